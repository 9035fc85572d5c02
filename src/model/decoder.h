// Incremental forward for generation: each call runs only the new tokens, reading the keys and
// values of the earlier positions from a cache (one sequence, batch 1). The weights are the flat
// fp32 buffer of a ModelLayout, on the backend's device; nothing here is trained.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/device_array.h"
#include "model/model_layout.h"

namespace zt {

class Decoder {
 public:
  virtual ~Decoder() = default;
  /// Runs `tokens` at positions [position(), position() + tokens.size()) and returns the logits
  /// of the last one: vocab_size floats in host memory, valid until the next call.
  const float* append(const std::vector<int32_t>& tokens);
  /// Tokens run so far.
  int position() const { return position_; }
  /// The cache's length: position() never passes it.
  int max_positions() const { return max_positions_; }

 protected:
  Decoder(Backend& backend, int vocab_size, int max_positions, int chunk);
  /// Runs n tokens (already in tokens_) at position_, leaving the last one's logits in logits_.
  virtual void run(int n) = 0;

  Backend& backend_;
  int max_positions_, chunk_;  // chunk_: the most tokens one run() takes
  int position_ = 0;
  DeviceArray<int32_t> tokens_;  // device: this run's tokens
  DeviceArray<float> logits_;    // device: the last position's logits

 private:
  DeviceArray<int32_t> tokens_staging_;  // pinned
  DeviceArray<float> logits_host_;       // pinned
};

/// The decoder of `layout`'s architecture over `weights` (flat_size() floats on the device,
/// which must outlive it), for sequences of up to max_positions tokens.
std::unique_ptr<Decoder> make_decoder(const ModelLayout& layout, Backend& backend, const float* weights,
                                      int max_positions);

}  // namespace zt
