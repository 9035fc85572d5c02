// ZeRO checkpoints: OUTPUT/global_step<N>/ holds one zero_rank_<R>_optim_states.h5 per rank (that
// rank's partition of the fp32 master weights and the optimizer's moments, exp_avg and/or
// exp_avg_sq as the manifest's optimizer keeps them, chunked with Fletcher32;
// attributes for rank, world size, stage, dtype, partition bounds and the training counters),
// model_states.h5 (the 16-bit parameters under their HF names at stages 0-2, and at stage 3 with
// stage3_gather_16bit_weights_on_model_save), and manifest.json (configs, the parameter table with flat offsets, partition
// bounds, every file with its size and CRC-32, and its own CRC-32: checkpoint/manifest.h).
//
// Publishing is atomic: every file is written under a .tmp name, fsync'ed and renamed; all ranks
// agree that their files are durable before rank 0 writes the manifest and then replaces
// OUTPUT/latest (write, fsync, rename). A crash at any moment leaves the previous `latest`
// pointing at a complete checkpoint.
//
// Loading validates everything before any state is touched (every field of the manifest, every
// file's presence, size and checksum, the model config), then each rank reads the range of the flat buffer it
// now owns from whichever shards hold it: a checkpoint from N ranks at stage S loads at any M
// and any stage.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/h5.h"
#include "checkpoint/manifest.h"
#include "comm/communicator.h"
#include "config/ds_config.h"
#include "config/model_config.h"
#include "model/model_layout.h"
#include "zero/engine.h"

namespace zt {

/// Where a rank sits, for node-local storage: each node's files live on that node only.
struct NodePlacement {
  int node = 0, local_rank = 0, num_nodes = 1;
  bool node_local = false;  ///< checkpoint.use_node_local_storage
};

struct SavedCheckpoint {
  std::string path;
  uint64_t bytes = 0;
  std::vector<std::string> removed;  ///< older checkpoints rotated out (this file system's)
};

/// Writes OUTPUT/global_step<N>/ and moves OUTPUT/latest to it. With `keep_last` > 0 (HF's
/// --save_total_limit), then rotate_checkpoints() on every file system written. Collective.
SavedCheckpoint save_checkpoint(const std::string& output_dir, ZeroEngine& engine, const ModelLayout& layout,
                                const DsConfig& ds, HostComm& comm, const TrainingPosition& position,
                                const NodePlacement& placement = {}, int64_t keep_last = 0);

/// Once `latest` names global_step<keep_step>: removes every complete checkpoint under
/// output_dir but the `limit` newest (global_step<keep_step> always stays), and the directories
/// of saves interrupted before it. A checkpoint loses its manifest first, so a crash in the
/// middle of a removal leaves a directory that no reader takes for complete. Returns what it
/// removed.
std::vector<std::string> rotate_checkpoints(const std::string& output_dir, int64_t keep_step, int64_t limit);

/// With node-local storage the nodes may disagree on `latest` after a crash between their
/// updates: every rank reads its node's, and all take the oldest tag (every node still holds it
/// complete). Returns the directory to load. Collective.
std::string agree_on_latest(const std::string& output_dir, HostComm& comm);

/// A validated checkpoint, ready to be read at any world size.
class CheckpointReader {
 public:
  /// `where` is a checkpoint directory, a directory with a `latest` file, or "auto" (the
  /// `latest` of output_dir). Validates the manifest, the files (size and CRC-32) and that the
  /// model config matches `model`. Throws UsageError naming the file on any problem; warns
  /// (once per file system: verify_index 0) when the manifest predates manifest_crc32.
  /// `expect` null: take the model config from the manifest (offline tools).
  /// With `node_local`, only the shards present on this node are validated and readable.
  /// The CRC-32 pass, which reads every byte, is shared among the processes that see the same
  /// files: this one checks the listed files i with i % verify_count == verify_index (sizes and
  /// everything else are checked by all). Callers agree on the verdict afterwards.
  /// `verify` says how the files' bytes are checked:
  ///  - kWholeFiles: the CRC-32 pass runs in the constructor (resume: every byte is loaded).
  ///  - kWholeFilesInBackground: it runs on a thread of its own while the caller reads: the caller
  ///    must call wait_verified() before it publishes anything it derived, and on its error paths,
  ///    so that a corrupt file is reported as such rather than as whatever reading it ran into.
  ///    When that pass covers every file (verify_count 1, not node-local), reads skip HDF5's
  ///    Fletcher32 of each chunk, which would check the same bytes again.
  ///  - kChunksRead: no CRC-32 pass; what the caller reads is checked chunk by chunk (HDF5's
  ///    Fletcher32; a mismatch is a UsageError naming the file and the dataset), and what it does
  ///    not read is not read at all. For exports, which need the master weights (a third of each
  ///    shard with Adam or Lamb, half with Lion or Adagrad) and not the optimizer moments.
  /// The two latter are for exports, which read tensor by tensor: their datasets keep two chunks
  /// in HDF5's cache (H5File::cache_chunks); a resume reads whole partitions without it.
  enum class Verify { kWholeFiles, kWholeFilesInBackground, kChunksRead };
  /// `expect_optimizer`: a resume's optimizer, checked with require_optimizer before any file is
  /// read; the shards are then checked for the fields it keeps (Adafactor's exp_avg exists only
  /// with beta1, which the manifest's optimizer name does not say).
  CheckpointReader(const std::string& where, const std::string& output_dir, const ModelConfig* expect,
                   bool node_local = false, int verify_index = 0, int verify_count = 1,
                   Verify verify = Verify::kWholeFiles,
                   std::optional<OptimizerConfig> expect_optimizer = std::nullopt);
  ~CheckpointReader();
  CheckpointReader(CheckpointReader&&) noexcept;
  CheckpointReader& operator=(CheckpointReader&&) noexcept;

  /// Waits for the CRC-32 pass; throws UsageError naming the first file that failed it. Returns
  /// at once when the pass ran in the constructor.
  void wait_verified();

  const ModelConfig& model_config() const { return model_; }

  const std::string& dir() const { return dir_; }
  const TrainingPosition& position() const { return position_; }
  const EngineState& engine_state() const { return engine_state_; }
  int saved_world_size() const { return world_size_; }
  int saved_stage() const { return stage_; }
  /// The optimizer whose state the shards hold.
  OptimizerConfig::Type optimizer() const { return optimizer_; }
  /// Throws UsageError unless the shards hold the state `type` steps with (Adam and AdamW share
  /// theirs): another optimizer's moments would be read as this one's.
  void require_optimizer(OptimizerConfig::Type type) const;

  /// Adafactor's factors (FactorReader), from any shard on this node.
  void read_factors(float* rows, size_t row_count, float* cols, size_t col_count);
  /// OneBitLamb's per-tensor scalars (ScalarReader), from any shard on this node (every shard of
  /// a OneBitLamb checkpoint holds them: checked when it is opened).
  bool read_onebit_lamb(double* out, size_t count);
  /// OnebitAdam's errors of `rank` (ErrorReader): from its own shard when the checkpoint was
  /// written at `world` ranks and holds `count` of them; false otherwise (they start afresh).
  bool read_onebit_errors(int rank, int world, float* out, size_t count);
  /// ZeroOneAdam's state of `rank` between meetings (LocalStateReader): from its own shard when
  /// the checkpoint was written at `world` ranks and holds it; nothing otherwise.
  std::optional<double> read_zero_one_local(int rank, int world, float* out, size_t count);
  /// Elements [lo, hi) of a field over the flat layout, read from the shards that hold them.
  void read(StateField field, size_t lo, size_t hi, float* out);
  /// With node-local storage only this node's shards are here: throws UsageError naming the
  /// first shard [lo, hi) needs that this node does not have.
  void require_local(size_t lo, size_t hi) const;

 private:
  const H5File& shard(int rank);
  void check_shards(const std::string& manifest_path, bool node_local);
  std::string dir_;
  ModelConfig model_;
  int world_size_ = 0, stage_ = 0;
  size_t flat_size_ = 0;
  std::vector<std::pair<size_t, size_t>> partitions_;
  std::vector<bool> local_;  // per saved rank: its shard is on this node
  TrainingPosition position_;
  EngineState engine_state_;
  OptimizerConfig::Type optimizer_ = OptimizerConfig::Type::kAdamW;
  std::vector<StateField> state_fields_;  // the shards' fp32 fields: the master weights, the optimizer's moments
  std::map<int, H5File> open_;
  struct Verifier;  // the background CRC-32 pass
  std::unique_ptr<Verifier> verifier_;
  bool crc_covers_all_ = false;  // this process CRCs every file itself, in the background
  bool exporting_ = false;       // a reader of tensors (hyperslabs), not of whole partitions
};

/// CRC-32 (zlib's) of a whole file, a regular one (core/regular_file.h). `stop`, when given and
/// set, ends the pass early (the result is then meaningless).
uint32_t file_crc32(const std::string& path, const std::atomic<bool>* stop = nullptr);

}  // namespace zt
