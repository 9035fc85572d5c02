// manifest.json of a checkpoint (docs/formats.md): written by one function, read by one function
// that trusts nothing in it. parse_manifest() checks every field against the others and against
// the model it describes (the parameter table, the flat size, partitions that cover the flat
// buffer exactly once, one shard per saved rank plus model_states.h5), and the manifest's own
// checksum, manifest_crc32. It touches no file: CheckpointReader then checks the listed files
// against it. Every refusal is a UsageError of one line, "<path>: <key>: <what>".
#pragma once

#include <boost/json.hpp>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/ds_config.h"
#include "config/model_config.h"
#include "core/dtype.h"
#include "optim/loss_scaler.h"

namespace zt {

inline constexpr int kCheckpointFormatVersion = 1;

/// The trainer's position, saved with the model states.
struct TrainingPosition {
  int64_t step = 0;            ///< optimizer steps completed
  uint64_t data_position = 0;  ///< next global sample
  uint64_t seed = 0;
};

/// One file the checkpoint consists of, as the writer recorded it.
struct ManifestFile {
  std::string name;
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
  int node = 0;
};

/// A manifest that passed every check.
struct Manifest {
  int world_size = 0, stage = 0;
  DType param_dtype = DType::kF32;
  size_t flat_size = 0;
  ModelConfig model;
  boost::json::object model_json;  ///< model_config as written, to compare with a run's model
  std::string ds_config_source;
  TrainingPosition position;
  int64_t adam_step = 0, scheduler_iteration = -1;
  LossScaler::State scaler{};
  /// The optimizer whose state the shards hold (absent before issue 31: Adam's, as AdamW).
  OptimizerConfig::Type optimizer = OptimizerConfig::Type::kAdamW;
  std::vector<std::pair<size_t, size_t>> partitions;  ///< per saved rank, [begin, end)
  bool node_local = false;
  int num_nodes = 1;
  std::vector<ManifestFile> files;  ///< every shard in rank order, then model_states.h5
  bool checksummed = false;         ///< carried manifest_crc32 (and it matched)
  boost::json::object build;        ///< the build that wrote it (core/build_info.h); empty before issue 29
};

/// The shard of saved rank `rank`: zero_rank_<rank>_optim_states.h5.
std::string shard_name(int rank);

/// The manifest's model_config: the six keys that fix the layout.
boost::json::object model_json(const ModelConfig& m);

/// Validates `text`, the content of the manifest at `path` (named in every message). A
/// manifest without manifest_crc32 (written before it existed) is accepted with
/// checksummed = false; the caller warns.
Manifest parse_manifest(std::string_view text, const std::string& path);

/// The manifest's text as the writer stores it: `manifest` serialized (any manifest_crc32 in it
/// dropped) with ,"manifest_crc32":N appended as its last member, N being zlib's CRC-32 of every
/// byte before that member (docs/formats.md). Tests use it to re-sign an edited manifest.
std::string sign_manifest(boost::json::object manifest);

}  // namespace zt
