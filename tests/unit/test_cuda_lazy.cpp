// cuBLASLt and NCCL are loaded on first use, not at start-up (backend/cuda/lazy_library.h): a
// process that never calls them does not map them, and the first call reaches the real library.
// Runs without a GPU: the calls here need none.
#include <cublasLt.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <fstream>
#include <sstream>
#include <string>

#include "backend/cuda/lazy_library.h"
#include "core/error.h"

namespace zt::cuda {
namespace {

bool mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::stringstream text;
  text << maps.rdbuf();
  return text.str().find(name) != std::string::npos;
}

TEST(CudaLazy, CublasLtIsMappedOnlyOnceCalled) {
  ASSERT_FALSE(mapped("libcublasLt.so")) << "cuBLASLt was loaded at start-up";
  EXPECT_EQ(cublasLtGetVersion(), size_t(CUBLAS_VERSION));  // the library this build was compiled against
  EXPECT_TRUE(mapped("libcublasLt.so"));
  EXPECT_STREQ(cublasLtGetStatusString(CUBLAS_STATUS_SUCCESS), "success");  // cuBLASLt 13's own text
}

TEST(CudaLazy, NcclIsMappedOnlyOnceCalled) {
  ASSERT_FALSE(mapped("libnccl.so")) << "NCCL was loaded at start-up";
  const std::string text = ncclGetErrorString(ncclInvalidArgument);
  EXPECT_NE(text.find("invalid argument"), std::string::npos) << text;
  EXPECT_TRUE(mapped("libnccl.so"));
}

TEST(CudaLazy, AMissingLibraryOrSymbolIsAnErrorNamingIt) {
  try {
    lazy_symbol("libzt-no-such-library.so.7", "/nonexistent", "f");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("libzt-no-such-library.so.7"), std::string::npos) << e.what();
  }
  EXPECT_THROW(lazy_symbol(ZT_NCCL_SONAME, ZT_NCCL_LIBRARY_DIR, "ncclNoSuchFunction"), Error);
}

}  // namespace
}  // namespace zt::cuda
