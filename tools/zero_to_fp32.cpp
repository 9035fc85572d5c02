// zero_to_fp32 CHECKPOINT_DIR OUTPUT_DIR [-t TAG] [--max_shard_size 5GB] [--dtype fp32|bf16|fp16]
//              [--hdf5] [--overwrite] [--fsync]
//
// Consolidates the ZeRO shards of a checkpoint (any stage, any world size) into an HF GPT-2
// model: model.safetensors (or model-0000k-of-0000n.safetensors + model.safetensors.index.json
// past --max_shard_size) and config.json. Streams tensor by tensor from HDF5 hyperslabs, so the
// memory it needs is the largest tensor plus a fixed buffer, never the model. What it reads is
// checked before it is used: the manifest (its own CRC-32, every file's size) and each chunk of the
// master weights (HDF5's Fletcher32), and it reads nothing else: not the optimizer moments, two
// thirds of each shard, which an export does not need (a cold export is bound by the disk).
// --verify_whole_files also checks every file's CRC-32 from the manifest, moments included, on a
// thread of its own while the tensors go to temporary files, which are renamed into place only
// once every file has passed. Either way a corrupt checkpoint is one line naming the file and
// nothing is published.
#include <boost/json.hpp>
#include <boost/program_options.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "checkpoint/checkpoint.h"
#include "checkpoint/export_hf.h"
#include "config/model_config.h"
#include "config/tool_options.h"
#include "config/sizes.h"
#include "core/error.h"
#include "core/log.h"
#include "core/tool_main.h"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace {

int run(int argc, char** argv) {
  std::string checkpoint, output, tag, max_shard = "5GB", dtype_name_arg = "fp32";
  bool overwrite = false, no_fsync = false, fsync_flag = false, hdf5 = false, whole_files = false;
  po::options_description opts("zero_to_fp32 CHECKPOINT_DIR OUTPUT_DIR");
  opts.add_options()
    ("help,h", "print this help")
    ("tag,t", po::value(&tag), "checkpoint tag inside CHECKPOINT_DIR (default: its `latest`)")
    ("max_shard_size", po::value(&max_shard), "split into files of at most this size (default 5GB)")
    ("dtype", po::value(&dtype_name_arg), "fp32 (default), bf16 or fp16")
    ("overwrite", po::bool_switch(&overwrite), "replace an existing model in OUTPUT_DIR")
    ("no_fsync", po::bool_switch(&no_fsync), "skip the fsync of each file before the renames (faster; a power "
                                             "loss may then leave renamed files empty)")
    ("fsync", po::bool_switch(&fsync_flag), "the default, kept for older scripts")
    ("hdf5", po::bool_switch(&hdf5), "write model.h5 (a dataset per tensor, HF names) instead of safetensors")
    ("verify_whole_files", po::bool_switch(&whole_files), "also check the CRC-32 of every checkpoint file, the "
                                                          "optimizer moments the export does not read included");
  po::options_description hidden;
  hidden.add_options()("checkpoint", po::value(&checkpoint))("output", po::value(&output));
  po::positional_options_description positional;
  positional.add("checkpoint", 1).add("output", 1);
  po::variables_map vm;
  if (!zt::parse_tool_command_line(argc, argv, opts, vm, hidden, positional)) return 0;
  ZT_USAGE_CHECK(!checkpoint.empty() && !output.empty(), "usage: zero_to_fp32 CHECKPOINT_DIR OUTPUT_DIR [options]");
  const zt::DType dtype = zt::parse_dtype(dtype_name_arg);
  const uint64_t shard_limit = zt::parse_size(max_shard, zt::SizeKind::kBytesSI, "--max_shard_size");

  // Validate the manifest and the files' sizes now; each chunk read as it is read (and, with
  // --verify_whole_files, every file's CRC-32 while the export runs: nothing is published before
  // that pass has succeeded).
  const std::string where = tag.empty() ? checkpoint : (fs::path(checkpoint) / tag).string();
  using Verify = zt::CheckpointReader::Verify;
  zt::CheckpointReader reader(where, checkpoint, nullptr, false, 0, 1,
                              whole_files ? Verify::kWholeFilesInBackground : Verify::kChunksRead);
  ZT_USAGE_CHECK(!(no_fsync && fsync_flag), "--fsync and --no_fsync contradict each other");
  const bool durable = !no_fsync;
  const zt::ExportedModel out = hdf5 ? zt::export_hf_model_hdf5(reader, output, dtype, overwrite, durable)
                                     : zt::export_hf_model(reader, output, dtype, shard_limit, overwrite, durable);
  zt::log_info("wrote ", out.tensors, " tensors (", out.bytes, " bytes, ", zt::dtype_name(dtype), ") in ", out.files,
               " file(s) to ", output, " from ", reader.dir(), " (", reader.saved_world_size(), " rank(s), stage ",
               reader.saved_stage(), ")");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return zt::run_tool("zero_to_fp32", [&] { return run(argc, argv); });
}
