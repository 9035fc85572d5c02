#include "checkpoint/export_hf.h"

#include <boost/json.hpp>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>

#include "checkpoint/safetensors.h"
#include "config/model_config.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "model/model_layout.h"

namespace zt {

namespace fs = std::filesystem;

namespace {

// config.json's "torch_dtype" for weights stored as `dtype`.
const char* torch_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return "bfloat16";
    case DType::kF16: return "float16";
    default: return "float32";
  }
}

// Runs an export that writes into `output`, creating it when needed. The reader may still be
// checking its files' CRC-32 in the background: the export waits for that verdict before it
// publishes, and on failure a corrupt checkpoint is what is reported (not what reading it ran
// into). A directory the export created is removed again when it failed (it is empty then: every
// file was still a temporary, and those are gone), so that a failure leaves nothing behind.
template <class Write>
ExportedModel guard_export(CheckpointReader& reader, const std::string& output, Write&& write) {
  std::error_code ec;
  const bool existed = fs::exists(output, ec) || ec;
  try {
    return write();
  } catch (...) {
    if (!existed) fs::remove(output, ec);  // only an empty directory goes
    reader.wait_verified();
    throw;
  }
}

ExportedModel write_safetensors(CheckpointReader& reader, const std::string& output, DType dtype,
                                uint64_t shard_limit, bool overwrite, bool durable) {
  const std::unique_ptr<ModelLayout> layout_ptr = make_model_layout(reader.model_config());
  const ModelLayout& layout = *layout_ptr;
  for (const char* name : {"model.safetensors", "model.safetensors.index.json", "config.json"}) {
    ZT_USAGE_CHECK(overwrite || !fs::exists(fs::path(output) / name), (fs::path(output) / name).string(),
                   ": already exists; pass --overwrite to replace it");
  }
  std::error_code ec;
  fs::create_directories(output, ec);
  ZT_USAGE_CHECK(!ec, output, ": cannot create: ", ec.message());

  // Group tensors into shards of at most shard_limit bytes (a tensor larger than the limit gets
  // a shard of its own, as HF does).
  std::vector<std::vector<const ParamInfo*>> shards(1);
  uint64_t in_shard = 0, total = 0;
  for (const auto& p : layout.params()) {
    const uint64_t bytes = p.numel * dtype_size(dtype);
    if (in_shard > 0 && in_shard + bytes > shard_limit) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(&p);
    in_shard += bytes;
    total += bytes;
  }
  const size_t n = shards.size();
  auto shard_file = [&](size_t i) {
    if (n == 1) return std::string("model.safetensors");
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", i + 1, n);
    return std::string(name);
  };

  // Every file is written and closed under a temporary name first, and only then are they all
  // renamed into place: a failure (a full disk) leaves the final names as they were.
  std::vector<float> fp32;
  std::vector<unsigned char> converted;
  boost::json::object weight_map;
  std::vector<std::unique_ptr<SafetensorsWriter>> writers;
  for (size_t i = 0; i < n; ++i) {
    std::vector<TensorSpec> specs;
    for (const auto* p : shards[i]) specs.push_back({p->name, dtype, p->shape});
    auto& writer = *writers.emplace_back(
        std::make_unique<SafetensorsWriter>((fs::path(output) / shard_file(i)).string(), specs));
    for (const auto* p : shards[i]) {
      fp32.resize(p->numel);  // one tensor at a time: peak memory is the largest tensor
      reader.read(StateField::kMaster, p->offset, p->offset + p->numel, fp32.data());
      if (dtype == DType::kF32) {
        writer.write_next(fp32.data());
      } else {
        converted.resize(p->numel * 2);
        convert(fp32.data(), DType::kF32, converted.data(), dtype, p->numel);
        writer.write_next(converted.data());
      }
      weight_map[p->name] = shard_file(i);
    }
    writer.finish(durable);
  }
  std::optional<AtomicFile> index;
  if (n > 1) {
    index.emplace((fs::path(output) / "model.safetensors.index.json").string());
    index->write(boost::json::serialize(
        boost::json::object{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}));
    index->close(durable);
  }
  AtomicFile config((fs::path(output) / "config.json").string());
  config.write(model_config_to_json(reader.model_config(), torch_dtype_name(dtype)));
  config.close(durable);
  reader.wait_verified();
  for (auto& writer : writers) writer->publish(durable);
  if (index) index->publish(durable);
  config.publish(durable);
  // A model written before (with --overwrite) may have had other shards: remove what is not
  // part of this one, so that no stale index or shard can be loaded with it.
  std::set<std::string> written;
  for (size_t i = 0; i < n; ++i) written.insert(shard_file(i));
  if (n > 1) written.insert("model.safetensors.index.json");
  for (const auto& entry : fs::directory_iterator(output)) {
    const std::string name = entry.path().filename().string();
    const bool model_file = name == "model.safetensors" || name == "model.safetensors.index.json" ||
                            (name.rfind("model-", 0) == 0 && entry.path().extension() == ".safetensors");
    if (model_file && !written.count(name)) fs::remove(entry.path());
  }
  return ExportedModel{layout.params().size(), total, n};
}

ExportedModel write_hdf5(CheckpointReader& reader, const std::string& output, DType dtype, bool overwrite,
                         bool durable) {
  const std::unique_ptr<ModelLayout> layout_ptr = make_model_layout(reader.model_config());
  const ModelLayout& layout = *layout_ptr;
  for (const char* name : {"model.h5", "config.json"}) {
    ZT_USAGE_CHECK(overwrite || !fs::exists(fs::path(output) / name), (fs::path(output) / name).string(),
                   ": already exists; pass --overwrite to replace it");
  }
  std::error_code ec;
  fs::create_directories(output, ec);
  ZT_USAGE_CHECK(!ec, output, ": cannot create: ", ec.message());
  const std::string path = (fs::path(output) / "model.h5").string();
  uint64_t total = 0;
  // As above: written under temporary names, then renamed; a failure removes the temporaries.
  AtomicFile config((fs::path(output) / "config.json").string());
  config.write(model_config_to_json(reader.model_config(), torch_dtype_name(dtype)));
  config.close(durable);
  try {
    H5File f = H5File::create(path + ".tmp");
    f.set_attribute("dtype", std::string(dtype_name(dtype)));
    std::vector<float> fp32;
    std::vector<uint16_t> half;
    for (const auto& p : layout.params()) {
      fp32.resize(p.numel);
      reader.read(StateField::kMaster, p.offset, p.offset + p.numel, fp32.data());
      if (dtype == DType::kF32) {
        f.write(p.name, fp32.data(), p.numel);
      } else {
        half.resize(p.numel);
        convert(fp32.data(), DType::kF32, half.data(), dtype, p.numel);
        f.write(p.name, half.data(), p.numel);
      }
      boost::json::array shape(p.shape.begin(), p.shape.end());
      f.set_attribute("shape:" + p.name, boost::json::serialize(shape));
      total += p.numel * dtype_size(dtype);
    }
    f.close();
    if (durable) sync_to_disk(path + ".tmp");
    reader.wait_verified();
    ZT_CHECK_ERRNO(::rename((path + ".tmp").c_str(), path.c_str()), path, ".tmp -> ", path);
    if (durable) sync_to_disk(output);
  } catch (...) {
    std::error_code ignored;
    fs::remove(path + ".tmp", ignored);
    throw;
  }
  config.publish(durable);
  return ExportedModel{layout.params().size(), total, 1};
}

}  // namespace

ExportedModel export_hf_model(CheckpointReader& reader, const std::string& output, DType dtype, uint64_t shard_limit,
                              bool overwrite, bool durable) {
  return guard_export(reader, output,
                      [&] { return write_safetensors(reader, output, dtype, shard_limit, overwrite, durable); });
}

ExportedModel export_hf_model_hdf5(CheckpointReader& reader, const std::string& output, DType dtype, bool overwrite,
                                   bool durable) {
  return guard_export(reader, output, [&] { return write_hdf5(reader, output, dtype, overwrite, durable); });
}

}  // namespace zt
