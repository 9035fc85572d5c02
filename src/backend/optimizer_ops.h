// Kernels over flat buffers used by the optimizer and the mixed-precision machinery. Gradients and
// parameters may be fp32, bf16 or fp16; master weights and moments are always fp32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "core/dtype.h"

namespace zt {

/// The element-wise update rules the fused optimizer kernels implement.
enum class UpdateRule {
  kAdam,     ///< Adam / AdamW (DeepSpeed's CPU Adam): master, exp_avg, exp_avg_sq
  kLion,     ///< Lion (Chen et al. 2023): master, exp_avg (the momentum)
  kAdagrad,  ///< Adagrad (torch.optim.Adagrad): master, exp_avg_sq (the running sum of squares)
  kLamb,     ///< Lamb (DeepSpeed's FusedLamb): Adam's moments, then a trust ratio per tensor (two passes)
  kMuon,     ///< Muon: momentum, Newton-Schulz per matrix, then the update (two passes); AdamW for the rest
  kAdafactor,  ///< Adafactor: factored second moments, an RMS clip per tensor (three passes)
  kOneBitAdam,  ///< 1-bit Adam: Adam until freeze_step, then a 1-bit compressed momentum all-reduce
  kZeroOneAdam,  ///< 0/1 Adam: Adam on variance steps, 1-bit compressed gradients between, then local steps
  kOneBitLamb,  ///< 1-bit Lamb: Lamb until freeze_step, then one 1-bit all-reduce of every momentum (passes)
};

/// Where 1-bit Adam's signs of one tensor sit: a tensor padded to `padded` elements is cut into
/// chunks of `chunk` (padded / ranks) elements; chunk q's signs fill words [word0, word0 +
/// ceil(chunk / 32)) of block q, blocks `block_words` words apart (element j of a chunk is bit
/// j % 32 of word j / 32). `scales` holds one scale per block, `scale_stride` floats apart.
struct SignBlocks {
  uint32_t* words = nullptr;
  size_t block_words = 0, word0 = 0;
  float* scales = nullptr;
  size_t scale_stride = 0;
  size_t chunk = 0;
  size_t blocks = 1;
};

/// 0/1 Adam's element-wise passes (DeepSpeed's ZeroOneAdam, exp_avg_sq v not written), with
/// d = sqrt(v) + eps and D the decompressed all-reduce (OptimizerOps::onebit_apply's). Where
/// v = 0, D and m are taken as 0 (onebit_apply's momentum mask: DeepSpeed's exp_avg_mask built
/// from the frozen variance), so such an element moves by weight decay alone.
enum class ZeroOnePass {
  /// Between variance steps: m = b1 m + (1 - b1) D, D the all-reduced gradient (one rank:
  /// grad_scale g); w -= lr (m / d + wd w).
  kCompressedGrad,
  /// Past var_freeze_step, each rank on its own gradient: m = b1 m + (1 - b1) grad_scale g;
  /// U = m / d + wd w; w -= lr U; u -= lr U, u (the momentum accumulator) starting at 0 when
  /// `fresh` (the first step since the ranks last met).
  kLocal,
  /// Before u's compressed all-reduce: w -= u (the weights where the ranks last met), u *= d.
  kSyncPrepare,
  /// After it: m = -D / lrs (lrs: the lrs summed since the ranks last met; 0 where that sum is 0,
  /// which DeepSpeed divides by), w += D / d, u = 0. On one rank (no signs) the preparation runs
  /// first and D = u d.
  kSync,
};
struct ZeroOneArgs {
  ZeroOnePass pass = ZeroOnePass::kLocal;
  float lrs = 0;
  bool fresh = false;
};

/// The rows [row0, row0 + rows) and columns [col0, col0 + cols) that elements [first, first + n)
/// (n > 0) of a row-major matrix `width` columns wide touch: every column once a range spans a row
/// boundary.
struct MatrixSpan {
  size_t row0, rows, col0, cols;
};
inline MatrixSpan matrix_span(size_t first, size_t n, size_t width) {
  const size_t row0 = first / width, rows = (first + n - 1) / width - row0 + 1;
  return rows == 1 ? MatrixSpan{row0, 1, first % width, n} : MatrixSpan{row0, rows, 0, width};
}

/// Adafactor's second moment of elements [first, first + n) of one tensor: element by element
/// (exp_avg_sq, 1-D tensors), or, for a matrix with `cols` columns (row-major, HF's stored
/// shape), its row factor already divided by the rows' mean (`scaled_row`) and its column factor.
struct AdafactorMoment {
  float* exp_avg_sq = nullptr;
  const float* scaled_row = nullptr;
  const float* col = nullptr;
  size_t first = 0, cols = 0;
  bool factored() const { return scaled_row != nullptr; }
};

/// One optimizer step's scalars, as DeepSpeed's CPU optimizers compute them.
struct OptimizerStepArgs {
  UpdateRule rule = UpdateRule::kAdam;
  float lr = 0;  ///< Adagrad: already decayed by lr_decay
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  float weight_decay = 0;
  bool adamw_mode = true;  ///< Adam only: decoupled decay (Lion's is always decoupled, Adagrad's L2)
  bool eps_inside_sqrt = false;  ///< Lamb: sqrt(v + eps) instead of sqrt(v) + eps
  /// 1 - beta1^t and 1 - beta2^t (1 when bias correction is off, and for Lion and Adagrad).
  /// Lamb's step size is lr sqrt(bias_correction2) / bias_correction1, as FusedLamb's.
  float bias_correction1 = 1, bias_correction2 = 1;
  /// Multiplies every gradient before use: 1/loss_scale x clip coefficient.
  float grad_scale = 1;
  /// Muon: the matrices' momentum and learning rate (lr, betas and eps are its AdamW's).
  float momentum = 0.95f, muon_lr = 0;
  /// Adafactor: beta2 is 1 - t^decay_rate, eps is added to every g^2 (transformers' eps1; 0 for
  /// torch's), and the second-moment estimate is clamped below at eps_floor^2 (torch's eps1; 0
  /// for transformers'), the rows' mean at eps_floor; beta1 drives exp_avg where there is one.
  float eps_floor = 0;
};

class OptimizerOps {
 public:
  virtual ~OptimizerOps() = default;

  /// The fused Adam/AdamW step over n elements: reads the gradient in its own dtype, updates the
  /// fp32 master weights and both moments, and writes the parameter in `param_dtype` in the same
  /// pass (param may alias master when both are fp32). No fp32 copy of the gradient is made.
  virtual void adam_step(const OptimizerStepArgs& args, float* master, float* exp_avg, float* exp_avg_sq,
                         const void* grad, DType grad_dtype, void* param, DType param_dtype, size_t n) = 0;
  /// The fused Lion step, likewise: with g the scaled gradient and m the momentum,
  ///   w -= lr wd w ; w -= lr sign(b1 m + (1 - b1) g) ; m = b2 m + (1 - b2) g
  /// where sign(0) = 0, as the paper and torch.sign (DeepSpeed's CPU Lion moves such a weight
  /// by -lr, its FusedLion by +lr).
  virtual void lion_step(const OptimizerStepArgs& args, float* master, float* exp_avg, const void* grad,
                         DType grad_dtype, void* param, DType param_dtype, size_t n) = 0;
  /// The fused Adagrad step, as torch.optim.Adagrad: g += wd w (L2) ; s += g^2 ;
  /// w -= lr g / (sqrt(s) + eps). (DeepSpeed 0.19.6's AVX Adagrad left the decay out of the
  /// numerator; 0.19.8's agrees with torch, measured in tests/bench/ds_optimizer_peers.sh.)
  virtual void adagrad_step(const OptimizerStepArgs& args, float* master, float* exp_avg_sq, const void* grad,
                            DType grad_dtype, void* param, DType param_dtype, size_t n) = 0;

  /// Lamb's first pass over n elements of one tensor: with g the scaled gradient,
  ///   m = b1 m + (1 - b1) g ; v = b2 v + (1 - b2) g^2 ; u = m / (sqrt(v) + eps) + wd w
  /// (eps under the root with eps_inside_sqrt), adding sum(w^2) to sums[0] and sum(u^2) to
  /// sums[1] in double (`sums` in memory of the same kind as the data). Weights are not written.
  virtual void lamb_moments(const OptimizerStepArgs& args, const float* master, float* exp_avg, float* exp_avg_sq,
                            const void* grad, DType grad_dtype, size_t n, double* sums) = 0;
  /// Lamb's second pass: w -= step_size * trust_ratio * u, with u from the updated moments and the
  /// weight before this step; writes the parameter in `param_dtype` as the other steps do.
  virtual void lamb_apply(const OptimizerStepArgs& args, float trust_ratio, float* master, const float* exp_avg,
                          const float* exp_avg_sq, void* param, DType param_dtype, size_t n) = 0;

  /// Muon's first pass over n elements of a matrix: with g the scaled gradient and m the momentum,
  ///   m = momentum m + (1 - momentum) g ; update = (1 - momentum) g + momentum m
  /// (Nesterov's, as DeepSpeed's and torch's Muon: grad.lerp_(m, momentum) after m.lerp_(grad)).
  virtual void muon_momentum(const OptimizerStepArgs& args, float* exp_avg, const void* grad, DType grad_dtype,
                             float* update, size_t n) = 0;
  /// Muon's second pass: w = w (1 - muon_lr wd) - muon_lr update (the update orthogonalised and scaled
  /// by its shape already), writing the parameter in `param_dtype` as the other steps do.
  virtual void muon_apply(const OptimizerStepArgs& args, float* master, const float* update, void* param,
                          DType param_dtype, size_t n) = 0;

  // Adafactor, with g the scaled gradient, v the second-moment estimate of an element (v =
  // scaled_row[r] col[c] for a matrix) and u = g / sqrt(max(v, eps_floor^2)).
  /// First pass, matrices: adds g^2 + eps of elements [first, first + n) of a matrix with `cols`
  /// columns to row_sums[r] and col_sums[c] of their row r and column c (fp32 sums, accumulated
  /// in double inside a call; memory of the data's kind).
  virtual void adafactor_sums(const OptimizerStepArgs& args, const void* grad, DType grad_dtype, size_t n,
                              size_t first, size_t cols, float* row_sums, float* col_sums) = 0;
  /// Between the passes, once per matrix (rows x cols) with its sums over every rank:
  ///   row = b2 row + (1 - b2) row_sums / cols ; col = b2 col + (1 - b2) col_sums / rows ;
  ///   scaled_row = row / max(mean(row), eps_floor).
  virtual void adafactor_factors(const OptimizerStepArgs& args, float* row, float* col, const float* row_sums,
                                 const float* col_sums, size_t rows, size_t cols, float* scaled_row) = 0;
  /// Second pass over n elements of one tensor: a 1-D tensor's v = b2 v + (1 - b2)(g^2 + eps)
  /// first; adds sum(w^2) to sums[0] (nothing when master is null: no weight RMS is needed) and
  /// sum(u^2) to sums[1] in double (memory of the data's kind).
  virtual void adafactor_norms(const OptimizerStepArgs& args, const float* master, const AdafactorMoment& v,
                               const void* grad, DType grad_dtype, size_t n, double* sums) = 0;
  /// Third pass, with the tensor's `scale` (its step over the clip) and `decay`: p = scale u; with
  /// exp_avg, m = b1 m + (1 - b1) p and p = m; w = w - decay w - p; writes the parameter in
  /// `param_dtype` as the other steps do.
  virtual void adafactor_apply(const OptimizerStepArgs& args, float scale, float decay, float* master, float* exp_avg,
                               const AdafactorMoment& v, const void* grad, DType grad_dtype, void* param,
                               DType param_dtype, size_t n) = 0;

  // 1-bit Adam (DeepSpeed's OnebitAdam and its compressed_allreduce), one tensor per call. A sign
  // is +1 for x >= 0 (and NaN), else -1; every sum is in double, in memory of the data's kind.
  /// The worker's first pass: with g the scaled gradient, m = b1 m + (1 - b1) g over n elements
  /// (no update when grad is null); adds sum((m + e)^2) over the `padded` elements to *sum, m
  /// being 0 beyond n (the tensor's padding) and e the worker's compression error (0 when null).
  virtual void onebit_momentum_sums(const OptimizerStepArgs& args, float* exp_avg, const void* grad, DType grad_dtype,
                                    size_t n, const float* error, size_t padded, double* sum) = 0;
  /// The server's first pass over its chunk (`in.chunk` elements) of one tensor, from every
  /// rank's signs and scales: e = sum_q sign_q scale_q / ranks (in rank order, fp32) + e, adding
  /// sum(e^2) to *sum. `error` then holds the compensated values that compress() takes.
  virtual void onebit_server_sums(const SignBlocks& in, float* error, double* sum) = 0;
  /// Compresses x + e (x: n elements, 0 beyond, or none when null) over `padded` elements: with
  /// scale = sqrt(*sum / padded), each element's sign goes into `out` (chunk by chunk, as
  /// SignBlocks says), e = x + e - scale sign, and scale into out.scales[q * scale_stride] for
  /// every block q.
  virtual void onebit_compress(const float* x, size_t n, float* error, size_t padded, const double* sum,
                               const SignBlocks& out) = 0;
  /// The step, with exp_avg_sq frozen: m = scale_q sign (the decompressed all-reduce, element i
  /// from chunk i / in.chunk; m as it is when in.words is null), except m = 0 where v = 0 (an
  /// element whose gradient was exactly 0 through the warm-up, whose frozen v stays 0: DeepSpeed
  /// steps it by lr m / eps once the signs' noise or a later gradient makes m nonzero, unless its
  /// users build an exp_avg_mask in Python), then
  /// w -= lr (m / (sqrt(v) + eps) + wd w), writing the parameter in `param_dtype` as the other
  /// steps do.
  virtual void onebit_apply(const OptimizerStepArgs& args, float* master, float* exp_avg, const float* exp_avg_sq,
                            const SignBlocks& in, void* param, DType param_dtype, size_t n) = 0;
  /// One of 0/1 Adam's passes (ZeroOnePass) over one tensor: `in` holds the decompressed
  /// all-reduce where the pass reads D (in.words null on one rank); `grad` is read by the
  /// gradient passes alone; the parameter is written in `param_dtype` wherever w changes.
  virtual void zero_one_pass(const ZeroOneArgs& z, const OptimizerStepArgs& args, float* master, float* exp_avg,
                             const float* exp_avg_sq, float* accumulator, const void* grad, DType grad_dtype,
                             const SignBlocks& in, void* param, DType param_dtype, size_t n) = 0;

  // 1-bit Lamb past its warm-up (DeepSpeed's OnebitLamb), one tensor per call; its momenta go
  // through one compressed all-reduce of all of them, packed (OneBitCompression over one tensor).
  /// x = (b1 m + (1 - b1) g) scale over n elements, g the scaled gradient (m not written): the
  /// tensor's momentum as it enters the all-reduce, times its scaling coefficient.
  virtual void onebit_lamb_momentum(const OptimizerStepArgs& args, float scale, const float* exp_avg,
                                    const void* grad, DType grad_dtype, float* x, size_t n) = 0;
  /// out = the decompressed all-reduce over n elements (`in` read as onebit_apply reads it).
  virtual void onebit_decompress(const SignBlocks& in, float* out, size_t n) = 0;
  /// After the all-reduce, with x its result for this tensor and f its exp_avg_sq_fresh:
  ///   m' = x / scale (0 where v = 0: onebit_apply's mask) ; r = (m' - b1 m) / (1 - b1) (the
  ///   gradient reconstructed) ; f = b2 f + (1 - b2) r^2 ; d = sqrt(v) + eps ; p = m' / d ;
  ///   u = p + wd w ; m = m'
  /// adding sum(u^2) to sums[0] and sum(p^2) to sums[1] in double, and raising sums[2] to the
  /// largest d / (sqrt(f) + eps) (memory of the data's kind; sums[2] starts at 0 or below).
  /// Weights are not written: lamb_apply with the tensor's coefficient and no bias correction
  /// steps them by the same u.
  virtual void onebit_lamb_stats(const OptimizerStepArgs& args, float scale, const float* master, float* exp_avg,
                                 const float* exp_avg_sq, float* exp_avg_sq_fresh, const float* x, size_t n,
                                 double* sums) = 0;

  // Newton-Schulz's element-wise steps between its GEMMs (optim/newton_schulz.h), fp32.
  /// y = a y + b x (x may alias y).
  virtual void axpby(float* y, float a, const float* x, float b, size_t n) = 0;
  /// x *= 1 / (sqrt(*sum_sq) + eps), *sum_sq read where the kernel runs (memory of x's kind).
  virtual void scale_by_inverse_norm(float* x, size_t n, const double* sum_sq, float eps) = 0;
  /// x[i, i] += a for the n x n matrix x.
  virtual void add_diagonal(float* x, size_t n, float a) = 0;

  /// The one-pass step of args.rule (not Lamb, which needs its two passes and the tensors'
  /// norms between them); the moments a rule does not keep are not touched (may be null).
  void step(const OptimizerStepArgs& args, float* master, float* exp_avg, float* exp_avg_sq, const void* grad,
            DType grad_dtype, void* param, DType param_dtype, size_t n) {
    switch (args.rule) {
      case UpdateRule::kAdam:
        return adam_step(args, master, exp_avg, exp_avg_sq, grad, grad_dtype, param, param_dtype, n);
      case UpdateRule::kLion: return lion_step(args, master, exp_avg, grad, grad_dtype, param, param_dtype, n);
      case UpdateRule::kAdagrad:
        return adagrad_step(args, master, exp_avg_sq, grad, grad_dtype, param, param_dtype, n);
      case UpdateRule::kOneBitAdam:  // its warm-up: Adam without bias correction
      case UpdateRule::kZeroOneAdam:  // its variance steps: the same
        return adam_step(args, master, exp_avg, exp_avg_sq, grad, grad_dtype, param, param_dtype, n);
      case UpdateRule::kLamb:
      case UpdateRule::kOneBitLamb:
      case UpdateRule::kMuon:
      case UpdateRule::kAdafactor: break;
    }
    throw std::logic_error("OptimizerOps::step: Lamb, Muon and Adafactor step in passes");
  }

  // ZeRO++'s quantized collectives (zero/quantized_gather.h), as DeepSpeed's symmetric quantizer
  // (csrc/includes/quantization_utils.h) computes them with `bits` 8 (qwZ's weights) or 4 (qgZ's
  // gradients), in blocks of `block` elements (the last may be shorter; even for 4 bits): with a
  // the block's largest |x|, h = 2^(bits - 1) and s = h / a (1 where a is 0),
  // q = round-half-even(x s) clamped to [-h, h - 1], and the block's scale, sent beside q, 1 / s.
  // 8 bits: a byte an element; 4 bits: two a byte, element 2k in the low nibble of byte k.
  /// Quantizes n elements of `x` (its dtype) into `q` and ceil(n / block) `scales`.
  virtual void quantize(const void* x, DType dtype, size_t n, size_t block, int bits, void* q, float* scales) = 0;
  /// x = q * its block's scale, rounded to x's dtype.
  virtual void dequantize(const void* q, const float* scales, size_t n, size_t block, int bits, void* x,
                          DType dtype) = 0;

  /// Adds the sum of squares of n gradient values, in double, to *out (memory of the same kind
  /// as `data`); NaN or inf in the data gives a non-finite result.
  virtual void sum_squares(const void* data, DType dtype, size_t n, double* out) = 0;

  /// acc[i] = round(acc[i] + x[i]) in acc's dtype: gradient accumulation (16-bit or fp32, either side).
  virtual void accumulate_into(void* acc, DType acc_dtype, const void* x, DType x_dtype, size_t n) = 0;

  /// Sets n elements to zero.
  virtual void zero(void* data, DType dtype, size_t n) = 0;
};

}  // namespace zt
