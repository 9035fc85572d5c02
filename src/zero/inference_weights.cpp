#include "zero/inference_weights.h"

#include <algorithm>
#include <vector>

#include "core/error.h"

namespace zt {

InferenceWeights::InferenceWeights(const DsConfig& config, const ModelLayout& layout, Backend& backend,
                                   DataComm& comm, const StateSource& source)
    : layout_(layout), backend_(backend),
      plan_(ZeroPlan::inference(config, layout.flat_size(), comm.size(), comm.rank())) {
  if (plan_.params_replicated()) {
    load_whole(source);
    return;
  }
  // ParamSwapper keeps the partition in its own file; otherwise it lives in the plan's pool.
  if (!plan_.params_on_nvme) {
    partition_ = DeviceArray<unsigned char>(backend, plan_.params_count * plan_.elem(), plan_.param_pool);
  }
  coordinator_ = std::make_unique<PartitionedParameterCoordinator>(plan_, layout, backend, comm, partition_.data(),
                                                                   config);
  load_partition(source);
}

// This rank's partition, a chunk at a time: read in fp32, converted to the config's dtype on the
// host, written into the store (device or host memory, or the swap file).
void InferenceWeights::load_partition(const StateSource& source) {
  std::vector<float> chunk(std::min(kLoadChunk, plan_.params_count));
  std::vector<unsigned char> converted(plan_.dtype == DType::kF32 ? 0 : chunk.size() * plan_.elem());
  ParamStore& store = coordinator_->store();
  for (size_t done = 0; done < plan_.params_count; done += chunk.size()) {
    const size_t n = std::min(chunk.size(), plan_.params_count - done);
    const size_t lo = plan_.params_base + done;
    source.read(StateField::kMaster, lo, lo + n, chunk.data());  // zeros past the model (the padding)
    if (plan_.dtype == DType::kF32) {
      store.write(done, n, chunk.data());
    } else {
      convert(chunk.data(), DType::kF32, converted.data(), plan_.dtype, n);
      store.write(done, n, converted.data());
    }
  }
  backend_.synchronize(backend_.compute_stream());
}

// Every weight, a chunk at a time through pinned memory, each rounded to the config's dtype and
// back, as stage 3 would hold and widen it.
void InferenceWeights::load_whole(const StateSource& source) {
  const size_t flat = layout_.flat_size();
  whole_ = DeviceArray<float>(backend_, flat);
  DeviceArray<float> staging(backend_, load_staging_bytes(layout_) / sizeof(float), Pool::kPinned);
  std::vector<unsigned char> rounded(plan_.dtype == DType::kF32 ? 0 : staging.size() * plan_.elem());
  Stream& compute = backend_.compute_stream();
  for (size_t done = 0; done < flat; done += staging.size()) {
    const size_t n = std::min(staging.size(), flat - done);
    backend_.synchronize(compute);  // the last chunk's copy has read the staging
    source.read(StateField::kMaster, done, done + n, staging.data());
    if (plan_.dtype != DType::kF32) {
      convert(staging.data(), DType::kF32, rounded.data(), plan_.dtype, n);
      convert(rounded.data(), plan_.dtype, staging.data(), DType::kF32, n);
    }
    backend_.copy_async(whole_.data() + done, staging.data(), n * sizeof(float), compute);
  }
  backend_.synchronize(compute);
}

const float* InferenceWeights::acquire_weights(int unit) {
  if (!coordinator_) return whole_.data() + layout_.unit_offset(unit);
  return static_cast<const float*>(coordinator_->acquire(unit));
}

void InferenceWeights::release_weights(int unit) {
  if (coordinator_) coordinator_->release(unit);
}

float* InferenceWeights::grad_accumulator(int unit) {
  ZT_CHECK(false, "unit ", unit, ": generation computes no gradients");
  return nullptr;
}

void InferenceWeights::end_pass(bool another) {
  if (coordinator_) coordinator_->end_pass(another);
}

}  // namespace zt
