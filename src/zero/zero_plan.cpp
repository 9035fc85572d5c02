#include "zero/zero_plan.h"

#include <cmath>

#include "core/error.h"

namespace zt {

ZeroPlan ZeroPlan::inference(const DsConfig& config, size_t flat_size, int world_size, int rank, DType working) {
  return ZeroPlan(config, flat_size, world_size, rank, true, working, false);
}

ZeroPlan::ZeroPlan(const DsConfig& config, size_t flat_size, int world_size, int rank_, bool kernels_reach_host,
                   DType working, bool training_)
    : stage(config.zero.stage), world(world_size), rank(rank_), dtype(config.param_dtype()),
      grad_dtype(config.grad_dtype()), comm_dtype(config.communication_data_type.value_or(config.param_dtype())),
      working_dtype(working), partition(flat_size, world_size), training(training_) {
  ZT_USAGE_CHECK(working == DType::kF32 || working == DType::kBF16, "activations in ", dtype_name(working),
                 " are not implemented (fp32 or bf16)");
  ZT_USAGE_CHECK(!(dtype == DType::kF16 && working == DType::kBF16),
                 "bf16 activations with fp16 parameters are not implemented: train in bf16 or fp32");
  const size_t padded = partition.padded_size, part = partition.partition_size;
  opt_begin = stage == 0 ? 0 : partition.begin(rank);
  opt_count = !training ? 0 : stage == 0 ? padded : part;
  const OffloadConfig& off = config.zero.offload_optimizer;
  const OffloadConfig& off_param = config.zero.offload_param;
  // Partial offload (ratio < 1) keeps the first part of the range on the device.
  offloaded = off.enabled() ? size_t(std::llround(double(opt_count) * off.ratio)) : 0;
  device_count = opt_count - offloaded;

  if (stage == 3 && config.zero.zero_hpz_partition_size > 1 && config.zero.zero_hpz_partition_size < world) {
    hpz = int(config.zero.zero_hpz_partition_size);
    ZT_USAGE_CHECK(world % hpz == 0, "zero_optimization.zero_hpz_partition_size: ", hpz, " does not divide the ",
                   world, " ranks");
    secondary = PartitionMap(flat_size, hpz);
  }
  params_base = stage == 3 ? partition.begin(rank) : 0;
  params_count = stage == 3 ? part : padded;
  grads_base = stage >= 2 ? partition.begin(rank) : 0;
  grads_count = !training ? 0 : stage >= 2 ? part : padded;
  grads_on_host = stage == 3 && offloaded > 0 && device_count == 0 && kernels_reach_host;
  params_on_host = stage == 3 && off_param.enabled();
  params_on_nvme = params_on_host && off_param.device == OffloadConfig::Device::kNvme;
  offloaded_param_pool = off_param.pin_memory ? Pool::kPinned : Pool::kHost;
  offloaded_optimizer_pool = off.pin_memory ? Pool::kPinned : Pool::kHost;
  param_pool = params_on_host ? offloaded_param_pool : Pool::kDevice;
  grad_pool = grads_on_host ? offloaded_optimizer_pool : Pool::kDevice;
  if (!training) return;
  // fp32 gradients under 16-bit parameters are DeepSpeed's BF16_Optimizer: stages 0 and 1, every
  // gradient on the device (the config refuses the rest; this guards programmatic configs).
  ZT_USAGE_CHECK(config.grad_dtype_supported(), config.source, ": data_types.grad_accum_dtype ",
                 dtype_name(grad_dtype), " with ", dtype_name(dtype), " parameters is not implemented at stage ",
                 stage, off.enabled() ? " with offload_optimizer" : "");
  // The device's part of the optimizer steps on the device and writes its parameters in place,
  // which offload_param puts in host memory: a GPU kernel cannot write pageable memory.
  ZT_USAGE_CHECK(!params_on_host || device_count == 0 || kernels_reach_host, config.source,
                 ": zero_optimization.offload_param on a GPU needs offload_optimizer on \"cpu\" or \"nvme\" "
                 "with ratio 1 (the CPU optimizer step updates the offloaded parameters)");
  ZT_USAGE_CHECK(!params_on_nvme || (offloaded > 0 && device_count == 0), config.source,
                 ": zero_optimization.offload_param.device: \"nvme\" needs offload_optimizer on \"cpu\" or "
                 "\"nvme\" with ratio 1 (the CPU optimizer step writes the updated parameters to the swap file)");
  delayed_update_after = config.zero.delayed_param_update_after;
  if (delayed_update_after < 0) return;
  // The CPU optimizer step of step t reads the host copy of its gradient and writes the new parameters
  // aside while step t+1 runs; what it reads or writes must be no buffer that step t+1 uses.
  ZT_USAGE_CHECK(offloaded > 0, "--delayed_param_update overlaps ZeRO-Offload's CPU optimizer step with the next "
                 "step: it needs zero_optimization.offload_optimizer on \"cpu\" or \"nvme\" in ", config.source);
  ZT_USAGE_CHECK(config.optimizer.type != OptimizerConfig::Type::kLamb,
                 "--delayed_param_update with Lamb is not implemented: Lamb's trust ratios need an all-reduce of the "
                 "tensors' norms between its two passes, which the update's own thread cannot join (", config.source,
                 ")");
  ZT_USAGE_CHECK(config.optimizer.type != OptimizerConfig::Type::kMuon,
                 "--delayed_param_update with Muon is not implemented: its matrices are exchanged between the ranks "
                 "and orthogonalised between its two passes, which the update's own thread cannot join (",
                 config.source, ")");
  ZT_USAGE_CHECK(!config.optimizer.factored(),
                 "--delayed_param_update with Adafactor is not implemented: its factors need an all-reduce of the "
                 "matrices' sums, and its clipping one of the tensors' norms, between its passes, which the update's "
                 "own thread cannot join (", config.source, ")");
  ZT_USAGE_CHECK(!params_on_host, "--delayed_param_update with zero_optimization.offload_param is not implemented: "
                 "the CPU optimizer step would write the parameter partition that the next step gathers from (", config.source,
                 ")");
  ZT_USAGE_CHECK(!grads_on_host, "--delayed_param_update at stage 3 with the whole optimizer offloaded is not "
                 "implemented on a backend whose kernels reduce into host memory: the next step's backward would "
                 "write the gradient the CPU optimizer step reads (", config.source, "); use stage 2, or a ratio below 1");
}

}  // namespace zt
