// manifest.json is not trusted (issue 13): a saved checkpoint's manifest is edited in each bad
// way and the reader must refuse it with one line naming the manifest and the key. Semantic
// edits are re-signed (sign_manifest) so that the check under test, not the checksum, refuses
// them; the checksum itself is checked against zlib's CRC-32 computed here, independently.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <boost/json.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>

#include "comm/data_comm.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/manifest.h"
#include "comm/self_comm.h"
#include "core/build_info.h"
#include "core/error.h"
#include "model/model_layout.h"
#include "zero/engine.h"
#include "zero/partition.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

class ManifestCheck : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::temp_directory_path() / ("zt_manifest_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    model.n_layer = 1;
    model.n_embd = 32;
    model.n_head = 2;
    model.n_positions = 16;
    model.vocab_size = 50;
    auto backend = make_cpu_backend();
    const std::unique_ptr<ModelLayout> layout_ptr = make_model_layout(model);
  const ModelLayout& layout = *layout_ptr;
    DsConfig ds;
    ds.train_micro_batch_size_per_gpu = 2;
    ds.train_batch_size = 2;
    ds.zero.stage = 1;
    SelfComm comm;
    auto engine_comm = make_data_comm(*backend, comm);
    ZeroEngine engine(layout, *backend, *engine_comm, comm, ds);
    engine.init_params(3);
    save_checkpoint(dir.string(), engine, layout, ds, comm, TrainingPosition{3, 6, 1});
    path = (dir / "global_step3" / "manifest.json").string();
    flat = layout.flat_size();
  }
  void TearDown() override { fs::remove_all(dir); }

  std::string text() const {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  boost::json::object object() const { return boost::json::parse(text()).as_object(); }
  void write(const std::string& content) const {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << content;
  }
  // Edits the manifest, then signs it as the writer would.
  void edit(const std::function<void(boost::json::object&)>& change) const {
    boost::json::object m = object();
    change(m);
    write(sign_manifest(m));
  }
  // The reader's one-line refusal ("" when it accepts).
  std::string load_error() const {
    try {
      CheckpointReader reader(dir.string(), dir.string(), nullptr);
    } catch (const UsageError& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir;
  std::string path;
  ModelConfig model;
  size_t flat = 0;
};

// The refusal names the manifest first, then the key, on one line.
void expect_refusal(const std::string& error, const std::string& file, const std::string& what) {
  EXPECT_EQ(error.rfind(file + ": ", 0), 0u) << error;
  EXPECT_NE(error.find(what), std::string::npos) << "wanted \"" << what << "\" in: " << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
}

TEST_F(ManifestCheck, WriterSignsWithZlibCrcOfTheBytesBeforeTheMember) {
  const std::string t = text();
  const std::string member = ",\"manifest_crc32\":";
  const size_t at = t.rfind(member);
  ASSERT_NE(at, std::string::npos) << t;
  EXPECT_EQ(t.back(), '}');
  const uLong crc = crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(t.data()), uInt(at));
  EXPECT_EQ(t.substr(at + member.size()), std::to_string(crc) + "}");
  EXPECT_EQ(object().at("manifest_crc32").to_number<uint64_t>(), crc);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(load_error(), "");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");  // no warning for a signed manifest
}

TEST_F(ManifestCheck, EditWithoutResigningIsAChecksumMismatch) {
  std::string t = text();
  const size_t at = t.find("\"step\":3");
  ASSERT_NE(at, std::string::npos);
  t.replace(at, 8, "\"step\":4");
  write(t);
  expect_refusal(load_error(), path, "manifest_crc32: checksum mismatch");
}

TEST_F(ManifestCheck, ChecksumMustBeTheLastMember) {
  std::string t = text();
  t.insert(t.size() - 1, ",\"world_size\":0");  // after the checksum: it would not cover it
  write(t);
  expect_refusal(load_error(), path, "manifest_crc32: must be the last member");
}

// Checkpoints saved before manifest_crc32 load, with one warning line naming the manifest.
TEST_F(ManifestCheck, UnsignedManifestLoadsWithOneWarning) {
  boost::json::object m = object();
  m.erase("manifest_crc32");
  write(boost::json::serialize(m));
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(load_error(), "");
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find(path + ": no manifest_crc32"), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
}

struct BadEdit {
  const char* name;
  std::function<void(boost::json::object&, size_t flat)> change;
  std::string what;
};

TEST_F(ManifestCheck, EachSemanticEditIsRefusedByKey) {
  using boost::json::array;
  using boost::json::object;
  const std::vector<BadEdit> cases = {
      {"world_size 0", [](object& m, size_t) { m["world_size"] = 0; }, "world_size: must be >= 1, got 0"},
      {"no files", [](object& m, size_t) { m["files"] = array(); }, "files: 0 listed, expected 2"},
      {"negative step", [](object& m, size_t) { m["step"] = -1; }, "step: must be >= 0, got -1"},
      {"stage 4", [](object& m, size_t) { m["stage"] = 4; }, "stage: must be <= 3, got 4"},
      {"format", [](object& m, size_t) { m["format"] = "other"; }, "format: not \"zerotrain-checkpoint\""},
      {"format_version", [](object& m, size_t) { m["format_version"] = 2; }, "format_version: unsupported"},
      {"param_dtype", [](object& m, size_t) { m["param_dtype"] = "fp64"; }, "param_dtype: \"fp64\""},
      {"flat_size", [](object& m, size_t f) { m["flat_size"] = f + 16; },
       "flat_size: " + std::to_string(flat + 16) + " does not match the model_config's layout"},
      {"missing step", [](object& m, size_t) { m.erase("step"); }, "step: missing"},
      {"unknown key", [](object& m, size_t) { m["stage3"] = true; }, "stage3: unknown key"},
      {"model_config extra key", [](object& m, size_t) { m["model_config"].as_object()["n_inner"] = 128; },
       "model_config.n_inner: unknown key"},
      {"model_config missing key", [](object& m, size_t) { m["model_config"].as_object().erase("n_head"); },
       "model_config.n_head: missing"},
      {"model_config bad value", [](object& m, size_t) { m["model_config"].as_object()["n_head"] = 0; },
       "model_config: n_head: must be >= 1"},
      {"a tensor less", [](object& m, size_t) { m["params"].as_array().pop_back(); }, "params: 15 tensors"},
      {"numel", [](object& m, size_t) { m["params"].as_array()[1].as_object()["numel"] = 1; }, "params[1].numel: 1"},
      {"tensor name", [](object& m, size_t) { m["params"].as_array()[0].as_object()["name"] = "x"; },
       "params[0].name: \"x\""},
      {"partition begin > end", [](object& m, size_t f) { m["partitions"] = array{array{f, 0}}; },
       "partitions[0]: begin " + std::to_string(flat) + " > end 0"},
      {"partition not from 0", [](object& m, size_t f) { m["partitions"] = array{array{16, f}}; },
       "partitions[0]: begins at 16, not at 0"},
      {"partition short", [](object& m, size_t f) { m["partitions"] = array{array{0, f - 16}}; },
       "partitions[0]: the last partition ends at " + std::to_string(flat - 16)},
      {"two partitions", [](object& m, size_t f) { m["partitions"] = array{array{0, 16}, array{16, f}}; },
       "partitions: 2 partitions for world_size 1"},
      {"partition not a pair", [](object& m, size_t) { m["partitions"] = array{array{0}}; },
       "partitions[0]: expected [begin, end]"},
      {"negative bound", [](object& m, size_t f) { m["partitions"] = array{array{-16, f}}; },
       "partitions[0]: expected [begin, end] of integers >= 0"},
      {"shard name", [](object& m, size_t) { m["files"].as_array()[0].as_object()["name"] = "model_states.h5"; },
       "files[0].name: \"model_states.h5\", expected \"zero_rank_0_optim_states.h5\""},
      {"crc32 range", [](object& m, size_t) { m["files"].as_array()[0].as_object()["crc32"] = uint64_t(1) << 32; },
       "files[0].crc32: must be <= 4294967295"},
      {"node", [](object& m, size_t) { m["files"].as_array()[1].as_object()["node"] = 1; },
       "files[1].node: must be <= 0, got 1"},
      {"loss_scale", [](object& m, size_t) { m["state"].as_object()["loss_scale"] = 0.0; },
       "state.loss_scale: missing or not > 0"},
      {"adam_step", [](object& m, size_t) { m["state"].as_object()["adam_step"] = -1; },
       "state.adam_step: must be >= 0, got -1"},
      {"seed type", [](object& m, size_t) { m["state"].as_object()["seed"] = "1"; },
       "state.seed: expected an integer >= 0"},
      {"num_nodes", [](object& m, size_t) { m["num_nodes"] = 2; }, "num_nodes: must be <= 1, got 2"},
      {"build not an object", [](object& m, size_t) { m["build"] = 5; }, "build: expected an object, got 5"},
  };
  const std::string original = text();
  for (const BadEdit& c : cases) {
    SCOPED_TRACE(c.name);
    edit([&](boost::json::object& m) { c.change(m, flat); });
    expect_refusal(load_error(), path, c.what);
    write(original);
  }
  EXPECT_EQ(load_error(), "");
}

// The manifest records the build that wrote it (issue 29), as --version prints it; a manifest
// from before it (no "build") still loads.
TEST_F(ManifestCheck, RecordsTheBuildAndLoadsWithoutIt) {
  const boost::json::object m = object();
  ASSERT_TRUE(m.contains("build")) << text();
  const boost::json::object& build = m.at("build").as_object();
  for (const auto& [key, value] : build_info()) {
    ASSERT_TRUE(build.contains(key)) << key;
    EXPECT_EQ(build.at(key).as_string(), value) << key;
  }
  EXPECT_EQ(build.size(), build_info().size());
  const Manifest parsed = parse_manifest(text(), path);
  EXPECT_EQ(parsed.build, build);
  edit([](boost::json::object& e) { e.erase("build"); });
  EXPECT_EQ(load_error(), "");
  EXPECT_TRUE(parse_manifest(text(), path).build.empty());
}

// World size 2 over a 1-rank save: the second shard is listed (a copy of the first) so that the
// partition checks in the middle of the list are what refuses.
TEST_F(ManifestCheck, PartitionsCoverTheFlatBufferOnceInRankOrder) {
  using boost::json::array;
  const size_t half = flat / 2;
  auto two_ranks = [&](array partitions) {
    edit([&](boost::json::object& m) {
      m["world_size"] = 2;
      auto& files = m["files"].as_array();
      boost::json::object second = files[0].as_object();
      second["name"] = "zero_rank_1_optim_states.h5";
      files.insert(files.begin() + 1, second);
      m["partitions"] = partitions;
    });
  };
  two_ranks(array{array{0, half}, array{half + 16, flat}});
  expect_refusal(load_error(), path,
                 "partitions[1]: begins at " + std::to_string(half + 16) + ", not at " + std::to_string(half) +
                     " where partitions[0] ends");
  two_ranks(array{array{0, flat}, array{flat + 16, flat}});
  expect_refusal(load_error(), path,
                 "partitions[1]: begin " + std::to_string(flat + 16) + " > end " + std::to_string(flat));
  two_ranks(array{array{0, half}, array{half, flat + 16}});
  expect_refusal(load_error(), path, "partitions[1]: ends at " + std::to_string(flat + 16) + ", past flat_size");
}

// The size and CRC-32 the (re-signed) manifest records are checked against the shard itself.
TEST_F(ManifestCheck, FilesAreCheckedAgainstTheirRecordedSizeAndChecksum) {
  const std::string shard = (dir / "global_step3" / shard_name(0)).string();
  const std::string original = text();
  edit([](boost::json::object& m) {
    auto& f = m["files"].as_array()[0].as_object();
    f["bytes"] = f["bytes"].to_number<uint64_t>() + 1;
  });
  expect_refusal(load_error(), shard, "bytes, the manifest says");
  write(original);
  edit([](boost::json::object& m) {
    auto& f = m["files"].as_array()[0].as_object();
    f["crc32"] = (f["crc32"].to_number<uint64_t>() + 1) & 0xffffffffu;
  });
  expect_refusal(load_error(), shard, "checksum mismatch with the manifest");
}

// A padding-only partition (a small model on many ranks) is the empty [flat, flat], never a
// range whose begin is past its end, and the held ranges tile the model in rank order.
TEST(PartitionMap, HeldRangesNeverRunBackwards) {
  for (size_t flat : {size_t(16), size_t(80), size_t(256), size_t(1000), size_t(842496)}) {
    for (int world : {1, 2, 3, 4, 7, 8, 64}) {
      const PartitionMap part(flat, world);
      size_t next = 0;
      for (int r = 0; r < world; ++r) {
        const auto [begin, end] = part.held(r);
        ASSERT_LE(begin, end) << flat << " on " << world << ", rank " << r;
        ASSERT_EQ(begin, next) << flat << " on " << world << ", rank " << r;
        next = end;
      }
      EXPECT_EQ(next, flat) << flat << " on " << world;
    }
  }
  // The case the clamp exists for: rank 6's partition starts past the model's end.
  const PartitionMap part(80, 8);
  ASSERT_GT(part.begin(6), size_t(80));
  EXPECT_EQ(part.held(6), std::make_pair(size_t(80), size_t(80)));
}

// A manifest, `latest` or shard that is a FIFO, or a `latest` that is a symlink loop or names a
// path instead of a tag, is refused at once (a FIFO opened for reading would block forever).
TEST_F(ManifestCheck, SpecialFilesAreRefusedWithoutBlocking) {
  const fs::path latest = dir / "latest";
  const fs::path shard = dir / "global_step3" / shard_name(0);
  auto replace_with_fifo = [](const fs::path& p) {
    fs::remove(p);
    ASSERT_EQ(::mkfifo(p.c_str(), 0644), 0);
  };
  const auto start = std::chrono::steady_clock::now();
  replace_with_fifo(shard);
  expect_refusal(load_error(), shard.string(), "not a regular file (a FIFO)");
  replace_with_fifo(path);
  expect_refusal(load_error(), path, "not a regular file (a FIFO)");
  replace_with_fifo(latest);
  fs::remove(path);  // so that the reader follows `latest`
  expect_refusal(load_error(), latest.string(), "not a regular file (a FIFO)");
  fs::remove(latest);
  fs::create_symlink("loop_b", latest);
  fs::create_symlink("latest", dir / "loop_b");
  expect_refusal(load_error(), latest.string(), "cannot open file: Too many levels of symbolic links");
  fs::remove(latest);
  std::ofstream(latest.string()) << "../../etc";
  expect_refusal(load_error(), latest.string(), "not a checkpoint tag (global_step<N>)");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

}  // namespace
}  // namespace zt
