#include "zero/quantized_gather.h"

namespace zt {

QuantizedSplit::QuantizedSplit(const std::vector<size_t>& slice_counts) : counts(slice_counts) {
  for (size_t n : counts) {
    offset.push_back(total_words);
    words.push_back(packet_words(n));
    total_words += words.back();
  }
}

void quantize_packet(Backend& backend, const QuantizedSplit& split, int rank, const void* mine, DType dtype,
                     unsigned char* wire) {
  const size_t n = split.counts[size_t(rank)];
  if (n == 0) return;
  auto* scales = reinterpret_cast<float*>(wire) + split.offset[size_t(rank)];
  backend.optimizer_ops().quantize_int8(mine, dtype, n, kQuantBlock, reinterpret_cast<int8_t*>(scales + QuantizedSplit::blocks(n)),
                                        scales);
}

void dequantize_packets(Backend& backend, const QuantizedSplit& split, const unsigned char* wire, void* out,
                        DType dtype) {
  auto* at = static_cast<unsigned char*>(out);
  for (size_t r = 0; r < split.counts.size(); ++r) {
    const size_t n = split.counts[r];
    if (n == 0) continue;
    const auto* scales = reinterpret_cast<const float*>(wire) + split.offset[r];
    backend.optimizer_ops().dequantize_int8(reinterpret_cast<const int8_t*>(scales + QuantizedSplit::blocks(n)), scales,
                                            n, kQuantBlock, at, dtype);
    at += n * dtype_size(dtype);
  }
}

}  // namespace zt
