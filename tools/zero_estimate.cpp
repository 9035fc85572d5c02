// zero_estimate: how much memory a run needs, before launching it.
//
//   zero_estimate --stage 2|3 (--params N --largest_layer_params L | --config_name MODEL.json)
//                 [--num_gpus_per_node G] [--num_nodes K] [--additional_buffer_factor 1.5]
//                 [--accelerator cpu|emulated|cuda] [--gpu_memory 80GB [--cpu_memory 512GB]] [--json]
//   zero_estimate --generate --config_name MODEL.json [--deepspeed CONFIG | --stage S] [--bf16|--fp16]
//                 [--batch_size B] [--max_length P] [--num_gpus_per_node G] [--num_nodes K]
//                 [--gpu_memory 80GB] [--json]
//
// prints DeepSpeed's model-state table (the same rows, numbers and rounding as its
// estimate_zero{2,3}_model_states_mem_needs_all_cold). With --config_name it also estimates what
// zerotrain will allocate per rank, activations and buffers included, for --deepspeed CONFIG (or
// --stage) and the batch flags; and with --gpu_memory and --cpu_memory [--nvme_capacity] it walks
// from the fastest configuration to the leanest and prints the first that fits as a ds_config.json.
// --accelerator cuda adds the GPU view: GPU memory per rank with the CUDA caching allocator's
// rounding, the CUDA context, cuBLASLt's workspace and NCCL's buffers, and with --gpu_memory alone
// whether the estimated run fits (exit 1 when not); the recommender then fits that total.
// --json prints all of it as one JSON object. --generate estimates a zero_generate run instead
// (ZeRO-Inference): per rank, the weights where the config puts them, stage 3's gathered layers,
// the KV caches of --batch_size sequences of --max_length positions, the decoder's buffers, by
// pool; with --gpu_memory, whether the device's part fits (exit 1 when not).
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
#include "config/train_args.h"
#include "config/sizes.h"
#include "core/error.h"
#include "core/human_units.h"
#include "core/tool_main.h"
#include "model/model_layout.h"
#include "model/model_memory.h"
#include "zero/comm_estimate.h"
#include "zero/memory_estimate.h"
#include "zero/mics_groups.h"
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
           {{"buckets", e.buckets},
            {"working", e.working},
            {"gather", e.gather},
            {"offload", e.offload_buffers},
            {"optimizer", e.optimizer}}},
          {"activation_bytes", e.activations},
          {"kernel_scratch_bytes", e.kernel_scratch},
          {"weight_pack_bytes", e.weight_packs},
          {"pool_bytes",
           {{"device", e.by_pool[int(Pool::kDevice)]},
            {"host", e.by_pool[int(Pool::kHost)]},
            {"pinned", e.by_pool[int(Pool::kPinned)]},
            {"nvme", e.by_pool[int(Pool::kNvme)]}}}};
}

// `training` false: a generation run's, which has no optimizer.
std::string describe(const DsConfig& c, bool training = true) {
  std::string s = cat("stage ", c.zero.stage, ", ", dtype_name(c.param_dtype()));
  if (training) s += cat(", ", optimizer_name(c.optimizer.type));
  auto where = [](const OffloadConfig& o) { return o.device == OffloadConfig::Device::kNvme ? "nvme" : "cpu"; };
  if (training && c.zero.offload_optimizer.enabled()) s += cat(", optimizer on ", where(c.zero.offload_optimizer));
  if (c.zero.offload_param.enabled()) s += cat(", parameters on ", where(c.zero.offload_param));
  return s;
}

// Small parts of the GPU view (rounding, NCCL) read better in MiB.
std::string gib_or_mib(double bytes) {
  if (bytes >= 0x1p30) return gib(bytes);
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", bytes / 0x1p20);
  return text;
}

void print_estimate(const MemoryEstimate& e, const DsConfig& c, const RunShape& run) {
  const ModelStateBytes& d = e.device_states;
  const ModelStateBytes& o = e.offloaded_states;
  std::printf("zerotrain, per rank (%d rank(s), %s, micro-batch %d, block %d%s):\n", run.world_size,
              describe(c).c_str(), run.micro_batch, run.seq_len,
              run.gradient_checkpointing ? ", gradient checkpointing" : "");
  const OptimizerConfig& opt = c.optimizer;
  if (opt.factored()) {
    std::printf("  optimizer Adafactor (%s): fp32 master%s, 4%s bytes a parameter, + a row and a column factor per "
                "matrix and exp_avg_sq for 1-D tensors (DeepSpeed's table assumes Adam's 12 for any)\n",
                opt.adafactor_torch ? "torch.optim's" : "transformers'", opt.has_exp_avg() ? " + exp_avg" : "",
                opt.has_exp_avg() ? " + 4" : "");
  } else if (opt.aux_exp_avg_sq()) {
    std::printf("  optimizer Muon: fp32 master + exp_avg, 8 bytes a parameter of its hidden matrices, 12 of the rest "
                "(+ exp_avg_sq for AdamW; DeepSpeed's table assumes Adam's 12 for any)\n");
  } else if (opt.type == OptimizerConfig::Type::kOneBitAdam) {
    std::printf("  optimizer OneBitAdam: fp32 master + exp_avg + exp_avg_sq, 12 bytes a parameter, + its compression "
                "errors past one rank, 4 bytes a parameter and 4/N more (DeepSpeed's table assumes Adam's 12 for any)\n");
  } else if (opt.type == OptimizerConfig::Type::kOneBitLamb) {
    std::printf("  optimizer OneBitLamb: fp32 master + exp_avg + exp_avg_sq + exp_avg_sq_fresh, 16 bytes a parameter, + "
                "its packed momenta, 4, and its compression errors past one rank, 4 and 4/N more (DeepSpeed's table "
                "assumes Adam's 12 for any)\n");
  } else if (opt.type == OptimizerConfig::Type::kZeroOneAdam) {
    std::printf("  optimizer ZeroOneAdam: fp32 master + exp_avg + exp_avg_sq, 12 bytes a parameter, + its momentum "
                "accumulator, 4, and its compression errors past one rank, 4 and 4/N more (DeepSpeed's table assumes "
                "Adam's 12 for any)\n");
  } else {
    std::printf("  optimizer %s: fp32 master%s%s, %d bytes a parameter (DeepSpeed's table assumes Adam's 12 for any)\n",
                optimizer_name(opt.type), opt.has_exp_avg() ? " + exp_avg" : "",
                opt.has_exp_avg_sq() ? " + exp_avg_sq" : "", 4 * (1 + opt.moment_count()));
  }
  std::printf("  model states on the device %11s  (params %s, grads %s, master %s, moments %s)\n",
              gib(double(d.total())).c_str(), gib(double(d.params)).c_str(), gib(double(d.grads)).c_str(),
              gib(double(d.master)).c_str(), gib(double(d.exp_avg + d.exp_avg_sq)).c_str());
  if (o.total() > 0) {
    std::printf("  model states offloaded     %11s  (params %s, grads %s, master %s, moments %s)\n",
                gib(double(o.total())).c_str(), gib(double(o.params)).c_str(), gib(double(o.grads)).c_str(),
                gib(double(o.master)).c_str(), gib(double(o.exp_avg + o.exp_avg_sq)).c_str());
  }
  std::printf("  buffers                    %11s  (buckets %s, gathered parameters %s, working copies %s, swap %s",
              gib(double(e.buckets + e.gather + e.working + e.offload_buffers + e.optimizer)).c_str(),
              gib(double(e.buckets)).c_str(), gib(double(e.gather)).c_str(), gib(double(e.working)).c_str(),
              gib(double(e.offload_buffers)).c_str());
  if (e.optimizer > 0) {
    const char* what = opt.factored()                                     ? ", Adafactor's sums %s"
                       : opt.type == OptimizerConfig::Type::kOneBitAdam ? ", 1-bit compression (errors, signs) %s"
                       : opt.type == OptimizerConfig::Type::kZeroOneAdam
                           ? ", momentum accumulator and 1-bit compression (errors, signs) %s"
                       : opt.type == OptimizerConfig::Type::kOneBitLamb
                           ? ", packed momenta and 1-bit compression (errors, signs) %s"
                                                                          : ", Muon's matrices %s";
    std::printf(what, gib(double(e.optimizer)).c_str());
  }
  std::printf(")\n");
  std::printf("  activations                %11s\n", gib(double(e.activations)).c_str());
  if (e.weight_packs > 0) {
    std::printf("  bf16 weight packs          %11s  (ZT_BF16_WEIGHT_PACKS=1: each GEMM weight in oneDNN's layout, "
                "twice)\n", gib(double(e.weight_packs)).c_str());
  }
  std::printf("  per pool: device %s, host %s, pinned %s, nvme %s\n", gib(double(e.by_pool[0])).c_str(),
              gib(double(e.by_pool[1])).c_str(), gib(double(e.by_pool[2])).c_str(), gib(double(e.by_pool[3])).c_str());
}

// The command line, as given.
struct Args {
  int stage = -1, gpus_per_node = 1, num_nodes = 1;
  int64_t micro = 8, eval_batch = 8, block = 0, accumulation = 1;
  // --per_device_train_batch_size, --gradient_accumulation_steps on the command line, for "auto"
  bool micro_given = false, accumulation_given = false;
  double factor = 1.5;
  std::string params_text, largest_text, model_path, ds_path, gpu_text, cpu_text, nvme_text,
      nvme_path = "/local_nvme";
  std::string accelerator = "cpu";
  std::string optim;  // HF's --optim; empty: not given
  std::string optim_args;  // HF's --optim_args (Adafactor's keyword arguments)
  bool checkpointing = false, bf16 = false, fp16 = false, as_json = false;
  bool delayed_update = false;  // zerotrain's --delayed_param_update: the pending parameters' host copy
  bool shm_collectives = false;  // ZT_SHM_COLLECTIVES=1 at run time: HierComm across nodes
  bool generate = false;        // a zero_generate run: --batch_size sequences of --max_length positions
  int64_t gen_batch = 1, max_length = 0;
  std::string activation_dtype = "auto";
  std::string classifier_chunk = "auto";
  bool cuda() const { return accelerator == "cuda"; }
  /// The recommender: host memory or NVMe given, or a GPU's memory outside the GPU view (where
  /// --gpu_memory alone checks the estimate instead).
  bool recommend_wanted() const {
    return !generate && (!cpu_text.empty() || !nvme_text.empty() || (!gpu_text.empty() && !cuda()));
  }
  /// The GPU view's verdict on the estimated configuration.
  bool gpu_fit_wanted() const { return cuda() && !gpu_text.empty(); }
  bool estimate_wanted() const { return stage >= 0 || !ds_path.empty(); }
};

// The trainer's --accelerator names (backend/accelerator.h) that say which memory to estimate:
// cpu and emulated (the engine's pools in host memory), cuda (a GPU's). auto is not one: the
// trainer resolves it on the machine it runs on, and zero_estimate runs before, anywhere.
constexpr const char* kEstimateAccelerators = "cpu, emulated, cuda";

// Every flag's own constraints, and which flags need which.
void check_args(const Args& a) {
  ZT_USAGE_CHECK(a.gpus_per_node >= 1, "--num_gpus_per_node must be >= 1, got ", a.gpus_per_node);
  ZT_USAGE_CHECK(a.num_nodes >= 1, "--num_nodes must be >= 1, got ", a.num_nodes);
  ZT_USAGE_CHECK(a.factor > 0, "--additional_buffer_factor must be positive, got ", a.factor);
  ZT_USAGE_CHECK(a.micro >= 1 && a.eval_batch >= 1,
                 "--per_device_train_batch_size and --per_device_eval_batch_size must be >= 1");
  ZT_USAGE_CHECK(a.accumulation >= 1, "--gradient_accumulation_steps must be >= 1, got ", a.accumulation);
  ZT_USAGE_CHECK(!(a.bf16 && a.fp16), "--bf16 and --fp16 cannot both be set");
  ZT_USAGE_CHECK(a.model_path.empty() != a.params_text.empty(),
                 "give the model as --params N [--largest_layer_params L] or as --config_name MODEL.json (one of them)");
  ZT_USAGE_CHECK(a.stage == -1 || (a.stage >= 0 && a.stage <= 3), "--stage must be 0-3, got ", a.stage);
  ZT_USAGE_CHECK(a.accelerator == "cpu" || a.accelerator == "emulated" || a.accelerator == "cuda",
                 "--accelerator \"", a.accelerator, "\": choose one of ", kEstimateAccelerators,
                 a.accelerator == "auto" ? " (auto is decided where the trainer runs)" : "");
  ZT_USAGE_CHECK(!a.generate || !a.model_path.empty(), "--generate needs --config_name MODEL.json");
  ZT_USAGE_CHECK(a.gen_batch >= 1 && a.max_length >= 0, "--batch_size must be >= 1 and --max_length >= 0");
  ZT_USAGE_CHECK(!a.generate || (a.cpu_text.empty() && a.nvme_text.empty()),
                 "--generate takes --gpu_memory alone: the recommender is for training runs");
  ZT_USAGE_CHECK(!a.delayed_update || a.params_text.empty(),
                 "--delayed_param_update needs --config_name: DeepSpeed's tables (--params) assume no delayed update");
  ZT_USAGE_CHECK(!a.delayed_update || !a.ds_path.empty(),
                 "--delayed_param_update needs --deepspeed CONFIG with offload_optimizer (the flag is zerotrain's; "
                 "zero_estimate's defaults offload nothing)");
  ZT_USAGE_CHECK(!a.cuda() || !a.model_path.empty(),
                 "--accelerator cuda needs --config_name: the GPU view is of zerotrain's estimate per rank");
  // The capacities parse here, so that a bad one is the only line printed.
  for (const auto& [text, flag] : {std::pair{&a.gpu_text, "--gpu_memory"}, {&a.cpu_text, "--cpu_memory"},
                                   {&a.nvme_text, "--nvme_capacity"}}) {
    if (!text->empty()) parse_size(*text, SizeKind::kBytesMemory, flag);
  }
  ZT_USAGE_CHECK(!a.gpu_fit_wanted() || a.recommend_wanted() || a.estimate_wanted(),
                 "--gpu_memory with --accelerator cuda checks zerotrain's estimate: give --stage or --deepspeed "
                 "(or --cpu_memory too, for the recommender)");
  ZT_USAGE_CHECK(!a.recommend_wanted() || (!a.gpu_text.empty() && !a.cpu_text.empty()),
                 "the recommender needs both --gpu_memory and --cpu_memory");
  ZT_USAGE_CHECK(!a.recommend_wanted() || !a.model_path.empty(),
                 "the recommender needs --config_name (it estimates activations)");
}

// Parses and checks the command line into `a`; false when it asked for --help (printed).
bool parse_args(int argc, char** argv, Args& a) {
  po::options_description opts("zero_estimate");
  opts.add_options()
    ("help,h", "print this help")
    ("stage", po::value(&a.stage), "ZeRO stage (2 or 3 for DeepSpeed's table; 0-3 for zerotrain's estimate)")
    ("params", po::value(&a.params_text), "total parameters: 2783M, 1.5B, 7e9")
    ("largest_layer_params", po::value(&a.largest_text), "parameters of the largest layer (stage 3)")
    ("config_name", po::value(&a.model_path), "HF GPT-2 config.json: parameters and layers from the model")
    ("num_gpus_per_node", po::value(&a.gpus_per_node), "GPUs (ranks) per node (default 1)")
    ("num_nodes", po::value(&a.num_nodes), "nodes (default 1)")
    ("additional_buffer_factor", po::value(&a.factor), "DeepSpeed's CPU estimation factor (default 1.5)")
    ("deepspeed", po::value(&a.ds_path), "ds_config.json to estimate (\"auto\" resolves from the flags)")
    ("per_device_train_batch_size", po::value(&a.micro), "micro-batch per rank (default 8)")
    ("per_device_eval_batch_size", po::value(&a.eval_batch), "eval batch per rank (default 8)")
    ("gradient_accumulation_steps", po::value(&a.accumulation),
     "micro-steps a step (default 1; the config's \"auto\"): stages 2 and 3 reduce gradients in each")
    ("block_size", po::value(&a.block), "sequence length (default: the model's positions, at most 1024)")
    ("gradient_checkpointing", po::bool_switch(&a.checkpointing), "recompute each block in backward")
    ("activation_dtype", po::value(&a.activation_dtype),
     "auto (default: bf16 in a bf16 run on cuda or on a CPU like this one with AVX512-BF16 or AMX, else fp32), fp32 "
     "or bf16: what the activations are held in")
    ("classifier_chunk_tokens", po::value(&a.classifier_chunk),
     "auto (default), 0 or N: the tokens the lm_head and the loss run over at a time (zerotrain's flag); the "
     "logits held are one chunk's")
    ("delayed_param_update", po::bool_switch(&a.delayed_update),
     "zerotrain's flag: counts the host copy of the offloaded parameters that the delayed update keeps")
    ("optim", po::value(&a.optim),
     "HF's --optim without an optimizer in --deepspeed: adamw_torch (default), lion_32bit, adagrad or adafactor (Lion "
     "and Adagrad keep one fp32 moment: 8 bytes of state per parameter, not Adam's 12; Adafactor 4 and its factors)")
    ("optim_args", po::value(&a.optim_args), "HF's --optim_args, with --optim adafactor (beta1 adds exp_avg)")
    ("bf16", po::bool_switch(&a.bf16), "bf16 parameters and gradients")
    ("fp16", po::bool_switch(&a.fp16), "fp16 parameters and gradients")
    ("accelerator", po::value(&a.accelerator),
     "cpu (default: the engine's pools), emulated (the same), cuda (GPU memory per rank: the caching "
     "allocator's rounding, the CUDA context, cuBLASLt's and NCCL's buffers)")
    ("gpu_memory", po::value(&a.gpu_text),
     "memory per GPU, e.g. 80GB (GB = 2^30 bytes): the recommender's, or with --accelerator cuda whether "
     "the estimate fits")
    ("cpu_memory", po::value(&a.cpu_text), "recommender: host memory per node, e.g. 512GB")
    ("nvme_capacity", po::value(&a.nvme_text), "recommender: NVMe per node, e.g. 2TB (enables the NVMe rungs)")
    ("nvme_path", po::value(&a.nvme_path), "recommender: nvme_path for the NVMe rungs (default /local_nvme)")
    ("generate", po::bool_switch(&a.generate),
     "estimate a zero_generate run (ZeRO-Inference) with --config_name and --deepspeed or --stage")
    ("batch_size", po::value(&a.gen_batch), "with --generate: sequences at once per rank (default 1)")
    ("max_length", po::value(&a.max_length),
     "with --generate: each sequence's KV cache in tokens (default: the model's positions)")
    ("shm_collectives", po::bool_switch(&a.shm_collectives),
     "the run sets ZT_SHM_COLLECTIVES=1 (the CPU, or CUDA staged through host memory): shared memory in each node "
     "and MPI between nodes, which sends (nodes - 1) times a collective's buffer across them; without it, a ring's "
     "traffic (MPI, NCCL)")
    ("json", po::bool_switch(&a.as_json), "print one JSON object instead of text");
  po::variables_map vm;
  if (!parse_tool_command_line(argc, argv, opts, vm)) return false;
  a.micro_given = vm.count("per_device_train_batch_size") > 0;
  a.accumulation_given = vm.count("gradient_accumulation_steps") > 0;
  check_args(a);
  return true;
}

// The model: its config when given one (the estimate and the recommender need it), and its size
// either way.
struct Model {
  std::optional<ModelConfig> config;
  double total = 0, largest = 0;  // parameters: all of them, and the largest layer's
};

Model read_model(const Args& a) {
  Model m;
  if (!a.model_path.empty()) {
    m.config = load_model_config(a.model_path);
    m.total = double(make_model_layout(*m.config)->num_params());
    m.largest = double(largest_layer_params(*m.config));
    return m;
  }
  m.total = double(parse_size(a.params_text, SizeKind::kCount, "--params"));
  if (!a.largest_text.empty()) m.largest = double(parse_size(a.largest_text, SizeKind::kCount, "--largest_layer_params"));
  ZT_USAGE_CHECK(a.stage == 2 || a.stage == 3, "--stage 2 or 3 is needed for DeepSpeed's table with --params");
  ZT_USAGE_CHECK(a.stage != 3 || !a.largest_text.empty(), "--stage 3 needs --largest_layer_params");
  return m;
}

// 1. DeepSpeed's model-state table (--stage 2 or 3).
void report_deepspeed_table(const Args& a, const Model& m, json::object& out) {
  const auto rows = a.stage == 2 ? deepspeed_zero2_rows(m.total, a.gpus_per_node, a.num_nodes, a.factor)
                                 : deepspeed_zero3_rows(m.total, m.largest, a.gpus_per_node, a.num_nodes, a.factor);
  json::array table;
  for (const auto& r : rows) {
    json::object row{{"cpu_bytes", r.cpu_bytes}, {"gpu_bytes", r.gpu_bytes}, {"offload_optimizer", r.offload_optimizer}};
    if (a.stage == 3) {
      row["offload_param"] = r.offload_param;
      row["zero_init"] = r.zero_init;
    }
    table.push_back(std::move(row));
  }
  out["deepspeed_model_states"] = std::move(table);
  if (!a.as_json) {
    std::fputs(deepspeed_table(a.stage, m.total, m.largest, a.gpus_per_node, a.num_nodes, a.factor).c_str(), stdout);
  }
}

// The run being estimated, from the flags (the micro-batch is settled by the config).
RunShape make_run_shape(const Args& a, const ModelConfig& model) {
  RunShape run;
  run.world_size = a.gpus_per_node * a.num_nodes;
  run.ranks_per_node = a.gpus_per_node;
  run.micro_batch = int(a.micro);
  run.eval_batch = int(a.eval_batch);
  run.seq_len = int(a.block > 0 ? a.block : default_block_size(model));
  run.gradient_checkpointing = a.checkpointing;
  run.activation_dtype = a.activation_dtype;
  run.classifier_chunk = parse_classifier_chunk(a.classifier_chunk);
  run.cuda = a.cuda();
  run.emulated = a.accelerator == "emulated";
  ZT_USAGE_CHECK(run.seq_len <= model.n_positions, "--block_size ", run.seq_len, " exceeds n_positions ",
                 model.n_positions);
  return run;
}

// --deepspeed CONFIG with "auto" resolved from the flags (--stage overrides its stage), or
// without one, the defaults zerotrain would use at --stage.
DsConfig make_ds_config(const Args& a, const ModelConfig& model, const RunShape& run) {
  AutoValues autos;
  autos.world_size = run.world_size;
  autos.hidden_size = model.n_embd;
  autos.micro_batch = {a.micro, a.micro_given};
  autos.grad_accum = {a.accumulation, a.accumulation_given};
  autos.bf16 = {a.bf16, a.bf16};
  autos.fp16 = {a.fp16, a.fp16};
  autos.optim = {a.optim.empty() ? std::string("adamw_torch") : a.optim, !a.optim.empty()};
  autos.optim_args = {a.optim_args, !a.optim_args.empty()};
  if (!a.ds_path.empty()) {
    DsConfig config = load_ds_config(a.ds_path, autos);
    if (a.stage >= 0) config.zero.stage = a.stage;
    config.zero.delayed_param_update_after = a.delayed_update ? 0 : -1;
    return config;
  }
  const std::string defaults = cat(
      R"({"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
          "bf16": {"enabled": "auto"}, "fp16": {"enabled": "auto"},
          "zero_optimization": {"stage": )", std::max(a.stage, 0), R"(, "overlap_comm": true,
            "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
            "stage3_param_persistence_threshold": "auto"}})");
  return parse_ds_config(parse_json_lenient(defaults, "zero_estimate defaults"), "zero_estimate defaults", autos);
}

json::object gpu_json(const GpuMemoryEstimate& g) {
  return {{"model_states", g.model_states}, {"buffers", g.buffers}, {"activations", g.activations},
          {"allocator_rounding", g.rounding}, {"cuda_context_and_cublaslt", g.context},
          {"nccl_buffers", g.nccl}, {"total", g.total()}};
}

void print_gpu_estimate(const GpuMemoryEstimate& g, int world_size) {
  std::printf("\nGPU memory per rank (CUDA; the fixed costs are documented defaults until a GPU run measures them):\n");
  auto row = [](const char* what, size_t bytes, const char* note = "") {
    std::printf("  %-28s %11s%s\n", what, gib_or_mib(double(bytes)).c_str(), note);
  };
  row("model states", g.model_states);
  row("buckets and buffers", g.buffers);
  row("activations", g.activations);
  row("allocator rounding", g.rounding, "  (2 MiB segments, 512 B blocks)");
  row("CUDA context + cuBLASLt", g.context);
  row("NCCL buffers", g.nccl, world_size > 1 ? "" : "  (one rank: none)");
  row("total", g.total());
}

// The GPU view's verdict on the estimated configuration (--accelerator cuda --gpu_memory).
bool report_gpu_fit(const Args& a, const GpuMemoryEstimate& g, json::object& gpu) {
  const uint64_t capacity = parse_size(a.gpu_text, SizeKind::kBytesMemory, "--gpu_memory");
  const bool fits = g.fits(capacity);
  gpu["gpu_memory"] = capacity;
  gpu["fits"] = fits;
  if (!a.as_json) {
    const double total = double(g.total()), cap = double(capacity);
    if (fits) {
      std::printf("fits: %s of %s GPU memory, %s free\n", gib(total).c_str(), gib(cap).c_str(),
                  gib_or_mib(cap - total).c_str());
    } else {
      std::printf("does not fit: %s > %s GPU memory, %s short\n", gib(total).c_str(), gib(cap).c_str(),
                  gib_or_mib(total - cap).c_str());
    }
  }
  return fits;
}

// 2. zerotrain's own estimate per rank, and with --accelerator cuda its GPU view. Returns false
// when --gpu_memory was given for the GPU view and the run does not fit.
bool report_estimate(const Args& a, const ModelConfig& model, const DsConfig& config, const RunShape& run,
                     json::object& out) {
  const MemoryEstimate e = estimate_memory(model, config, run);
  out["estimate"] = estimate_json(e);
  out["estimate"].as_object()["config"] = describe(config);
  if (!a.as_json) {
    std::printf("\n");
    print_estimate(e, config, run);
  }
  if (!a.cuda()) return true;
  const GpuMemoryEstimate g = estimate_gpu_memory(e, run.world_size);
  if (!a.as_json) print_gpu_estimate(g, run.world_size);
  json::object gpu = gpu_json(g);
  const bool fits = !a.gpu_fit_wanted() || report_gpu_fit(a, g, gpu);
  out["gpu_memory_per_rank"] = std::move(gpu);
  return fits;
}

Hardware read_hardware(const Args& a) {
  Hardware hw;
  hw.gpu_memory = parse_size(a.gpu_text, SizeKind::kBytesMemory, "--gpu_memory");
  hw.cuda = a.cuda();
  hw.cpu_memory = parse_size(a.cpu_text, SizeKind::kBytesMemory, "--cpu_memory");
  if (!a.nvme_text.empty()) hw.nvme_capacity = parse_size(a.nvme_text, SizeKind::kBytesMemory, "--nvme_capacity");
  hw.nvme_path = a.nvme_path;
  return hw;
}

// The recommender's verdict, and whether it took recomputing the activations to fit.
struct Advice {
  Recommendation rec;
  bool needs_checkpointing = false;
};

Advice advise(const ModelConfig& model, const DsConfig& config, const RunShape& run, const Hardware& hw) {
  Advice advice{recommend(model, config, run, hw), false};
  // Nothing fits as asked: activations are often what overflows, so try again recomputing them.
  if (advice.rec.chosen < 0 && !run.gradient_checkpointing) {
    RunShape recompute = run;
    recompute.gradient_checkpointing = true;
    Recommendation again = recommend(model, config, recompute, hw);
    if (again.chosen >= 0) advice = {std::move(again), true};
  }
  return advice;
}

void print_ladder(const Hardware& hw, const Recommendation& rec, bool delayed_update) {
  std::printf("\nrecommender (GPU %s%s, node memory %s%s), fastest first%s:\n", gib(double(hw.gpu_memory)).c_str(),
              hw.cuda ? " for the GPU view's total" : "",
              gib(double(hw.cpu_memory)).c_str(),
              hw.nvme_capacity ? cat(", NVMe ", gib(double(hw.nvme_capacity))).c_str() : "",
              delayed_update ? " (--delayed_param_update: only the rungs with offload_optimizer and no offload_param)"
                             : "");
  for (const RungVerdict& v : rec.rungs) {
    std::printf("  %-58s %s\n", v.name.c_str(),
                v.fits ? cat("fits: ", hw.cuda ? "GPU " : "device ", gib(double(v.gpu_bytes)), ", host ",
                             gib(double(v.estimate.host_total())), " per rank")
                             .c_str()
                       : cat("no: ", v.why_not).c_str());
  }
}

// 2b. The data path's bytes a step, summed over ranks, within nodes and across them (the
// trainer's metrics.jsonl traffic_bytes and last lines say what a run measured).
void report_traffic(const Args& a, const ModelConfig& model, const DsConfig& config, const RunShape& run,
                    json::object& out) {
  const std::unique_ptr<ModelLayout> layout = make_model_layout(model);
  const ZeroPlan plan(config, layout->flat_size(), mics_shard_ranks(config, run.world_size), /*rank=*/0,
                      /*kernels_reach_host=*/!run.cuda);
  const StepPayload payload =
      step_payload(plan, config, *layout, a.gpus_per_node, max_collective_elements(run), run.world_size);
  const bool hierarchical = a.shm_collectives;
  const TrafficTotals t = step_traffic(payload, run.world_size, a.num_nodes, hierarchical);
  const std::vector<int> nodes = block_nodes(run.world_size, a.gpus_per_node);
  json::object j = traffic_json(t);
  j["nodes"] = node_json(nodes);
  j["collectives"] = hierarchical ? "shared memory in each node, MPI between nodes" : "ring";
  j["caveat"] = payload.caveat;
  out["traffic_bytes_per_step"] = std::move(j);
  if (a.as_json) return;
  std::printf("\ncommunication a step, all ranks' data path (%s, %s): %s\n", node_words(nodes).c_str(),
              hierarchical ? "shared memory in each node, MPI between nodes" : "ring collectives",
              run.world_size == 1 ? "none (one rank)" : traffic_words(t).c_str());
  if (!payload.caveat.empty()) std::printf("  (%s)\n", payload.caveat.c_str());
}

// 3. The recommender: every rung from the fastest to the leanest, and the first that fits as a
// ds_config.json. Returns whether one fits.
bool report_recommendation(const Args& a, const ModelConfig& model, const DsConfig& config, const RunShape& run,
                           json::object& out) {
  const Hardware hw = read_hardware(a);
  const Advice advice = advise(model, config, run, hw);
  const Recommendation& rec = advice.rec;
  if (!a.as_json) print_ladder(hw, rec, a.delayed_update);
  json::array ladder;
  for (const RungVerdict& v : rec.rungs) {
    json::object rung{{"rung", v.name}, {"fits", v.fits}, {"why_not", v.why_not}, {"estimate", estimate_json(v.estimate)}};
    if (hw.cuda) rung["gpu_memory_per_rank"] = gpu_json(estimate_gpu_memory(v.estimate, run.world_size));
    ladder.push_back(std::move(rung));
  }
  json::object r{{"ladder", std::move(ladder)}};
  if (rec.chosen >= 0) {
    const RungVerdict& v = rec.rungs[size_t(rec.chosen)];
    r["chosen"] = v.name;
    r["gradient_checkpointing"] = run.gradient_checkpointing || advice.needs_checkpointing;
    r["ds_config"] = ds_config_json(v.config);
    if (!a.as_json) {
      std::printf("\nrecommended: %s%s. ds_config.json:\n%s\n", v.name.c_str(),
                  advice.needs_checkpointing ? ", with --gradient_checkpointing (nothing fits without it)" : "",
                  pretty_json(r["ds_config"]).c_str());
    }
  } else {
    r["chosen"] = nullptr;
    if (!a.as_json) std::printf("\nnothing fits, with or without --gradient_checkpointing: use more GPUs or a smaller batch\n");
  }
  out["recommendation"] = std::move(r);
  return rec.chosen >= 0;
}

// --generate: what one rank of a zero_generate run holds. Returns false when --gpu_memory was
// given and the device's part does not fit it.
bool report_generation(const Args& a, const ModelConfig& model, const DsConfig& config, json::object& out) {
  const int world = a.gpus_per_node * a.num_nodes;
  ZT_USAGE_CHECK(a.max_length <= model.n_positions, "--max_length ", a.max_length, " exceeds the model's ",
                 model.n_positions, " positions");
  ZT_USAGE_CHECK(a.gen_batch <= (int64_t(1) << 20), "--batch_size ", a.gen_batch, " is more than 2^20 sequences");
  const int positions = int(a.max_length > 0 ? a.max_length : model.n_positions);
  const GenerationMemory m = estimate_generation_memory(model, config, world, int(a.gen_batch), positions);
  const size_t device = m.by_pool[int(Pool::kDevice)];
  json::object g{{"config", describe(config, false)}, {"weights", m.weights}, {"gathered", m.gather},
                 {"kv_cache", m.kv_cache}, {"kv_cache_per_sequence", m.kv_cache_per_sequence()},
                 {"decoder_buffers", m.decoder}, {"pinned_staging", m.staging},
                 {"per_pool", {{"device", device}, {"host", m.by_pool[int(Pool::kHost)]},
                               {"pinned", m.by_pool[int(Pool::kPinned)]}, {"nvme", m.by_pool[int(Pool::kNvme)]}}}};
  bool fits = true;
  if (!a.gpu_text.empty()) {
    const uint64_t capacity = parse_size(a.gpu_text, SizeKind::kBytesMemory, "--gpu_memory");
    fits = device <= capacity;
    g["gpu_memory"] = capacity;
    g["fits"] = fits;
  }
  if (!a.as_json) {
    std::printf("zero_generate, per rank (%d rank(s), %s, %lld sequence(s) of %d positions):\n", world,
                describe(config, false).c_str(), static_cast<long long>(a.gen_batch), positions);
    auto row = [](const char* what, size_t bytes, const std::string& note = "") {
      std::printf("  %-24s %11s%s\n", what, human_bytes(double(bytes)).c_str(), note.c_str());
    };
    const size_t on_nvme = m.by_pool[int(Pool::kNvme)];
    row("weights", m.weights,
        config.zero.stage != 3 ? "  (the whole model, fp32)"
                               : cat("  (this rank's partition", on_nvme ? cat("; ", human_bytes(double(on_nvme)),
                                                                                " more on NVMe") : "", ")"));
    if (config.zero.stage == 3) row("gathered layers", m.gather, "  (at most: stage3_max_live_parameters)");
    row("KV cache", m.kv_cache, cat("  (", a.gen_batch, " x ", human_bytes(double(m.kv_cache_per_sequence())), ")"));
    row("decoder buffers", m.decoder);
    std::printf("  per pool: device %s, host %s, pinned %s, nvme %s\n", human_bytes(double(device)).c_str(),
                human_bytes(double(m.by_pool[int(Pool::kHost)])).c_str(),
                human_bytes(double(m.by_pool[int(Pool::kPinned)])).c_str(),
                human_bytes(double(m.by_pool[int(Pool::kNvme)])).c_str());
    if (!a.gpu_text.empty()) {
      std::printf("%s: device %s of %s\n", fits ? "fits" : "does not fit", human_bytes(double(device)).c_str(),
                  a.gpu_text.c_str());
    }
  }
  out["generation"] = std::move(g);
  return fits;
}

// Prints each part the flags ask for, in order; with --json, all of them as one object at the
// end. Exits 1 when the recommender finds nothing that fits or, without the recommender, when the
// GPU view of the estimated run does not fit --gpu_memory.
int run(int argc, char** argv) {
  Args a;
  if (!parse_args(argc, argv, a)) return 0;
  json::object out;
  const Model m = read_model(a);
  out["num_params"] = m.total;
  out["largest_layer_params"] = m.largest;
  // The config is read before anything is printed: a bad one is the only line.
  std::optional<RunShape> run;
  std::optional<DsConfig> config;
  if (m.config) {
    run = make_run_shape(a, *m.config);
    config = make_ds_config(a, *m.config, *run);
    run->micro_batch = int(config->train_micro_batch_size_per_gpu);
  }
  if (a.generate) {
    const bool fits = report_generation(a, *m.config, *config, out);
    if (a.as_json) std::cout << json::serialize(out) << "\n";
    return fits ? 0 : 1;
  }
  if (a.stage == 2 || a.stage == 3) report_deepspeed_table(a, m, out);
  bool fits = true;
  if (m.config) {
    if (a.estimate_wanted()) {
      fits = report_estimate(a, *m.config, *config, *run, out);
      report_traffic(a, *m.config, *config, *run, out);
    }
    if (a.recommend_wanted()) fits = report_recommendation(a, *m.config, *config, *run, out);
  }
  if (a.as_json) std::cout << json::serialize(out) << "\n";
  return fits ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return run_tool("zero_estimate", [&] { return run(argc, argv); });
}
