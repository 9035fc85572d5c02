// Row-major GEMMs on cuBLASLt, which is column-major: a row-major [r,c] matrix is the column-major
// [c,r] matrix with the same bytes, so D = op(A) op(B) in row-major is D^T = op(B)^T op(A)^T in
// column-major, and we hand cuBLASLt B as its first operand and A as its second, each with its
// own transpose flag unchanged. The bias epilogue adds a vector over the rows of the column-major
// D^T, which are the columns of our D: bias[n], as wanted.
//
// Leading dimensions: a row-major matrix stored with row stride ld is the column-major matrix of
// the transposed shape with leading dimension ld, whichever operand it is and whether or not it is
// transposed: cuBLASLt's layouts are [cols, rows] of what is stored, ld = the stored row stride.
// So A stored [m,k] (or [k,m] when trans_a) is cuBLASLt's second operand [k,m] (or [m,k]) with
// ld = lda; B stored [k,n] (or [n,k]) its first operand [n,k] (or [k,n]) with ld = ldb; D [m,n] is
// [n,m] with ld = ldd. Densely packed (ld = 0 in GemmArgs), ld is the stored row length, the
// layout's first dimension, as before leading dimensions could be given.
//
// Descriptors, layouts and the heuristic's algorithm are cached per shape (and per pointer
// alignment, which decides which algorithms may run); only the bias and aux pointers change per
// call. A shape cuBLASLt has no algorithm for is cached too, as declined.
//
// The GELU epilogues' aux matrix has D's shape: column-major [n, m] here, so its leading
// dimension is n (cuBLASLt wants it divisible by 8). cuBLASLt's GELU is the tanh approximation,
// GPT-2's gelu_new, as our kernels compute it.
#include "backend/cuda/cublaslt_gemm.h"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"
#include "core/log.h"

namespace zt::cuda {
namespace {

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::kF32: return CUDA_R_32F;
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kF16: return CUDA_R_16F;
  }
  return CUDA_R_32F;
}

/// The largest power of two up to 256 that divides the address: cuBLASLt assumes 256-byte aligned
/// operands unless told otherwise, and views inside a flat buffer can be less aligned.
uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && address % align != 0) align /= 2;
  return align;
}

struct GemmKey {
  bool trans_a, trans_b;
  int m, n, k;
  DType ab_dtype, d_dtype;
  bool bias, accumulate, allow_tf32;
  int lda, ldb, ldd;  // resolved: the stored row strides, never 0
  uint32_t align_a, align_b, align_d;
  int device;
  size_t workspace_bytes;  // the algorithm chosen may use up to this much
  bool has_c;
  GemmEpilogue epilogue;
  uint32_t align_c, align_aux, align_bias;  // 0 where the operand is absent
  auto tie() const {
    return std::tie(trans_a, trans_b, m, n, k, ab_dtype, d_dtype, bias, accumulate, allow_tf32, lda, ldb, ldd,
                    align_a, align_b, align_d, device, workspace_bytes, has_c, epilogue, align_c, align_aux,
                    align_bias);
  }
  bool operator<(const GemmKey& o) const { return tie() < o.tie(); }
};

struct MatmulDescDeleter {
  void operator()(cublasLtMatmulDescOpaque_t* d) const { cublasLtMatmulDescDestroy(d); }
};
struct LayoutDeleter {
  void operator()(cublasLtMatrixLayoutOpaque_t* l) const { cublasLtMatrixLayoutDestroy(l); }
};
struct PreferenceDeleter {
  void operator()(cublasLtMatmulPreferenceOpaque_t* p) const { cublasLtMatmulPreferenceDestroy(p); }
};
using MatmulDesc = std::unique_ptr<cublasLtMatmulDescOpaque_t, MatmulDescDeleter>;
using Layout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, LayoutDeleter>;
using Preference = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, PreferenceDeleter>;

/// One planned GEMM: cuBLASLt's operands in its order (first = our B, second = our A).
struct GemmPlan {
  MatmulDesc desc;
  Layout first, second, d;  // C shares D's layout (C = D when accumulating)
  cublasLtMatmulAlgo_t algo{};
  bool declined = false;              // cuBLASLt has no algorithm: `why` says what it answered
  std::string why;
  bool logged = false;                // try_gemm has logged `why` (once a plan)
};

cublasLtEpilogue_t lt_epilogue(const GemmKey& key) {
  switch (key.epilogue) {
    case GemmEpilogue::kGeluAux: return key.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    case GemmEpilogue::kDGelu: return CUBLASLT_EPILOGUE_DGELU;
    case GemmEpilogue::kNone: break;
  }
  return key.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

const char* epilogue_name(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::kGeluAux: return " with the GELU_AUX epilogue";
    case GemmEpilogue::kDGelu: return " with the DGELU epilogue";
    case GemmEpilogue::kNone: break;
  }
  return "";
}

/// A column-major layout of `rows` x `cols` with leading dimension ld >= rows (the row-major
/// matrix stored [cols, rows] with row stride ld).
Layout make_layout(DType t, int rows, int cols, int ld) {
  cublasLtMatrixLayout_t raw = nullptr;
  ZT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&raw, cuda_type(t), uint64_t(rows), uint64_t(cols), int64_t(ld)));
  return Layout(raw);
}

/// The row stride of a row-major matrix whose rows hold `row_length` elements: `ld` when given
/// (checked to be at least the row length), `row_length` when 0 (densely packed).
int resolve_ld(int ld, int row_length, const char* name) {
  ZT_CHECK(ld == 0 || ld >= row_length, "gemm: ", name, " = ", ld, " is less than the row length ", row_length);
  return ld ? ld : row_length;
}

/// The alignment every row of an operand starts at: its pointer's, and, when a leading dimension
/// was given, no more than its row stride in bytes keeps. Densely packed operands keep their
/// pointer's alignment alone, as before leading dimensions could be given (cuBLASLt checks each
/// layout's leading dimension itself; the explicit one is folded in as a bound that always holds).
uint32_t row_alignment(const void* p, int ld_given, DType t) {
  uint32_t align = alignment_of(p);
  if (ld_given) {
    const uint64_t row_bytes = uint64_t(ld_given) * dtype_size(t);
    while (align > 1 && row_bytes % align != 0) align /= 2;
  }
  return align;
}

template <typename V>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const V& value) {
  ZT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
}

template <typename V>
void set_preference(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const V& value) {
  ZT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)));
}

/// The plan for `key`, or one marked declined where cuBLASLt has no algorithm. bias and aux are
/// the first call's pointers: the heuristic reads their alignment (the key holds it).
std::unique_ptr<GemmPlan> make_plan(CudaContext& ctx, const GemmKey& key, const void* bias, void* aux) {
  auto plan = std::make_unique<GemmPlan>();
  if (key.epilogue != GemmEpilogue::kNone && (key.n % 8 != 0 || key.align_aux < 16)) {
    // cuBLASLt's documented bounds for the GELU aux matrix: its leading dimension divisible by 8
    // (and 16-byte rows with it); checked here rather than met as an error at launch.
    plan->declined = true;
    plan->why = cat("the GEMM m=", key.m, " n=", key.n, " k=", key.k, epilogue_name(key.epilogue),
                    ": the aux matrix needs n divisible by 8 and a 16-byte aligned pointer");
    return plan;
  }
  const bool f32 = key.ab_dtype == DType::kF32;
  const cublasComputeType_t compute =
      f32 && key.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  cublasLtMatmulDesc_t desc = nullptr;
  ZT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, compute, CUDA_R_32F));
  plan->desc.reset(desc);
  // First operand = our B: stored [k,n] row-major (= [n,k] column-major, no transpose) or, when
  // trans_b, [n,k] row-major (= [k,n] column-major, transposed).
  const cublasOperation_t op_first = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_desc(desc, CUBLASLT_MATMUL_DESC_TRANSA, op_first);
  set_desc(desc, CUBLASLT_MATMUL_DESC_TRANSB, op_second);
  const cublasLtEpilogue_t epilogue = lt_epilogue(key);
  if (epilogue != CUBLASLT_EPILOGUE_DEFAULT) set_desc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
  if (key.bias) {
    set_desc(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, cuda_type(key.d_dtype));  // the default, stated
    set_desc(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  }
  if (key.epilogue != GemmEpilogue::kNone) {  // aux: D's shape and dtype (the default), densely packed
    set_desc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t(key.n));
    set_desc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
  }

  // Each layout is [cols, rows] of the matrix as stored, with its row stride as the leading dimension.
  plan->first = key.trans_b ? make_layout(key.ab_dtype, key.k, key.n, key.ldb)
                            : make_layout(key.ab_dtype, key.n, key.k, key.ldb);
  plan->second = key.trans_a ? make_layout(key.ab_dtype, key.m, key.k, key.lda)
                             : make_layout(key.ab_dtype, key.k, key.m, key.lda);
  plan->d = make_layout(key.d_dtype, key.n, key.m, key.ldd);

  cublasLtMatmulPreference_t raw_pref = nullptr;
  ZT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&raw_pref));
  Preference pref(raw_pref);
  set_preference(raw_pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t(ctx.lt_workspace_bytes));
  set_preference(raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_b);  // cuBLASLt's A is our B
  set_preference(raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_a);
  set_preference(raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.has_c ? key.align_c : key.align_d);
  set_preference(raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_d);

  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      ctx.lt, desc, plan->first.get(), plan->second.get(), plan->d.get(), plan->d.get(), raw_pref, 1, &result, &found);
  // Declined: no algorithm, or NOT_SUPPORTED. Any other status is a mistake in what we asked
  // (an attribute's value, a layout) and fails here rather than being composed around quietly.
  if (status != CUBLAS_STATUS_NOT_SUPPORTED)
    ZT_CUBLAS_CHECK(status, "(heuristic for m=", key.m, " n=", key.n, " k=", key.k, epilogue_name(key.epilogue), ")");
  if (status != CUBLAS_STATUS_SUCCESS || found == 0 || result.state != CUBLAS_STATUS_SUCCESS) {
    plan->declined = true;
    plan->why = cat("cuBLASLt has no algorithm for the GEMM m=", key.m, " n=", key.n, " k=", key.k,
                    " trans_a=", key.trans_a, " trans_b=", key.trans_b, " lda=", key.lda, " ldb=", key.ldb,
                    " ldd=", key.ldd, " ", dtype_name(key.ab_dtype), " -> ", dtype_name(key.d_dtype),
                    key.bias ? " with bias" : "", key.has_c ? " with an addend" : "", epilogue_name(key.epilogue),
                    " (", cublasLtGetStatusString(status != CUBLAS_STATUS_SUCCESS ? status : result.state), ")");
    return plan;
  }
  plan->algo = result.algo;
  return plan;
}

std::mutex plans_mutex;
GemmCounts counts;  // under plans_mutex

/// Enqueues the GEMM (true), or returns false where the plan is declined, with its reason in *why
/// (null: logged as a warning, the first time for this plan, for try_gemm's caller composing).
bool run_gemm(CudaContext& ctx, const GemmArgs& args, std::string* why) {

  ZT_CHECK(args.m >= 0 && args.n >= 0 && args.k >= 0, "gemm: negative shape m=", args.m, " n=", args.n, " k=", args.k);
  ZT_CHECK(!(args.bias && args.accumulate), "gemm: a bias epilogue with accumulate is not supported");
  ZT_CHECK(!(args.c && args.accumulate), "gemm: an addend C with accumulate (C = D) is not supported");
  ZT_CHECK(args.epilogue == GemmEpilogue::kNone || (args.aux && !args.c && !args.accumulate),
           "gemm: a GELU epilogue needs its aux matrix and takes no addend");
  ZT_CHECK(args.epilogue != GemmEpilogue::kDGelu || !args.bias, "gemm: the DGELU epilogue takes no bias");
  // cuBLASLt reads the bias vector in 16-byte pieces (llm.c checks the same); callers with a less
  // aligned bias broadcast it into D themselves and accumulate.
  ZT_CHECK(args.bias == nullptr || reinterpret_cast<uintptr_t>(args.bias) % 16 == 0,
           "gemm: the bias must be 16-byte aligned for cuBLASLt's epilogue");
  ZT_CHECK(args.ab_dtype != DType::kF32 || args.d_dtype == DType::kF32,
           "gemm: fp32 inputs write fp32 output (asked for ", dtype_name(args.d_dtype), ")");
  ZT_CHECK(args.d_dtype == DType::kF32 || args.d_dtype == args.ab_dtype, "gemm: ", dtype_name(args.ab_dtype),
           " inputs cannot write ", dtype_name(args.d_dtype));
  // The stored row lengths: A [m,k] or, transposed, [k,m]; B [k,n] or [n,k]; D [m,n].
  const int lda = resolve_ld(args.lda, args.trans_a ? args.m : args.k, "lda");
  const int ldb = resolve_ld(args.ldb, args.trans_b ? args.k : args.n, "ldb");
  const int ldd = resolve_ld(args.ldd, args.n, "ldd");
  if (args.m == 0 || args.n == 0) return true;
  if (args.k == 0) {
    // An empty sum: D = 0 (+ bias), or D unchanged when accumulating. cuBLASLt rejects k = 0.
    ZT_CHECK(args.bias == nullptr && args.c == nullptr && args.epilogue == GemmEpilogue::kNone,
             "gemm: k = 0 with a bias, an addend or an epilogue is not supported");
    if (!args.accumulate) {
      const size_t es = dtype_size(args.d_dtype);
      if (ldd == args.n)
        ZT_CUDA_CHECK(cudaMemsetAsync(args.d, 0, size_t(args.m) * args.n * es, ctx.compute));
      else  // the m rows of n elements only: the padding past them may be another matrix's
        ZT_CUDA_CHECK(cudaMemset2DAsync(args.d, size_t(ldd) * es, 0, size_t(args.n) * es, size_t(args.m), ctx.compute));
    }
    return true;
  }

  const GemmKey key{args.trans_a,
                    args.trans_b,
                    args.m,
                    args.n,
                    args.k,
                    args.ab_dtype,
                    args.d_dtype,
                    args.bias != nullptr,
                    args.accumulate,
                    args.allow_tf32,
                    lda,
                    ldb,
                    ldd,
                    row_alignment(args.a, args.lda, args.ab_dtype),
                    row_alignment(args.b, args.ldb, args.ab_dtype),
                    row_alignment(args.d, args.ldd, args.d_dtype),
                    ctx.device,
                    ctx.lt_workspace_bytes,
                    args.c != nullptr,
                    args.epilogue,
                    args.c ? row_alignment(args.c, args.ldd, args.d_dtype) : 0,
                    args.aux ? alignment_of(args.aux) : 0,
                    args.bias ? alignment_of(args.bias) : 0};
  // One lock over lookup and launch: the cached descriptor's bias and aux pointers are set per call.
  static std::map<GemmKey, std::unique_ptr<GemmPlan>> plans;
  std::lock_guard<std::mutex> lock(plans_mutex);
  auto it = plans.find(key);
  if (it == plans.end()) {
    it = plans.emplace(key, make_plan(ctx, key, args.bias, args.aux)).first;
  }
  GemmPlan& plan = *it->second;
  const bool fused = args.c || args.epilogue != GemmEpilogue::kNone;
  if (plan.declined) {
    ++counts.declined_calls;
    if (why) {
      *why = plan.why;
    } else if (!plan.logged) {
      plan.logged = true;
      log_line(LogLevel::kWarn, cat(plan.why, "; composing the op from a plain GEMM and a kernel"));
    }
    return false;
  }
  if (fused) ++counts.fused_launches;
  if (args.bias) set_desc(plan.desc.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, args.bias);
  if (args.aux) set_desc(plan.desc.get(), CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, args.aux);

  const float alpha = 1.0f, beta = args.accumulate || args.c ? 1.0f : 0.0f;
  const void* c = args.c ? args.c : args.d;
  ZT_CUBLAS_CHECK(cublasLtMatmul(ctx.lt, plan.desc.get(), &alpha, args.b, plan.first.get(), args.a,
                                 plan.second.get(), &beta, c, plan.d.get(), args.d, plan.d.get(), &plan.algo,
                                 ctx.lt_workspace, ctx.lt_workspace_bytes, ctx.compute),
                  "(m=", args.m, " n=", args.n, " k=", args.k, epilogue_name(args.epilogue), ")");
  return true;
}

}  // namespace

void gemm(CudaContext& ctx, const GemmArgs& args) {
  std::string why;
  if (!run_gemm(ctx, args, &why)) throw_error(__FILE__, __LINE__, why);
}

bool try_gemm(CudaContext& ctx, const GemmArgs& args) { return run_gemm(ctx, args, nullptr); }

GemmCounts gemm_counts() {
  std::lock_guard<std::mutex> lock(plans_mutex);
  return counts;
}

}  // namespace zt::cuda
