// Attention of the CUDA KernelOps<bf16>, both kinds (GPT-2's packed causal attention and the
// Llama family's grouped-query attention), in the logsumexp contract (attention_saves_lse: att
// holds lse[B,NH,Tq], fp32, and the backward recomputes the probabilities).
//
// The shapes flash attention takes (head size 64 or 128, 16-byte aligned operands:
// flash_attention_supported) run cuda_flash_attention.cu: bf16 on tensor cores, O(T) memory.
//
// Anything else takes the exact, slow fallback: q, k, v (and in backward dout) are widened to fp32
// staging buffers (exact), the fp32 kernels of cuda_attention.cu and cuda_llama_ops.cu run on them
// with full fp32 probabilities in scratch (forward: the probabilities the fp32 kernel writes, and
// lse computed beside them from the same fp32 q and k; backward: the probabilities rebuilt from
// q, k and the saved lse), and the outputs are rounded to bf16 once. Its cost is the fp32
// kernels' (no tensor cores, O(T^2) scratch) plus the staging passes. A training-shaped call
// (Tq = Tk: every backward, and a forward that is not decoding after a KV cache) that lands here
// logs why, once per process (warn_fallback_once), since at training lengths the O(T^2) scratch
// is what runs out of memory; decoding (Tq < Tk, a few queries) is cheap here and says nothing.
//
// ctx.scratch is one buffer, valid until its next call, and the fp32 backward kernels take
// their own scratch from it; so every staging buffer and the fp32 kernels' scratch are carved
// out of one call, and the fp32 kernels get a context whose scratch is the tail of it. The flash
// backward makes its one ctx.scratch call itself (D, B*NH*T floats), and nothing here calls it
// on that path.
#include <cstddef>
#include <initializer_list>
#include <mutex>
#include <string>

#include "backend/cuda/cuda_attention.h"
#include "backend/cuda/cuda_context.h"
#include "backend/cuda/cuda_flash_attention.h"
#include "backend/cuda/cuda_kernels_bf16.h"
#include "backend/cuda/cuda_llama_ops.h"
#include "core/error.h"
#include "core/log.h"

namespace zt::cuda {
namespace {

constexpr size_t kStagingAlign = 256;

size_t align_up(size_t bytes) { return (bytes + kStagingAlign - 1) / kStagingAlign * kStagingAlign; }

/// fp32 buffers of the given element counts, plus `tail_bytes` handed to the fp32 kernels as
/// their ctx.scratch (context()), all from one ctx.scratch call.
class Staging {
 public:
  Staging(CudaContext& ctx, std::initializer_list<size_t> counts, size_t tail_bytes) : sub_(ctx) {
    ZT_CHECK(counts.size() <= kMaxBuffers, "attention staging: too many buffers");
    size_t total = 0;
    for (size_t n : counts) total += align_up(n * sizeof(float));
    char* base = static_cast<char*>(ctx.scratch(total + tail_bytes));
    size_t offset = 0, i = 0;
    for (size_t n : counts) {
      buffers_[i++] = reinterpret_cast<float*>(base + offset);
      offset += align_up(n * sizeof(float));
    }
    void* tail = base + offset;
    sub_.scratch = [tail, tail_bytes](size_t bytes) -> void* {
      ZT_CHECK(bytes <= tail_bytes, "attention staging: the fp32 kernel asked for ", bytes,
               " bytes of scratch, more than the ", tail_bytes, " reserved");
      return tail;
    };
  }
  float* operator[](size_t i) const { return buffers_[i]; }
  /// The caller's context with the tail as its scratch.
  CudaContext& context() { return sub_; }

 private:
  static constexpr size_t kMaxBuffers = 8;
  CudaContext sub_;
  float* buffers_[kMaxBuffers] = {};
};

void widen(CudaContext& ctx, float* dst, const bf16* src, size_t n) {
  launch_cast(src, DType::kBF16, dst, DType::kF32, n, ctx.compute);
}
void narrow(CudaContext& ctx, bf16* dst, const float* src, size_t n) {
  launch_cast(src, DType::kF32, dst, DType::kBF16, n, ctx.compute);
}

/// Logs, once per process and only for a training-shaped call (Tq = Tk), why `op` took the fallback.
void warn_fallback_once(const char* op, const AttentionLayout& l, std::initializer_list<const void*> pointers,
                        std::initializer_list<const char*> names) {
  if (l.Tq != l.Tk) return;
  static std::once_flag warned;
  std::call_once(warned, [&] {
    const std::string why = flash_attention_unsupported_reason(l, pointers, names);
    const size_t probs = size_t(l.B) * l.NH * l.Tq * l.Tk * sizeof(float);
    log_warn("attention: ", op, " falls back from flash attention (", why,
             ") to the widened fp32 kernels, whose memory is O(T^2): B*NH*T*T floats of scratch, ",
             probs >= (size_t(1) << 20) ? cat(probs >> 20, " MiB") : cat(probs >> 10, " KiB"), " at B=", l.B,
             " NH=", l.NH, " T=", l.Tq, " (logged once)");
  });
}

}  // namespace

void launch_attention_forward_bf16(CudaContext& ctx, bf16* out, float* lse, const bf16* qkv, int B, int T, int C,
                                   int NH) {
  const AttentionLayout l = packed_attention_layout(B, T, C, NH);
  const size_t BT = size_t(B) * T;
  if (BT * C == 0) return;
  if (flash_attention_supported(l, {out, qkv})) {
    launch_flash_attention_forward(ctx, out, lse, qkv, qkv + C, qkv + 2 * C, l);
    return;
  }
  warn_fallback_once("attention_forward", l, {out, qkv}, {"out", "qkv"});
  Staging s(ctx, {BT * 3 * C, BT * C, size_t(B) * NH * T * T}, 0);
  float *qkv32 = s[0], *out32 = s[1], *probs = s[2];
  widen(ctx, qkv32, qkv, BT * 3 * C);
  launch_attention_forward(s.context(), out32, probs, qkv32, B, T, C, NH);
  launch_attention_lse_f32(ctx, lse, qkv32, qkv32 + C, l);
  narrow(ctx, out, out32, BT * C);
}

void launch_attention_backward_bf16(CudaContext& ctx, bf16* dqkv, const bf16* dout, const bf16* out, const bf16* qkv,
                                    const float* lse, int B, int T, int C, int NH) {
  const AttentionLayout l = packed_attention_layout(B, T, C, NH);
  const size_t BT = size_t(B) * T;
  if (BT * C == 0) return;
  if (flash_attention_supported(l, {dqkv, dout, out, qkv})) {
    launch_flash_attention_backward(ctx, dqkv, dqkv + C, dqkv + 2 * C, dout, out, qkv, qkv + C, qkv + 2 * C, lse,
                                    l);
    return;
  }
  warn_fallback_once("attention_backward", l, {dqkv, dout, out, qkv}, {"dqkv", "dout", "out", "qkv"});
  // The rebuilt probabilities, then launch_attention_backward's own scratch: the softmax
  // gradient, B*NH*T*T floats.
  const size_t att_n = size_t(B) * NH * T * T;
  Staging s(ctx, {BT * 3 * C, BT * C, BT * 3 * C, att_n}, sizeof(float) * att_n);
  float *qkv32 = s[0], *dout32 = s[1], *dqkv32 = s[2], *probs = s[3];
  widen(ctx, qkv32, qkv, BT * 3 * C);
  widen(ctx, dout32, dout, BT * C);
  launch_attention_probs_from_lse_f32(ctx, probs, qkv32, qkv32 + C, lse, l);
  launch_attention_backward(s.context(), dqkv32, dout32, qkv32, probs, B, T, C, NH);
  narrow(ctx, dqkv, dqkv32, BT * 3 * C);
}

void launch_gqa_attention_forward_bf16(CudaContext& ctx, bf16* out, float* lse, const bf16* q, const bf16* k,
                                       const bf16* v, int B, int Tq, int Tk, int NH, int NKV, int hs) {
  const AttentionLayout l = gqa_attention_layout(B, Tq, Tk, NH, NKV, hs);
  const size_t nq = size_t(B) * Tq * NH * hs, nkv = size_t(B) * Tk * NKV * hs;
  if (nq == 0) return;
  if (flash_attention_supported(l, {out, q, k, v})) {
    launch_flash_attention_forward(ctx, out, lse, q, k, v, l);
    return;
  }
  warn_fallback_once("gqa_attention_forward", l, {out, q, k, v}, {"out", "q", "k", "v"});
  Staging s(ctx, {nq, nkv, nkv, nq, size_t(B) * NH * Tq * Tk}, 0);
  float *q32 = s[0], *k32 = s[1], *v32 = s[2], *out32 = s[3], *probs = s[4];
  widen(ctx, q32, q, nq);
  widen(ctx, k32, k, nkv);
  widen(ctx, v32, v, nkv);
  launch_gqa_attention_forward(s.context(), out32, probs, q32, k32, v32, B, Tq, Tk, NH, NKV, hs);
  launch_attention_lse_f32(ctx, lse, q32, k32, l);
  narrow(ctx, out, out32, nq);
}

void launch_gqa_attention_backward_bf16(CudaContext& ctx, bf16* dq, bf16* dk, bf16* dv, const bf16* dout,
                                        const bf16* out, const bf16* q, const bf16* k, const bf16* v,
                                        const float* lse, int B, int T, int NH, int NKV, int hs) {
  const AttentionLayout l = gqa_attention_layout(B, T, T, NH, NKV, hs);
  const size_t nq = size_t(B) * T * NH * hs, nkv = size_t(B) * T * NKV * hs;
  if (nq == 0) return;
  if (flash_attention_supported(l, {dq, dk, dv, dout, out, q, k, v})) {
    launch_flash_attention_backward(ctx, dq, dk, dv, dout, out, q, k, v, lse, l);
    return;
  }
  warn_fallback_once("gqa_attention_backward", l, {dq, dk, dv, dout, out, q, k, v},
                     {"dq", "dk", "dv", "dout", "out", "q", "k", "v"});
  // The rebuilt probabilities, then launch_gqa_attention_backward's own scratch: the softmax
  // gradient, B*NH*T*T floats.
  const size_t att_n = size_t(B) * NH * T * T;
  Staging s(ctx, {nq, nkv, nkv, nq, nq, nkv, nkv, att_n}, sizeof(float) * att_n);
  float *q32 = s[0], *k32 = s[1], *v32 = s[2], *dout32 = s[3], *dq32 = s[4], *dk32 = s[5], *dv32 = s[6];
  float* probs = s[7];
  widen(ctx, q32, q, nq);
  widen(ctx, k32, k, nkv);
  widen(ctx, v32, v, nkv);
  widen(ctx, dout32, dout, nq);
  launch_attention_probs_from_lse_f32(ctx, probs, q32, k32, lse, l);
  launch_gqa_attention_backward(s.context(), dq32, dk32, dv32, dout32, q32, k32, v32, probs, B, T, NH, NKV, hs);
  narrow(ctx, dq, dq32, nq);
  narrow(ctx, dk, dk32, nkv);
  narrow(ctx, dv, dv32, nkv);
}

}  // namespace zt::cuda
