// The model states as the rest of the program sees them: their sizes by kind (metrics and
// zero_estimate), the counters and fp32 fields a checkpoint holds, and where a starting state
// comes from.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "config/ds_config.h"
#include "model/param_layout.h"

#include "optim/loss_scaler.h"

namespace zt {

/// Model-state bytes per rank, by kind (metrics.jsonl's `model_state_bytes`).
struct ModelStateBytes {
  size_t params = 0, grads = 0, master = 0, exp_avg = 0, exp_avg_sq = 0;
  size_t total() const { return params + grads + master + exp_avg + exp_avg_sq; }
};

/// Temporary buffers by kind (metrics.jsonl's `buffer_bytes`).
struct BufferBytes {
  size_t buckets = 0;  ///< gradient buckets
  size_t gather = 0;   ///< stage 3 gather buffers allocated so far (gathered, prefetched or kept for reuse)
  size_t working = 0;  ///< working copies (activation dtype) of units and fp32 unit gradient slots
  size_t offload = 0;  ///< NVMe swap buffers and the staging of updated parameters (host)
  size_t optimizer = 0;  ///< Muon: its updates, the matrices' exchange and Newton-Schulz's workspace
};

/// The optimizer's counters, saved in checkpoints next to the tensors.
struct EngineState {
  int64_t adam_step = 0;
  int64_t scheduler_iteration = -1;
  LossScaler::State scaler{};
};

/// The fp32 tensors a checkpoint holds, each over the flat layout (kExpAvgSqFresh: OneBitLamb's
/// exp_avg_sq_fresh, whose bytes ModelStateBytes counts under exp_avg_sq).
enum class StateField { kMaster, kExpAvg, kExpAvgSq, kExpAvgSqFresh };

/// The fields a checkpoint holds for `optimizer`: the master weights, then the moments it keeps.
inline std::vector<StateField> state_fields(const OptimizerConfig& optimizer) {
  std::vector<StateField> fields{StateField::kMaster};
  if (optimizer.has_exp_avg()) fields.push_back(StateField::kExpAvg);
  if (optimizer.has_exp_avg_sq()) fields.push_back(StateField::kExpAvgSq);
  if (optimizer.has_exp_avg_sq_fresh()) fields.push_back(StateField::kExpAvgSqFresh);
  return fields;
}

/// Whether `optimizer` keeps exp_avg_sq element by element for a tensor of this shape: Muon for
/// the tensors its AdamW steps (not hidden matrices), Adafactor for those it does not factor (not
/// 2-D), every other optimizer that has the field for every tensor.
inline bool keeps_exp_avg_sq(const OptimizerConfig& optimizer, const TensorShape& shape) {
  if (!optimizer.has_exp_avg_sq()) return false;
  if (optimizer.type == OptimizerConfig::Type::kMuon) return !shape.hidden_matrix;
  if (optimizer.factored()) return !shape.matrix();
  return true;
}

/// Adafactor's row and column factors of every matrix, in the model's tensor order (all rows,
/// then all columns); null: they start at zero.
using FactorReader = std::function<void(float* rows, size_t row_count, float* cols, size_t col_count)>;

/// OnebitAdam's and ZeroOneAdam's compression errors of `rank` of `world` (`count` floats, OneBitCompression's
/// layout), as a checkpoint written at the same world size holds them: fills `out` and returns
/// true, or returns false (another world size, or none saved: they start at zero, as DeepSpeed's).
using ErrorReader = std::function<bool(int rank, int world, float* out, size_t count)>;

/// ZeroOneAdam's state of `rank` of `world` between two meetings of the ranks, which is each
/// rank's own (its weights, exp_avg and momentum accumulator moved by its own gradients: `count`
/// floats, 3 x its optimizer range), as a checkpoint written at the same world size holds it:
/// fills `out` and returns the lrs summed since the ranks met, or nothing (another world size,
/// or saved where the ranks had just met: the shared fields are the state, and the accumulator
/// starts at zero).
using LocalStateReader = std::function<std::optional<double>(int rank, int world, float* out, size_t count)>;

/// OneBitLamb's per-tensor scalars (ZeroEngine::onebit_lamb_scalars' `count` doubles), as a
/// checkpoint holds them: fills `out` and returns true, or returns false (none saved: they start
/// as at step 0).
using ScalarReader = std::function<bool(double* out, size_t count)>;

/// Fills out[0, hi - lo) with elements [lo, hi) of a field (hi <= the model's flat size).
using StateReader = std::function<void(StateField field, size_t lo, size_t hi, float* out)>;

/// What an engine starts from. Every way of building one (fresh initialisation, pretrained
/// weights, resuming at the same or another layout) goes through ZeroEngine::load with one of
/// these, so the starting state has a single definition: whatever the source does not carry
/// starts as the config says, never from a default-constructed EngineState (whose loss scale of
/// 0 once made every fine-tuning step NaN).
struct StateSource {
  StateReader read;                     ///< serves kMaster; the moments too when with_moments
  bool with_moments = false;            ///< false: exp_avg and exp_avg_sq start at zero
  std::optional<EngineState> counters;  ///< empty: step 0, the schedule's start, the config's loss scale
  FactorReader read_factors;            ///< Adafactor's factors when with_moments (a checkpoint holds them)
  ErrorReader read_onebit_errors;       ///< 1-bit optimizers' errors when with_moments (null: they start at zero)
  LocalStateReader read_zero_one_local; ///< ZeroOneAdam's local state when with_moments (null: none)
  ScalarReader read_onebit_lamb;        ///< OneBitLamb's per-tensor scalars when with_moments (null: none)
};

}  // namespace zt
