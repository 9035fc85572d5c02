#include "optim/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace zt {

LossScaler::LossScaler(const Fp16Config& c)
    : dynamic_(c.enabled && c.loss_scale == 0),
      scale_(!c.enabled ? 1.0 : c.loss_scale == 0 ? std::ldexp(1.0, c.initial_scale_power) : c.loss_scale),
      min_scale_(c.min_loss_scale), window_(c.loss_scale_window), delayed_shift_(c.hysteresis),
      consecutive_hysteresis_(c.consecutive_hysteresis), cur_hysteresis_(c.hysteresis) {}

void LossScaler::update(bool overflow) {
  if (!dynamic_) {
    ++cur_iter_;
    return;
  }
  if (overflow) {
    if (delayed_shift_ == 1 || cur_hysteresis_ == 1) {
      // DeepSpeed raises here once the scale cannot go lower; training cannot make progress.
      if (scale_ == min_scale_) {
        throw Error(cat("fp16 loss scale is already at min_loss_scale (", min_scale_,
                        ") and the gradients still overflow; training cannot continue"));
      }
      scale_ = std::max(scale_ / 2.0, min_scale_);
    } else {
      --cur_hysteresis_;
    }
    last_overflow_iter_ = cur_iter_;
  } else {
    if (consecutive_hysteresis_) cur_hysteresis_ = delayed_shift_;
    if ((cur_iter_ - last_overflow_iter_) % window_ == 0) {
      if (!consecutive_hysteresis_) cur_hysteresis_ = delayed_shift_;
      scale_ *= 2.0;
    }
  }
  ++cur_iter_;
}

void LossScaler::restore(const State& s) {
  // A scale of 0 would zero every gradient and make the norm NaN; no step ever produces one.
  ZT_CHECK(std::isfinite(s.scale) && s.scale > 0, "loss scale ", s.scale, " is not a positive number");
  ZT_CHECK(s.cur_hysteresis >= 0, "loss scaler hysteresis ", s.cur_hysteresis, " is negative");
  scale_ = s.scale;
  cur_iter_ = s.cur_iter;
  last_overflow_iter_ = s.last_overflow_iter;
  cur_hysteresis_ = s.cur_hysteresis;
}

}  // namespace zt
