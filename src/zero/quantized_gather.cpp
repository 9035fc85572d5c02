#include "zero/quantized_gather.h"

#include <algorithm>

#include "core/error.h"

namespace zt {

std::vector<size_t> tensor_starts(const std::vector<std::pair<size_t, size_t>>& tensor_ranges) {
  std::vector<size_t> starts;
  for (const auto& [begin, end] : tensor_ranges) starts.push_back(begin);
  std::sort(starts.begin(), starts.end());
  return starts;
}

QuantizedSplit::QuantizedSplit(const std::vector<size_t>& slice_counts, int bits_, const std::vector<size_t>& first,
                               const std::vector<size_t>& cuts)
    : bits(bits_), counts(slice_counts) {
  ZT_CHECK(first.size() == counts.size(), "QuantizedSplit: ", first.size(), " slice starts for ", counts.size(),
           " slices");
  for (size_t r = 0; r < counts.size(); ++r) {
    std::vector<Segment> s;
    const size_t lo = first[r], hi = lo + counts[r];
    size_t at = lo, bytes = 0;
    for (auto c = std::upper_bound(cuts.begin(), cuts.end(), lo); at < hi; ++c) {
      const size_t end = c == cuts.end() ? hi : std::min(hi, *c);
      if (end > at) {
        s.push_back({at - lo, end - at, bytes});
        bytes += ((end - at) * size_t(bits) + 7) / 8;
      }
      at = end;
      if (c == cuts.end()) break;
    }
    offset.push_back(total_words);
    words.push_back(scales(s) + (bytes + 3) / 4);
    total_words += words.back();
    segments.push_back(std::move(s));
  }
}

namespace {

std::vector<size_t> no_starts(size_t n) { return std::vector<size_t>(n, 0); }

}  // namespace

QuantizedSplit::QuantizedSplit(const std::vector<size_t>& slice_counts, int bits_)
    : QuantizedSplit(slice_counts, bits_, no_starts(slice_counts.size()), {}) {}

size_t QuantizedSplit::scales(const std::vector<Segment>& s) const {
  size_t n = 0;
  for (const Segment& g : s) n += blocks(g.count, bits);
  return n;
}

void quantize_packet(Backend& backend, const QuantizedSplit& split, int rank, const void* mine, DType dtype,
                     unsigned char* wire) {
  const auto& segments = split.segments[size_t(rank)];
  float* scales = reinterpret_cast<float*>(wire) + split.offset[size_t(rank)];
  auto* values = reinterpret_cast<unsigned char*>(scales + split.scales(segments));
  const auto* x = static_cast<const unsigned char*>(mine);
  for (const QuantizedSplit::Segment& g : segments) {
    backend.optimizer_ops().quantize(x + g.offset * dtype_size(dtype), dtype, g.count, split.block(), split.bits,
                                     values + g.byte, scales);
    scales += QuantizedSplit::blocks(g.count, split.bits);
  }
}

void dequantize_packet(Backend& backend, const QuantizedSplit& split, int rank, const unsigned char* wire, void* out,
                       DType dtype) {
  const auto& segments = split.segments[size_t(rank)];
  const float* scales = reinterpret_cast<const float*>(wire) + split.offset[size_t(rank)];
  const auto* values = reinterpret_cast<const unsigned char*>(scales + split.scales(segments));
  for (const QuantizedSplit::Segment& g : segments) {
    backend.optimizer_ops().dequantize(values + g.byte, scales, g.count, split.block(), split.bits,
                                       static_cast<unsigned char*>(out) + g.offset * dtype_size(dtype), dtype);
    scales += QuantizedSplit::blocks(g.count, split.bits);
  }
}

void dequantize_packets(Backend& backend, const QuantizedSplit& split, const unsigned char* wire, void* out,
                        DType dtype) {
  auto* at = static_cast<unsigned char*>(out);
  for (size_t r = 0; r < split.counts.size(); ++r) {
    dequantize_packet(backend, split, int(r), wire, at, dtype);
    at += split.counts[r] * dtype_size(dtype);
  }
}

}  // namespace zt
