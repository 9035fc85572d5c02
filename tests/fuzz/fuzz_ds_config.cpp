// Fuzz harness: the DeepSpeed config reader (parse_ds_config, config/ds_config.h) on any bytes,
// with "auto" resolved from the trainer's default flags (TrainArgs{}) on 2 ranks of a model with
// hidden size 768. Built twice from this file: with fuzz_driver.cpp as a ctest test (seeded
// mutations of corpus/ds_config/), and with ZT_FUZZ=ON as a libFuzzer target.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "config/json_reader.h"
#include "config/train_args.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  constexpr const char* kSource = "fuzz/ds_config.json";
  constexpr int kWorldSize = 2;
  static const zt::AutoValues autos = zt::TrainArgs{}.auto_values(kWorldSize, 768);
  zt::fuzz::check_reader(kSource, [&] {
    const zt::DsConfig c = zt::parse_ds_config(zt::parse_json_lenient(text, kSource), kSource, autos);
    // What the engine takes from an accepted config without checking again: DeepSpeed's batch
    // identity within the 32-bit counts, a ZeRO stage, one 16-bit mode, gradients in a dtype the
    // engine runs, and buckets, buffers and I/O sizes that hold something.
    const int64_t micro = c.train_micro_batch_size_per_gpu, gas = c.gradient_accumulation_steps;
    if (micro < 1 || micro > INT32_MAX || gas < 1 || gas > INT32_MAX ||
        c.train_batch_size != micro * gas * kWorldSize) {
      zt::fuzz::finding("a batch accepted that breaks train = micro x accumulation x world");
    }
    if (c.zero.stage < 0 || c.zero.stage > 3) zt::fuzz::finding("a ZeRO stage accepted outside 0-3");
    if (c.fp16.enabled && c.bf16) zt::fuzz::finding("fp16 and bf16 accepted together");
    if (!c.grad_dtype_supported()) zt::fuzz::finding("a gradient dtype accepted that the engine does not run");
    if (c.zero.reduce_bucket_size < 1 || c.zero.allgather_bucket_size < 1 || c.zero.stage3_prefetch_bucket_size < 1 ||
        c.zero.sub_group_size < 1 || c.zero.offload_optimizer.buffer_count < 1 ||
        c.zero.offload_param.buffer_count < 1 || c.aio.block_size < 4096 || c.aio.block_size % 4096 != 0 ||
        c.aio.queue_depth < 1 || c.aio.intra_op_parallelism < 1) {
      zt::fuzz::finding("a size accepted that holds nothing");
    }
    if (!(c.optimizer.lr >= 0) || !(c.optimizer.beta1 >= 0 && c.optimizer.beta1 < 1) ||
        !(c.optimizer.beta2 >= 0 && c.optimizer.beta2 < 1) || !(c.optimizer.eps >= 0) ||
        !(c.gradient_clipping >= 0)) {
      zt::fuzz::finding("an optimizer setting accepted outside its range");
    }
  });
  return 0;
}
