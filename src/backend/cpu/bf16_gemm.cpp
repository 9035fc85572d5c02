#include "backend/cpu/bf16_gemm.h"

#include <dnnl.hpp>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/cpu_features.h"
#include "core/error.h"
#include "core/memory_pool.h"

namespace zt::cpu {

namespace {

using dnnl::memory;
using Dims = memory::dims;
using Type = memory::data_type;

bool has_all(dnnl::cpu_isa isa, dnnl::cpu_isa want) {
  return (static_cast<unsigned>(isa) & static_cast<unsigned>(want)) == static_cast<unsigned>(want);
}

const char* isa_name(dnnl::cpu_isa isa) {
  if (has_all(isa, dnnl::cpu_isa::avx512_core_amx)) return "avx512_core_amx";
  if (has_all(isa, dnnl::cpu_isa::avx512_core_bf16)) return "avx512_core_bf16";
  return "none";
}

// An operand that is `rows` x `cols` as the product reads it, stored row-major with leading
// dimension ld: as it is, or transposed (stored [cols, rows]).
memory::desc operand(int rows, int cols, bool transposed, int ld, Type type) {
  const Dims dims{rows, cols};
  return transposed ? memory::desc(dims, type, Dims{1, ld}) : memory::desc(dims, type, Dims{ld, 1});
}

}  // namespace

// One product's shape, layout and types: the primitive's key (a training step repeats a handful).
// `packed`: B is a weight pack, in the layout the primitive chooses (format any).
struct GemmShape {
  bool ta, tb;
  int M, N, K, lda, ldb, ldc;
  Type c_type;
  bool bias, accumulate;
  bool packed = false;
  auto key() const { return std::make_tuple(ta, tb, M, N, K, lda, ldb, ldc, c_type, bias, accumulate, packed); }
  bool operator<(const GemmShape& o) const { return key() < o.key(); }
  memory::desc a() const { return operand(M, K, ta, lda, Type::bf16); }
  memory::desc b() const {
    return packed ? memory::desc(Dims{K, N}, Type::bf16, memory::format_tag::any) : plain_b();
  }
  memory::desc plain_b() const { return operand(K, N, tb, ldb, Type::bf16); }
  memory::desc c() const { return memory::desc(Dims{M, N}, c_type, Dims{ldc, 1}); }
  memory::desc bias_row() const { return memory::desc(Dims{1, N}, Type::bf16, Dims{N, 1}); }
};

// Each calling thread runs its products on its own stream with its own scratchpad (oneDNN's
// library scratchpad is shared between primitives unless the library is built for concurrent
// execution, which Debian's is not), so that threads of an OpenMP loop may multiply at once, each
// product then on its thread alone (oneDNN runs serially inside a parallel region).
struct Bf16Gemm::Impl {
  struct Primitive {
    dnnl::matmul matmul;
    memory::desc scratchpad, weights;
  };
  // A weight in the primitive's layout, and the reorder that makes it from the weight as it lies.
  struct Pack {
    memory::desc desc;
    dnnl::reorder reorder;
    void* bytes = nullptr;
    size_t size = 0;
    bool fresh = false;
  };
  using PackKey = std::tuple<const bf16*, bool, int, int, int>;  // B, tb, K, N, ldb
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  std::map<GemmShape, Primitive> primitives;
  std::vector<std::pair<const char*, const char*>> kept;  // the ranges whose weights are packed
  std::atomic<bool> any_kept{false};  // kept is not empty; without packs no product takes the lock for it
  std::map<PackKey, Pack> packs;
  size_t pack_bytes = 0;
  mutable std::mutex mutex;  // guards `primitives`, `kept` and `packs`

  ~Impl() {
    for (auto& [key, pack] : packs) free(pack);
  }

  void free(Pack& pack) {
    if (!pack.bytes) return;
    pool_free(Pool::kDevice, pack.bytes, pack.size);
    pack_bytes -= pack.size;
    pack.bytes = nullptr;
  }

  bool is_kept(const void* p) const {
    const char* c = static_cast<const char*>(p);
    return std::any_of(kept.begin(), kept.end(), [c](const auto& r) { return c >= r.first && c < r.second; });
  }

  // The pack of `s`'s B (a kept weight), made again where stale or laid out otherwise (a layout
  // that changed with the rows would remake it at each switch: oneDNN 2.6 chose one layout for
  // every row count tried). The memory is read after the lock is let go: a weight's products run
  // on one thread (the model's GEMMs; attention's operands are never weights).
  memory pack(const GemmShape& s, const Primitive& p, const bf16* B, dnnl::stream& stream) {
    std::lock_guard<std::mutex> lock(mutex);
    Pack& pack = packs[PackKey{B, s.tb, s.K, s.N, s.ldb}];
    if (pack.bytes && pack.desc != p.weights) free(pack);
    if (!pack.bytes) {
      pack.bytes = pool_alloc(Pool::kDevice, p.weights.get_size());  // throws before anything is counted
      pack.desc = p.weights;
      pack.size = p.weights.get_size();
      pack_bytes += pack.size;
      pack.reorder = dnnl::reorder(dnnl::reorder::primitive_desc(engine, s.plain_b(), engine, pack.desc));
      pack.fresh = false;
    }
    memory packed(pack.desc, engine, pack.bytes);
    if (!pack.fresh) {
      memory plain(s.plain_b(), engine, const_cast<bf16*>(B));
      pack.reorder.execute(stream, plain, packed);
      stream.wait();
      pack.fresh = true;
    }
    return packed;
  }

  const Primitive& primitive(const GemmShape& s) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = primitives.find(s);
    if (it != primitives.end()) return it->second;
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (s.accumulate) {
      dnnl::post_ops ops;
      ops.append_sum(1.0f);  // C = A B + C, C read in its own type and rounded once
      attr.set_post_ops(ops);
    }
    const auto desc = s.bias ? dnnl::matmul::desc(s.a(), s.b(), s.bias_row(), s.c())
                             : dnnl::matmul::desc(s.a(), s.b(), s.c());
    const dnnl::matmul::primitive_desc pd(desc, attr, engine);
    return primitives.emplace(s, Primitive{dnnl::matmul(pd), pd.scratchpad_desc(), pd.weights_desc()}).first->second;
  }

  // Runs the product on operands as they lie, on the calling thread's stream and scratchpad.
  void run(GemmShape s, const bf16* A, const bf16* B, void* C, const bf16* bias) {
    thread_local std::vector<uint8_t> scratchpad;  // grown to the thread's largest
    if (any_kept.load(std::memory_order_relaxed)) {
      std::lock_guard<std::mutex> lock(mutex);
      s.packed = is_kept(B);
    }
    const Primitive& p = primitive(s);
    if (scratchpad.size() < p.scratchpad.get_size()) scratchpad.resize(p.scratchpad.get_size());
    dnnl::stream stream(engine);
    memory am(s.a(), engine, const_cast<bf16*>(A)), cm(s.c(), engine, C);
    memory bm = s.packed ? pack(s, p, B, stream) : memory(s.b(), engine, const_cast<bf16*>(B));
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
    args.emplace(DNNL_ARG_SCRATCHPAD, memory(p.scratchpad, engine, scratchpad.data()));
    if (bias) args.emplace(DNNL_ARG_BIAS, memory(s.bias_row(), engine, const_cast<bf16*>(bias)));
    p.matmul.execute(stream, args);
    stream.wait();
  }
};

Bf16Gemm::Bf16Gemm() : impl_(std::make_unique<Impl>()) {}
Bf16Gemm::~Bf16Gemm() = default;

Bf16Gemm* shared_bf16_gemm() {
  static const std::unique_ptr<Bf16Gemm> gemm = Bf16Gemm::make_if_fast();
  return gemm.get();
}

bool cpu_has_bf16_gemm_instructions() {
  return active_cpu_isa() == CpuIsa::kAvx512 &&  // not ZT_CPU_ISA=avx2, not an AVX2-only CPU
         has_all(dnnl::get_effective_cpu_isa(), dnnl::cpu_isa::avx512_core_bf16);
}

std::unique_ptr<Bf16Gemm> Bf16Gemm::make_if_fast() {
  const char* env = std::getenv("ZT_BF16_GEMM");
  const std::string choice = env && *env ? env : "auto";
  ZT_USAGE_CHECK(choice == "auto" || choice == "bf16" || choice == "fp32",
                 "ZT_BF16_GEMM must be auto, bf16 or fp32, got '", choice, "'");
  bf16_weight_packs_enabled();  // a bad ZT_BF16_WEIGHT_PACKS is refused on every CPU, used or not
  if (choice == "fp32" || !cpu_has_bf16_gemm_instructions()) return nullptr;
  // On an Intel core with AVX512-BF16 but no AMX, oneDNN 2.6's bf16 kernels reached 166-168
  // GFLOP/s where OpenBLAS's fp32 reach 290-320 (2 Emerald Rapids cores, every GPT-2 shape): fp32 GEMMs on
  // widened operands win. AMX's tiles multiply many times faster (a bf16 step 0.51-0.54x the fp32
  // step), and on an AMD CPU with AVX512-BF16 the bf16 path measured 0.44-0.63x (issues 17, 33).
  __builtin_cpu_init();
  const bool faster = has_all(dnnl::get_effective_cpu_isa(), dnnl::cpu_isa::avx512_core_amx) ||
                      __builtin_cpu_is("amd");
  if (choice == "auto" && !faster) return nullptr;
  return make_if_supported();
}

std::unique_ptr<Bf16Gemm> Bf16Gemm::make_if_supported() {
  if (!cpu_has_bf16_gemm_instructions()) return nullptr;
  return std::unique_ptr<Bf16Gemm>(new Bf16Gemm());
}

bool bf16_weight_packs_enabled() {
  // Read at each engine's start (a test compares both in one process). Off by default: a pack
  // per weight for the forward and one for dx cost 4 bytes a matrix parameter, and on the one
  // CPU measured (AVX512-BF16 without AMX, oneDNN forced) a step was no faster within noise.
  const char* env = std::getenv("ZT_BF16_WEIGHT_PACKS");
  const std::string choice = env && *env ? env : "0";
  ZT_USAGE_CHECK(choice == "0" || choice == "1", "ZT_BF16_WEIGHT_PACKS must be 0 or 1, got '", choice, "'");
  return choice == "1";
}

std::string bf16_gemm_description() {
  if (const Bf16Gemm* gemm = shared_bf16_gemm()) return "bf16 GEMMs: " + gemm->describe();
  if (!cpu_has_bf16_gemm_instructions()) return "bf16 GEMMs: fp32 on widened operands (no bf16 instructions)";
  const char* env = std::getenv("ZT_BF16_GEMM");
  return env && std::string(env) == "fp32"
             ? "bf16 GEMMs: fp32 on widened operands (ZT_BF16_GEMM=fp32)"
             : "bf16 GEMMs: fp32 on widened operands (faster than AVX512-BF16 without AMX on this CPU)";
}

void Bf16Gemm::weight_packs(const void* lo, const void* hi, WeightPacks what) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  const std::pair<const char*, const char*> range{static_cast<const char*>(lo), static_cast<const char*>(hi)};
  auto& kept = impl_->kept;
  if (what == WeightPacks::kKeep) {
    if (std::find(kept.begin(), kept.end(), range) == kept.end()) kept.push_back(range);
    impl_->any_kept = true;
    return;
  }
  auto& packs = impl_->packs;
  for (auto it = packs.begin(); it != packs.end();) {
    const char* b = reinterpret_cast<const char*>(std::get<0>(it->first));
    if (b < range.first || b >= range.second) {
      ++it;
    } else if (what == WeightPacks::kStale) {
      (it++)->second.fresh = false;
    } else {
      impl_->free(it->second);
      it = packs.erase(it);
    }
  }
  if (what == WeightPacks::kDrop) kept.erase(std::remove(kept.begin(), kept.end(), range), kept.end());
  impl_->any_kept = !kept.empty();
}

size_t Bf16Gemm::weight_pack_bytes() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->pack_bytes;
}

size_t Bf16Gemm::pack_bytes(int K, int N) const {
  GemmShape s{false, false, 1, N, K, K, N, N, Type::bf16, false, false, true};
  return impl_->primitive(s).weights.get_size();
}

std::string Bf16Gemm::describe() const {
  const dnnl_version_t* v = dnnl_version();
  return cat("oneDNN ", v->major, ".", v->minor, " bf16 (", isa_name(impl_->isa), ")");
}

void Bf16Gemm::gemm(bool trans_a, bool trans_b, int M, int N, int K, const float* A, const float* B, float beta,
                    float* C) {
  ZT_CHECK(beta == 0.0f || beta == 1.0f, "bf16 GEMM: beta ", beta, " (0 or 1 only)");
  if (M == 0 || N == 0) return;
  thread_local std::vector<bf16> a16, b16;  // the rounded operands, grown to the thread's largest
  const size_t na = size_t(M) * K, nb = size_t(K) * N;
  if (a16.size() < na) a16.resize(na);
  if (b16.size() < nb) b16.resize(nb);
  // Rounded as stored (a transposed operand stays transposed; the descriptor says so), each
  // conversion on every thread.
  convert(A, a16.data(), na);
  convert(B, b16.data(), nb);
  const GemmShape s{trans_a, trans_b, M, N, K, trans_a ? M : K, trans_b ? K : N, N, Type::f32, false, beta != 0};
  impl_->run(s, a16.data(), b16.data(), C, nullptr);
}

void Bf16Gemm::gemm(bool trans_a, bool trans_b, int M, int N, int K, const bf16* A, int lda, const bf16* B, int ldb,
                    float beta, bf16* C, int ldc, const bf16* bias) {
  ZT_CHECK(beta == 0.0f || beta == 1.0f, "bf16 GEMM: beta ", beta, " (0 or 1 only)");
  if (M == 0 || N == 0 || (K == 0 && beta != 0 && !bias)) return;  // nothing to add
  impl_->run({trans_a, trans_b, M, N, K, lda, ldb, ldc, Type::bf16, bias != nullptr, beta != 0}, A, B, C, bias);
}

void Bf16Gemm::gemm(bool trans_a, bool trans_b, int M, int N, int K, const bf16* A, int lda, const bf16* B, int ldb,
                    float beta, float* C, int ldc) {
  ZT_CHECK(beta == 0.0f || beta == 1.0f, "bf16 GEMM: beta ", beta, " (0 or 1 only)");
  if (M == 0 || N == 0 || (K == 0 && beta != 0)) return;
  impl_->run({trans_a, trans_b, M, N, K, lda, ldb, ldc, Type::f32, false, beta != 0}, A, B, C, nullptr);
}

}  // namespace zt::cpu
