#include "checkpoint/checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "config/build_info_json.h"
#include "config/json_reader.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/log.h"
#include "core/regular_file.h"
#include "core/timer.h"
#include "model/model_layout.h"
#include "zero/partition.h"

namespace zt {

namespace fs = std::filesystem;

namespace {

constexpr int kFormatVersion = kCheckpointFormatVersion;
// `latest` holds one tag, global_step<N>.
constexpr uint64_t kMaxLatestBytes = 4096;

// OnebitAdam's compression errors of the shard's own rank (OneBitCompression's layout).
constexpr const char* kOneBitErrors = "onebit_errors";
// ZeroOneAdam's state of the shard's own rank between two meetings of the ranks (its master
// weights, exp_avg and momentum accumulator over its optimizer range), and the lrs summed since.
constexpr const char* kZeroOneLocal = "zero_one_local";
constexpr const char* kZeroOneLrs = "zero_one_lrs";
// OneBitLamb's per-tensor scalars in every shard (ZeroEngine::onebit_lamb_scalars, float64).
constexpr const char* kOneBitLambScalars = "onebit_lamb_scalars";
// Adafactor's factors in every shard (rows, then columns, of every matrix in the model's order).
constexpr const char* kFactorRows = "exp_avg_sq_row";
constexpr const char* kFactorCols = "exp_avg_sq_col";

const char* field_name(StateField f) {
  switch (f) {
    case StateField::kMaster: return "fp32_master";
    case StateField::kExpAvg: return "exp_avg";
    case StateField::kExpAvgSq: return "exp_avg_sq";
    case StateField::kExpAvgSqFresh: return "exp_avg_sq_fresh";
  }
  return "?";
}

// Test hook: ZT_CHECKPOINT_CRASH_AT=k kills this process (SIGKILL, as a node failure would) at
// the k-th point of the write sequence, counted over the whole run, so that a test can check
// that `latest` survives a crash anywhere in a save.
void crash_point() {
  static const char* env = std::getenv("ZT_CHECKPOINT_CRASH_AT");
  static long target = env ? std::atol(env) : 0;
  static long reached = 0;
  if (target > 0 && ++reached == target) ::kill(::getpid(), SIGKILL);
}

// Makes a renamed file durable: fsync the file, rename, fsync the directory.
void publish(const std::string& tmp, const std::string& final_path) {
  sync_to_disk(tmp);
  crash_point();  // written, not yet renamed
  ZT_CHECK_ERRNO(::rename(tmp.c_str(), final_path.c_str()), tmp, " -> ", final_path);
  sync_to_disk(fs::path(final_path).parent_path().string());
  crash_point();  // renamed
}

void write_text_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    crash_point();  // an empty temporary exists
    out << text;
    out.flush();
    ZT_CHECK(out.good(), tmp, ": write failed");
  }
  publish(tmp, path);
}

// Whether anything is at `path`. A path that cannot even be examined (a symlink loop, no
// permission) counts as there, so that opening it names the problem rather than calling it absent.
bool present(const fs::path& path) {
  std::error_code ec;
  return fs::exists(path, ec) || ec;
}

// The tag `latest` names (trailing newline or spaces allowed); anything but global_step<N> is
// refused, so that an edited `latest` cannot point the reader outside the output directory.
std::string read_latest_tag(const std::string& path) {
  std::string tag = read_regular_file(path, kMaxLatestBytes, "`latest` file");
  while (!tag.empty() && (tag.back() == '\n' || tag.back() == ' ')) tag.pop_back();
  const std::string digits = tag.rfind("global_step", 0) == 0 ? tag.substr(11) : std::string();
  ZT_USAGE_CHECK(!digits.empty() && digits.size() <= 18 && digits.find_first_not_of("0123456789") == std::string::npos,
                 path, ": not a checkpoint tag (global_step<N>)");
  return tag;
}

}  // namespace

struct CheckpointReader::Verifier {
  std::thread thread;
  std::atomic<bool> stop{false};
  std::exception_ptr error;
  ~Verifier() {  // a reader dropped before the verdict: stop reading and go
    stop = true;
    if (thread.joinable()) thread.join();
  }
};

uint32_t file_crc32(const std::string& path, const std::atomic<bool>* stop) {
  RegularFile file(path);
  // The file is read in place (mapped, a window at a time) rather than copied into a buffer by
  // read(): the copy cost as much as the CRC itself. A window is unmapped before the next one, so
  // the mapped pages never count for more than one window in this process's memory. A file
  // truncated while being checked ends in SIGBUS, as for any mapped reader; the size was
  // checked against the manifest just before.
  // While one window is summed, the disk reads the next (a cold file: without it the disk idled
  // during every CRC and a load took 20 % longer than with read()'s readahead).
  constexpr uint64_t kWindow = uint64_t(32) << 20;
  uLong crc = crc32(0L, Z_NULL, 0);
  (void)::posix_fadvise(file.fd(), 0, 0, POSIX_FADV_SEQUENTIAL);
  (void)::posix_fadvise(file.fd(), 0, off_t(kWindow), POSIX_FADV_WILLNEED);
  for (uint64_t at = 0; at < file.size(); at += kWindow) {
    if (stop && stop->load(std::memory_order_relaxed)) break;
    const size_t len = size_t(std::min(kWindow, file.size() - at));
    if (at + kWindow < file.size()) (void)::posix_fadvise(file.fd(), off_t(at + kWindow), off_t(kWindow), POSIX_FADV_WILLNEED);
    void* map = ::mmap(nullptr, len, PROT_READ, MAP_SHARED, file.fd(), off_t(at));
    ZT_USAGE_CHECK(map != MAP_FAILED, path, ": cannot map for reading: ", std::strerror(errno));
    crc = crc32_z(crc, static_cast<const Bytef*>(map), len);
    ::munmap(map, len);
  }
  return uint32_t(crc);
}

namespace {

// One writer of shared files per file system: rank 0, or each node's local rank 0 when every
// node has its own disk.
bool is_node_writer(int rank, const NodePlacement& placement) {
  return rank == 0 || (placement.node_local && placement.local_rank == 0);
}

// A node writer's preparation: creates `dir` and checks that it has room for what the ranks
// sharing its file system will write (their shards, 4 bytes per element per state field: 12 for
// Adam, 8 for Lion and Adagrad; and the 16-bit model).
// Returns the problem, empty when there is none; a directory without room is removed again.
std::string prepare_checkpoint_dir(const std::string& dir, const ZeroEngine& engine, const ModelLayout& layout,
                                   int world, const NodePlacement& placement) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return cat(dir, ": cannot create: ", ec.message());
  const int writers = placement.node_local ? (world + placement.num_nodes - 1) / placement.num_nodes : world;
  const double field_bytes = 4.0 * double(engine.state_fields().size());
  const double needed = 1.02 * ((double(engine.partition().partition_size) * field_bytes +
                                 4.0 * double(engine.onebit_error_count() + engine.zero_one_local_count())) *
                                    writers +
                                double(layout.flat_size() * dtype_size(engine.param_dtype())));
  const fs::space_info space = fs::space(dir, ec);
  if (ec || double(space.available) >= needed) return "";  // a file system that cannot say: try
  fs::remove(dir, ec);
  return cat(dir, ": not enough disk space to save the checkpoint: it needs about ", uint64_t(needed), " bytes and ",
             space.available, " are available (No space left on device); the previous checkpoint is untouched");
}

// Before anything is written, every rank learns whether some rank's preparation failed, so that
// a full disk ends the job with a clear message and the previous checkpoint untouched. The
// lowest failing rank throws with its `problem`.
void agree_on_preparation(const std::string& problem, HostComm& comm) {
  const int rank = comm.rank(), world = comm.size();
  const double first_failed = -comm.all_reduce_max(-(problem.empty() ? double(world) : double(rank)));
  if (first_failed < world) {
    if (int(first_failed) == rank) throw Error(problem);
    // The failing rank ends the job (MPI_Abort from main) and prints the one line; wait for it.
    comm.barrier()->wait();
  }
  comm.barrier()->wait();
}

// This rank's partition of the fp32 state, with the attributes a reader checks it by. Every
// stage writes by the same partition map, so a reader never needs to know how the writer's
// optimizer was laid out.
void write_shard(const std::string& path, ZeroEngine& engine, const ModelLayout& layout,
                 const TrainingPosition& position, int rank, int world) {
  const auto [lo, hi] = engine.partition().held(rank);
  const EngineState st = engine.state();
  {
    H5File f = H5File::create(path + ".tmp");
    for (StateField field : engine.state_fields()) {
      // In pieces, so an offloaded state (host memory or NVMe) is never copied whole.
      f.write(field_name(field), hi - lo, [&](size_t offset, size_t n, float* out) {
        engine.read_field(field, lo + offset, n, out);
      });
    }
    // Adafactor's factors are replicated on every rank and the same at any world size: every
    // shard holds them whole, so any rank reads them from a shard of its own node.
    if (const auto [rows, cols] = engine.factor_extent(); rows + cols > 0) {
      std::vector<float> r(rows), c(cols);
      engine.read_factors(r.data(), c.data());
      f.write(kFactorRows, r.data(), rows);
      f.write(kFactorCols, c.data(), cols);
    }
    // OneBitLamb's scalars are everyone's and fit any world size: every shard holds them, as
    // Adafactor's factors.
    if (const std::vector<double> s = engine.onebit_lamb_scalars(); !s.empty()) {
      f.write(kOneBitLambScalars, s.data(), s.size());
    }
    // OnebitAdam's errors are this rank's own: its shard holds them.
    if (const size_t n = engine.onebit_error_count(); n > 0) {
      std::vector<float> errors(n);
      engine.read_onebit_errors(errors.data());
      f.write(kOneBitErrors, errors.data(), n);
    }
    // ZeroOneAdam between meetings: each rank's weights moved by its own gradients.
    if (const size_t n = engine.zero_one_local_count(); n > 0) {
      std::vector<float> local(n);
      f.set_attribute(kZeroOneLrs, engine.read_zero_one_local(local.data()));
      f.write(kZeroOneLocal, local.data(), n);
    }
    f.set_attribute("format_version", int64_t(kFormatVersion));
    f.set_attribute("rank", int64_t(rank));
    f.set_attribute("world_size", int64_t(world));
    f.set_attribute("stage", int64_t(engine.stage()));
    f.set_attribute("param_dtype", std::string(dtype_name(engine.param_dtype())));
    f.set_attribute("partition_begin", int64_t(lo));
    f.set_attribute("partition_end", int64_t(hi));
    f.set_attribute("flat_size", int64_t(layout.flat_size()));
    f.set_attribute("step", position.step);
    f.set_attribute("data_position", int64_t(position.data_position));
    f.set_attribute("adam_step", st.adam_step);
    f.set_attribute("scheduler_last_batch_iteration", st.scheduler_iteration);
    f.set_attribute("loss_scale", st.scaler.scale);
    crash_point();  // the shard is half written
    f.close();
  }
  publish(path + ".tmp", path);
}

// The parameters in param_dtype() (T: float, or the raw bits of a 16-bit type) under their HF
// names, into `out` where there is one (rank 0). One tensor at a time in host memory, through
// gather_params on every rank: a collective at stage 3, and the engine's own copy out of
// wherever the parameters live at the other stages (a device buffer the host must not read).
template <typename T>
void write_params(H5File* out, ZeroEngine& engine, const ModelLayout& layout) {
  ZT_CHECK(sizeof(T) == dtype_size(engine.param_dtype()), "write_params: element type of ", sizeof(T),
           " bytes for ", dtype_name(engine.param_dtype()));
  std::vector<T> tensor;
  for (const auto& p : layout.params()) {
    tensor.resize(p.numel);
    engine.gather_params(p.offset, p.offset + p.numel, tensor.data());
    if (out) out->write(p.name, tensor.data(), p.numel);
  }
}

// model_states.h5, written by rank 0: the 16-bit model under HF names at stages 0-2, and at
// stage 3 with stage3_gather_16bit_weights_on_model_save (without it, only the attributes: the
// weights are in the shards).
void write_model_states(const std::string& path, ZeroEngine& engine, const ModelLayout& layout, const DsConfig& ds,
                        int rank) {
  std::optional<H5File> file;
  if (rank == 0) {
    file.emplace(H5File::create(path + ".tmp"));
    file->set_attribute("format_version", int64_t(kFormatVersion));
    file->set_attribute("param_dtype", std::string(dtype_name(engine.param_dtype())));
    file->set_attribute("model_config", boost::json::serialize(model_json(layout.config())));
  }
  if (engine.stage() < 3 || ds.zero.stage3_gather_16bit_weights_on_model_save) {
    H5File* out = file ? &*file : nullptr;
    if (engine.param_dtype() == DType::kF32) {
      write_params<float>(out, engine, layout);
    } else {
      write_params<uint16_t>(out, engine, layout);
    }
  }
  if (rank == 0) {
    file->close();
    file.reset();
    publish(path + ".tmp", path);
  }
}

// One published file as the manifest lists it.
struct WrittenFile {
  uint64_t bytes = 0;
  uint64_t crc32 = 0;
  int node = 0;
};

struct WrittenFiles {
  std::vector<WrittenFile> shards;  // by rank
  WrittenFile model;                // model_states.h5, on rank 0's node
  uint64_t total_bytes() const {
    uint64_t sum = model.bytes;
    for (const WrittenFile& f : shards) sum += f.bytes;
    return sum;
  }
};

// Once every rank's files are durable: every rank learns every file's size, checksum and node,
// since every manifest writer lists them all (model_states.h5 lives on rank 0's node).
// Collective.
WrittenFiles collect_written_files(const std::string& shard, const std::string& model_path,
                                   const NodePlacement& placement, HostComm& comm) {
  const int rank = comm.rank(), world = comm.size();
  std::vector<double> table(size_t(3 * world), 0.0);
  table[size_t(3 * rank)] = double(fs::file_size(shard));
  table[size_t(3 * rank + 1)] = double(file_crc32(shard));
  table[size_t(3 * rank + 2)] = double(placement.node);
  comm.all_reduce_doubles(table, false);
  crash_point();  // every rank durable, nothing published
  std::vector<double> model{0.0, 0.0};
  if (rank == 0) model = {double(fs::file_size(model_path)), double(file_crc32(model_path))};
  comm.all_reduce_doubles(model, false);
  WrittenFiles files;
  for (int r = 0; r < world; ++r) {
    files.shards.push_back(
        {uint64_t(table[size_t(3 * r)]), uint64_t(table[size_t(3 * r + 1)]), int(table[size_t(3 * r + 2)])});
  }
  files.model = {uint64_t(model[0]), uint64_t(model[1]), 0};
  return files;
}

boost::json::array manifest_files(const WrittenFiles& files) {
  boost::json::array list;
  auto entry = [](const std::string& name, const WrittenFile& f) {
    return boost::json::object{{"name", name}, {"bytes", f.bytes}, {"crc32", f.crc32}, {"node", f.node}};
  };
  for (size_t r = 0; r < files.shards.size(); ++r) list.push_back(entry(shard_name(int(r)), files.shards[r]));
  list.push_back(entry("model_states.h5", files.model));
  return list;
}

// manifest.json's fields (docs/formats.md), unsigned.
boost::json::object build_manifest(const ZeroEngine& engine, const ModelLayout& layout, const DsConfig& ds,
                                   const TrainingPosition& position, const NodePlacement& placement,
                                   const WrittenFiles& files) {
  const int world = int(files.shards.size());
  const EngineState st = engine.state();
  boost::json::array params, partitions;
  for (const auto& p : layout.params()) {
    boost::json::array shape(p.shape.begin(), p.shape.end());
    params.push_back({{"name", p.name}, {"shape", shape}, {"offset", p.offset}, {"numel", p.numel}});
  }
  for (int r = 0; r < world; ++r) {
    partitions.push_back(boost::json::array{engine.partition().held(r).first, engine.partition().held(r).second});
  }
  return boost::json::object{
      {"format", "zerotrain-checkpoint"},
      {"format_version", kFormatVersion},
      {"step", position.step},
      {"world_size", world},
      {"stage", engine.stage()},
      {"param_dtype", dtype_name(engine.param_dtype())},
      {"flat_size", layout.flat_size()},
      {"model_config", model_json(layout.config())},
      {"ds_config_source", ds.source},
      {"optimizer", engine.optimizer_type()},
      {"state",
       {{"data_position", position.data_position},
        {"seed", position.seed},
        {"adam_step", st.adam_step},
        {"scheduler_last_batch_iteration", st.scheduler_iteration},
        {"loss_scale", st.scaler.scale},
        {"loss_scale_cur_iter", st.scaler.cur_iter},
        {"loss_scale_last_overflow_iter", st.scaler.last_overflow_iter},
        {"loss_scale_cur_hysteresis", st.scaler.cur_hysteresis}}},
      {"params", params},
      {"partitions", partitions},
      {"node_local", placement.node_local},
      {"num_nodes", placement.num_nodes},
      {"files", manifest_files(files)},
      {"build", build_info_json()}};
}

}  // namespace

SavedCheckpoint save_checkpoint(const std::string& output_dir, ZeroEngine& engine, const ModelLayout& layout,
                                const DsConfig& ds, HostComm& comm, const TrainingPosition& position,
                                const NodePlacement& placement, int64_t keep_last) {
  const int rank = comm.rank();
  const std::string tag = cat("global_step", position.step);
  const std::string dir = (fs::path(output_dir) / tag).string();
  const bool node_writer = is_node_writer(rank, placement);
  agree_on_preparation(node_writer ? prepare_checkpoint_dir(dir, engine, layout, comm.size(), placement) : "", comm);

  // Each rank's shard, rank 0's model, each published (fsync'ed and renamed) on its own.
  const std::string shard = (fs::path(dir) / shard_name(rank)).string();
  const std::string model_path = (fs::path(dir) / "model_states.h5").string();
  write_shard(shard, engine, layout, position, rank, comm.size());
  write_model_states(model_path, engine, layout, ds, rank);

  // Every rank's files are durable: then the manifest, then `latest`, in that order. With
  // node-local storage each node's writer publishes the manifest on its own disk (the same text
  // everywhere: it describes every node's part). Signed: manifest_crc32 last.
  const WrittenFiles files = collect_written_files(shard, model_path, placement, comm);
  if (node_writer) {
    write_text_atomically((fs::path(dir) / "manifest.json").string(),
                          sign_manifest(build_manifest(engine, layout, ds, position, placement, files)));
  }
  // Every node's manifest is durable before any node's `latest` moves.
  comm.barrier()->wait();
  if (node_writer) write_text_atomically((fs::path(output_dir) / "latest").string(), tag);
  comm.barrier()->wait();
  SavedCheckpoint saved{dir, files.total_bytes(), {}};
  if (node_writer && keep_last > 0) saved.removed = rotate_checkpoints(output_dir, position.step, keep_last);
  return saved;
}

std::vector<std::string> rotate_checkpoints(const std::string& output_dir, int64_t keep_step, int64_t limit) {
  std::vector<std::pair<int64_t, fs::path>> complete;  // other than keep_step, newest first
  std::vector<fs::path> doomed;
  for (const auto& entry : fs::directory_iterator(output_dir)) {
    const std::string name = entry.path().filename().string();
    char* end = nullptr;
    if (!entry.is_directory() || name.rfind("global_step", 0) != 0) continue;
    const long long step = std::strtoll(name.c_str() + 11, &end, 10);
    if (end == name.c_str() + 11 || *end != '\0' || step == keep_step) continue;
    if (fs::exists(entry.path() / "manifest.json")) {
      complete.emplace_back(step, entry.path());
    } else if (step < keep_step) {
      doomed.push_back(entry.path());  // an interrupted save: no reader would take it
    }
  }
  std::sort(complete.begin(), complete.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = size_t(std::max<int64_t>(limit - 1, 0)); i < complete.size(); ++i) doomed.push_back(complete[i].second);
  std::vector<std::string> removed;
  for (const fs::path& dir : doomed) {
    std::error_code ec;
    fs::remove(dir / "manifest.json", ec);
    if (!ec) fs::remove_all(dir, ec);
    if (ec) throw Error(cat(dir.string(), ": cannot remove (--save_total_limit): ", ec.message()));
    removed.push_back(dir.string());
  }
  return removed;
}

std::string agree_on_latest(const std::string& output_dir, HostComm& comm) {
  // Step number of this node's `latest`, -1 when it has none, -2 when it cannot be read; everyone
  // takes the minimum. A refusal waits for the collective, so that no rank is left inside it.
  double step = -1;
  const fs::path latest = fs::path(output_dir) / "latest";
  std::string problem;
  try {
    if (present(latest)) step = std::atof(read_latest_tag(latest.string()).c_str() + 11);
  } catch (const UsageError& e) {
    problem = e.what();
    step = -2;
  }
  const double oldest = -comm.all_reduce_max(-step);
  if (!problem.empty()) throw UsageError(problem);
  ZT_USAGE_CHECK(oldest >= 0, latest.string(),
                 oldest == -1 ? ": missing on at least one node; nothing to resume from"
                              : ": unreadable on another node (its rank names the problem)");
  return (fs::path(output_dir) / cat("global_step", int64_t(oldest))).string();
}

CheckpointReader::CheckpointReader(const std::string& where, const std::string& output_dir,
                                   const ModelConfig* expect, bool node_local, int verify_index,
                                   int verify_count, Verify verify_mode,
                                   std::optional<OptimizerConfig> expect_optimizer) {
  // Resolve: "auto" is OUTPUT/latest; a directory with `latest` follows it.
  std::string dir = where == "auto" ? output_dir : where;
  if (!present(fs::path(dir) / "manifest.json") && present(fs::path(dir) / "latest")) {
    dir = (fs::path(dir) / read_latest_tag((fs::path(dir) / "latest").string())).string();
  }
  dir_ = dir;
  const std::string manifest_path = (fs::path(dir) / "manifest.json").string();
  ZT_USAGE_CHECK(present(manifest_path), manifest_path,
                 ": no checkpoint here (no manifest.json: never written, or the save did not complete)");
  // Everything in the manifest is checked (checkpoint/manifest.h) before any file it names is.
  const Manifest m = parse_manifest(read_regular_file(manifest_path, kMaxJsonBytes, "manifest"), manifest_path);
  if (!m.checksummed && verify_index == 0) {
    log_warn(manifest_path, ": no manifest_crc32 (written by an older zerotrain), so edits to it cannot be detected; "
             "loading it as it is (the next save writes one)");
  }
  model_ = m.model;
  world_size_ = m.world_size;
  stage_ = m.stage;
  flat_size_ = m.flat_size;
  partitions_ = m.partitions;
  position_ = m.position;
  engine_state_.adam_step = m.adam_step;
  engine_state_.scheduler_iteration = m.scheduler_iteration;
  engine_state_.scaler = m.scaler;
  optimizer_ = m.optimizer;
  if (expect) {
    for (const auto& [key, value] : model_json(*expect)) {
      // A key the checkpoint lacks: another architecture (a GPT-2 checkpoint has no model_type).
      const boost::json::value* saved = m.model_json.if_contains(key);
      ZT_USAGE_CHECK(saved && *saved == value, manifest_path, ": model config differs: ", key, " is ",
                     saved ? boost::json::serialize(*saved) : std::string("absent"), " in the checkpoint, ",
                     boost::json::serialize(value), " now");
    }
  }
  // Before any file is read: another optimizer's moments would be read as this one's.
  if (expect_optimizer) require_optimizer(expect_optimizer->type);
  // The fields checked in every shard: those the resume's optimizer reads, else the manifest's.
  OptimizerConfig saved;
  saved.type = m.optimizer;
  state_fields_ = state_fields(expect_optimizer.value_or(saved));
  // Every file: present, a regular file, the size and checksum the writer recorded. With
  // node-local storage a file may live on another node; what this rank needs is checked by
  // require_local().
  std::vector<std::pair<std::string, uint32_t>> to_verify;
  for (size_t i = 0; i < m.files.size(); ++i) {
    const ManifestFile& f = m.files[i];
    const std::string path = (fs::path(dir) / f.name).string();
    if (node_local && !present(path)) continue;
    ZT_USAGE_CHECK(present(path), path, ": missing (listed in ", manifest_path, ")");
    const uint64_t bytes = RegularFile(path).size();
    ZT_USAGE_CHECK(bytes == f.bytes, path, ": ", bytes, " bytes, the manifest says ", f.bytes, " (truncated or replaced)");
    if (verify_mode != Verify::kChunksRead && int(i % size_t(verify_count)) == verify_index) {
      to_verify.emplace_back(path, f.crc32);
    }
  }
  verifier_ = std::make_unique<Verifier>();
  const bool in_background = verify_mode == Verify::kWholeFilesInBackground;
  crc_covers_all_ = in_background && verify_count == 1 && !node_local;
  exporting_ = verify_mode != Verify::kWholeFiles;
  auto verify = [v = verifier_.get(), to_verify] {
    for (const auto& [path, crc] : to_verify) {
      const uint32_t got = file_crc32(path, &v->stop);
      if (v->stop) return;
      ZT_USAGE_CHECK(got == crc, path, ": checksum mismatch with the manifest (corrupt)");
    }
  };
  if (!in_background) {
    verify();
  } else {
    verifier_->thread = std::thread([v = verifier_.get(), verify] {
      try {
        verify();
      } catch (...) {
        v->error = std::current_exception();
      }
    });
  }
  try {
    check_shards(manifest_path, node_local);
  } catch (...) {
    wait_verified();  // a corrupt file is the cause to report, not what HDF5 made of it
    throw;
  }
}

CheckpointReader::~CheckpointReader() = default;

CheckpointReader::CheckpointReader(CheckpointReader&&) noexcept = default;
CheckpointReader& CheckpointReader::operator=(CheckpointReader&&) noexcept = default;

void CheckpointReader::wait_verified() {
  if (!verifier_) return;
  if (verifier_->thread.joinable()) verifier_->thread.join();
  if (verifier_->error) std::rethrow_exception(verifier_->error);
}

void CheckpointReader::check_shards(const std::string& manifest_path, bool node_local) {
  // The shards' own attributes must agree with the manifest.
  for (int r = 0; r < world_size_; ++r) {
    local_.push_back(present(fs::path(dir_) / shard_name(r)));
    if (!local_.back()) {
      ZT_USAGE_CHECK(node_local, (fs::path(dir_) / shard_name(r)).string(), ": missing (listed in ", manifest_path, ")");
      continue;
    }
    const H5File& f = shard(r);
    const auto [begin, end] = partitions_[size_t(r)];
    ZT_USAGE_CHECK(f.int_attribute("rank") == r && f.int_attribute("world_size") == world_size_ &&
                       f.int_attribute("partition_begin") == int64_t(begin) &&
                       f.int_attribute("partition_end") == int64_t(end),
                   f.path(), ": rank, world size or partition bounds disagree with the manifest");
    if (optimizer_ == OptimizerConfig::Type::kAdafactor) {
      ZT_USAGE_CHECK(f.has(kFactorRows) && f.has(kFactorCols), f.path(), ": Adafactor's ", kFactorRows, " or ",
                     kFactorCols, " is missing");
    }
    // Without them a compressed step's coefficients would be 0 and nothing would train.
    if (optimizer_ == OptimizerConfig::Type::kOneBitLamb) {
      ZT_USAGE_CHECK(f.has(kOneBitLambScalars), f.path(), ": OneBitLamb's ", kOneBitLambScalars, " is missing");
    }
    for (StateField field : state_fields_) {
      ZT_USAGE_CHECK(f.has(field_name(field)), f.path(), ": holds no ", field_name(field), ", which the ",
                     optimizer_name(optimizer_), " resumed keeps (Adafactor keeps exp_avg only with beta1); "
                     "resume with the checkpoint's settings, or start from its weights with --model_name_or_path");
      ZT_USAGE_CHECK(f.length(field_name(field)) == end - begin, f.path(), ": ",
                     field_name(field), " does not hold the ", end - begin, " elements of the manifest's partitions[",
                     r, "]");
    }
  }
}

const H5File& CheckpointReader::shard(int rank) {
  auto it = open_.find(rank);
  if (it == open_.end()) {
    it = open_.emplace(rank, H5File::open((fs::path(dir_) / shard_name(rank)).string())).first;
    // Every byte of this file goes through this process's own CRC-32 pass, and the caller waits
    // for it before using what it read (the background mode): HDF5's Fletcher32 of each chunk
    // would check the same bytes a second time.
    if (crc_covers_all_) it->second.skip_chunk_checksums();
    if (exporting_) it->second.cache_chunks();
  }
  return it->second;
}

void CheckpointReader::require_local(size_t lo, size_t hi) const {
  for (int r = 0; r < world_size_; ++r) {
    const auto [begin, end] = partitions_[size_t(r)];
    if (std::max(lo, begin) < std::min(hi, end) && !local_[size_t(r)]) {
      char host[256] = "?";
      gethostname(host, sizeof(host) - 1);
      throw UsageError(cat((fs::path(dir_) / shard_name(r)).string(), ": not on this node (", host,
                           "): with node-local storage a rank can load only shards its own node wrote; resume with "
                           "the same node layout, or copy the shards to a shared file system"));
    }
  }
}

void CheckpointReader::require_optimizer(OptimizerConfig::Type type) const {
  using T = OptimizerConfig::Type;
  const auto adam = [](T t) { return t == T::kAdam || t == T::kAdamW; };
  if (type == optimizer_ || (adam(type) && adam(optimizer_))) return;
  throw UsageError(cat((fs::path(dir_) / "manifest.json").string(), ": optimizer: the checkpoint holds ",
                       optimizer_name(optimizer_), "'s state and the config asks for ", optimizer_name(type),
                       "; resume with ", optimizer_name(optimizer_), ", or export the model with zero_to_fp32 and start ",
                       optimizer_name(type), " from it with --model_name_or_path"));
}

void CheckpointReader::read_factors(float* rows, size_t row_count, float* cols, size_t col_count) {
  for (int r = 0; r < world_size_; ++r) {
    if (!local_[size_t(r)]) continue;
    const H5File& f = shard(r);
    ZT_USAGE_CHECK(f.length(kFactorRows) == row_count && f.length(kFactorCols) == col_count, f.path(), ": ",
                   kFactorRows, " and ", kFactorCols, " hold ", f.length(kFactorRows), " and ", f.length(kFactorCols),
                   " elements; the model's matrices have ", row_count, " rows and ", col_count, " columns");
    f.read(kFactorRows, 0, row_count, rows);
    f.read(kFactorCols, 0, col_count, cols);
    return;
  }
  throw UsageError(cat(dir_, ": no shard on this node holds Adafactor's factors"));
}

bool CheckpointReader::read_onebit_lamb(double* out, size_t count) {
  for (int r = 0; r < world_size_; ++r) {
    if (!local_[size_t(r)]) continue;
    const H5File& f = shard(r);  // check_shards saw the dataset in every shard
    ZT_USAGE_CHECK(f.length(kOneBitLambScalars) == count, f.path(), ": ", kOneBitLambScalars, " holds ",
                   f.length(kOneBitLambScalars), " values; the model's ", count / 3, " tensors need ", count);
    f.read(kOneBitLambScalars, 0, count, out);
    return true;
  }
  throw UsageError(cat(dir_, ": no shard on this node holds OneBitLamb's ", kOneBitLambScalars));
}

bool CheckpointReader::read_onebit_errors(int rank, int world, float* out, size_t count) {
  if (world != world_size_ || rank >= world_size_ || !local_[size_t(rank)]) return false;
  const H5File& f = shard(rank);
  if (!f.has(kOneBitErrors) || f.length(kOneBitErrors) != count) return false;
  f.read(kOneBitErrors, 0, count, out);
  return true;
}

std::optional<double> CheckpointReader::read_zero_one_local(int rank, int world, float* out, size_t count) {
  if (world != world_size_ || rank >= world_size_ || !local_[size_t(rank)]) return std::nullopt;
  const H5File& f = shard(rank);
  if (!f.has(kZeroOneLocal)) return std::nullopt;
  ZT_USAGE_CHECK(f.length(kZeroOneLocal) == count, f.path(), ": ", kZeroOneLocal, " holds ", f.length(kZeroOneLocal),
                 " elements where this run's rank ", rank, " keeps ", count);
  f.read(kZeroOneLocal, 0, count, out);
  return f.double_attribute(kZeroOneLrs);
}

void CheckpointReader::read(StateField field, size_t lo, size_t hi, float* out) {
  ZT_CHECK(hi <= flat_size_, "read past the model");
  for (int r = 0; r < world_size_ && lo < hi; ++r) {
    const auto [begin, end] = partitions_[size_t(r)];
    const size_t a = std::max(lo, begin), b = std::min(hi, end);
    if (b <= a) continue;
    shard(r).read(field_name(field), a - begin, b - a, out + (a - lo));
  }
}

}  // namespace zt
