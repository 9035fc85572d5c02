// A CausalLM together with the ParamSource it computes with, behind one type whatever its
// activation dtype (fp32 or bf16): what the trainer drives.
#pragma once

#include <cstdint>
#include <memory>
#include <type_traits>

#include "model/causal_lm.h"

namespace zt {

class BoundModel {
 public:
  virtual ~BoundModel() = default;
  /// CausalLM::forward with the bound parameters.
  virtual void forward(const int32_t* inputs, const int32_t* targets, int B, int T_, double loss_weight = 1.0,
                       std::optional<double> backward_scale = std::nullopt) = 0;
  /// CausalLM::backward with the bound parameters.
  virtual void backward(double dloss_scale) = 0;
  virtual double take_loss() = 0;
  virtual int64_t last_prediction_count() const = 0;
  virtual size_t activation_bytes() const = 0;
  virtual double flops_per_token_forward(int seq_len) const = 0;
  /// kF32 or kBF16.
  virtual DType activation_dtype() const = 0;
};

template <typename T>
class BoundCausalLM final : public BoundModel {
 public:
  BoundCausalLM(std::unique_ptr<CausalLM<T>> model, ParamSource<T>& params)
      : model_(std::move(model)), params_(params) {}
  void forward(const int32_t* inputs, const int32_t* targets, int B, int T_, double loss_weight,
               std::optional<double> backward_scale) override {
    model_->forward(params_, inputs, targets, B, T_, loss_weight, backward_scale);
  }
  void backward(double dloss_scale) override { model_->backward(params_, dloss_scale); }
  double take_loss() override { return model_->take_loss(); }
  int64_t last_prediction_count() const override { return model_->last_prediction_count(); }
  size_t activation_bytes() const override { return model_->activation_bytes(); }
  double flops_per_token_forward(int seq_len) const override { return model_->flops_per_token_forward(seq_len); }
  DType activation_dtype() const override { return std::is_same_v<T, bf16> ? DType::kBF16 : DType::kF32; }

 private:
  std::unique_ptr<CausalLM<T>> model_;
  ParamSource<T>& params_;
};

/// `model` bound to `params` (which must outlive it).
template <typename T>
std::unique_ptr<BoundModel> bind_model(std::unique_ptr<CausalLM<T>> model, ParamSource<T>& params) {
  return std::make_unique<BoundCausalLM<T>>(std::move(model), params);
}

}  // namespace zt
