// NCCL's functions that zerotrain calls, loaded on first use (backend/cuda/lazy_library.h says
// why). Each definition has nccl.h's exact signature: a mismatch is a compile error.
#include <nccl.h>

#include "backend/cuda/lazy_library.h"

#define ZT_NCCL_REAL(fn) ZT_LAZY_REAL(ZT_NCCL_SONAME, ZT_NCCL_LIBRARY_DIR, fn)

extern "C" {

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  ZT_NCCL_REAL(ncclGetUniqueId);
  return real(id);
}
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  ZT_NCCL_REAL(ncclCommInitRank);
  return real(comm, nranks, id, rank);
}
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  ZT_NCCL_REAL(ncclCommDestroy);
  return real(comm);
}
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  ZT_NCCL_REAL(ncclCommAbort);
  return real(comm);
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* error) {
  ZT_NCCL_REAL(ncclCommGetAsyncError);
  return real(comm, error);
}
const char* ncclGetErrorString(ncclResult_t result) {
  ZT_NCCL_REAL(ncclGetErrorString);
  return real(result);
}
const char* ncclGetLastError(ncclComm_t comm) {
  ZT_NCCL_REAL(ncclGetLastError);
  return real(comm);
}
ncclResult_t ncclGroupStart() {
  ZT_NCCL_REAL(ncclGroupStart);
  return real();
}
ncclResult_t ncclGroupEnd() {
  ZT_NCCL_REAL(ncclGroupEnd);
  return real();
}
ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  ZT_NCCL_REAL(ncclAllReduce);
  return real(send, recv, count, type, op, comm, stream);
}
ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t stream) {
  ZT_NCCL_REAL(ncclReduceScatter);
  return real(send, recv, count, type, op, comm, stream);
}
ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t type, ncclComm_t comm,
                           cudaStream_t stream) {
  ZT_NCCL_REAL(ncclAllGather);
  return real(send, recv, count, type, comm, stream);
}
ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op, int root,
                        ncclComm_t comm, cudaStream_t stream) {
  ZT_NCCL_REAL(ncclReduce);
  return real(send, recv, count, type, op, root, comm, stream);
}
ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  ZT_NCCL_REAL(ncclBroadcast);
  return real(send, recv, count, type, root, comm, stream);
}
ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  ZT_NCCL_REAL(ncclSend);
  return real(send, count, type, peer, comm, stream);
}
ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t stream) {
  ZT_NCCL_REAL(ncclRecv);
  return real(recv, count, type, peer, comm, stream);
}

}  // extern "C"
