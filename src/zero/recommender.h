// The question users actually have before launching: which configuration is the fastest that
// fits? The recommender walks the ladder from fastest to leanest,
//
//   stage 0 -> 1 -> 2 -> 2 + optimizer offload (cpu) -> 3 -> 3 + optimizer and parameter offload
//   (cpu) -> 3 + optimizer on NVMe, parameters on cpu -> 3 + both on NVMe
//
// estimates each rung with estimate_memory, and returns the first whose per-rank device bytes fit
// the GPU (on a CUDA GPU, Hardware::cuda: the GPU view's total, allocator rounding and the
// process's fixed costs included), whose host bytes times the ranks on a node fit the node's memory, and whose NVMe bytes
// times the ranks on a node fit the drive (NVMe rungs only when a capacity is given).
#pragma once

#include <boost/json/object.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "zero/memory_estimate.h"

namespace zt {

struct Hardware {
  uint64_t gpu_memory = 0;     ///< bytes per GPU (rank)
  bool cuda = false;           ///< a CUDA GPU: compare its GPU view (estimate_gpu_memory) with gpu_memory
  uint64_t cpu_memory = 0;     ///< bytes of host memory per node
  uint64_t nvme_capacity = 0;  ///< bytes of NVMe per node; 0: none
  std::string nvme_path = "/local_nvme";
};

struct RungVerdict {
  std::string name;
  DsConfig config;
  MemoryEstimate estimate;
  size_t gpu_bytes = 0;  ///< what must fit gpu_memory: device_total(), or the GPU view's total with Hardware::cuda
  bool fits = false;
  std::string why_not;  ///< which resource overflowed, for the report
};

struct Recommendation {
  std::vector<RungVerdict> rungs;  ///< every rung tried, in order, up to the first that fits
  int chosen = -1;                 ///< index into rungs, -1 when nothing fits
};

/// `base` supplies everything but the stage and offload settings (dtype, buckets, batch, ...).
Recommendation recommend(const ModelConfig& model, const DsConfig& base, const RunShape& run, const Hardware& hw);

/// A ready ds_config.json for `config`: batch, precision, optimizer from the trainer's flags
/// ("auto"), and the ZeRO, offload and aio settings the estimate assumed.
boost::json::object ds_config_json(const DsConfig& config);

}  // namespace zt
