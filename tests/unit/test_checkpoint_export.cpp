// zero_to_fp32's consolidation: the safetensors it writes hold exactly the gathered fp32 master
// weights (or their bf16 rounding), under HF names and shapes; read back here by a parser
// written independently of the product's reader.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <boost/json.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "comm/data_comm.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/export_hf.h"
#include "checkpoint/pretrained.h"
#include "checkpoint/safetensors.h"
#include "comm/self_comm.h"
#include "core/error.h"
#include "model/causal_lm.h"
#include "zero/engine.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

// A minimal safetensors parser: 8-byte little-endian header length, JSON header, data.
struct ParsedFile {
  boost::json::object header;
  std::vector<char> data;
};
ParsedFile parse_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  unsigned char le[8];
  in.read(reinterpret_cast<char*>(le), 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | le[i];
  std::string text(n, ' ');
  in.read(text.data(), std::streamsize(n));
  ParsedFile f;
  f.header = boost::json::parse(text).as_object();
  f.data.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return f;
}

// Where dataset `name`'s first chunk lies in the HDF5 file `path` (HDF5's own chunk index).
uint64_t first_chunk_at(const std::string& path, const std::string& name) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t set = H5Dopen2(file, name.c_str(), H5P_DEFAULT);
  const hsize_t origin[1] = {0};
  hsize_t bytes = 0;
  unsigned filter_mask = 0;
  haddr_t address = HADDR_UNDEF;
  const herr_t rc = H5Dget_chunk_info_by_coord(set, origin, &filter_mask, &address, &bytes);
  H5Dclose(set);
  H5Fclose(file);
  EXPECT_TRUE(rc >= 0 && address != HADDR_UNDEF && bytes > 8) << path << ": no chunk info for " << name;
  return uint64_t(address);
}

void flip_byte(const std::string& path, uint64_t at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(std::streamoff(at));
  const char c = char(f.get() ^ 0x55);
  f.seekp(std::streamoff(at));
  f.put(c);
}

class Export : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::temp_directory_path() / ("zt_export_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    model.n_layer = 2;
    model.n_embd = 32;
    model.n_head = 2;
    model.n_positions = 16;
    model.vocab_size = 50;
  }
  void TearDown() override { fs::remove_all(dir); }

  // Trains a few steps at `stage`, saves, and returns the full fp32 master weights.
  std::vector<float> train_and_save(int stage, bool bf16 = false, bool gather16 = false) {
    auto backend = make_cpu_backend();
    const std::unique_ptr<ModelLayout> layout_ptr = make_model_layout(model);
  const ModelLayout& layout = *layout_ptr;
    DsConfig ds;
    ds.train_micro_batch_size_per_gpu = 2;
    ds.train_batch_size = 2;
    ds.optimizer.lr = 1e-2;
    ds.zero.stage = stage;
    ds.bf16 = bf16;
    ds.zero.stage3_gather_16bit_weights_on_model_save = gather16;
    SelfComm comm;
    auto engine_comm = make_data_comm(*backend, comm);
    ZeroEngine engine(layout, *backend, *engine_comm, comm, ds);
    engine.init_params(3);
    const auto m_ptr = make_causal_lm<float>(layout, *backend, backend->ops(), 2, 16, false);
    CausalLM<float>& m = *m_ptr;
    std::vector<int32_t> in(32), tg(32);
    for (int i = 0; i < 32; ++i) {
      in[i] = (i * 7) % 50;
      tg[i] = (i * 7 + 1) % 50;
    }
    for (int step = 0; step < 3; ++step) {
      m.forward(engine, in.data(), tg.data(), 2, 16);
      m.backward(engine, engine.backward_scale());
      engine.step();
    }
    save_checkpoint(dir.string(), engine, layout, ds, comm, TrainingPosition{3, 6, 1});
    return engine.gather_master_weights();
  }

  fs::path dir;
  ModelConfig model;
};

TEST_F(Export, SafetensorsHoldTheMasterWeightsExactly) {
  for (int stage : {0, 3}) {
    const std::vector<float> master = train_and_save(stage);
    CheckpointReader reader(dir.string(), dir.string(), nullptr);
    const fs::path out = dir / ("model" + std::to_string(stage));
    const ExportedModel e = export_hf_model(reader, out.string(), DType::kF32, uint64_t(1) << 40, false);
    EXPECT_EQ(e.files, 1u);
    const ParsedFile f = parse_safetensors((out / "model.safetensors").string());
    const std::unique_ptr<ModelLayout> layout_ptr = make_model_layout(model);
  const ModelLayout& layout = *layout_ptr;
    EXPECT_EQ(f.header.size(), layout.params().size() + 1);  // + __metadata__
    uint64_t expected_end = 0;
    for (const auto& p : layout.params()) {
      ASSERT_TRUE(f.header.contains(p.name)) << p.name;
      const auto& t = f.header.at(p.name).as_object();
      EXPECT_EQ(t.at("dtype").as_string(), "F32");
      std::vector<int64_t> shape;
      for (const auto& d : t.at("shape").as_array()) shape.push_back(d.to_number<int64_t>());
      EXPECT_EQ(shape, p.shape) << p.name;
      const uint64_t begin = t.at("data_offsets").as_array()[0].to_number<uint64_t>();
      const uint64_t end = t.at("data_offsets").as_array()[1].to_number<uint64_t>();
      ASSERT_EQ(end - begin, p.numel * 4) << p.name;
      EXPECT_EQ(0, std::memcmp(f.data.data() + begin, master.data() + p.offset, p.numel * 4)) << p.name;
      expected_end = std::max(expected_end, end);
    }
    EXPECT_EQ(f.data.size(), expected_end);
    // Refuses to overwrite.
    EXPECT_THROW(export_hf_model(reader, out.string(), DType::kF32, uint64_t(1) << 40, false), UsageError);
  }
}

TEST_F(Export, ShardedBf16WithIndex) {
  const std::vector<float> master = train_and_save(2);
  CheckpointReader reader(dir.string(), dir.string(), nullptr);
  const fs::path out = dir / "sharded";
  const ExportedModel e = export_hf_model(reader, out.string(), DType::kBF16, 20000, false);
  EXPECT_GT(e.files, 1u);
  std::ifstream index_in((out / "model.safetensors.index.json").string());
  std::string text((std::istreambuf_iterator<char>(index_in)), std::istreambuf_iterator<char>());
  const auto index = boost::json::parse(text).as_object();
  const auto& weight_map = index.at("weight_map").as_object();
  const std::unique_ptr<ModelLayout> layout_ptr = make_model_layout(model);
  const ModelLayout& layout = *layout_ptr;
  EXPECT_EQ(weight_map.size(), layout.params().size());
  for (const auto& p : layout.params()) {
    const std::string file(weight_map.at(p.name).as_string());
    const ParsedFile f = parse_safetensors((out / file).string());
    const auto& t = f.header.at(p.name).as_object();
    EXPECT_EQ(t.at("dtype").as_string(), "BF16");
    const uint64_t begin = t.at("data_offsets").as_array()[0].to_number<uint64_t>();
    for (size_t i = 0; i < p.numel; ++i) {
      uint16_t bits;
      std::memcpy(&bits, f.data.data() + begin + 2 * i, 2);
      ASSERT_EQ(bits, to_bf16(master[p.offset + i]).bits) << p.name << "[" << i << "]";
    }
  }
  // config.json says what the weights are stored as: transformers loads them in that dtype.
  std::ifstream config_in((out / "config.json").string());
  const std::string config((std::istreambuf_iterator<char>(config_in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(boost::json::parse(config).as_object().at("torch_dtype").as_string(), "bfloat16");
}

// The export read back as a fine-tuning run's starting state (--model_name_or_path): every tensor
// equals the master weights, and the alignment gaps between tensors (24-wide layernorms leave
// 8 elements each) read as zero even into a buffer full of NaN.
TEST_F(Export, PretrainedSourceReadsTheExportWithZeroGaps) {
  model.n_embd = 24;
  const std::vector<float> master = train_and_save(2);
  CheckpointReader reader(dir.string(), dir.string(), nullptr);
  const fs::path out = dir / "pretrained";
  export_hf_model(reader, out.string(), DType::kF32, uint64_t(1) << 40, false);
  const SafetensorsReader weights(out.string());
  const std::unique_ptr<ModelLayout> layout_ptr = make_model_layout(model);
  const ModelLayout& layout = *layout_ptr;
  check_pretrained(weights, layout, out.string());
  const StateSource source = pretrained_source(weights, layout);
  EXPECT_FALSE(source.with_moments);
  EXPECT_FALSE(source.counters.has_value());
  std::vector<float> got(layout.flat_size(), std::nanf(""));
  const size_t split = layout.flat_size() / 3;  // in two ranges, as two ranks would read
  source.read(StateField::kMaster, 0, split, got.data());
  source.read(StateField::kMaster, split, layout.flat_size(), got.data() + split);
  std::vector<bool> in_tensor(layout.flat_size(), false);
  size_t gaps = 0;
  for (const auto& p : layout.params()) {
    for (size_t i = 0; i < p.numel; ++i) {
      in_tensor[p.offset + i] = true;
      ASSERT_EQ(got[p.offset + i], master[p.offset + i]) << p.name << "[" << i << "]";
    }
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (in_tensor[i]) continue;
    ++gaps;
    ASSERT_EQ(got[i], 0.0f) << "gap element " << i;
  }
  EXPECT_GT(gaps, 0u);
  // A tensor missing from the folder is refused by name.
  model.n_layer = 3;
  EXPECT_THROW(check_pretrained(weights, *make_model_layout(model), out.string()), UsageError);
}

// A file that fails to open as safetensors (here: a header that is not JSON) leaves no file
// descriptor behind, however often it is tried.
TEST_F(Export, FailedSafetensorsOpenClosesItsFile) {
  const fs::path bad = dir / "bad.safetensors";
  {
    std::ofstream out(bad.string(), std::ios::binary);
    const uint64_t length = 8;
    out.write(reinterpret_cast<const char*>(&length), 8);
    out << "not json";
  }
  auto open_fds = [] {
    size_t n = 0;
    for ([[maybe_unused]] const auto& entry : fs::directory_iterator("/proc/self/fd")) ++n;
    return n;
  };
  const size_t before = open_fds();
  for (int i = 0; i < 50; ++i) EXPECT_THROW(SafetensorsReader reader(bad.string()), UsageError);
  EXPECT_EQ(open_fds(), before);
}

// --hdf5: model.h5 with a dataset per tensor under its HF name and its shape as an attribute.
TEST_F(Export, Hdf5Output) {
  const std::vector<float> master = train_and_save(1);
  CheckpointReader reader(dir.string(), dir.string(), nullptr);
  const fs::path out = dir / "h5";
  export_hf_model_hdf5(reader, out.string(), DType::kF32, false);
  const H5File f = H5File::open((out / "model.h5").string());
  const std::unique_ptr<ModelLayout> layout_ptr = make_model_layout(model);
  const ModelLayout& layout = *layout_ptr;
  for (const auto& p : layout.params()) {
    std::vector<float> values(p.numel);
    f.read(p.name, 0, p.numel, values.data());
    EXPECT_EQ(0, std::memcmp(values.data(), master.data() + p.offset, p.numel * 4)) << p.name;
  }
  EXPECT_EQ(f.string_attribute("shape:transformer.h.1.mlp.c_fc.weight"), "[32,128]");
  EXPECT_TRUE(fs::exists(out / "config.json"));
  EXPECT_THROW(export_hf_model_hdf5(reader, out.string(), DType::kF32, false), UsageError);
}

// stage3_gather_16bit_weights_on_model_save: model_states.h5 holds every tensor in bf16 under
// its HF name, equal to the rounded master weights; without it a stage 3 checkpoint has none.
TEST_F(Export, Stage3Gathers16BitWeightsOnSave) {
  for (bool gather : {false, true}) {
    const std::vector<float> master = train_and_save(3, true, gather);
    const H5File f = H5File::open((dir / "global_step3" / "model_states.h5").string());
    const std::unique_ptr<ModelLayout> layout_ptr = make_model_layout(model);
  const ModelLayout& layout = *layout_ptr;
    for (const auto& p : layout.params()) {
      ASSERT_EQ(f.has(p.name), gather) << p.name;
      if (!gather) continue;
      std::vector<uint16_t> bits(p.numel);
      f.read(p.name, 0, p.numel, bits.data());
      for (size_t i = 0; i < p.numel; ++i) ASSERT_EQ(bits[i], to_bf16(master[p.offset + i]).bits) << p.name;
    }
    fs::remove_all(dir / "global_step3");
  }
}

}  // namespace
}  // namespace zt

namespace zt {
namespace {

// zero_to_fp32's default check (Verify::kChunksRead): a corrupt chunk of the master weights is a
// checksum mismatch naming the file and the dataset, and nothing is published; a corrupt chunk of
// an optimizer moment, which an export does not need, is never read, so the export is still exact;
// the whole-file CRC-32 (--verify_whole_files) refuses that checkpoint too.
TEST_F(Export, ChecksTheChunksItReadsAndReadsNoMoments) {
  const std::vector<float> master = train_and_save(2);
  const std::string shard = (fs::path(CheckpointReader(dir.string(), dir.string(), nullptr).dir()) / shard_name(0)).string();
  const fs::path clean = dir / "clean", moments = dir / "moments", whole = dir / "whole", bad = dir / "bad";
  using Verify = CheckpointReader::Verify;
  {
    CheckpointReader reader(dir.string(), dir.string(), nullptr, false, 0, 1, Verify::kChunksRead);
    export_hf_model(reader, clean.string(), DType::kF32, uint64_t(1) << 40, false);
  }
  flip_byte(shard, first_chunk_at(shard, "exp_avg_sq") + 8);
  {
    CheckpointReader reader(dir.string(), dir.string(), nullptr, false, 0, 1, Verify::kChunksRead);
    export_hf_model(reader, moments.string(), DType::kF32, uint64_t(1) << 40, false);
    const ParsedFile a = parse_safetensors((clean / "model.safetensors").string());
    const ParsedFile b = parse_safetensors((moments / "model.safetensors").string());
    EXPECT_TRUE(a.data == b.data) << "an unread moment changed the export";
  }
  try {
    CheckpointReader reader(dir.string(), dir.string(), nullptr, false, 0, 1, Verify::kWholeFilesInBackground);
    export_hf_model(reader, whole.string(), DType::kF32, uint64_t(1) << 40, false);
    ADD_FAILURE() << "the whole-file CRC-32 passed a corrupt moment";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(shard + ": checksum mismatch"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(whole));
  flip_byte(shard, first_chunk_at(shard, "fp32_master") + 8);
  try {
    CheckpointReader reader(dir.string(), dir.string(), nullptr, false, 0, 1, Verify::kChunksRead);
    export_hf_model(reader, bad.string(), DType::kF32, uint64_t(1) << 40, false);
    ADD_FAILURE() << "a corrupt master chunk was exported";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(shard + ": checksum mismatch in dataset 'fp32_master'"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(bad));
}

}  // namespace
}  // namespace zt
