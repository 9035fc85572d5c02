// ZeRO-Offload and ZeRO-Infinity at the world size ctest launches (1, 2, 4 ranks): every offload
// variant trains to bit-identical losses and master weights as the same stage without offload
// (the CPU Adam is the same kernel in the same order), the accounting puts the bytes where the
// config says, and the NVMe swap files vanish with the engine.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "comm/data_comm.h"
#include "comm/mpi_comm.h"
#include "core/error.h"
#include "core/memory_pool.h"
#include "model/model_layout.h"
#include "zero/engine.h"
#include "zero_test_harness.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

// NVMe offload's directory: $ZT_TEST_NVME_DIR, else the system's temporary directory.
std::string nvme_dir() {
  const char* dir = std::getenv("ZT_TEST_NVME_DIR");
  return dir ? dir : fs::temp_directory_path().string();
}

struct OffloadCase {
  int stage;
  DType dtype;
  int64_t accumulation;
  OffloadConfig::Device optimizer;
  double ratio = 1.0;
  OffloadConfig::Device params = OffloadConfig::Device::kNone;
  bool pinned = false;
  int64_t max_in_cpu = 0;  ///< offload_param nvme: elements kept in host memory
};

DsConfig offload_config(const OffloadCase& c, int world) {
  DsConfig cfg = make_config(c.stage, c.dtype, world, c.accumulation);
  cfg.zero.offload_optimizer.device = c.optimizer;
  cfg.zero.offload_optimizer.ratio = c.ratio;
  cfg.zero.offload_optimizer.pin_memory = c.pinned;
  cfg.zero.offload_optimizer.nvme_path = nvme_dir();
  cfg.zero.offload_param.device = c.params;
  cfg.zero.offload_param.nvme_path = nvme_dir();
  cfg.zero.offload_param.max_in_cpu = c.max_in_cpu;
  cfg.zero.offload_param.buffer_count = 2;  // fewer than the units in flight: buffers are waited for
  cfg.zero.offload_param.buffer_size = 100000;
  // Small pieces and blocks, so that the swap pipeline and the request splitting both run.
  cfg.zero.sub_group_size = 4096;  // pieces are whole multiples of 2048 elements
  cfg.aio.block_size = 8192;
  cfg.aio.queue_depth = 4;
  cfg.aio.intra_op_parallelism = 2;
  return cfg;
}

constexpr auto kCpu = OffloadConfig::Device::kCpu;
constexpr auto kNvme = OffloadConfig::Device::kNvme;
constexpr auto kNone = OffloadConfig::Device::kNone;

class Offload : public ::testing::TestWithParam<OffloadCase> {};

TEST_P(Offload, TrainsExactlyAsWithoutOffload) {
  const OffloadCase c = GetParam();
  MpiComm world(MPI_COMM_WORLD);
  // On a GPU the device's part of a partial offload steps on the device and would write
  // parameters that offload_param keeps in pageable host memory, which a kernel cannot reach:
  // the engine refuses that config by name instead.
  if (c.params != kNone && c.ratio < 1 && !test_backend()->kernels_reach_host_memory()) {
    try {
      train(world, offload_config(c, world.size()), nullptr, nullptr, nullptr);
      ADD_FAILURE() << "offload_param with offload_optimizer ratio " << c.ratio << " was not refused on a GPU";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("offload_param on a GPU needs offload_optimizer"), std::string::npos)
          << e.what();
    }
    return;
  }
  std::vector<float> master_ref, master_off;
  const std::vector<double> reference =
      train(world, make_config(c.stage, c.dtype, world.size(), c.accumulation), nullptr, nullptr, &master_ref);
  const std::vector<double> losses = train(world, offload_config(c, world.size()), nullptr, nullptr, &master_off);
  ASSERT_EQ(losses.size(), reference.size());
  EXPECT_LT(losses.back(), losses.front() - 0.3) << "offloaded training does not learn";
  for (size_t i = 0; i < losses.size(); ++i) EXPECT_EQ(losses[i], reference[i]) << "step " << i + 1;
  ASSERT_EQ(master_off.size(), master_ref.size());
  size_t differing = 0;
  for (size_t i = 0; i < master_ref.size(); ++i) differing += master_off[i] != master_ref[i];
  EXPECT_EQ(differing, 0u) << "master weights differ after " << kSteps << " steps";
}

std::string offload_name(const ::testing::TestParamInfo<OffloadCase>& info) {
  const OffloadCase& c = info.param;
  std::string name = "stage" + std::to_string(c.stage) + "_" + dtype_name(c.dtype) + "_accum" +
                     std::to_string(c.accumulation) +
                     (c.optimizer == OffloadConfig::Device::kNvme ? "_nvme" : "_cpu");
  if (c.ratio < 1) name += "_ratio" + std::to_string(int(c.ratio * 100));
  if (c.params != OffloadConfig::Device::kNone) {
    name += c.params == OffloadConfig::Device::kNvme ? "_params_nvme" : "_params_cpu";
  }
  if (c.max_in_cpu > 0) name += "_in_cpu" + std::to_string(c.max_in_cpu);
  if (c.pinned) name += "_pinned";
  return name;
}


INSTANTIATE_TEST_SUITE_P(
    All, Offload,
    ::testing::Values(OffloadCase{1, DType::kF32, 1, kCpu}, OffloadCase{2, DType::kF32, 1, kCpu},
                      OffloadCase{3, DType::kF32, 1, kCpu}, OffloadCase{1, DType::kBF16, 4, kCpu},
                      OffloadCase{2, DType::kBF16, 4, kCpu, 1.0, kNone, true},
                      OffloadCase{3, DType::kBF16, 4, kCpu, 1.0, kCpu, true},
                      OffloadCase{2, DType::kBF16, 1, kCpu, 0.4}, OffloadCase{3, DType::kF32, 1, kCpu, 0.6, kCpu},
                      OffloadCase{1, DType::kBF16, 1, kNvme}, OffloadCase{2, DType::kF32, 4, kNvme},
                      OffloadCase{2, DType::kBF16, 4, kNvme}, OffloadCase{3, DType::kBF16, 1, kNvme, 1.0, kCpu},
                      OffloadCase{3, DType::kF32, 4, kNvme}, OffloadCase{3, DType::kBF16, 1, kNvme, 1.0, kNvme},
                      OffloadCase{3, DType::kBF16, 4, kCpu, 1.0, kNvme, false, 6000},
                      OffloadCase{3, DType::kF32, 1, kNvme, 1.0, kNvme, true, 20000}),
    offload_name);

// docs/design.md's per-rank bytes with the offloaded kinds moved off the device.
TEST(OffloadMemory, DeviceHoldsOnlyWhatTheStageKeeps) {
  MpiComm world(MPI_COMM_WORLD);
  const std::unique_ptr<ModelLayout> layout_ptr = make_model_layout(tiny_model());
  const ModelLayout& layout = *layout_ptr;
  auto backend = test_backend();
  const PartitionMap part(layout.flat_size(), world.size());
  const double P = double(part.padded_size), p = double(part.partition_size);
  // Stage 3 with the optimizer offloaded keeps its bf16 gradient partition where the backward
  // kernels write it: in host memory on the CPU, on the device on a GPU (ZeroPlan::grads_on_host).
  const double grads_on_device = backend->kernels_reach_host_memory() ? 0 : 2 * p;
  // Stage 2, cpu optimizer offload: 2 Psi + 2 Psi / N on the device; 12 Psi / N (+ the 2 Psi / N
  // gradient copy the CPU Adam reads) on the host.
  {
    const size_t host_before = pool_in_use()[Pool::kHost];
    DsConfig cfg = offload_config(OffloadCase{2, DType::kBF16, 1, kCpu}, world.size());
    auto engine_comm = make_data_comm(*backend, world);
    ZeroEngine engine(layout, *backend, *engine_comm, world, cfg);
    const ModelStateBytes dev = engine.model_state_bytes(), off = engine.offloaded_state_bytes();
    EXPECT_EQ(double(dev.total()), 2 * P + 2 * p);
    EXPECT_EQ(double(off.master + off.exp_avg + off.exp_avg_sq), 12 * p);
    EXPECT_EQ(double(off.grads), 2 * p);
    EXPECT_GE(double(pool_in_use()[Pool::kHost] - host_before), 14 * p);
  }
  // Stage 3, param and optimizer offload: no model state on the device but (on a GPU) the
  // gradient partition; what else it holds is the live working set (gather buffers), and the
  // host holds 16 Psi / N.
  {
    DsConfig cfg = offload_config(OffloadCase{3, DType::kBF16, 1, kCpu, 1.0, kCpu}, world.size());
    auto engine_comm = make_data_comm(*backend, world);
    ZeroEngine engine(layout, *backend, *engine_comm, world, cfg);
    EXPECT_EQ(double(engine.model_state_bytes().total()), grads_on_device);
    EXPECT_EQ(double(engine.offloaded_state_bytes().total()), 16 * p);
  }
  // NVMe: the optimizer state is in the swap file (nvme pool), not in memory.
  {
    const size_t nvme_before = pool_in_use()[Pool::kNvme];
    DsConfig cfg = offload_config(OffloadCase{3, DType::kBF16, 1, kNvme}, world.size());
    auto engine_comm = make_data_comm(*backend, world);
    ZeroEngine engine(layout, *backend, *engine_comm, world, cfg);
    // The parameter partition; the gradient partition went to the host with the optimizer
    // (CPU) or stays on the device (GPU).
    EXPECT_EQ(double(engine.model_state_bytes().total()), 2 * p + grads_on_device);
    EXPECT_GE(double(pool_in_use()[Pool::kNvme] - nvme_before), 12 * p);
    EXPECT_LE(double(engine.buffer_bytes().offload), 4 * 12 * 4096 + 2 * 2 * 4096);  // 4 swap buffers + 2 staging
  }
  // Stage 3, everything on NVMe: the parameters' swap file too.
  {
    DsConfig cfg = offload_config(OffloadCase{3, DType::kBF16, 1, kNvme, 1.0, kNvme}, world.size());
    auto engine_comm = make_data_comm(*backend, world);
    ZeroEngine engine(layout, *backend, *engine_comm, world, cfg);
    EXPECT_EQ(double(engine.model_state_bytes().total()), grads_on_device);
    EXPECT_GE(double(engine.offloaded_state_bytes().params), 2 * p);
    EXPECT_GE(double(pool_in_use()[Pool::kNvme]), 14 * p);
  }
  EXPECT_EQ(pool_in_use()[Pool::kNvme], 0u) << "swap files outlived their engine";
}

// No file named after this process is left in nvme_path, during the run or after it.
TEST(OffloadNvme, LeavesNoFilesBehind) {
  MpiComm world(MPI_COMM_WORLD);
  const std::string prefix = "zerotrain-" + std::to_string(::getpid()) + "-";
  auto ours = [&] {
    int n = 0;
    for (const auto& e : fs::directory_iterator(nvme_dir())) n += e.path().filename().string().rfind(prefix, 0) == 0;
    return n;
  };
  const std::unique_ptr<ModelLayout> layout_ptr = make_model_layout(tiny_model());
  const ModelLayout& layout = *layout_ptr;
  auto backend = test_backend();
  {
    DsConfig cfg = offload_config(OffloadCase{2, DType::kBF16, 1, kNvme}, world.size());
    auto engine_comm = make_data_comm(*backend, world);
    ZeroEngine engine(layout, *backend, *engine_comm, world, cfg);
    engine.init_params(3);
    EXPECT_GT(pool_in_use()[Pool::kNvme], 0u);
    EXPECT_EQ(ours(), 0) << "the swap file is visible in " << nvme_dir();
  }
  EXPECT_EQ(ours(), 0);
}

// A bad nvme_path is a UsageError naming the key, at construction, before any step.
TEST(OffloadNvme, BadPathIsAStartupError) {
  MpiComm world(MPI_COMM_WORLD);
  const std::unique_ptr<ModelLayout> layout_ptr = make_model_layout(tiny_model());
  const ModelLayout& layout = *layout_ptr;
  auto backend = test_backend();
  DsConfig cfg = offload_config(OffloadCase{2, DType::kBF16, 1, kNvme}, world.size());
  cfg.zero.offload_optimizer.nvme_path = nvme_dir() + "/zerotrain-no-such-dir";
  try {
    auto engine_comm = make_data_comm(*backend, world);
    ZeroEngine engine(layout, *backend, *engine_comm, world, cfg);
    ADD_FAILURE() << "a missing nvme_path was accepted";
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("zero_optimization.offload_optimizer.nvme_path"), std::string::npos) << what;
    EXPECT_NE(what.find("No such file or directory"), std::string::npos) << what;
  }
  cfg.zero.offload_optimizer.nvme_path = nvme_dir();
  cfg.zero.offload_optimizer.buffer_count = 2;
  EXPECT_THROW(ZeroEngine(layout, *backend, *make_data_comm(*backend, world), world, cfg), UsageError);
  // NVMe parameters need buffers as big as the largest slice, and the optimizer offloaded whole.
  cfg = offload_config(OffloadCase{3, DType::kBF16, 1, kNvme, 1.0, kNvme}, world.size());
  cfg.zero.offload_param.buffer_size = 100;
  try {
    auto engine_comm = make_data_comm(*backend, world);
    ZeroEngine engine(layout, *backend, *engine_comm, world, cfg);
    ADD_FAILURE() << "a too small buffer_size was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("offload_param.buffer_size: 100 elements is smaller"), std::string::npos)
        << e.what();
  }
  cfg = offload_config(OffloadCase{3, DType::kBF16, 1, kNone, 1.0, kNvme}, world.size());
  EXPECT_THROW(ZeroEngine(layout, *backend, *make_data_comm(*backend, world), world, cfg), UsageError);
}

}  // namespace
}  // namespace zt
