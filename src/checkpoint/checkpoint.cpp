#include "checkpoint/checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

#include "config/json_reader.h"
#include "core/error.h"
#include "core/timer.h"
#include "zero/partition.h"

namespace zt {

namespace fs = std::filesystem;

namespace {

constexpr int kFormatVersion = 1;

const char* field_name(StateField f) {
  switch (f) {
    case StateField::kMaster: return "fp32_master";
    case StateField::kExpAvg: return "exp_avg";
    case StateField::kExpAvgSq: return "exp_avg_sq";
  }
  return "?";
}

std::string shard_name(int rank) { return cat("zero_rank_", rank, "_optim_states.h5"); }

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
void fsync_path(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  ZT_CHECK_ERRNO(fd, path);
  int rc = ::fsync(fd);
  ::close(fd);
  ZT_CHECK_ERRNO(rc, "fsync ", path);
}

void publish(const std::string& tmp, const std::string& final_path) {
  fsync_path(tmp);
  crash_point();  // written, not yet renamed
  ZT_CHECK_ERRNO(::rename(tmp.c_str(), final_path.c_str()), tmp, " -> ", final_path);
  fsync_path(fs::path(final_path).parent_path().string());
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

boost::json::object model_json(const ModelConfig& m) {
  return {{"n_layer", m.n_layer}, {"n_embd", m.n_embd}, {"n_head", m.n_head}, {"n_positions", m.n_positions},
          {"vocab_size", m.vocab_size}, {"layer_norm_epsilon", m.layer_norm_epsilon}};
}

}  // namespace

uint32_t file_crc32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ZT_USAGE_CHECK(in.good(), path, ": cannot open");
  std::vector<char> buffer(size_t(4) << 20);
  uLong crc = crc32(0L, Z_NULL, 0);
  while (in) {
    in.read(buffer.data(), std::streamsize(buffer.size()));
    const std::streamsize got = in.gcount();
    if (got > 0) crc = crc32(crc, reinterpret_cast<const Bytef*>(buffer.data()), uInt(got));
  }
  return uint32_t(crc);
}

SavedCheckpoint save_checkpoint(const std::string& output_dir, ZeroEngine& engine, const Gpt2Layout& layout,
                                const DsConfig& ds, Communicator& comm, const TrainingPosition& position,
                                const NodePlacement& placement, int64_t keep_last) {
  const int rank = comm.rank(), world = comm.size();
  const std::string tag = cat("global_step", position.step);
  const std::string dir = (fs::path(output_dir) / tag).string();
  // One writer of shared files per file system: rank 0, or each node's local rank 0 when every
  // node has its own disk.
  const bool node_writer = rank == 0 || (placement.node_local && placement.local_rank == 0);
  // Before anything is written: room for what the ranks sharing this file system will write
  // (their shards, 12 bytes per element, and the 16-bit model), so a full disk ends the job
  // with a clear message and the previous checkpoint untouched.
  std::string problem;
  if (node_writer) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) problem = cat(dir, ": cannot create: ", ec.message());
    const int writers = placement.node_local ? (world + placement.num_nodes - 1) / placement.num_nodes : world;
    const double needed = 1.02 * (double(engine.partition().partition_size) * 12.0 * writers +
                                  double(layout.flat_size() * dtype_size(engine.param_dtype())));
    const fs::space_info space = fs::space(dir, ec);
    if (problem.empty() && !ec && double(space.available) < needed) {
      problem = cat(dir, ": not enough disk space to save the checkpoint: it needs about ", uint64_t(needed),
                    " bytes and ", space.available, " are available (No space left on device); ",
                    "the previous checkpoint is untouched");
      fs::remove(dir, ec);
    }
  }
  const double first_failed = -comm.all_reduce_max(-(problem.empty() ? double(world) : double(rank)));
  if (first_failed < world) {
    if (int(first_failed) == rank) throw Error(problem);
    // The failing rank ends the job (MPI_Abort from main) and prints the one line; wait for it.
    comm.barrier()->wait();
  }
  comm.barrier()->wait();

  // This rank's partition of the fp32 state (every stage writes by the same partition map, so a
  // reader never needs to know how the writer's optimizer was laid out).
  const PartitionMap& part = engine.partition();
  const size_t lo = part.begin(rank), hi = std::min(part.end(rank), layout.flat_size());
  const size_t count = hi > lo ? hi - lo : 0;
  const EngineState st = engine.state();
  const std::string shard = (fs::path(dir) / shard_name(rank)).string();
  {
    H5File f = H5File::create(shard + ".tmp");
    for (StateField field : {StateField::kMaster, StateField::kExpAvg, StateField::kExpAvgSq}) {
      // In pieces, so an offloaded state (host memory or NVMe) is never copied whole.
      f.write(field_name(field), count, [&](size_t offset, size_t n, float* out) {
        engine.read_field(field, lo + offset, n, out);
      });
    }
    f.set_attribute("format_version", int64_t(kFormatVersion));
    f.set_attribute("rank", int64_t(rank));
    f.set_attribute("world_size", int64_t(world));
    f.set_attribute("stage", int64_t(engine.stage()));
    f.set_attribute("param_dtype", std::string(dtype_name(engine.param_dtype())));
    f.set_attribute("partition_begin", int64_t(lo));
    f.set_attribute("partition_end", int64_t(lo + count));
    f.set_attribute("flat_size", int64_t(layout.flat_size()));
    f.set_attribute("step", position.step);
    f.set_attribute("data_position", int64_t(position.data_position));
    f.set_attribute("adam_step", st.adam_step);
    f.set_attribute("scheduler_last_batch_iteration", st.scheduler_iteration);
    f.set_attribute("loss_scale", st.scaler.scale);
    crash_point();  // the shard is half written
    f.close();
  }
  publish(shard + ".tmp", shard);

  // Rank 0: the 16-bit model under HF names, when it holds the parameters whole (stages 0-2),
  // or gathered tensor by tensor at stage 3 with stage3_gather_16bit_weights_on_model_save.
  const std::string model_path = (fs::path(dir) / "model_states.h5").string();
  const bool gather = engine.stage() == 3 && ds.zero.stage3_gather_16bit_weights_on_model_save;
  std::optional<H5File> model_h5;
  if (rank == 0) {
    model_h5.emplace(H5File::create(model_path + ".tmp"));
    model_h5->set_attribute("format_version", int64_t(kFormatVersion));
    model_h5->set_attribute("param_dtype", std::string(dtype_name(engine.param_dtype())));
    model_h5->set_attribute("model_config", boost::json::serialize(model_json(layout.config())));
  }
  if (engine.full_params() || gather) {
    std::vector<unsigned char> tensor;
    for (const auto& p : layout.params()) {
      const unsigned char* data = nullptr;
      if (engine.full_params()) {
        data = static_cast<const unsigned char*>(engine.full_params()) + p.offset * dtype_size(engine.param_dtype());
      } else {
        tensor.resize(p.numel * dtype_size(engine.param_dtype()));  // one tensor at a time
        engine.gather_params(p.offset, p.offset + p.numel, tensor.data());
        data = tensor.data();
      }
      if (rank != 0) continue;
      if (engine.param_dtype() == DType::kF32) {
        model_h5->write(p.name, reinterpret_cast<const float*>(data), p.numel);
      } else {
        model_h5->write(p.name, reinterpret_cast<const uint16_t*>(data), p.numel);
      }
    }
  }
  if (rank == 0) {
    model_h5->close();
    model_h5.reset();
    publish(model_path + ".tmp", model_path);
  }

  // Every rank's file is durable: agree, collect sizes, checksums and nodes, then publish the
  // manifest and move `latest`, in that order.
  std::vector<double> files(size_t(3 * world), 0.0);
  files[size_t(3 * rank)] = double(fs::file_size(shard));
  files[size_t(3 * rank + 1)] = double(file_crc32(shard));
  files[size_t(3 * rank + 2)] = double(placement.node);
  comm.all_reduce_doubles(files, false);
  crash_point();  // every rank durable, nothing published
  SavedCheckpoint saved{dir, 0, {}};
  for (int r = 0; r < world; ++r) saved.bytes += uint64_t(files[size_t(3 * r)]);
  // model_states.h5 lives on rank 0's node; every manifest writer needs its size and checksum.
  std::vector<double> model_file{0.0, 0.0};
  if (rank == 0) model_file = {double(fs::file_size(model_path)), double(file_crc32(model_path))};
  comm.all_reduce_doubles(model_file, false);
  saved.bytes += uint64_t(model_file[0]);
  if (node_writer) {
    boost::json::array file_list;
    for (int r = 0; r < world; ++r) {
      file_list.push_back({{"name", shard_name(r)},
                           {"bytes", uint64_t(files[size_t(3 * r)])},
                           {"crc32", uint64_t(files[size_t(3 * r + 1)])},
                           {"node", int(files[size_t(3 * r + 2)])}});
    }
    file_list.push_back({{"name", "model_states.h5"},
                         {"bytes", uint64_t(model_file[0])},
                         {"crc32", uint64_t(model_file[1])},
                         {"node", 0}});
    boost::json::array params, partitions;
    for (const auto& p : layout.params()) {
      boost::json::array shape(p.shape.begin(), p.shape.end());
      params.push_back({{"name", p.name}, {"shape", shape}, {"offset", p.offset}, {"numel", p.numel}});
    }
    for (int r = 0; r < world; ++r) {
      partitions.push_back(boost::json::array{part.begin(r), std::min(part.end(r), layout.flat_size())});
    }
    boost::json::object manifest{
        {"format", "zerotrain-checkpoint"},
        {"format_version", kFormatVersion},
        {"step", position.step},
        {"world_size", world},
        {"stage", engine.stage()},
        {"param_dtype", dtype_name(engine.param_dtype())},
        {"flat_size", layout.flat_size()},
        {"model_config", model_json(layout.config())},
        {"ds_config_source", ds.source},
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
        {"files", file_list}};
    // With node-local storage each node's writer publishes the manifest on its own disk (the
    // same text everywhere: it describes every node's part).
    write_text_atomically((fs::path(dir) / "manifest.json").string(), boost::json::serialize(manifest));
  }
  // Every node's manifest is durable before any node's `latest` moves.
  comm.barrier()->wait();
  if (node_writer) write_text_atomically((fs::path(output_dir) / "latest").string(), tag);
  comm.barrier()->wait();
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

std::string agree_on_latest(const std::string& output_dir, Communicator& comm) {
  // Step number of this node's `latest`, or -1 when it has none; everyone takes the minimum.
  double step = -1;
  const fs::path latest = fs::path(output_dir) / "latest";
  if (fs::exists(latest)) {
    std::string tag = read_text_file(latest.string());
    if (tag.rfind("global_step", 0) == 0) step = std::atof(tag.c_str() + 11);
  }
  const double oldest = -comm.all_reduce_max(-step);
  ZT_USAGE_CHECK(oldest >= 0, latest.string(), ": missing on at least one node; nothing to resume from");
  return (fs::path(output_dir) / cat("global_step", int64_t(oldest))).string();
}

CheckpointReader::CheckpointReader(const std::string& where, const std::string& output_dir,
                                   const ModelConfig* expect, bool node_local, int verify_index,
                                   int verify_count) {
  // Resolve: "auto" is OUTPUT/latest; a directory with `latest` follows it.
  std::string dir = where == "auto" ? output_dir : where;
  if (!fs::exists(fs::path(dir) / "manifest.json") && fs::exists(fs::path(dir) / "latest")) {
    std::string tag = read_text_file((fs::path(dir) / "latest").string());
    while (!tag.empty() && (tag.back() == '\n' || tag.back() == ' ')) tag.pop_back();
    dir = (fs::path(dir) / tag).string();
  }
  dir_ = dir;
  const std::string manifest_path = (fs::path(dir) / "manifest.json").string();
  ZT_USAGE_CHECK(fs::exists(manifest_path), manifest_path,
                 ": no checkpoint here (no manifest.json: never written, or the save did not complete)");
  const boost::json::value json = read_json_file(manifest_path);
  try {
    const auto& m = json.as_object();
    ZT_USAGE_CHECK(m.at("format").as_string() == "zerotrain-checkpoint", manifest_path, ": not a zerotrain checkpoint");
    ZT_USAGE_CHECK(m.at("format_version").to_number<int>() == kFormatVersion, manifest_path,
                   ": unsupported format_version ", m.at("format_version").to_number<int>());
    world_size_ = m.at("world_size").to_number<int>();
    stage_ = m.at("stage").to_number<int>();
    flat_size_ = m.at("flat_size").to_number<size_t>();
    const auto& mc = m.at("model_config").as_object();
    model_ = parse_model_config(boost::json::serialize(mc), manifest_path + " (model_config)");
    if (expect) {
      for (const auto& [key, value] : model_json(*expect)) {
        ZT_USAGE_CHECK(mc.contains(key) && mc.at(key) == value, manifest_path, ": model config differs: ", key, " is ",
                       mc.contains(key) ? boost::json::serialize(mc.at(key)) : std::string("missing"),
                       " in the checkpoint, ", boost::json::serialize(value), " now");
      }
    }
    for (const auto& p : m.at("partitions").as_array()) {
      partitions_.emplace_back(p.as_array().at(0).to_number<size_t>(), p.as_array().at(1).to_number<size_t>());
    }
    ZT_USAGE_CHECK(int(partitions_.size()) == world_size_, manifest_path, ": ", partitions_.size(),
                   " partitions for world size ", world_size_);
    const auto& s = m.at("state").as_object();
    position_.step = m.at("step").to_number<int64_t>();
    position_.data_position = s.at("data_position").to_number<uint64_t>();
    position_.seed = s.at("seed").to_number<uint64_t>();
    engine_state_.adam_step = s.at("adam_step").to_number<int64_t>();
    engine_state_.scheduler_iteration = s.at("scheduler_last_batch_iteration").to_number<int64_t>();
    engine_state_.scaler.scale = s.at("loss_scale").to_number<double>();
    engine_state_.scaler.cur_iter = s.at("loss_scale_cur_iter").to_number<int64_t>();
    engine_state_.scaler.last_overflow_iter = s.at("loss_scale_last_overflow_iter").to_number<int64_t>();
    engine_state_.scaler.cur_hysteresis = s.at("loss_scale_cur_hysteresis").to_number<int>();
    // Every file: present, the size and checksum the writer recorded. With node-local storage a
    // file may live on another node; what this rank needs is checked by require_local().
    const auto& listed = m.at("files").as_array();
    for (size_t i = 0; i < listed.size(); ++i) {
      const auto& f = listed[i];
      const std::string path = (fs::path(dir) / std::string(f.at("name").as_string())).string();
      if (node_local && !fs::exists(path)) continue;
      ZT_USAGE_CHECK(fs::exists(path), path, ": missing (listed in ", manifest_path, ")");
      const uint64_t bytes = f.at("bytes").to_number<uint64_t>();
      ZT_USAGE_CHECK(fs::file_size(path) == bytes, path, ": ", fs::file_size(path), " bytes, the manifest says ", bytes,
                     " (truncated or replaced)");
      if (int(i % size_t(verify_count)) != verify_index) continue;
      ZT_USAGE_CHECK(file_crc32(path) == f.at("crc32").to_number<uint32_t>(), path,
                     ": checksum mismatch with the manifest (corrupt)");
    }
  } catch (const std::exception& e) {
    if (dynamic_cast<const UsageError*>(&e)) throw;
    throw UsageError(cat(manifest_path, ": malformed manifest: ", e.what()));
  }
  ZT_USAGE_CHECK(flat_size_ == Gpt2Layout(model_).flat_size(), manifest_path, ": flat size ", flat_size_,
                 " does not match the model's ", Gpt2Layout(model_).flat_size());
  // The shards' own attributes must agree with the manifest.
  for (int r = 0; r < world_size_; ++r) {
    local_.push_back(fs::exists(fs::path(dir_) / shard_name(r)));
    if (!local_.back()) {
      ZT_USAGE_CHECK(node_local, (fs::path(dir_) / shard_name(r)).string(), ": missing (listed in ", manifest_path, ")");
      continue;
    }
    const H5File& f = shard(r);
    ZT_USAGE_CHECK(f.int_attribute("rank") == r && f.int_attribute("world_size") == world_size_ &&
                       size_t(f.int_attribute("partition_begin")) == partitions_[size_t(r)].first &&
                       size_t(f.int_attribute("partition_end")) == partitions_[size_t(r)].second,
                   f.path(), ": rank, world size or partition bounds disagree with the manifest");
  }
}

const H5File& CheckpointReader::shard(int rank) {
  auto it = open_.find(rank);
  if (it == open_.end()) it = open_.emplace(rank, H5File::open((fs::path(dir_) / shard_name(rank)).string())).first;
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
