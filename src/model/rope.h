// The rotary embedding's angles, computed on the host once per model as HF computes them: in
// fp32, with each rope_scaling type's inverse frequencies.
#pragma once

#include <vector>

#include "config/model_config.h"

namespace zt {

/// HF's inv_freq[head_size / 2]: 1 / rope_theta^(2i / head_size), rescaled by rope_scaling.
std::vector<float> rope_inv_freq(const ModelConfig& config);

/// cos and sin of position t's angles for t < positions, [positions, head_size / 2] each:
/// angle = (t / factor for linear scaling) * inv_freq[i], rounded to fp32 first as HF does.
void rope_tables(const ModelConfig& config, int positions, std::vector<double>& cos, std::vector<double>& sin);

}  // namespace zt
