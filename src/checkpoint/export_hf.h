// Consolidation of a ZeRO checkpoint into an HF GPT-2 model directory (what zero_to_fp32 does):
// model.safetensors, or model-0000k-of-0000n.safetensors + model.safetensors.index.json past the
// shard limit, and config.json. Tensor by tensor: memory holds the largest tensor, not the model.
#pragma once

#include <cstdint>
#include <string>

#include "checkpoint/checkpoint.h"

namespace zt {

struct ExportedModel {
  size_t tensors = 0;
  uint64_t bytes = 0;  ///< tensor data written
  size_t files = 0;
};

/// Writes the fp32 master weights of `reader`'s checkpoint to `output` in `dtype`. Refuses to
/// replace an existing model unless `overwrite` (UsageError naming the file).
/// Every file is written under a temporary name and checked; only when all are closed are they
/// renamed into place, so a failure (a full disk) leaves the final names as they were and no
/// temporary behind. `durable` fsyncs each file before the renames and the directory after.
ExportedModel export_hf_model(CheckpointReader& reader, const std::string& output, DType dtype, uint64_t shard_limit,
                              bool overwrite, bool durable = true);

/// The same model as one HDF5 file, model.h5: a dataset per tensor under its HF name (flat, in
/// `dtype`; bf16/fp16 as uint16 bit patterns) and a "shape:<name>" attribute with its shape, plus
/// config.json. Streams tensor by tensor and publishes like the safetensors export.
ExportedModel export_hf_model_hdf5(CheckpointReader& reader, const std::string& output, DType dtype, bool overwrite,
                                   bool durable = true);

}  // namespace zt
