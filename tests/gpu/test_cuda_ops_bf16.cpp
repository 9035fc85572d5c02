// Every KernelOps<bf16> op of the CUDA backend (cuda_kernels_bf16.cu, cuda_llama_ops_bf16.cu,
// cuda_attention_bf16.cu) against the CPU backend's bf16 table (backend/cpu/bf16_kernels.cpp)
// on the same random bf16 inputs, as test_cuda_ops.cpp checks the fp32 table. Each op runs on an
// aligned shape (C a multiple of 8, 16-byte aligned pointers: the 16-byte vector paths) and on an
// unaligned one (odd sizes or pointers one element off: the scalar paths).
//
// Both sides read bf16 exactly, compute in fp32 and round each bf16 output once; they differ only
// in summation order and expf, so a bf16 output may differ by one bf16 ulp (2^-8 relative) in a
// few elements. Errors are measured as in test_cuda_ops.cpp: max|gpu - cpu| / max|cpu|
// ("max-relative"), or ||gpu - cpu|| / ||cpu|| for GEMM outputs. Ops that chain (a backward that
// reads its forward's statistics, probabilities or outputs) get the CPU's values on both sides
// first, so a failure names the op that is wrong, not the one after it. Each GPU call is
// synchronised and its errors are reported with the op's name.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <algorithm>
#include <functional>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cublaslt_gemm.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/device_array.h"
#include "core/dtype.h"
#include "core/error.h"
#include "../unit/random_test_util.h"
#include "cpu_gpu_twins.h"

namespace zt {
namespace {

// Tolerances. A bf16 output rounded once on each side from fp32 values that agree to ~1e-6 is at
// most one bf16 ulp (2^-8 = 0.0039 of the element, so of the largest element) away: 1e-2. A
// wrong index, formula or rounding path gives errors of order 1. fp32 outputs (parameter
// gradients, statistics, losses) are sums of the same bf16 inputs in other orders: 1e-3.
constexpr double kBf16Tol = 1e-2;
constexpr double kF32Tol = 1e-3;
// The same fp32 values rounded to nearest even on both sides give the same bf16 but where they sit
// within ~1e-6 of a rounding boundary: well under 1% of the elements. A kernel that truncates, or
// rounds an intermediate to bf16 and again at the end, changes about half of them while staying
// within one ulp (so within kBf16Tol): more than this share of differing elements fails. Not for
// GEMM outputs, whose fp32 sums (tensor cores against OpenBLAS) differ more.
constexpr double kMaxDifferingShare = 0.1;

/// fp32 values rounded to bf16 as the CPU rounds them.
std::vector<bf16> bf16_values(const std::vector<float>& v) {
  std::vector<bf16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = to_bf16(v[i]);
  return out;
}

std::vector<float> widen(const std::vector<bf16>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = to_float(v[i]);
  return out;
}
std::vector<float> widen(const std::vector<float>& v) { return v; }

/// How far got is from want, with what a failure message needs to locate it.
struct Diff {
  double err = 0;    // max-relative or norm-relative
  size_t worst = 0;  // the index of the largest |got - want|
  float got_at = 0, want_at = 0;
  size_t beyond_ulp = 0;  // elements more than one bf16 ulp of the larger side apart
  size_t differing = 0;   // elements that are not equal
  size_t non_finite = 0;  // elements where exactly one side is NaN or infinite
};

double bf16_ulp(double x) {
  x = std::fabs(x);
  return x > 0 ? std::ldexp(1.0, std::ilogb(x) - 7) : 0.0;
}

Diff compare(const std::vector<float>& got, const std::vector<float>& want, bool normwise) {
  Diff d;
  double max_err = 0, max_ref = 0, sq_err = 0, sq_ref = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = got[i], w = want[i];
    if (std::isfinite(g) != std::isfinite(w)) {
      if (d.non_finite++ == 0) d.worst = i, d.got_at = got[i], d.want_at = want[i];
      continue;
    }
    if (!std::isfinite(w)) continue;
    const double e = std::fabs(g - w);
    if (g != w) ++d.differing;
    if (e > max_err && d.non_finite == 0) max_err = e, d.worst = i, d.got_at = got[i], d.want_at = want[i];
    if (e > bf16_ulp(std::max(std::fabs(g), std::fabs(w)))) ++d.beyond_ulp;
    max_ref = std::max(max_ref, std::fabs(w));
    sq_err += e * e;
    sq_ref += w * w;
  }
  if (d.non_finite) d.err = std::numeric_limits<double>::infinity();
  else if (normwise) d.err = sq_ref > 0 ? std::sqrt(sq_err / sq_ref) : std::sqrt(sq_err);
  else d.err = max_ref > 0 ? max_err / max_ref : max_err;
  return d;
}

class CudaOpsBf16 : public CpuGpuTest {
 public:
  /// Random normal values rounded to bf16, the same on both sides.
  Twin<bf16> bf16_twin(size_t n, uint32_t seed, float scale = 1.0f) { return twin(bf16_values(randn(n, seed, scale))); }
  /// Random normal fp32 values (parameter gradients, statistics), the same on both sides.
  Twin<float> f32_twin(size_t n, uint32_t seed, float scale = 1.0f) { return twin(randn(n, seed, scale)); }

  /// Runs the same op on the GPU (synchronised, so that a failing kernel is reported here, with
  /// the op's name) and on the CPU.
  void on_both(const std::string& op, const std::function<void(KernelOps<bf16>&, Backend&)>& fn) {
    try {
      fn(gpu->ops_bf16(), *gpu);
      gpu->synchronize();
    } catch (const std::exception& e) {
      throw std::runtime_error(cat(op, " on the GPU failed: ", e.what()));
    }
    fn(cpu->ops_bf16(), *cpu);
  }

  /// Gives the GPU the CPU's copy, so that the next op reads the same values on both sides.
  template <typename T>
  void use_cpu_values(Twin<T>& t) {
    const auto host = read(*cpu, t.c);
    gpu->copy_from_host(t.g.data(), host.data(), t.g.bytes());
  }

  template <typename T>
  /// `rounded_once`: both sides round the same fp32 result once, so few bf16 elements may differ
  /// at all (not so for flash attention, which also rounds its probabilities to bf16 for the
  /// tensor-core product with V, as FlashAttention does, and sums in tiles).
  void expect_close(const Twin<T>& t, double tol, const std::string& what, bool normwise = false,
                    bool rounded_once = true) {
    const Diff d = compare(widen(read(*gpu, t.g)), widen(read(*cpu, t.c)), normwise);
    EXPECT_LE(d.err, tol) << what << ": " << (normwise ? "norm" : "max") << "-relative error " << d.err
                          << "; worst at [" << d.worst << "]: gpu " << d.got_at << ", cpu " << d.want_at << "; "
                          << d.beyond_ulp << " of " << t.c.size() << " elements more than 1 bf16 ulp apart, "
                          << d.non_finite << " non-finite on one side only";
    if (std::is_same_v<T, bf16> && !normwise && rounded_once) {
      EXPECT_LE(double(d.differing), kMaxDifferingShare * double(t.c.size()))
          << what << ": " << d.differing << " of " << t.c.size()
          << " bf16 elements differ, more than rounding fp32 to nearest even once explains (truncated? rounded twice?)";
    }
  }

  template <typename T>
  void expect_equal_bits(const Twin<T>& t, const std::string& what) {
    const auto got = read(*gpu, t.g), want = read(*cpu, t.c);
    size_t mismatches = 0, first = 0;
    for (size_t i = 0; i < want.size(); ++i)
      if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0 && mismatches++ == 0) first = i;
    EXPECT_EQ(mismatches, 0u) << what << ": " << mismatches << " of " << want.size()
                              << " elements differ in their bits; the first at [" << first
                              << "]: gpu " << to_float(got[first]) << ", cpu " << to_float(want[first]);
  }
};

/// "aligned" or "unaligned" plus the shape, for messages.
std::string path_name(bool aligned) { return aligned ? "aligned" : "unaligned"; }

// ---- embedding ----------------------------------------------------------------------------------

// Tokens from only 20 values, so many rows share a token (the backward's chains); with wpe (GPT-2)
// and without (the Llama family). C = 64 and 2056 take the 16-byte paths (2056 / 8 > 256 threads:
// two blocks across a row), C = 45 and 301 the scalar ones. The sums are fp32 additions of bf16
// values in the CPU's order, the copies and the one addition of the forward are exact: bit for bit.
TEST_F(CudaOpsBf16, Embedding) {
  constexpr int B = 2, T = 37, V = 101;
  for (int C : {64, 2056, 45, 301}) {
    const std::string shape = cat(" (", path_name(C % 8 == 0), ": B", B, " T", T, " C", C, ")");
    auto tokens = twin(random_tokens(B * T, 20, 1));
    auto wte = bf16_twin(size_t(V) * C, 2), wpe = bf16_twin(size_t(T) * C, 3);
    auto out = bf16_twin(size_t(B) * T * C, 4), out_nopos = bf16_twin(size_t(B) * T * C, 5);
    auto dout = bf16_twin(size_t(B) * T * C, 6);
    auto dwte = f32_twin(size_t(V) * C, 7), dwpe = f32_twin(size_t(T) * C, 8);  // accumulated into
    auto dwte_nopos = f32_twin(size_t(V) * C, 9);
    on_both("embedding_forward" + shape, [&](KernelOps<bf16>& k, Backend& b) {
      k.embedding_forward(out.on(b), tokens.on(b), wte.on(b), wpe.on(b), B, T, C);
    });
    expect_equal_bits(out, "embedding_forward out" + shape);
    on_both("embedding_forward without wpe" + shape, [&](KernelOps<bf16>& k, Backend& b) {
      k.embedding_forward(out_nopos.on(b), tokens.on(b), wte.on(b), nullptr, B, T, C);
    });
    expect_equal_bits(out_nopos, "embedding_forward without wpe out" + shape);
    on_both("embedding_backward" + shape, [&](KernelOps<bf16>& k, Backend& b) {
      k.embedding_backward(dwte.on(b), dwpe.on(b), dout.on(b), tokens.on(b), B, T, C);
    });
    expect_close(dwte, kF32Tol, "embedding_backward dwte" + shape);
    expect_close(dwpe, kF32Tol, "embedding_backward dwpe" + shape);
    on_both("embedding_backward without dwpe" + shape, [&](KernelOps<bf16>& k, Backend& b) {
      k.embedding_backward(dwte_nopos.on(b), nullptr, dout.on(b), tokens.on(b), B, T, C);
    });
    expect_close(dwte_nopos, kF32Tol, "embedding_backward without dwpe dwte" + shape);
  }
}

// ---- norms --------------------------------------------------------------------------------------

// One warp per row: C = 264 (33 groups of 8: lanes loop) and 64 take the 16-byte path, 45 and 301
// the scalar one. dx, dweight and dbias are added to.
TEST_F(CudaOpsBf16, Layernorm) {
  const int rows = 74;
  for (int C : {264, 64, 45, 301}) {
    const std::string shape = cat(" (", path_name(C % 8 == 0), ": rows ", rows, " C ", C, ")");
    auto x = bf16_twin(size_t(rows) * C, 10, 2.0f), w = bf16_twin(C, 11), bias = bf16_twin(C, 12);
    auto out = bf16_twin(size_t(rows) * C, 13);
    auto mean = f32_twin(rows, 14), rstd = f32_twin(rows, 15);
    auto dout = bf16_twin(size_t(rows) * C, 16), dx = bf16_twin(size_t(rows) * C, 17);
    auto dw = f32_twin(C, 18), db = f32_twin(C, 19);
    on_both("layernorm_forward" + shape, [&](KernelOps<bf16>& k, Backend& b) {
      k.layernorm_forward(out.on(b), mean.on(b), rstd.on(b), x.on(b), w.on(b), bias.on(b), rows, C, 1e-5);
    });
    expect_close(out, kBf16Tol, "layernorm_forward out" + shape);
    expect_close(mean, kF32Tol, "layernorm_forward mean" + shape);
    expect_close(rstd, kF32Tol, "layernorm_forward rstd" + shape);
    use_cpu_values(mean);
    use_cpu_values(rstd);
    on_both("layernorm_backward" + shape, [&](KernelOps<bf16>& k, Backend& b) {
      k.layernorm_backward(dx.on(b), dw.on(b), db.on(b), dout.on(b), x.on(b), w.on(b), mean.on(b), rstd.on(b), rows, C);
    });
    expect_close(dx, kBf16Tol, "layernorm_backward dx (+=)" + shape);
    expect_close(dw, kF32Tol, "layernorm_backward dweight (+=)" + shape);
    expect_close(db, kF32Tol, "layernorm_backward dbias (+=)" + shape);
  }
}

TEST_F(CudaOpsBf16, Rmsnorm) {
  const int rows = 74;
  for (int C : {264, 64, 45, 301}) {
    const std::string shape = cat(" (", path_name(C % 8 == 0), ": rows ", rows, " C ", C, ")");
    auto x = bf16_twin(size_t(rows) * C, 100, 2.0f), w = bf16_twin(C, 101);
    auto out = bf16_twin(size_t(rows) * C, 102), dout = bf16_twin(size_t(rows) * C, 104);
    auto dx = bf16_twin(size_t(rows) * C, 105);
    auto rstd = f32_twin(rows, 103), dw = f32_twin(C, 106);
    on_both("rmsnorm_forward" + shape, [&](KernelOps<bf16>& k, Backend& b) {
      k.rmsnorm_forward(out.on(b), rstd.on(b), x.on(b), w.on(b), rows, C, 1e-6);
    });
    expect_close(out, kBf16Tol, "rmsnorm_forward out" + shape);
    expect_close(rstd, kF32Tol, "rmsnorm_forward rstd" + shape);
    use_cpu_values(rstd);
    on_both("rmsnorm_backward" + shape, [&](KernelOps<bf16>& k, Backend& b) {
      k.rmsnorm_backward(dx.on(b), dw.on(b), dout.on(b), x.on(b), w.on(b), rstd.on(b), rows, C);
    });
    expect_close(dx, kBf16Tol, "rmsnorm_backward dx (+=)" + shape);
    expect_close(dw, kF32Tol, "rmsnorm_backward dweight (+=)" + shape);
  }
}

// ---- GEMMs --------------------------------------------------------------------------------------

/// A GEMM shape: aligned ones have every dimension a multiple of 8 and 16-byte aligned operands;
/// unaligned ones odd dimensions and activations one element off (cuBLASLt is told the alignment).
struct GemmShape {
  int rows, in, out;
  size_t off;  // elements the activations (x, out, dx, dout) are offset by
  std::string name() const {
    return cat(" (", path_name(in % 8 == 0 && out % 8 == 0 && off == 0), ": rows ", rows, " in ", in, " out ", out,
               off ? " activations one element off" : "", ")");
  }
};
const GemmShape kGemmShapes[] = {{74, 64, 192, 0}, {74, 45, 149, 1}, {300, 768, 1000, 0}};

// matmul_forward ([in,out] weights) and linear_forward ([out,in]) with an aligned bias (cuBLASLt's
// epilogue), without one, and with one 2 bytes off 16-byte alignment (broadcast, then accumulate).
TEST_F(CudaOpsBf16, MatmulAndLinearForward) {
  for (const GemmShape& s : kGemmShapes) {
    const std::string shape = s.name();
    const size_t o = s.off;
    auto x = bf16_twin(size_t(s.rows) * s.in + o, 20), w = bf16_twin(size_t(s.in) * s.out, 21, 0.1f);
    auto bias = bf16_twin(s.out + 1, 22);
    for (bool linear : {false, true}) {
      const std::string op = linear ? "linear_forward" : "matmul_forward";
      auto forward = [&](KernelOps<bf16>& k, Backend& b, bf16* out, const bf16* bias_ptr) {
        if (linear) k.linear_forward(out, x.on(b) + o, w.on(b), bias_ptr, s.rows, s.in, s.out);
        else k.matmul_forward(out, x.on(b) + o, w.on(b), bias_ptr, s.rows, s.in, s.out);
      };
      auto with_bias = bf16_twin(size_t(s.rows) * s.out + o, 23), no_bias = bf16_twin(size_t(s.rows) * s.out + o, 24);
      auto odd_bias = bf16_twin(size_t(s.rows) * s.out + o, 25);
      on_both(op + " with bias" + shape,
              [&](KernelOps<bf16>& k, Backend& b) { forward(k, b, with_bias.on(b) + o, bias.on(b)); });
      expect_close(with_bias, kBf16Tol, op + " with bias" + shape, true);
      on_both(op + " without bias" + shape,
              [&](KernelOps<bf16>& k, Backend& b) { forward(k, b, no_bias.on(b) + o, nullptr); });
      expect_close(no_bias, kBf16Tol, op + " without bias" + shape, true);
      on_both(op + " with a bias not 16-byte aligned" + shape,
              [&](KernelOps<bf16>& k, Backend& b) { forward(k, b, odd_bias.on(b) + o, bias.on(b) + 1); });
      expect_close(odd_bias, kBf16Tol, op + " with a bias not 16-byte aligned" + shape, true);
    }
  }
}

TEST_F(CudaOpsBf16, MatmulBackward) {
  for (const GemmShape& s : kGemmShapes) {
    const std::string shape = s.name();
    const size_t o = s.off;
    auto x = bf16_twin(size_t(s.rows) * s.in + o, 30), w = bf16_twin(size_t(s.in) * s.out, 31, 0.1f);
    auto dout = bf16_twin(size_t(s.rows) * s.out + o, 32), dx = bf16_twin(size_t(s.rows) * s.in + o, 33);
    auto dw = f32_twin(size_t(s.in) * s.out, 34), db = f32_twin(s.out, 35);
    auto dw_only = f32_twin(size_t(s.in) * s.out, 36);
    on_both("matmul_backward" + shape, [&](KernelOps<bf16>& k, Backend& b) {
      k.matmul_backward(dx.on(b) + o, dw.on(b), db.on(b), dout.on(b) + o, x.on(b) + o, w.on(b), s.rows, s.in, s.out);
    });
    expect_close(dx, kBf16Tol, "matmul_backward dx" + shape, true);
    expect_close(dw, kF32Tol, "matmul_backward dweight (+=)" + shape, true);
    expect_close(db, kF32Tol, "matmul_backward dbias (+=)" + shape);
    on_both("matmul_backward without dx and dbias" + shape, [&](KernelOps<bf16>& k, Backend& b) {
      k.matmul_backward(nullptr, dw_only.on(b), nullptr, dout.on(b) + o, x.on(b) + o, w.on(b), s.rows, s.in, s.out);
    });
    expect_close(dw_only, kF32Tol, "matmul_backward without dx and dbias: dweight (+=)" + shape, true);
  }
}

// dx overwritten and accumulated (the q, k and v projections share their input: the bf16 dx is
// read, added to in fp32, rounded once), dweight and dbias accumulated, and the call without dx.
TEST_F(CudaOpsBf16, LinearBackward) {
  for (const GemmShape& s : kGemmShapes) {
    const std::string shape = s.name();
    const size_t o = s.off;
    auto x = bf16_twin(size_t(s.rows) * s.in + o, 46), w = bf16_twin(size_t(s.out) * s.in, 47, 0.1f);
    auto dout = bf16_twin(size_t(s.rows) * s.out + o, 48);
    auto dx = bf16_twin(size_t(s.rows) * s.in + o, 49), dx_acc = bf16_twin(size_t(s.rows) * s.in + o, 140);
    auto dw = f32_twin(size_t(s.out) * s.in, 141), db = f32_twin(s.out, 142);
    auto dw_only = f32_twin(size_t(s.out) * s.in, 143);
    on_both("linear_backward accumulate_dx=false" + shape, [&](KernelOps<bf16>& k, Backend& b) {
      k.linear_backward(dx.on(b) + o, dw.on(b), db.on(b), dout.on(b) + o, x.on(b) + o, w.on(b), s.rows, s.in, s.out,
                        false);
    });
    expect_close(dx, kBf16Tol, "linear_backward dx" + shape, true);
    expect_close(dw, kF32Tol, "linear_backward dweight (+=)" + shape, true);
    expect_close(db, kF32Tol, "linear_backward dbias (+=)" + shape);
    on_both("linear_backward accumulate_dx=true" + shape, [&](KernelOps<bf16>& k, Backend& b) {
      k.linear_backward(dx_acc.on(b) + o, dw.on(b), nullptr, dout.on(b) + o, x.on(b) + o, w.on(b), s.rows, s.in,
                        s.out, true);
    });
    expect_close(dx_acc, kBf16Tol, "linear_backward accumulate_dx=true: dx (+=)" + shape, true);
    expect_close(dw, kF32Tol, "linear_backward dweight (accumulated twice)" + shape, true);
    on_both("linear_backward without dx and dbias" + shape, [&](KernelOps<bf16>& k, Backend& b) {
      k.linear_backward(nullptr, dw_only.on(b), nullptr, dout.on(b) + o, x.on(b) + o, w.on(b), s.rows, s.in, s.out,
                        false);
    });
    expect_close(dw_only, kF32Tol, "linear_backward without dx and dbias: dweight (+=)" + shape, true);
  }
}

// ---- a GEMM with its neighbour (cuBLASLt's epilogues) -------------------------------------------

// The fused pairs of kernel_ops.h against the CPU's, which are the two ops composed: the residual
// added as the GEMM's C (matmul_ and linear_forward_residual), GELU_AUX_BIAS (matmul_gelu_forward:
// the GELU's input and output) and DGELU (matmul_backward_gelu: dx with the GELU's gradient, and
// dweight, dbias as matmul_backward). Each with an aligned bias, none, and one 2 bytes off
// alignment (the composed ops then). The GPU rounds once where the CPU rounds twice: normwise
// within a bf16 ulp. On the aligned shapes every fused op must run as one fused GEMM (seven of
// them: three ops with each of two biases, and the DGELU), none declined: the composed ops give
// the same values, so only cublaslt_gemm's call counts can tell that the fast path ran. The
// unaligned shape (an odd width, which no GELU epilogue takes) must give the same values through
// whichever path it takes.
TEST_F(CudaOpsBf16, FusedGemmNeighbours) {
  for (const GemmShape& s : kGemmShapes) {
    const std::string shape = s.name();
    const size_t o = s.off, n_in = size_t(s.rows) * s.in + o, n_out = size_t(s.rows) * s.out + o;
    const cuda::GemmCounts before = cuda::gemm_counts();
    auto x = bf16_twin(n_in, 150), w = bf16_twin(size_t(s.in) * s.out, 151, 0.1f), bias = bf16_twin(s.out + 1, 152);
    auto residual = bf16_twin(n_out, 153);
    for (int bias_kind = 0; bias_kind < 3; ++bias_kind) {
      const char* names[] = {" with bias", " without bias", " with a bias not 16-byte aligned"};
      auto bias_on = [&](Backend& b) -> const bf16* {
        return bias_kind == 0 ? bias.on(b) : bias_kind == 1 ? nullptr : bias.on(b) + 1;
      };
      for (bool linear : {false, true}) {
        const std::string op = cat(linear ? "linear" : "matmul", "_forward_residual", names[bias_kind], shape);
        auto out = bf16_twin(n_out, 154);
        on_both(op, [&](KernelOps<bf16>& k, Backend& b) {
          if (linear)
            k.linear_forward_residual(out.on(b) + o, x.on(b) + o, w.on(b), bias_on(b), residual.on(b) + o, s.rows,
                                      s.in, s.out);
          else
            k.matmul_forward_residual(out.on(b) + o, x.on(b) + o, w.on(b), bias_on(b), residual.on(b) + o, s.rows,
                                      s.in, s.out);
        });
        expect_close(out, kBf16Tol, op, true);
      }
      const std::string op = cat("matmul_gelu_forward", names[bias_kind], shape);
      auto pre = bf16_twin(n_out, 155), out = bf16_twin(n_out, 156);
      on_both(op, [&](KernelOps<bf16>& k, Backend& b) {
        k.matmul_gelu_forward(pre.on(b) + o, out.on(b) + o, x.on(b) + o, w.on(b), bias_on(b), s.rows, s.in, s.out);
      });
      expect_close(pre, kBf16Tol, op + ": the GELU's input", true);
      expect_close(out, kBf16Tol, op + ": the GELU's output", true);
    }
    // The backward of a GEMM whose input is gelu(pre): x = gelu(pre) on both sides, as in a model.
    auto dout = bf16_twin(n_out, 157), dx = bf16_twin(n_in, 158), gelu_pre = bf16_twin(n_in, 159, 3.0f);
    auto gelu_out = bf16_twin(n_in, 160);
    auto dw = f32_twin(size_t(s.in) * s.out, 161), db = f32_twin(s.out, 162);
    on_both("gelu_forward (the backward's input)" + shape, [&](KernelOps<bf16>& k, Backend& b) {
      k.gelu_forward(gelu_out.on(b) + o, gelu_pre.on(b) + o, size_t(s.rows) * s.in);
    });
    use_cpu_values(gelu_out);
    on_both("matmul_backward_gelu" + shape, [&](KernelOps<bf16>& k, Backend& b) {
      k.matmul_backward_gelu(dx.on(b) + o, dw.on(b), db.on(b), dout.on(b) + o, gelu_out.on(b) + o, w.on(b),
                             gelu_pre.on(b) + o, s.rows, s.in, s.out);
    });
    expect_close(dx, kBf16Tol, "matmul_backward_gelu: d(gelu_pre)" + shape, true);
    expect_close(dw, kF32Tol, "matmul_backward_gelu: dweight (+=)" + shape, true);
    expect_close(db, kF32Tol, "matmul_backward_gelu: dbias (+=)" + shape);
    if (s.in % 8 == 0 && s.out % 8 == 0 && o == 0) {
      const cuda::GemmCounts after = cuda::gemm_counts();
      EXPECT_EQ(after.declined_calls, before.declined_calls)
          << "cuBLASLt declined a fused GEMM on an aligned shape" << shape << " (see the warning above)";
      EXPECT_EQ(after.fused_launches - before.fused_launches, 7u)
          << "fused GEMMs launched on an aligned shape" << shape << ": the ops were composed instead";
    }
  }
}

// ---- attention ----------------------------------------------------------------------------------

// Both tables save the logsumexp of each row's scaled, masked scores (attention_saves_lse: the
// GPU's flash attention, the CPU's lse_attention.h): att's first B*NH*Tq floats. The reference lse
// in double from the bf16 inputs: q row r (of NH*Tq per batch) at position Tk - Tq + i reads
// keys 0..Tk - Tq + i of its kv head. `q_at(b, i, h)` and `k_at(b, j, kvh)` point at hs values.
template <typename QAt, typename KAt>
void expect_lse(CudaOpsBf16& t, const Twin<float>& att, int B, int Tq, int Tk, int NH, int NKV, int hs, QAt q_at,
                KAt k_at, const std::string& what) {
  const auto got = CudaOpsBf16::read(*t.gpu, att.g);
  double worst = 0;
  size_t worst_row = 0;
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      for (int i = 0; i < Tq; ++i) {
        const bf16* q = q_at(b, i, h);
        const int last = Tk - Tq + i;
        std::vector<double> s(size_t(last) + 1);
        double m = -INFINITY;
        for (int j = 0; j <= last; ++j) {
          const bf16* k = k_at(b, j, h / (NH / NKV));
          double dot = 0;
          for (int c = 0; c < hs; ++c) dot += double(to_float(q[c])) * double(to_float(k[c]));
          s[size_t(j)] = dot / std::sqrt(double(hs));
          m = std::max(m, s[size_t(j)]);
        }
        double sum = 0;
        for (double v : s) sum += std::exp(v - m);
        const size_t row = (size_t(b) * NH + h) * Tq + i;
        const double err = std::fabs(double(got[row]) - (m + std::log(sum)));
        if (err > worst) worst = err, worst_row = row;
      }
    }
  }
  EXPECT_LE(worst, 1e-3) << what << ": lse off by " << worst << " at row " << worst_row;
}

// GPT-2's attention on qkv[B,T,3C]: the bf16 tensors offset by `off` elements (the widening casts'
// scalar path). The backward reads the CPU's probabilities on both sides, or with the GPU's flash
// attention each side its own forward's state.
void check_attention(CudaOpsBf16& t, int B, int T, int C, int NH, size_t off) {
  const size_t qkv_n = size_t(B) * T * 3 * C, n = size_t(B) * T * C, att_n = size_t(B) * NH * T * T;
  const std::string shape = cat(" (", path_name(C % 8 == 0 && off == 0), ": B", B, " T", T, " C", C, " NH", NH,
                                off ? " one element off" : "", ")");
  auto qkv = t.bf16_twin(qkv_n + off, 50), dout = t.bf16_twin(n + off, 51);
  auto out = t.bf16_twin(n + off, 52), dqkv = t.bf16_twin(qkv_n + off, 54);
  auto att = t.f32_twin(att_n, 53);
  t.on_both("attention_forward" + shape, [&](KernelOps<bf16>& k, Backend& b) {
    k.attention_forward(out.on(b) + off, att.on(b), qkv.on(b) + off, B, T, C, NH);
  });
  const bool once = !t.gpu->ops_bf16().attention_saves_lse();  // the widened kernels round once
  t.expect_close(out, kBf16Tol, "attention_forward out" + shape, false, once);
  if (t.gpu->ops_bf16().attention_saves_lse()) {
    // Each side's backward reads its own forward's state.
    const auto host = CudaOpsBf16::read(*t.cpu, qkv.c);
    const int hs = C / NH;
    auto row = [&](int b, int i) { return host.data() + off + (size_t(b) * T + i) * 3 * C; };
    expect_lse(t, att, B, T, T, NH, NH, hs, [&](int b, int i, int h) { return row(b, i) + h * hs; },
               [&](int b, int j, int h) { return row(b, j) + C + h * hs; }, "attention_forward" + shape);
  } else {
    t.expect_close(att, kF32Tol, "attention_forward att" + shape);
    // The masked entries are exact zeros, as the CPU writes them.
    const auto a = t.read(*t.gpu, att.g);
    for (size_t row = 0; row < size_t(B) * NH * T; ++row)
      for (int t2 = int(row % T) + 1; t2 < T; ++t2)
        ASSERT_EQ(a[row * T + t2], 0.0f) << "attention_forward att masked row " << row << " t2 " << t2 << shape;
    t.use_cpu_values(att);
  }
  t.on_both("attention_backward" + shape, [&](KernelOps<bf16>& k, Backend& b) {
    k.attention_backward(dqkv.on(b) + off, dout.on(b) + off, out.on(b) + off, qkv.on(b) + off, att.on(b), B, T, C,
                         NH);
  });
  t.expect_close(dqkv, kBf16Tol, "attention_backward dqkv" + shape, false, once);
}

TEST_F(CudaOpsBf16, Attention) {
  check_attention(*this, 2, 37, 64, 4, 0);    // head size 16, under a warp
  check_attention(*this, 1, 101, 128, 2, 0);  // GPT-2's head size 64, a longer odd sequence
  check_attention(*this, 2, 37, 45, 3, 0);    // head size 15: odd sizes
  check_attention(*this, 2, 37, 64, 4, 1);    // pointers one element off
}

// Grouped-query attention: q[B,Tq,NH,hs], k, v [B,Tk,NKV,hs]; backward only where Tq = Tk
// (training), from the CPU's probabilities. `off`: the bf16 tensors one element off.
void check_gqa(CudaOpsBf16& t, int B, int Tq, int Tk, int NH, int NKV, int hs, size_t off) {
  const size_t q_n = size_t(B) * Tq * NH * hs, kv_n = size_t(B) * Tk * NKV * hs, att_n = size_t(B) * NH * Tq * Tk;
  const std::string shape = cat(" (", path_name(hs % 8 == 0 && off == 0), ": B", B, " Tq", Tq, " Tk", Tk, " NH", NH,
                                " NKV", NKV, " hs", hs, off ? " one element off" : "", ")");
  auto q = t.bf16_twin(q_n + off, 120), k = t.bf16_twin(kv_n + off, 121), v = t.bf16_twin(kv_n + off, 122);
  auto out = t.bf16_twin(q_n + off, 123);
  auto att = t.f32_twin(att_n, 124);
  t.on_both("gqa_attention_forward" + shape, [&](KernelOps<bf16>& ops, Backend& b) {
    ops.gqa_attention_forward(out.on(b) + off, att.on(b), q.on(b) + off, k.on(b) + off, v.on(b) + off, B, Tq, Tk, NH,
                              NKV, hs);
  });
  const bool once = !t.gpu->ops_bf16().attention_saves_lse();  // the widened kernels round once
  t.expect_close(out, kBf16Tol, "gqa_attention_forward out" + shape, false, once);
  const bool lse = t.gpu->ops_bf16().attention_saves_lse();
  if (lse) {
    const auto hq = CudaOpsBf16::read(*t.cpu, q.c), hk = CudaOpsBf16::read(*t.cpu, k.c);
    expect_lse(t, att, B, Tq, Tk, NH, NKV, hs,
               [&](int b, int i, int h) { return hq.data() + off + ((size_t(b) * Tq + i) * NH + h) * hs; },
               [&](int b, int j, int h) { return hk.data() + off + ((size_t(b) * Tk + j) * NKV + h) * hs; },
               "gqa_attention_forward" + shape);
  } else {
    t.expect_close(att, kF32Tol, "gqa_attention_forward att" + shape);
    // Query i sits at position Tk - Tq + i: the keys after it are exact zeros.
    const auto a = t.read(*t.gpu, att.g);
    for (size_t row = 0; row < size_t(B) * NH * Tq; ++row)
      for (int t2 = Tk - Tq + int(row % Tq) + 1; t2 < Tk; ++t2)
        ASSERT_EQ(a[row * Tk + t2], 0.0f) << "gqa_attention_forward att masked row " << row << " t2 " << t2 << shape;
  }
  if (Tq != Tk) return;
  if (!lse) t.use_cpu_values(att);  // else each side's backward reads its own forward's state
  auto dout = t.bf16_twin(q_n + off, 125);
  auto dq = t.bf16_twin(q_n + off, 126), dk = t.bf16_twin(kv_n + off, 127), dv = t.bf16_twin(kv_n + off, 128);
  t.on_both("gqa_attention_backward" + shape, [&](KernelOps<bf16>& ops, Backend& b) {
    ops.gqa_attention_backward(dq.on(b) + off, dk.on(b) + off, dv.on(b) + off, dout.on(b) + off, out.on(b) + off,
                               q.on(b) + off, k.on(b) + off, v.on(b) + off, att.on(b), B, Tq, NH, NKV, hs);
  });
  t.expect_close(dq, kBf16Tol, "gqa_attention_backward dq" + shape, false, once);
  t.expect_close(dk, kBf16Tol, "gqa_attention_backward dk" + shape, false, once);
  t.expect_close(dv, kBf16Tol, "gqa_attention_backward dv" + shape, false, once);
}

TEST_F(CudaOpsBf16, GqaAttention) {
  check_gqa(*this, 2, 37, 37, 4, 2, 16, 0);    // two query heads per kv head
  check_gqa(*this, 1, 101, 101, 8, 2, 64, 0);  // Llama's head size, a longer odd sequence
  check_gqa(*this, 2, 37, 37, 4, 2, 15, 0);    // odd head size
  check_gqa(*this, 2, 37, 37, 4, 2, 16, 1);    // pointers one element off
}

TEST_F(CudaOpsBf16, GqaAttentionWithKvCache) {
  check_gqa(*this, 2, 5, 40, 4, 2, 16, 0);  // a chunk of 5 new tokens after 35 cached ones
  check_gqa(*this, 3, 1, 33, 8, 2, 64, 0);  // decoding one token
  check_gqa(*this, 2, 5, 40, 4, 2, 15, 1);  // odd head size, pointers one element off
}

// ---- elementwise --------------------------------------------------------------------------------

// n is odd, so the 8-wide paths leave a scalar tail; the "+ 1" views are not 16-byte aligned and
// take the scalar path throughout. residual and accumulate are one fp32 addition of two bf16
// values, rounded once, on either side: bit for bit.
TEST_F(CudaOpsBf16, GeluResidualAccumulate) {
  const size_t n = 4099;
  auto x = bf16_twin(n + 1, 60, 3.0f), y = bf16_twin(n + 1, 61), dout = bf16_twin(n + 1, 62);
  auto gelu = bf16_twin(n + 1, 63), dgelu = bf16_twin(n + 1, 64), sum = bf16_twin(n + 1, 65);
  auto acc = bf16_twin(n + 1, 66);
  for (size_t off : {size_t(0), size_t(1)}) {
    const std::string shape = cat(" (", path_name(off == 0), ": n ", n, off ? " one element off" : "", ")");
    on_both("gelu_forward" + shape,
            [&](KernelOps<bf16>& k, Backend& b) { k.gelu_forward(gelu.on(b) + off, x.on(b) + off, n); });
    expect_close(gelu, kBf16Tol, "gelu_forward" + shape);
    on_both("gelu_backward" + shape, [&](KernelOps<bf16>& k, Backend& b) {
      k.gelu_backward(dgelu.on(b) + off, x.on(b) + off, dout.on(b) + off, n);
    });
    expect_close(dgelu, kBf16Tol, "gelu_backward" + shape);
    on_both("residual_forward" + shape, [&](KernelOps<bf16>& k, Backend& b) {
      k.residual_forward(sum.on(b) + off, x.on(b) + off, y.on(b) + off, n);
    });
    expect_equal_bits(sum, "residual_forward" + shape);
    on_both("accumulate" + shape,
            [&](KernelOps<bf16>& k, Backend& b) { k.accumulate(acc.on(b) + off, y.on(b) + off, n); });
    expect_equal_bits(acc, "accumulate" + shape);
  }
}

TEST_F(CudaOpsBf16, Swiglu) {
  const size_t n = 4099;
  auto gate = bf16_twin(n + 1, 130, 3.0f), up = bf16_twin(n + 1, 131), dout = bf16_twin(n + 1, 132);
  auto out = bf16_twin(n + 1, 133), dgate = bf16_twin(n + 1, 134), dup = bf16_twin(n + 1, 135);
  for (size_t off : {size_t(0), size_t(1)}) {
    const std::string shape = cat(" (", path_name(off == 0), ": n ", n, off ? " one element off" : "", ")");
    on_both("swiglu_forward" + shape, [&](KernelOps<bf16>& k, Backend& b) {
      k.swiglu_forward(out.on(b) + off, gate.on(b) + off, up.on(b) + off, n);
    });
    expect_close(out, kBf16Tol, "swiglu_forward" + shape);
    on_both("swiglu_backward" + shape, [&](KernelOps<bf16>& k, Backend& b) {
      k.swiglu_backward(dgate.on(b) + off, dup.on(b) + off, dout.on(b) + off, gate.on(b) + off, up.on(b) + off, n);
    });
    expect_close(dgate, kBf16Tol, "swiglu_backward dgate" + shape);
    expect_close(dup, kBf16Tol, "swiglu_backward dup" + shape);
  }
}

// ---- rotary -------------------------------------------------------------------------------------

// Forward, then inverse (from the CPU's rotated values on both sides), on x[B,T,heads,hs] with
// fp32 tables. hs/2 = 16 and 8 take the 16-byte path; hs/2 = 6 and x one element off the scalar one.
TEST_F(CudaOpsBf16, Rotary) {
  constexpr int B = 2, T = 37, heads = 3;
  struct Case {
    int hs;
    size_t off;
  };
  for (const Case c : {Case{32, 0}, Case{16, 0}, Case{12, 0}, Case{32, 1}}) {
    const std::string shape = cat(" (", path_name(c.hs / 2 % 8 == 0 && c.off == 0), ": B", B, " T", T, " heads ",
                                  heads, " hs ", c.hs, c.off ? " one element off" : "", ")");
    const size_t n = size_t(B) * T * heads * c.hs;
    const auto [c_host, s_host] = rope_angles(T, c.hs);
    auto cosines = twin(c_host), sines = twin(s_host);
    const std::vector<bf16> x_host = bf16_values(randn(n + c.off, 110));
    auto x = twin(x_host);
    on_both("rotary forward" + shape, [&](KernelOps<bf16>& k, Backend& b) {
      k.rotary(x.on(b) + c.off, cosines.on(b), sines.on(b), B, T, heads, c.hs, false);
    });
    expect_close(x, kBf16Tol, "rotary forward" + shape);
    use_cpu_values(x);
    on_both("rotary inverse" + shape, [&](KernelOps<bf16>& k, Backend& b) {
      k.rotary(x.on(b) + c.off, cosines.on(b), sines.on(b), B, T, heads, c.hs, true);
    });
    expect_close(x, kBf16Tol, "rotary inverse" + shape);
    // Two roundings to bf16 away from the start: about 2^-8 of the largest element at most.
    const Diff d = compare(widen(read(*gpu, x.g)), widen(x_host), false);
    EXPECT_LE(d.err, 2e-2) << "rotary inverse(forward(x)) = x" << shape << ": max-relative error " << d.err;
  }
}

// ---- classifier ---------------------------------------------------------------------------------

// Rows of V = 101 (odd: every row at another alignment), also one element off; V = 1024 (every row
// 16-byte aligned: the vector body only); GPT-2's V = 50257. Every fifth target is -1 (ignored).
// The online softmax's edge cases, in rows of 37 columns so that most of the block's threads see
// one element or none: a NaN logit makes its row's loss NaN even where it is the only element a
// thread sees (row 0's column 36: the tail's fifth element, thread 4's only one; a thread with no
// finite element must not drop it from the sum), and a -inf logit adds nothing (row 1's column 2,
// the unaligned head's third element, thread 2's only one): that row's loss is the CPU's.
TEST_F(CudaOpsBf16, SoftmaxLossKeepsNaNAndIgnoresMinusInfinity) {
  const int rows = 3, V = 37;
  std::vector<float> values = randn(size_t(rows) * V, 73, 2.0f);
  values[size_t(0) * V + 36] = std::numeric_limits<float>::quiet_NaN();
  values[size_t(1) * V + 2] = -std::numeric_limits<float>::infinity();
  auto logits = twin(bf16_values(values));
  auto targets = twin(std::vector<int32_t>{3, 7, 11});
  auto losses = f32_twin(rows, 74);
  auto loss_sum = twin(std::vector<double>{0.0});
  on_both("softmax_xent_forward with NaN and -inf logits", [&](KernelOps<bf16>& k, Backend& b) {
    k.softmax_xent_forward(logits.on(b), losses.on(b), targets.on(b), rows, V, loss_sum.on(b), 1.0);
  });
  const auto got = read(*gpu, losses.g), want = read(*cpu, losses.c);
  EXPECT_TRUE(std::isnan(got[0])) << "a NaN logit left row 0's loss at " << got[0];
  for (int r = 1; r < rows; ++r) {
    EXPECT_NEAR(got[r], want[r], kF32Tol * std::max(1.0f, std::fabs(want[r]))) << "row " << r << "'s loss";
  }
}

TEST_F(CudaOpsBf16, SoftmaxCrossEntropy) {
  struct Case {
    int rows, V;
    size_t off;
  };
  for (const Case c : {Case{74, 101, 0}, Case{74, 101, 1}, Case{8, 1024, 0}, Case{6, 50257, 0}}) {
    const std::string shape = cat(" (", path_name(c.V % 8 == 0 && c.off == 0), ": rows ", c.rows, " V ", c.V,
                                  c.off ? " one element off" : "", ")");
    const size_t n = size_t(c.rows) * c.V;
    auto targets = twin(random_tokens(c.rows, c.V, 70, true));
    auto logits = bf16_twin(n + c.off, 71, 4.0f);
    auto losses = f32_twin(c.rows, 72);
    const double start = 0.25, weight = 0.5;
    auto loss_sum = twin(std::vector<double>{start});
    on_both("softmax_xent_forward" + shape, [&](KernelOps<bf16>& k, Backend& b) {
      k.softmax_xent_forward(logits.on(b) + c.off, losses.on(b), targets.on(b), c.rows, c.V, loss_sum.on(b), weight);
    });
    expect_close(logits, kBf16Tol, "softmax_xent_forward probabilities" + shape);
    expect_close(losses, kF32Tol, "softmax_xent_forward losses" + shape);
    const double got = read(*gpu, loss_sum.g)[0], want = read(*cpu, loss_sum.c)[0];
    EXPECT_NEAR(got, want, kF32Tol * std::fabs(want - start)) << "softmax_xent_forward loss_sum" << shape;
    const auto ignored_loss = read(*gpu, losses.g);
    const auto target_host = read(*cpu, targets.c);
    for (int r = 0; r < c.rows; ++r) {
      if (target_host[r] < 0) {
        ASSERT_EQ(ignored_loss[r], 0.0f) << "softmax_xent_forward: ignored row " << r << shape;
      }
    }

    use_cpu_values(logits);
    on_both("softmax_xent_backward" + shape, [&](KernelOps<bf16>& k, Backend& b) {
      k.softmax_xent_backward(logits.on(b) + c.off, targets.on(b), c.rows, c.V, 1.0 / 64);
    });
    expect_close(logits, kBf16Tol, "softmax_xent_backward dlogits" + shape);
    const auto dlogits = read(*gpu, logits.g);
    for (int r = 0; r < c.rows; ++r) {
      if (target_host[r] >= 0) continue;
      for (int v = 0; v < c.V; ++v) {
        ASSERT_EQ(dlogits[c.off + size_t(r) * c.V + v].bits & 0x7fffu, 0u)
            << "softmax_xent_backward: ignored row " << r << " v " << v << " is not zero" << shape;
      }
    }
  }
}

// classifier_forward/backward (the lm_head GEMM and the loss together): the GPU table keeps the
// logits with a row stride of logits_stride(V) = V rounded up to 64 and runs its three GEMMs over
// the whole padded width against a head padded with zero rows; the CPU table's logits are dense
// (stride V). The GPU buffer starts as NaN everywhere: the forward's GEMM must write 0 into every
// padding column (a GEMM over only V columns would leave the NaN), and a softmax that read one
// would put NaN into the loss. Before the backward the padding is set to NaN again, so the
// backward must zero it itself before its GEMMs read it (else dx is NaN), and leave it 0. Only the
// first V columns of each GPU row are compared. V = 50257 (GPT-2: stride 50304; dhead's last 17
// rows come from the padded tile), 101 (odd, stride 128; dhead all tile but the first 64 rows),
// 37 (stride 64: dhead all tile) and 128 (already aligned: stride V, no padding); every fifth
// target is -1 (ignored).
//
// The logits come from GEMMs that differ in summation order (tensor cores against OpenBLAS), so a
// few round to the neighbouring bf16 on one side; x @ head^T is kept near 0.1 in size (|l| < 1,
// where one bf16 ulp is at most 2^-8) so that such a logit moves its probability and its row's
// loss well within the tolerances. The backward reads the CPU's probabilities on both sides.

/// The first V of every `stride` elements of rows x stride values, widened: a dense [rows, V].
template <typename T>
std::vector<float> dense_rows(const std::vector<T>& strided, int rows, int V, int stride) {
  std::vector<float> out(size_t(rows) * V);
  for (int r = 0; r < rows; ++r)
    for (int v = 0; v < V; ++v) out[size_t(r) * V + v] = to_float(strided[size_t(r) * stride + v]);
  return out;
}

void expect_close_values(const std::vector<float>& got, const std::vector<float>& want, double tol,
                         const std::string& what, bool normwise) {
  const Diff d = compare(got, want, normwise);
  EXPECT_LE(d.err, tol) << what << ": " << (normwise ? "norm" : "max") << "-relative error " << d.err
                        << "; worst at [" << d.worst << "]: gpu " << d.got_at << ", cpu " << d.want_at << "; "
                        << d.beyond_ulp << " of " << want.size() << " elements more than 1 bf16 ulp apart, "
                        << d.non_finite << " non-finite on one side only";
}

TEST_F(CudaOpsBf16, Classifier) {
  EXPECT_EQ(gpu->ops_bf16().logits_stride(50257), 50304);
  constexpr uint16_t kPadBits = 0x7fc1;  // a NaN no kernel writes (theirs are 0x7fc0 or computed)
  struct Case {
    int rows, C, V;
  };
  for (const Case c : {Case{64, 768, 50257}, Case{37, 72, 101}, Case{37, 72, 37}, Case{37, 72, 128}}) {
    const int gs = gpu->ops_bf16().logits_stride(c.V), cs = cpu->ops_bf16().logits_stride(c.V);
    const std::string shape = cat(" (rows ", c.rows, " C ", c.C, " V ", c.V, ", GPU stride ", gs, ")");
    ASSERT_GE(gs, c.V) << shape;
    ASSERT_EQ(gs % 8, 0) << "logits_stride must keep every bf16 row 16-byte aligned" << shape;
    auto x = bf16_twin(size_t(c.rows) * c.C, 80);
    auto head = bf16_twin(size_t(c.V) * c.C, 81, float(0.1 / std::sqrt(double(c.C))));
    auto targets = twin(random_tokens(c.rows, c.V, 82, true));
    auto losses = f32_twin(c.rows, 83);
    auto dx = bf16_twin(size_t(c.rows) * c.C, 84);            // overwritten
    auto dhead = f32_twin(size_t(c.V) * c.C, 85, 1e-4f);      // added to; small, so the gradient dominates
    const double start = 0.25, weight = 0.5, dloss = 1.0 / 64;
    auto loss_sum = twin(std::vector<double>{start});
    // Each side's logits at its own stride: the GPU's all NaN to start with.
    Twin<bf16> logits{gpu.get(), DeviceArray<bf16>(*gpu, size_t(c.rows) * gs),
                      DeviceArray<bf16>(*cpu, size_t(c.rows) * cs)};
    {
      const std::vector<bf16> pad(logits.g.size(), bf16{kPadBits});
      gpu->copy_from_host(logits.g.data(), pad.data(), logits.g.bytes());
    }
    auto expect_padding_zero = [&](const std::string& op) {
      const auto g = read(*gpu, logits.g);
      size_t nonzero = 0;
      for (int r = 0; r < c.rows; ++r)
        for (int v = c.V; v < gs; ++v) nonzero += (g[size_t(r) * gs + v].bits & 0x7fffu) != 0;
      EXPECT_EQ(nonzero, 0u) << op << ": " << nonzero << " padding elements (columns V..stride-1) are not 0"
                             << shape;
    };

    on_both("classifier_forward" + shape, [&](KernelOps<bf16>& k, Backend& b) {
      k.classifier_forward(logits.on(b), losses.on(b), x.on(b), head.on(b), targets.on(b), c.rows, c.C, c.V,
                           loss_sum.on(b), weight);
    });
    expect_close_values(dense_rows(read(*gpu, logits.g), c.rows, c.V, gs),
                        dense_rows(read(*cpu, logits.c), c.rows, c.V, cs), kBf16Tol,
                        "classifier_forward probabilities" + shape, false);
    expect_padding_zero("classifier_forward");
    expect_close(losses, kF32Tol, "classifier_forward losses" + shape);
    const double got = read(*gpu, loss_sum.g)[0], want = read(*cpu, loss_sum.c)[0];
    EXPECT_NEAR(got, want, kF32Tol * std::fabs(want - start)) << "classifier_forward loss_sum" << shape;
    const auto gpu_losses = read(*gpu, losses.g);
    const auto target_host = read(*cpu, targets.c);
    for (int r = 0; r < c.rows; ++r) {
      if (target_host[r] < 0) {
        ASSERT_EQ(gpu_losses[r], 0.0f) << "classifier_forward: ignored row " << r << shape;
      }
    }

    // The CPU's probabilities into the GPU's rows, NaN into the padding again.
    {
      const auto probs = read(*cpu, logits.c);
      auto g = read(*gpu, logits.g);
      for (int r = 0; r < c.rows; ++r) {
        for (int v = 0; v < c.V; ++v) g[size_t(r) * gs + v] = probs[size_t(r) * cs + v];
        for (int v = c.V; v < gs; ++v) g[size_t(r) * gs + v] = bf16{kPadBits};
      }
      gpu->copy_from_host(logits.g.data(), g.data(), logits.g.bytes());
    }
    on_both("classifier_backward" + shape, [&](KernelOps<bf16>& k, Backend& b) {
      k.classifier_backward(dx.on(b), dhead.on(b), logits.on(b), x.on(b), head.on(b), targets.on(b), c.rows, c.C,
                            c.V, dloss);
    });
    expect_close_values(dense_rows(read(*gpu, logits.g), c.rows, c.V, gs),
                        dense_rows(read(*cpu, logits.c), c.rows, c.V, cs), kBf16Tol,
                        "classifier_backward dlogits" + shape, false);
    expect_padding_zero("classifier_backward");
    expect_close(dx, kBf16Tol, "classifier_backward dx" + shape, true);
    expect_close(dhead, kF32Tol, "classifier_backward dhead (+=)" + shape, true);
  }
}

// ---- determinism --------------------------------------------------------------------------------


template <typename T>
DeviceArray<T> upload(Backend& b, const std::vector<T>& host) {
  DeviceArray<T> a(b, host.size());
  b.copy_from_host(a.data(), host.data(), a.bytes());
  return a;
}

template <typename T>
std::vector<uint8_t> bytes_of(Backend& b, const DeviceArray<T>& a) {
  std::vector<uint8_t> host(a.bytes());
  b.copy_to_host(host.data(), a.data(), a.bytes());
  return host;
}

// classifier_forward_backward (training's classifier: the softmax writes dlogits in its last pass)
// against classifier_forward then classifier_backward on the GPU from the same inputs: the same
// bits in every output (the logits buffer, now dlogits with its padding zeroed, the losses, the
// loss sum, dx and the accumulated dhead), at GPT-2's vocabulary, an odd one and an aligned one.
TEST_F(CudaOpsBf16, ClassifierForwardBackwardIsBothInOne) {
  struct Case {
    int rows, C, V;
  };
  KernelOps<bf16>& k = gpu->ops_bf16();
  for (const Case c : {Case{64, 768, 50257}, Case{37, 72, 101}, Case{37, 72, 128}}) {
    const int stride = k.logits_stride(c.V);
    const std::string shape = cat(" (rows ", c.rows, " C ", c.C, " V ", c.V, ")");
    const auto x = bf16_values(randn(size_t(c.rows) * c.C, 90));
    const auto head = bf16_values(randn(size_t(c.V) * c.C, 91, float(0.1 / std::sqrt(double(c.C)))));
    const auto targets = random_tokens(c.rows, c.V, 92, true);
    const auto logits0 = bf16_values(randn(size_t(c.rows) * stride, 93));  // garbage, padding included
    const auto dx0 = bf16_values(randn(size_t(c.rows) * c.C, 94));
    const auto dhead0 = randn(size_t(c.V) * c.C, 95, 1e-4f);
    struct Side {
      DeviceArray<bf16> x, head, logits, dx;
      DeviceArray<int32_t> targets;
      DeviceArray<float> losses, dhead;
      DeviceArray<double> loss_sum;
    };
    auto side = [&] {
      return Side{upload(*gpu, x), upload(*gpu, head), upload(*gpu, logits0), upload(*gpu, dx0),
                  upload(*gpu, targets), upload(*gpu, std::vector<float>(c.rows, 7.0f)), upload(*gpu, dhead0),
                  upload(*gpu, std::vector<double>{0.25})};
    };
    Side two = side(), one = side();
    const double weight = 0.5, dloss = 1.0 / 64;
    k.classifier_forward(two.logits.data(), two.losses.data(), two.x.data(), two.head.data(), two.targets.data(),
                         c.rows, c.C, c.V, two.loss_sum.data(), weight);
    k.classifier_backward(two.dx.data(), two.dhead.data(), two.logits.data(), two.x.data(), two.head.data(),
                          two.targets.data(), c.rows, c.C, c.V, dloss);
    k.classifier_forward_backward(one.dx.data(), one.dhead.data(), one.logits.data(), one.losses.data(),
                                  one.x.data(), one.head.data(), one.targets.data(), c.rows, c.C, c.V,
                                  one.loss_sum.data(), weight, dloss);
    gpu->synchronize();
    EXPECT_EQ(bytes_of(*gpu, one.logits), bytes_of(*gpu, two.logits)) << "dlogits" << shape;
    EXPECT_EQ(bytes_of(*gpu, one.losses), bytes_of(*gpu, two.losses)) << "losses" << shape;
    EXPECT_EQ(bytes_of(*gpu, one.loss_sum), bytes_of(*gpu, two.loss_sum)) << "loss_sum" << shape;
    EXPECT_EQ(bytes_of(*gpu, one.dx), bytes_of(*gpu, two.dx)) << "dx" << shape;
    EXPECT_EQ(bytes_of(*gpu, one.dhead), bytes_of(*gpu, two.dhead)) << "dhead" << shape;
    EXPECT_NE(bytes_of(*gpu, one.dhead), bytes_of(*gpu, upload(*gpu, dhead0))) << "dhead untouched" << shape;
  }
}


// The backward ops that sum across rows (the norms' parameter gradients, bias gradients, the
// embedding's) run twice on the GPU from the same inputs into fresh buffers: the results must be
// the same bits (the column sums and token chains add in a fixed order, no atomics). Many rows, so
// the column sums split them into several chunks; C = 768 takes the 16-byte paths, 765 the scalar.
TEST_F(CudaOpsBf16, RowReductionsAreDeterministic) {
  const int rows = 2048, out_dim = 1000;
  for (int C : {768, 765}) {
    const std::string shape = cat(" (", path_name(C % 8 == 0), ": rows ", rows, " C ", C, ")");
    const auto x = bf16_values(randn(size_t(rows) * C, 200, 2.0f)), w = bf16_values(randn(C, 201));
    const auto dout = bf16_values(randn(size_t(rows) * C, 202)), dx0 = bf16_values(randn(size_t(rows) * C, 203));
    const auto dw0 = randn(C, 204), db0 = randn(C, 205);
    const auto dout_gemm = bf16_values(randn(size_t(rows) * out_dim, 206));
    const auto dgemm_w0 = randn(size_t(C) * out_dim, 207), dgemm_b0 = randn(out_dim, 208);
    const auto tokens = random_tokens(rows, 50, 209);  // 50 tokens over 2048 rows: long chains
    const int B = 2, T = rows / B, V = 50;
    const auto dwte0 = randn(size_t(V) * C, 210), dwpe0 = randn(size_t(T) * C, 211);
    KernelOps<bf16>& k = gpu->ops_bf16();

    // The statistics the norms' backward reads, once.
    auto x_dev = upload(*gpu, x), w_dev = upload(*gpu, w), bias_dev = upload(*gpu, bf16_values(randn(C, 212)));
    DeviceArray<bf16> scratch_out(*gpu, size_t(rows) * C);
    DeviceArray<float> mean(*gpu, rows), rstd(*gpu, rows), rms_rstd(*gpu, rows);
    k.layernorm_forward(scratch_out.data(), mean.data(), rstd.data(), x_dev.data(), w_dev.data(), bias_dev.data(), rows,
                        C, 1e-5);
    k.rmsnorm_forward(scratch_out.data(), rms_rstd.data(), x_dev.data(), w_dev.data(), rows, C, 1e-6);
    auto dout_dev = upload(*gpu, dout), dout_gemm_dev = upload(*gpu, dout_gemm);
    auto tokens_dev = upload(*gpu, tokens);
    auto x_gemm = upload(*gpu, bf16_values(randn(size_t(rows) * C, 213)));
    auto w_gemm = upload(*gpu, bf16_values(randn(size_t(C) * out_dim, 214, 0.1f)));

    using Outputs = std::vector<std::pair<std::string, std::vector<uint8_t>>>;
    auto run = [&]() -> Outputs {
      Outputs outs;
      auto step = [&](const std::string& op, const std::function<void()>& fn) {
        try {
          fn();
          gpu->synchronize();
        } catch (const std::exception& e) {
          throw std::runtime_error(cat(op, shape, " on the GPU failed: ", e.what()));
        }
      };
      {
        auto dx = upload(*gpu, dx0);
        auto dw = upload(*gpu, dw0), db = upload(*gpu, db0);
        step("layernorm_backward", [&] {
          k.layernorm_backward(dx.data(), dw.data(), db.data(), dout_dev.data(), x_dev.data(), w_dev.data(),
                               mean.data(), rstd.data(), rows, C);
        });
        outs.emplace_back("layernorm_backward dx", bytes_of(*gpu, dx));
        outs.emplace_back("layernorm_backward dweight", bytes_of(*gpu, dw));
        outs.emplace_back("layernorm_backward dbias", bytes_of(*gpu, db));
      }
      {
        auto dx = upload(*gpu, dx0);
        auto dw = upload(*gpu, dw0);
        step("rmsnorm_backward", [&] {
          k.rmsnorm_backward(dx.data(), dw.data(), dout_dev.data(), x_dev.data(), w_dev.data(), rms_rstd.data(), rows,
                             C);
        });
        outs.emplace_back("rmsnorm_backward dx", bytes_of(*gpu, dx));
        outs.emplace_back("rmsnorm_backward dweight", bytes_of(*gpu, dw));
      }
      {
        // matmul ([in,out] = [C,out_dim]) and linear ([out,in] = [out_dim,C]) weights are the same
        // size; only dbias is compared (dweight is cuBLASLt's).
        auto dw = upload(*gpu, dgemm_w0), db = upload(*gpu, dgemm_b0);
        step("matmul_backward", [&] {
          k.matmul_backward(nullptr, dw.data(), db.data(), dout_gemm_dev.data(), x_gemm.data(), w_gemm.data(), rows, C,
                            out_dim);
        });
        outs.emplace_back("matmul_backward dbias", bytes_of(*gpu, db));
        auto dw2 = upload(*gpu, dgemm_w0), db2 = upload(*gpu, dgemm_b0);
        step("linear_backward", [&] {
          k.linear_backward(nullptr, dw2.data(), db2.data(), dout_gemm_dev.data(), x_gemm.data(), w_gemm.data(), rows,
                            C, out_dim, false);
        });
        outs.emplace_back("linear_backward dbias", bytes_of(*gpu, db2));
      }
      {
        auto dwte = upload(*gpu, dwte0), dwpe = upload(*gpu, dwpe0);
        step("embedding_backward", [&] {
          k.embedding_backward(dwte.data(), dwpe.data(), dout_dev.data(), tokens_dev.data(), B, T, C);
        });
        outs.emplace_back("embedding_backward dwte", bytes_of(*gpu, dwte));
        outs.emplace_back("embedding_backward dwpe", bytes_of(*gpu, dwpe));
      }
      return outs;
    };
    const Outputs first = run(), second = run();
    ASSERT_EQ(first.size(), second.size());
    for (size_t i = 0; i < first.size(); ++i) {
      const auto& a = first[i].second;
      const auto& b = second[i].second;
      size_t differ = 0, at = 0;
      for (size_t j = 0; j < a.size(); ++j)
        if (a[j] != b[j] && differ++ == 0) at = j;
      EXPECT_EQ(differ, 0u) << first[i].first << shape << ": two runs differ in " << differ
                            << " bytes, the first at byte " << at;
    }
  }
}

}  // namespace
}  // namespace zt
