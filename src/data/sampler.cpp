#include "data/sampler.h"

#include <vector>

#include "core/error.h"

namespace zt {

FeistelPermutation::FeistelPermutation(uint64_t n, uint64_t key) : n_(n), key_(key), half_bits_(1) {
  ZT_CHECK(n > 0, "empty permutation");
  while ((uint64_t(1) << (2 * half_bits_)) < n) ++half_bits_;
}

uint64_t FeistelPermutation::operator()(uint64_t x) const {
  ZT_CHECK(x < n_, "index ", x, " outside [0, ", n_, ")");
  const uint64_t mask = (uint64_t(1) << half_bits_) - 1;
  // Cycle walking: the network permutes [0, 4^half_bits); re-apply until we land inside [0, n).
  do {
    uint64_t left = x >> half_bits_, right = x & mask;
    for (uint64_t round = 0; round < 4; ++round) {
      uint64_t f = mix64(right ^ mix64(key_ + round)) & mask;
      uint64_t next_right = left ^ f;
      left = right;
      right = next_right;
    }
    x = (left << half_bits_) | right;
  } while (x >= n_);
  return x;
}

DistributedSampler::DistributedSampler(const TokenDataset& data, int seq_len, uint64_t seed)
    : data_(data), seq_len_(seq_len), seed_(seed) {
  ZT_USAGE_CHECK(data.size() >= size_t(seq_len) + 1, data.pattern(), ": ", data.size(),
                 " tokens is fewer than one window of block_size + 1 = ", seq_len + 1);
  num_windows_ = (data.size() - 1) / uint64_t(seq_len);
}

uint64_t DistributedSampler::window_of(uint64_t g) const {
  uint64_t epoch = g / num_windows_;
  FeistelPermutation perm(num_windows_, mix64(seed_) ^ mix64(epoch + 0x5eed));
  return perm(g % num_windows_);
}

void DistributedSampler::fill(uint64_t first, int64_t count, int32_t* inputs, int32_t* targets) const {
  std::vector<int32_t> window(size_t(seq_len_) + 1);
  for (int64_t i = 0; i < count; ++i) {
    uint64_t w = window_of(first + uint64_t(i));
    data_.read(size_t(w) * size_t(seq_len_), size_t(seq_len_) + 1, window.data());
    std::copy(window.begin(), window.end() - 1, inputs + i * seq_len_);
    std::copy(window.begin() + 1, window.end(), targets + i * seq_len_);
  }
}

EvalWindows::EvalWindows(const TokenDataset& data, int seq_len, int64_t max_windows)
    : data_(data), seq_len_(seq_len) {
  ZT_USAGE_CHECK(data.size() >= size_t(seq_len) + 1, data.pattern(), ": ", data.size(),
                 " tokens is fewer than one eval window of block_size + 1 = ", seq_len + 1);
  int64_t available = int64_t((data.size() - 1) / size_t(seq_len));
  count_ = max_windows > 0 ? std::min(max_windows, available) : available;
}

void EvalWindows::fill(int64_t first, int64_t n, int32_t* inputs, int32_t* targets) const {
  std::vector<int32_t> window(size_t(seq_len_) + 1);
  for (int64_t i = 0; i < n; ++i) {
    data_.read(size_t(first + i) * size_t(seq_len_), size_t(seq_len_) + 1, window.data());
    std::copy(window.begin(), window.end() - 1, inputs + i * seq_len_);
    std::copy(window.begin() + 1, window.end(), targets + i * seq_len_);
  }
}

}  // namespace zt
