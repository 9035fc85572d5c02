#include "zero/quantized_gather.h"

namespace zt {

QuantizedSplit::QuantizedSplit(const std::vector<size_t>& slice_counts, int bits_) : bits(bits_), counts(slice_counts) {
  for (size_t n : counts) {
    offset.push_back(total_words);
    words.push_back(packet_words(n, bits));
    total_words += words.back();
  }
}

void quantize_packet(Backend& backend, const QuantizedSplit& split, int rank, const void* mine, DType dtype,
                     unsigned char* wire) {
  const size_t n = split.counts[size_t(rank)];
  if (n == 0) return;
  float* scales = reinterpret_cast<float*>(wire) + split.offset[size_t(rank)];
  backend.optimizer_ops().quantize(mine, dtype, n, split.block(), split.bits, scales + QuantizedSplit::blocks(n, split.bits),
                                   scales);
}

void dequantize_packets(Backend& backend, const QuantizedSplit& split, const unsigned char* wire, void* out,
                        DType dtype) {
  auto* at = static_cast<unsigned char*>(out);
  for (size_t r = 0; r < split.counts.size(); ++r) {
    const size_t n = split.counts[r];
    if (n == 0) continue;
    const float* scales = reinterpret_cast<const float*>(wire) + split.offset[r];
    backend.optimizer_ops().dequantize(scales + QuantizedSplit::blocks(n, split.bits), scales, n, split.block(),
                                       split.bits, at, dtype);
    at += n * dtype_size(dtype);
  }
}

}  // namespace zt
