// zero_estimate: how much memory a run needs, before launching it.
//
//   zero_estimate --stage 2|3 (--params N --largest_layer_params L | --config_name MODEL.json)
//                 [--num_gpus_per_node G] [--num_nodes K] [--additional_buffer_factor 1.5]
//
// prints DeepSpeed's model-state table (the same rows, numbers and rounding as its
// estimate_zero{2,3}_model_states_mem_needs_all_cold). With --config_name it also estimates what
// zerotrain will allocate per rank, activations and buffers included, for --deepspeed CONFIG (or
// --stage) and the batch flags; and with --gpu_memory and --cpu_memory [--nvme_capacity] it walks
// from the fastest configuration to the leanest and prints the first that fits as a ds_config.json.
// --json prints all of it as one JSON object.
#include <boost/json.hpp>
#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>
#include <optional>

#include "config/ds_config.h"
#include "config/json_pretty.h"
#include "config/json_reader.h"
#include "config/model_config.h"
#include "config/tool_options.h"
#include "config/sizes.h"
#include "core/error.h"
#include "core/tool_main.h"
#include "zero/memory_estimate.h"
#include "zero/recommender.h"

namespace po = boost::program_options;
namespace json = boost::json;
using namespace zt;

namespace {

std::string gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", bytes / 0x1p30);
  return text;
}

json::object states_json(const ModelStateBytes& b) {
  return {{"params", b.params}, {"grads", b.grads}, {"master", b.master}, {"exp_avg", b.exp_avg},
          {"exp_avg_sq", b.exp_avg_sq}};
}

json::object estimate_json(const MemoryEstimate& e) {
  return {{"model_state_bytes", states_json(e.device_states)},
          {"offloaded_state_bytes", states_json(e.offloaded_states)},
          {"buffer_bytes",
           {{"buckets", e.buckets}, {"working", e.working}, {"gather", e.gather}, {"offload", e.offload_buffers}}},
          {"activation_bytes", e.activations},
          {"pool_bytes",
           {{"device", e.by_pool[int(Pool::kDevice)]},
            {"host", e.by_pool[int(Pool::kHost)]},
            {"pinned", e.by_pool[int(Pool::kPinned)]},
            {"nvme", e.by_pool[int(Pool::kNvme)]}}}};
}

std::string describe(const DsConfig& c) {
  std::string s = cat("stage ", c.zero.stage, ", ", dtype_name(c.param_dtype()));
  auto where = [](const OffloadConfig& o) { return o.device == OffloadConfig::Device::kNvme ? "nvme" : "cpu"; };
  if (c.zero.offload_optimizer.enabled()) s += cat(", optimizer on ", where(c.zero.offload_optimizer));
  if (c.zero.offload_param.enabled()) s += cat(", parameters on ", where(c.zero.offload_param));
  return s;
}

void print_estimate(const MemoryEstimate& e, const DsConfig& c, const RunShape& run) {
  const ModelStateBytes& d = e.device_states;
  const ModelStateBytes& o = e.offloaded_states;
  std::printf("zerotrain, per rank (%d rank(s), %s, micro-batch %d, block %d%s):\n", run.world_size,
              describe(c).c_str(), run.micro_batch, run.seq_len,
              run.gradient_checkpointing ? ", gradient checkpointing" : "");
  std::printf("  model states on the device %11s  (params %s, grads %s, master %s, moments %s)\n",
              gib(double(d.total())).c_str(), gib(double(d.params)).c_str(), gib(double(d.grads)).c_str(),
              gib(double(d.master)).c_str(), gib(double(d.exp_avg + d.exp_avg_sq)).c_str());
  if (o.total() > 0) {
    std::printf("  model states offloaded     %11s  (params %s, grads %s, master %s, moments %s)\n",
                gib(double(o.total())).c_str(), gib(double(o.params)).c_str(), gib(double(o.grads)).c_str(),
                gib(double(o.master)).c_str(), gib(double(o.exp_avg + o.exp_avg_sq)).c_str());
  }
  std::printf("  buffers                    %11s  (buckets %s, gathered parameters %s, working copies %s, swap %s)\n",
              gib(double(e.buckets + e.gather + e.working + e.offload_buffers)).c_str(), gib(double(e.buckets)).c_str(),
              gib(double(e.gather)).c_str(), gib(double(e.working)).c_str(), gib(double(e.offload_buffers)).c_str());
  std::printf("  activations                %11s\n", gib(double(e.activations)).c_str());
  std::printf("  per pool: device %s, host %s, pinned %s, nvme %s\n", gib(double(e.by_pool[0])).c_str(),
              gib(double(e.by_pool[1])).c_str(), gib(double(e.by_pool[2])).c_str(), gib(double(e.by_pool[3])).c_str());
}

int run(int argc, char** argv) {
  int stage = -1, gpus_per_node = 1, num_nodes = 1;
  int64_t micro = 8, eval_batch = 8, block = 0;
  double factor = 1.5;
  std::string params_text, largest_text, model_path, ds_path, gpu_text, cpu_text, nvme_text,
      nvme_path = "/local_nvme";
  bool checkpointing = false, bf16 = false, fp16 = false, as_json = false;
  po::options_description opts("zero_estimate");
  opts.add_options()
    ("help,h", "print this help")
    ("stage", po::value(&stage), "ZeRO stage (2 or 3 for DeepSpeed's table; 0-3 for zerotrain's estimate)")
    ("params", po::value(&params_text), "total parameters: 2783M, 1.5B, 7e9")
    ("largest_layer_params", po::value(&largest_text), "parameters of the largest layer (stage 3)")
    ("config_name", po::value(&model_path), "HF GPT-2 config.json: parameters and layers from the model")
    ("num_gpus_per_node", po::value(&gpus_per_node), "GPUs (ranks) per node (default 1)")
    ("num_nodes", po::value(&num_nodes), "nodes (default 1)")
    ("additional_buffer_factor", po::value(&factor), "DeepSpeed's CPU estimation factor (default 1.5)")
    ("deepspeed", po::value(&ds_path), "ds_config.json to estimate (\"auto\" resolves from the flags)")
    ("per_device_train_batch_size", po::value(&micro), "micro-batch per rank (default 8)")
    ("per_device_eval_batch_size", po::value(&eval_batch), "eval batch per rank (default 8)")
    ("block_size", po::value(&block), "sequence length (default n_positions)")
    ("gradient_checkpointing", po::bool_switch(&checkpointing), "recompute each block in backward")
    ("bf16", po::bool_switch(&bf16), "bf16 parameters and gradients")
    ("fp16", po::bool_switch(&fp16), "fp16 parameters and gradients")
    ("gpu_memory", po::value(&gpu_text), "recommender: memory per GPU, e.g. 80GB (GB = 2^30 bytes)")
    ("cpu_memory", po::value(&cpu_text), "recommender: host memory per node, e.g. 512GB")
    ("nvme_capacity", po::value(&nvme_text), "recommender: NVMe per node, e.g. 2TB (enables the NVMe rungs)")
    ("nvme_path", po::value(&nvme_path), "recommender: nvme_path for the NVMe rungs (default /local_nvme)")
    ("json", po::bool_switch(&as_json), "print one JSON object instead of text");
  po::variables_map vm;
  if (!parse_tool_command_line(argc, argv, opts, vm)) return 0;
  ZT_USAGE_CHECK(gpus_per_node >= 1, "--num_gpus_per_node must be >= 1, got ", gpus_per_node);
  ZT_USAGE_CHECK(num_nodes >= 1, "--num_nodes must be >= 1, got ", num_nodes);
  ZT_USAGE_CHECK(factor > 0, "--additional_buffer_factor must be positive, got ", factor);
  ZT_USAGE_CHECK(micro >= 1 && eval_batch >= 1, "--per_device_train_batch_size and --per_device_eval_batch_size must be >= 1");
  ZT_USAGE_CHECK(!(bf16 && fp16), "--bf16 and --fp16 cannot both be set");
  ZT_USAGE_CHECK(model_path.empty() != params_text.empty(),
                 "give the model as --params N [--largest_layer_params L] or as --config_name MODEL.json (one of them)");
  ZT_USAGE_CHECK(stage == -1 || (stage >= 0 && stage <= 3), "--stage must be 0-3, got ", stage);
  const bool recommend_wanted = !gpu_text.empty() || !cpu_text.empty() || !nvme_text.empty();
  ZT_USAGE_CHECK(!recommend_wanted || (!gpu_text.empty() && !cpu_text.empty()),
                 "the recommender needs both --gpu_memory and --cpu_memory");
  ZT_USAGE_CHECK(!recommend_wanted || !model_path.empty(), "the recommender needs --config_name (it estimates activations)");

  json::object out;
  double total = 0, largest = 0;
  std::optional<ModelConfig> model;
  if (!model_path.empty()) {
    model = load_model_config(model_path);
    total = double(Gpt2Layout(*model).num_params());
    largest = double(largest_layer_params(*model));
  } else {
    total = double(parse_size(params_text, SizeKind::kCount, "--params"));
    if (!largest_text.empty()) largest = double(parse_size(largest_text, SizeKind::kCount, "--largest_layer_params"));
    ZT_USAGE_CHECK(stage == 2 || stage == 3, "--stage 2 or 3 is needed for DeepSpeed's table with --params");
    ZT_USAGE_CHECK(stage != 3 || !largest_text.empty(), "--stage 3 needs --largest_layer_params");
  }
  out["num_params"] = total;
  out["largest_layer_params"] = largest;

  // 1. DeepSpeed's table.
  if (stage == 2 || stage == 3) {
    const auto rows = stage == 2 ? deepspeed_zero2_rows(total, gpus_per_node, num_nodes, factor)
                                 : deepspeed_zero3_rows(total, largest, gpus_per_node, num_nodes, factor);
    json::array table;
    for (const auto& r : rows) {
      json::object row{{"cpu_bytes", r.cpu_bytes}, {"gpu_bytes", r.gpu_bytes}, {"offload_optimizer", r.offload_optimizer}};
      if (stage == 3) {
        row["offload_param"] = r.offload_param;
        row["zero_init"] = r.zero_init;
      }
      table.push_back(std::move(row));
    }
    out["deepspeed_model_states"] = std::move(table);
    if (!as_json) std::fputs(deepspeed_table(stage, total, largest, gpus_per_node, num_nodes, factor).c_str(), stdout);
  }
  if (!model) {
    if (as_json) std::cout << json::serialize(out) << "\n";
    return 0;
  }

  // 2. zerotrain's own estimate.
  RunShape run;
  run.world_size = gpus_per_node * num_nodes;
  run.ranks_per_node = gpus_per_node;
  run.micro_batch = int(micro);
  run.eval_batch = int(eval_batch);
  run.seq_len = int(block > 0 ? block : model->n_positions);
  run.gradient_checkpointing = checkpointing;
  ZT_USAGE_CHECK(run.seq_len <= model->n_positions, "--block_size ", run.seq_len, " exceeds n_positions ",
                 model->n_positions);
  AutoValues autos;
  autos.world_size = run.world_size;
  autos.hidden_size = model->n_embd;
  autos.micro_batch = {micro, vm.count("per_device_train_batch_size") > 0};
  autos.bf16 = {bf16, bf16};
  autos.fp16 = {fp16, fp16};
  DsConfig config;
  if (!ds_path.empty()) {
    config = load_ds_config(ds_path, autos);
    if (stage >= 0) config.zero.stage = stage;
  } else {
    const std::string defaults = cat(
        R"({"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
            "bf16": {"enabled": "auto"}, "fp16": {"enabled": "auto"},
            "zero_optimization": {"stage": )", std::max(stage, 0), R"(, "overlap_comm": true,
              "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
              "stage3_param_persistence_threshold": "auto"}})");
    config = parse_ds_config(parse_json_lenient(defaults, "zero_estimate defaults"), "zero_estimate defaults", autos);
  }
  run.micro_batch = int(config.train_micro_batch_size_per_gpu);
  if (stage >= 0 || !ds_path.empty()) {
    const MemoryEstimate e = estimate_memory(*model, config, run);
    out["estimate"] = estimate_json(e);
    out["estimate"].as_object()["config"] = describe(config);
    if (!as_json) {
      std::printf("\n");
      print_estimate(e, config, run);
    }
  }

  // 3. The recommender.
  if (recommend_wanted) {
    Hardware hw;
    hw.gpu_memory = parse_size(gpu_text, SizeKind::kBytesMemory, "--gpu_memory");
    hw.cpu_memory = parse_size(cpu_text, SizeKind::kBytesMemory, "--cpu_memory");
    if (!nvme_text.empty()) hw.nvme_capacity = parse_size(nvme_text, SizeKind::kBytesMemory, "--nvme_capacity");
    hw.nvme_path = nvme_path;
    Recommendation rec = recommend(*model, config, run, hw);
    // Nothing fits as asked: activations are often what overflows, so try again recomputing them.
    bool needs_checkpointing = false;
    if (rec.chosen < 0 && !run.gradient_checkpointing) {
      RunShape recompute = run;
      recompute.gradient_checkpointing = true;
      Recommendation again = recommend(*model, config, recompute, hw);
      if (again.chosen >= 0) {
        rec = std::move(again);
        needs_checkpointing = true;
      }
    }
    json::array ladder;
    if (!as_json) std::printf("\nrecommender (GPU %s, node memory %s%s), fastest first:\n", gib(double(hw.gpu_memory)).c_str(),
                              gib(double(hw.cpu_memory)).c_str(),
                              hw.nvme_capacity ? cat(", NVMe ", gib(double(hw.nvme_capacity))).c_str() : "");
    for (const RungVerdict& v : rec.rungs) {
      ladder.push_back(json::object{{"rung", v.name}, {"fits", v.fits}, {"why_not", v.why_not},
                                    {"estimate", estimate_json(v.estimate)}});
      if (!as_json) {
        std::printf("  %-58s %s\n", v.name.c_str(),
                    v.fits ? cat("fits: device ", gib(double(v.estimate.device_total())), ", host ",
                                 gib(double(v.estimate.host_total())), " per rank")
                                 .c_str()
                           : cat("no: ", v.why_not).c_str());
      }
    }
    json::object r{{"ladder", std::move(ladder)}};
    if (rec.chosen >= 0) {
      const RungVerdict& v = rec.rungs[size_t(rec.chosen)];
      r["chosen"] = v.name;
      r["gradient_checkpointing"] = run.gradient_checkpointing || needs_checkpointing;
      r["ds_config"] = ds_config_json(v.config);
      if (!as_json) {
        std::printf("\nrecommended: %s%s. ds_config.json:\n%s\n", v.name.c_str(),
                    needs_checkpointing ? ", with --gradient_checkpointing (nothing fits without it)" : "",
                    pretty_json(r["ds_config"]).c_str());
      }
    } else {
      r["chosen"] = nullptr;
      if (!as_json) {
        std::printf("\nnothing fits, with or without --gradient_checkpointing: use more GPUs or a smaller batch\n");
      }
    }
    out["recommendation"] = std::move(r);
    if (rec.chosen < 0 && !as_json) return 1;
    if (rec.chosen < 0) {
      std::cout << json::serialize(out) << "\n";
      return 1;
    }
  }
  if (as_json) std::cout << json::serialize(out) << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return run_tool("zero_estimate", [&] { return run(argc, argv); });
}
