#include "backend/cpu/bf16_gemm.h"

#include <dnnl.hpp>

#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/error.h"

namespace zt::cpu {

namespace {

using dnnl::memory;
using Dims = memory::dims;

bool has_all(dnnl::cpu_isa isa, dnnl::cpu_isa want) {
  return (static_cast<unsigned>(isa) & static_cast<unsigned>(want)) == static_cast<unsigned>(want);
}

const char* isa_name(dnnl::cpu_isa isa) {
  if (has_all(isa, dnnl::cpu_isa::avx512_core_amx)) return "avx512_core_amx";
  if (has_all(isa, dnnl::cpu_isa::avx512_core_bf16)) return "avx512_core_bf16";
  return "none";
}

// An operand of `rows` x `cols` as stored row-major, or its transpose.
memory::desc operand(int rows, int cols, bool transposed, memory::data_type type) {
  const Dims dims{rows, cols};
  return transposed ? memory::desc(dims, type, Dims{1, rows}) : memory::desc(dims, type, Dims{cols, 1});
}

}  // namespace

struct Bf16Gemm::Impl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  // The primitives by shape: a training step repeats a handful of shapes.
  using Key = std::tuple<bool, bool, int, int, int, bool>;
  std::map<Key, dnnl::matmul> primitives;
  std::vector<bf16> a16, b16;  // scratch, grown to the largest operands
  std::mutex mutex;            // one GEMM at a time (the compute stream is serial anyway)

  dnnl::matmul& primitive(bool ta, bool tb, int M, int N, int K, bool accumulate) {
    const Key key{ta, tb, M, N, K, accumulate};
    auto it = primitives.find(key);
    if (it != primitives.end()) return it->second;
    const auto a = operand(M, K, ta, memory::data_type::bf16);  // op(A) is M x K
    const auto b = operand(K, N, tb, memory::data_type::bf16);  // op(B) is K x N
    const memory::desc c(Dims{M, N}, memory::data_type::f32, Dims{N, 1});
    dnnl::primitive_attr attr;
    if (accumulate) {
      dnnl::post_ops ops;
      ops.append_sum(1.0f);  // C = A B + C
      attr.set_post_ops(ops);
    }
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, engine);
    return primitives.emplace(key, dnnl::matmul(pd)).first->second;
  }
};

Bf16Gemm::Bf16Gemm() : impl_(std::make_unique<Impl>()) {}
Bf16Gemm::~Bf16Gemm() = default;

Bf16Gemm* shared_bf16_gemm() {
  static const std::unique_ptr<Bf16Gemm> gemm = Bf16Gemm::make_if_fast();
  return gemm.get();
}

std::unique_ptr<Bf16Gemm> Bf16Gemm::make_if_fast() {
  if (active_cpu_isa() != CpuIsa::kAvx512) return nullptr;  // ZT_CPU_ISA=avx2, or no AVX-512
  if (!has_all(dnnl::get_effective_cpu_isa(), dnnl::cpu_isa::avx512_core_bf16)) return nullptr;
  return std::unique_ptr<Bf16Gemm>(new Bf16Gemm());
}

std::string Bf16Gemm::describe() const {
  const dnnl_version_t* v = dnnl_version();
  return cat("oneDNN ", v->major, ".", v->minor, " bf16 (", isa_name(impl_->isa), ")");
}

void Bf16Gemm::gemm(bool trans_a, bool trans_b, int M, int N, int K, const float* A, const float* B, float beta,
                    float* C) {
  ZT_CHECK(beta == 0.0f || beta == 1.0f, "bf16 GEMM: beta ", beta, " (0 or 1 only)");
  if (M == 0 || N == 0) return;
  std::lock_guard<std::mutex> lock(impl_->mutex);
  const size_t na = size_t(M) * K, nb = size_t(K) * N;
  if (impl_->a16.size() < na) impl_->a16.resize(na);
  if (impl_->b16.size() < nb) impl_->b16.resize(nb);
  // Rounded as stored (a transposed operand stays transposed; the descriptor says so), each
  // conversion on every thread.
  convert(A, impl_->a16.data(), na);
  convert(B, impl_->b16.data(), nb);
  dnnl::matmul& mm = impl_->primitive(trans_a, trans_b, M, N, K, beta != 0.0f);
  const auto a = operand(M, K, trans_a, memory::data_type::bf16);
  const auto b = operand(K, N, trans_b, memory::data_type::bf16);
  const memory::desc c(Dims{M, N}, memory::data_type::f32, Dims{N, 1});
  memory am(a, impl_->engine, impl_->a16.data()), bm(b, impl_->engine, impl_->b16.data()), cm(c, impl_->engine, C);
  mm.execute(impl_->stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
  impl_->stream.wait();
}

}  // namespace zt::cpu
