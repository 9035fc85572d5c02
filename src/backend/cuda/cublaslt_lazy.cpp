// cuBLASLt's functions that zerotrain calls, loaded on first use (lazy_library.h says why). Each
// definition has the header's exact signature: a mismatch is a compile error (a second C function
// of the same name), never a wrong call.
#include <cublasLt.h>

#include "backend/cuda/lazy_library.h"

#define ZT_CUBLASLT_REAL(fn) ZT_LAZY_REAL(ZT_CUBLASLT_SONAME, ZT_CUDA_LIBRARY_DIR, fn)

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  ZT_CUBLASLT_REAL(cublasLtCreate);
  return real(handle);
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  ZT_CUBLASLT_REAL(cublasLtDestroy);
  return real(handle);
}
size_t cublasLtGetVersion(void) {
  ZT_CUBLASLT_REAL(cublasLtGetVersion);
  return real();
}
const char* cublasLtGetStatusString(cublasStatus_t status) {
  ZT_CUBLASLT_REAL(cublasLtGetStatusString);
  return real(status);
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  ZT_CUBLASLT_REAL(cublasLtMatmulDescCreate);
  return real(desc, compute, scale);
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  ZT_CUBLASLT_REAL(cublasLtMatmulDescDestroy);
  return real(desc);
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t bytes) {
  ZT_CUBLASLT_REAL(cublasLtMatmulDescSetAttribute);
  return real(desc, attr, buf, bytes);
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  ZT_CUBLASLT_REAL(cublasLtMatrixLayoutCreate);
  return real(layout, type, rows, cols, ld);
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  ZT_CUBLASLT_REAL(cublasLtMatrixLayoutDestroy);
  return real(layout);
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  ZT_CUBLASLT_REAL(cublasLtMatmulPreferenceCreate);
  return real(pref);
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  ZT_CUBLASLT_REAL(cublasLtMatmulPreferenceDestroy);
  return real(pref);
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t bytes) {
  ZT_CUBLASLT_REAL(cublasLtMatmulPreferenceSetAttribute);
  return real(pref, attr, buf, bytes);
}
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned) {
  ZT_CUBLASLT_REAL(cublasLtMatmulAlgoGetHeuristic);
  return real(handle, desc, a, b, c, d, pref, requested, results, returned);
}
cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* a,
                              cublasLtMatrixLayout_t a_layout, const void* b, cublasLtMatrixLayout_t b_layout,
                              const void* beta, const void* c, cublasLtMatrixLayout_t c_layout, void* d,
                              cublasLtMatrixLayout_t d_layout, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
  ZT_CUBLASLT_REAL(cublasLtMatmul);
  return real(handle, desc, alpha, a, a_layout, b, b_layout, beta, c, c_layout, d, d_layout, algo, workspace,
              workspace_bytes, stream);
}

}  // extern "C"
