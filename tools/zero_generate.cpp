// zero_generate --model_name_or_path DIR (--prompt TEXT | --prompt_file FILE | --input_ids "1 2 3")
//               [--max_new_tokens N] [--do_sample --temperature T --top_k K --top_p P --seed S]
// zero_generate --model_name_or_path DIR --prompts FILE [--output FILE] [--batch_size B] [--deepspeed DS.json]
//               (also under mpirun or srun)
//
// Generates from an HF model folder (config.json and safetensors, sharded or not: GPT-2, Llama,
// Mistral, Qwen2, or zero_to_fp32's export) or a zerotrain checkpoint (its master weights, from
// any world size and stage) with a KV cache: the prompt runs once, then one token per step. Text
// goes in and comes out through the folder's tokenizer.json (or --tokenizer);
// --input_ids and --output_ids skip it (and --input_ids alone prints ids where there is none).
// Sampling defaults come from generation_config.json as in HF generate, and flags override them.
// The continuation goes to stdout; speeds to stderr.
//
// --prompts FILE generates for every prompt of a file (data/prompts.h: text lines, or JSONL with
// "text" or "input_ids"), up to --batch_size sequences at once (each its own KV cache), each with
// a sampler seeded by --seed, so a prompt's continuation is the one it gets alone. Under mpirun or
// srun each rank takes prompts rank, rank + world, ...; rank 0 writes one JSON line a prompt, in
// the file's order, to --output (a new file, whole or not at all) or stdout. --deepspeed places
// the weights as the config does (ZeRO-Inference, zero/inference_weights.h): at stage 3 each rank
// holds its partition, on the device, in host memory or on NVMe, and the ranks run their forward
// passes in lockstep (model/generation_loop.h); otherwise each rank holds the whole model. Before
// anything loads, a run whose memory estimate passes what the machine has free is refused.
#include <mpi.h>

#include <algorithm>
#include <array>
#include <boost/json.hpp>
#include <boost/program_options.hpp>
#include <charconv>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "backend/accelerator.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/pretrained.h"
#include "checkpoint/safetensors.h"
#include "config/ds_config.h"
#include "config/generation_config.h"
#include "config/json_reader.h"
#include "config/model_config.h"
#include "comm/data_comm.h"
#include "comm/mpi_comm.h"
#include "comm/mpi_runtime.h"
#include "config/tool_options.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/human_units.h"
#include "core/log.h"
#include "core/memory_pool.h"
#include "core/tool_main.h"
#include "data/prompts.h"
#include "model/decoder.h"
#include "model/generation_loop.h"
#include "model/sampler.h"
#include "tokenizer/tokenizer.h"
#include "zero/inference_weights.h"
#include "zero/memory_estimate.h"

namespace po = boost::program_options;

namespace {

struct Args {
  std::string model, tokenizer, prompt, prompt_file, input_ids, prompts, output, deepspeed, accelerator = "auto";
  int max_new_tokens = 32, max_length = 0, batch_size = 1;
  bool batch_invariant = true;
  zt::SamplingParams sampling;
  uint64_t seed = 42;
  bool output_ids = false, no_special_tokens = false, keep_special_tokens = false;
  po::variables_map flags;  // which flags were given (generation_config.json fills the others)
};

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    for (char& c : word) c = c == ',' ? ' ' : c;
    std::istringstream parts(word);
    std::string part;
    while (parts >> part) {
      int32_t id = -1;
      auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), id);
      if (ec != std::errc() || end != part.data() + part.size() || id < 0) {
        throw zt::UsageError(zt::cat("--input_ids: '", part, "' is not a token id"));
      }
      ids.push_back(id);
    }
  }
  if (ids.empty()) throw zt::UsageError("--input_ids: no token ids");
  return ids;
}

// The flags the user gave win; generation_config.json fills the rest, as HF generate does.
void apply_generation_config(const po::variables_map& vm, const zt::GenerationConfig& g, Args& a) {
  auto unset = [&](const char* flag) { return vm[flag].defaulted() || !vm.count(flag); };
  if (g.do_sample && !vm["do_sample"].as<bool>()) a.sampling.do_sample = *g.do_sample;
  if (g.temperature && unset("temperature")) a.sampling.temperature = *g.temperature;
  if (g.top_k && unset("top_k")) a.sampling.top_k = *g.top_k;
  if (g.top_p && unset("top_p")) a.sampling.top_p = *g.top_p;
  if (g.max_new_tokens && unset("max_new_tokens")) a.max_new_tokens = *g.max_new_tokens;
}

// The KV cache's length for prompts of up to `longest` tokens: --max_length, else the longest
// prompt plus max_new_tokens, at most the model's positions. `where` names the longest prompt.
int cache_positions(const Args& a, const zt::ModelConfig& config, size_t longest, const std::string& where) {
  const int64_t wanted = a.max_length > 0 ? a.max_length : int64_t(longest) + a.max_new_tokens;
  const int positions = int(std::min<int64_t>(wanted, config.n_positions));
  ZT_USAGE_CHECK(int64_t(longest) < positions, where, "'s ", longest, " tokens leave no room in ", positions,
                 " positions");
  return positions;
}

// Each rank's (index, input ids, output ids) records, packed as int32 [index, n_in, in..., n_out,
// out...], gathered to rank 0 and unpacked there in the prompts' order. Collective.
struct Continuation {
  size_t index = 0;
  std::vector<int32_t> input_ids, output_ids;
};

std::vector<Continuation> gather_to_rank0(const std::vector<Continuation>& mine, size_t total) {
  std::vector<int32_t> packed;
  for (const Continuation& c : mine) {
    packed.push_back(int32_t(c.index));
    packed.push_back(int32_t(c.input_ids.size()));
    packed.insert(packed.end(), c.input_ids.begin(), c.input_ids.end());
    packed.push_back(int32_t(c.output_ids.size()));
    packed.insert(packed.end(), c.output_ids.begin(), c.output_ids.end());
  }
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  ZT_CHECK(packed.size() <= size_t(INT32_MAX), "rank ", rank, "'s continuations pass MPI's int count");
  const int count = int(packed.size());
  std::vector<int> counts(static_cast<size_t>(world)), displs(static_cast<size_t>(world));
  MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  size_t all = 0;
  for (int r = 0; r < world; ++r) {
    ZT_CHECK(all + size_t(counts[size_t(r)]) <= size_t(INT32_MAX), "the continuations pass MPI's int count");
    displs[size_t(r)] = int(all);
    all += size_t(counts[size_t(r)]);
  }
  std::vector<int32_t> everything(rank == 0 ? all : 0);
  MPI_Gatherv(packed.data(), count, MPI_INT, everything.data(), counts.data(), displs.data(), MPI_INT, 0,
              MPI_COMM_WORLD);
  std::vector<Continuation> out(rank == 0 ? total : 0);
  for (size_t at = 0; at < everything.size();) {
    Continuation c;
    c.index = size_t(everything[at++]);
    c.input_ids.assign(everything.begin() + long(at) + 1, everything.begin() + long(at) + 1 + everything[at]);
    at += 1 + c.input_ids.size();
    c.output_ids.assign(everything.begin() + long(at) + 1, everything.begin() + long(at) + 1 + everything[at]);
    at += 1 + c.output_ids.size();
    out[c.index] = std::move(c);
  }
  return out;
}

boost::json::array json_ids(const std::vector<int32_t>& ids) {
  boost::json::array out;
  for (int32_t id : ids) out.emplace_back(id);
  return out;
}

// The flags, checked: the same argv on every rank, so every rank agrees. nullopt: --help or --version.
std::optional<Args> parse_args(int argc, char** argv, const zt::ProcessPlace& place) {
  Args a;
  po::options_description opts("zero_generate --model_name_or_path DIR (--prompt TEXT | --prompts FILE)");
  opts.add_options()
    ("help,h", "print this help")
    ("model_name_or_path", po::value(&a.model),
     "an HF model folder (config.json and *.safetensors), or a zerotrain checkpoint (global_stepN, or an output "
     "directory with `latest`)")
    ("tokenizer", po::value(&a.tokenizer), "the tokenizer's folder or tokenizer.json (default: the model folder)")
    ("prompt", po::value(&a.prompt), "the text to continue")
    ("prompt_file", po::value(&a.prompt_file), "a file holding the text to continue")
    ("input_ids", po::value(&a.input_ids), "the prompt as token ids (\"1 2 3\" or \"1,2,3\"), no tokenizer needed")
    ("prompts", po::value(&a.prompts),
     "a file of prompts, one a line: text, or JSONL (*.jsonl, *.json) with \"text\" or \"input_ids\"; under mpirun "
     "each rank takes its share")
    ("output", po::value(&a.output),
     "with --prompts: a new JSONL file for the continuations, one line a prompt in the file's order (index, "
     "input_ids, output_ids, and text where there is a tokenizer); default: stdout")
    ("batch_size", po::value(&a.batch_size)->default_value(1),
     "with --prompts: sequences generated at once (each rank), each with its own KV cache; a finished one's "
     "place goes to the next prompt, and each gets the ids it would get alone")
    ("batch_invariant", po::value(&a.batch_invariant)->default_value(true)->implicit_value(true),
     "matrix products in one fixed order (KernelOps::set_batch_invariant), so a prompt's logits are bit for bit "
     "the ones it gets alone at any --batch_size; false: the GEMM library's, faster on long prompts, and a row "
     "may round differently beside others")
    ("deepspeed", po::value(&a.deepspeed),
     "a DeepSpeed config (ZeRO-Inference): stage 3 partitions the weights across the ranks and gathers each "
     "layer before use, offload_param keeps the partitions in host memory or on NVMe; stages 0-2 hold them "
     "whole on every rank (default: whole, fp32)")
    ("max_new_tokens", po::value(&a.max_new_tokens)->default_value(32), "tokens to generate at most")
    ("max_length", po::value(&a.max_length)->default_value(0),
     "the KV cache's length in tokens (default: prompt + max_new_tokens, at most max_position_embeddings)")
    ("do_sample", po::bool_switch(&a.sampling.do_sample), "sample instead of greedy decoding")
    ("temperature", po::value(&a.sampling.temperature)->default_value(1.0), "with --do_sample: divides the logits")
    ("top_k", po::value(&a.sampling.top_k)->default_value(50), "with --do_sample: keep the k most likely (0: all)")
    ("top_p", po::value(&a.sampling.top_p)->default_value(1.0), "with --do_sample: nucleus mass to keep")
    ("seed", po::value(&a.seed)->default_value(42),
     "with --do_sample: the draws' seed (a seed repeats a run; every prompt of --prompts starts from it)")
    ("no_special_tokens", po::bool_switch(&a.no_special_tokens), "encode the prompt without the BOS/post-processor")
    ("keep_special_tokens", po::bool_switch(&a.keep_special_tokens), "print special tokens in the output text")
    ("output_ids", po::bool_switch(&a.output_ids), "print the generated token ids instead of text")
    ("accelerator", po::value(&a.accelerator)->default_value("auto"), zt::kAcceleratorChoices);
  po::variables_map& vm = a.flags;
  if (!zt::parse_tool_command_line(argc, argv, opts, vm)) return std::nullopt;
  ZT_USAGE_CHECK(!a.model.empty(), "--model_name_or_path is required");
  ZT_USAGE_CHECK((!a.prompt.empty()) + (!a.prompt_file.empty()) + (!a.input_ids.empty()) + (!a.prompts.empty()) == 1,
                 "give exactly one of --prompt, --prompt_file, --input_ids and --prompts");
  ZT_USAGE_CHECK(a.output.empty() || !a.prompts.empty(), "--output goes with --prompts");
  ZT_USAGE_CHECK(!a.prompts.empty() || place.world_size == 1, "one prompt runs in one process; under mpirun or ",
                 "srun give --prompts FILE, whose prompts the ", place.world_size, " ranks share");
  ZT_USAGE_CHECK(a.max_new_tokens >= 1, "--max_new_tokens must be at least 1");
  ZT_USAGE_CHECK(a.batch_size >= 1, "--batch_size must be at least 1");
  std::error_code ec;
  ZT_USAGE_CHECK(a.output.empty() || !std::filesystem::exists(a.output, ec), "--output: ", a.output,
                 " exists; name a new file (nothing was overwritten)");
  return a;
}

// What this rank will hold at most (zero_estimate's arithmetic, zero/memory_estimate.h), logged
// before anything is loaded, beside the measured peaks at the end.
void log_estimate(const zt::GenerationMemory& m, const std::string& who) {
  zt::log_info(who, "memory estimate: device ", m.by_pool[int(zt::Pool::kDevice)], " B, host ",
               m.by_pool[int(zt::Pool::kHost)], " B, pinned ", m.by_pool[int(zt::Pool::kPinned)], " B, nvme ",
               m.by_pool[int(zt::Pool::kNvme)], " B (weights ", m.weights, " B, gathered at most ", m.gather,
               " B, KV cache ", m.kv_cache, " B = ", m.slots, " x ", m.kv_cache_per_sequence(), " B a sequence)");
}

// Refuses, before anything loads, a run whose estimate passes what this machine has now: a GPU's
// free memory for the device pool and the host's available memory for the host pools of the
// node's ranks together, or, where device memory is host memory (the CPU backends), the host's
// for all of it. The message says how many sequences would fit.
void check_memory_fits(const zt::GenerationMemory& m, const zt::Backend& backend, int batch_size, int positions,
                       int ranks_here) {
  const size_t device = m.by_pool[int(zt::Pool::kDevice)];
  const size_t host = m.by_pool[int(zt::Pool::kHost)] + m.by_pool[int(zt::Pool::kPinned)];
  const bool shared = backend.device_is_host_memory();
  struct Budget {
    size_t per_rank, ranks, available;
    const char* what;
  };
  for (const Budget& b : {Budget{shared ? device + host : device, shared ? size_t(ranks_here) : 1,
                                 backend.available_device_memory(),
                                 shared ? "host memory (the device's and the host pools')" : "device memory"},
                          Budget{shared ? 0 : host, size_t(ranks_here), zt::host_memory_available(), "host memory"}}) {
    const size_t need = b.per_rank * b.ranks;
    if (b.available == 0 || need <= b.available) continue;  // 0: not known here
    // Each sequence adds its KV cache (and a row of a few buffers, left out: the cache dwarfs it).
    const size_t per_sequence = std::max<size_t>(m.kv_cache_per_sequence(), 1) * b.ranks;
    const size_t fixed = need - std::min(need, m.kv_cache * b.ranks);
    const size_t fit = b.available > fixed ? (b.available - fixed) / per_sequence : 0;
    throw zt::UsageError(zt::cat(
        "--batch_size ", batch_size, ": ", m.slots, " sequence(s) of ", positions, " positions need ",
        zt::human_bytes(double(b.per_rank)), " of ", b.what, " on each rank",
        b.ranks > 1 ? zt::cat(" (", zt::human_bytes(double(need)), " for the ", b.ranks, " ranks of this node)") : "",
        " (KV cache ", m.slots, " x ", zt::human_bytes(double(m.kv_cache_per_sequence())), ", weights ",
        zt::human_bytes(double(m.weights)), ", gathered layers ", zt::human_bytes(double(m.gather)), ", buffers ",
        zt::human_bytes(double(m.decoder)), "), but ", zt::human_bytes(double(b.available)), " is available: ",
        fit == 0 ? std::string("not one sequence fits; a smaller --max_length") : zt::cat("at most ", fit, " fit"),
        ", or ZeRO stage 3 across more ranks, or offload_param, needs less (zero_estimate --generate); nothing was "
        "loaded"));
  }
}

// Rank 0 logs every rank's measured peak bytes in each pool (what zero_estimate predicts).
void log_memory_peaks(const zt::ProcessPlace& place) {
  const zt::PoolBytes peak = zt::pool_peaks();
  const std::array<unsigned long long, 4> mine{peak[zt::Pool::kDevice], peak[zt::Pool::kHost], peak[zt::Pool::kPinned],
                                               peak[zt::Pool::kNvme]};
  std::vector<unsigned long long> all(place.rank == 0 ? mine.size() * size_t(place.world_size) : 0);
  MPI_Gather(mine.data(), int(mine.size()), MPI_UNSIGNED_LONG_LONG, all.data(), int(mine.size()),
             MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
  for (size_t r = 0; r < all.size() / mine.size(); ++r) {
    const unsigned long long* p = all.data() + r * mine.size();
    zt::log_info(place.world_size > 1 ? zt::cat("rank ", r, ": ") : std::string(), "memory peak: device ", p[0],
                 " B, host ", p[1], " B, pinned ", p[2], " B, nvme ", p[3], " B");
  }
}

// The DeepSpeed config of --deepspeed, its "auto" values filled as the trainer fills them (the
// micro-batch from --batch_size), else DeepSpeed's defaults: stage 0, fp32.
zt::DsConfig load_config(const Args& a, int world_size, int64_t hidden_size) {
  zt::AutoValues autos;
  autos.world_size = world_size;
  autos.hidden_size = hidden_size;
  autos.micro_batch.value = a.batch_size;
  if (a.deepspeed.empty()) return zt::parse_ds_config(boost::json::object(), "the default config", autos);
  return zt::load_ds_config(a.deepspeed, autos);
}

// Where the weights come from: an HF folder (config.json and safetensors), or a zerotrain
// checkpoint (a global_stepN directory, or an output directory with `latest`), written at any
// world size and stage, whose shards each rank reads only its part of (HDF5's checksum of each
// chunk it reads checked).
struct WeightsFolder {
  std::optional<zt::SafetensorsReader> safetensors;
  std::optional<zt::CheckpointReader> checkpoint;
  zt::ModelConfig config;

  explicit WeightsFolder(const std::string& dir) {
    if (std::filesystem::exists(std::filesystem::path(dir) / "config.json")) {
      config = zt::load_model_config(dir + "/config.json");
      return;
    }
    checkpoint.emplace(dir, dir, nullptr, false, 0, 1, zt::CheckpointReader::Verify::kChunksRead);
    config = checkpoint->model_config();
  }
  /// The master weights, checked against the layout first.
  zt::StateSource source(const std::string& dir, const zt::ModelLayout& layout) {
    if (checkpoint) {
      return {[this](zt::StateField f, size_t lo, size_t hi, float* out) { checkpoint->read(f, lo, hi, out); }, false,
              std::nullopt, nullptr, nullptr, nullptr, nullptr};
    }
    safetensors.emplace(dir);
    zt::check_pretrained(*safetensors, layout, dir);
    return zt::pretrained_source(*safetensors, layout);
  }
};

int generate(Args a, const zt::ProcessPlace& place, zt::HostComm& comm) {
  const po::variables_map& vm = a.flags;
  WeightsFolder folder(a.model);
  const zt::ModelConfig& config = folder.config;
  const zt::GenerationConfig gen = zt::load_generation_config(a.model + "/generation_config.json");
  apply_generation_config(vm, gen, a);
  for (const auto& what : gen.not_applied) {
    if (place.rank == 0) {
      zt::log_warn(a.model, "/generation_config.json: ", what, " is not implemented; generating without it");
    }
  }
  ZT_USAGE_CHECK(a.sampling.temperature > 0, "--temperature must be > 0");
  ZT_USAGE_CHECK(a.sampling.top_p > 0 && a.sampling.top_p <= 1, "--top_p must be in (0, 1]");
  ZT_USAGE_CHECK(a.sampling.top_k >= 0, "--top_k must be >= 0");

  // The prompts: one from the flags, or this rank's share of the file's.
  std::vector<zt::Prompt> prompts;
  size_t total = 1;
  if (!a.prompts.empty()) {
    std::vector<zt::Prompt> all = zt::read_prompts(a.prompts, zt::input_format_of(a.prompts, "auto"));
    total = all.size();
    for (size_t i = size_t(place.rank); i < all.size(); i += size_t(place.world_size)) {
      prompts.push_back(std::move(all[i]));
    }
  } else if (!a.input_ids.empty()) {
    prompts.push_back(zt::Prompt{0, 0, "", parse_ids(a.input_ids)});
  } else {
    prompts.push_back(zt::Prompt{0, 0, a.prompt_file.empty() ? a.prompt : zt::read_text_file(a.prompt_file), {}});
  }
  const bool any_text =
      std::any_of(prompts.begin(), prompts.end(), [](const zt::Prompt& p) { return p.input_ids.empty(); });

  // The tokenizer is needed for text in or out. Ids in need none: where the model folder has no
  // tokenizer.json (and --tokenizer names none), ids come out too.
  const bool no_tokenizer =
      a.tokenizer.empty() && !std::filesystem::exists(std::filesystem::path(a.model) / "tokenizer.json");
  const bool print_ids = a.output_ids || (!a.input_ids.empty() && no_tokenizer);
  if (print_ids && !a.output_ids) {
    zt::log_info(a.model, ": no tokenizer.json, so the generated token ids are printed (as with --output_ids)");
  }
  std::unique_ptr<zt::Tokenizer> tokenizer;
  if (any_text || (a.prompts.empty() ? !print_ids : !no_tokenizer)) {
    tokenizer = zt::load_tokenizer(a.tokenizer.empty() ? a.model : a.tokenizer);
  }
  size_t longest = 0;
  std::string longest_where = "the prompt";
  for (zt::Prompt& p : prompts) {
    const std::string where = a.prompts.empty() ? "the prompt" : zt::cat(a.prompts, ":", p.line, ": the prompt");
    if (p.input_ids.empty()) {
      for (uint32_t id : tokenizer->encode(p.text, !a.no_special_tokens)) p.input_ids.push_back(int32_t(id));
      ZT_USAGE_CHECK(!p.input_ids.empty(), where, " encodes to no tokens");
    }
    for (int32_t id : p.input_ids) {
      ZT_USAGE_CHECK(id < config.vocab_size, where, " token ", id, " is outside the model's vocab_size ",
                     config.vocab_size);
    }
    if (p.input_ids.size() > longest) {
      longest = p.input_ids.size();
      longest_where = where;
    }
  }
  const int positions = prompts.empty() ? 1 : cache_positions(a, config, longest, longest_where);

  // Stop at any EOS HF would stop at: config.json's, generation_config.json's, the tokenizer's.
  zt::StopRule stop;
  stop.eos.insert(config.eos_token_ids.begin(), config.eos_token_ids.end());
  stop.eos.insert(gen.eos_token_ids.begin(), gen.eos_token_ids.end());
  if (tokenizer && tokenizer->eos_token_id()) stop.eos.insert(int32_t(*tokenizer->eos_token_id()));
  stop.max_new_tokens = a.max_new_tokens;

  const std::string who = place.world_size > 1 ? zt::cat("rank ", place.rank, ": ") : std::string();
  // The weights where the DeepSpeed config puts them (stage 3: this rank's partition, gathered a
  // unit at a time), read from the folder a chunk at a time; without --deepspeed, whole in fp32.
  std::unique_ptr<zt::Backend> backend = zt::make_backend(a.accelerator, place.local_rank, "--accelerator");
  const std::unique_ptr<zt::ModelLayout> layout = zt::make_model_layout(config);
  const zt::DsConfig ds = load_config(a, place.world_size, config.n_embd);
  const int slots = int(std::clamp<size_t>(prompts.size(), 1, size_t(a.batch_size)));
  const zt::GenerationMemory need = zt::estimate_generation_memory(config, ds, place.world_size, slots, positions);
  log_estimate(need, who);
  check_memory_fits(need, *backend, a.batch_size, positions, place.local_size);
  const zt::StateSource source = folder.source(a.model, *layout);
  const std::unique_ptr<zt::DataComm> data_comm = zt::make_data_comm(*backend, comm);
  zt::InferenceWeights params(ds, *layout, *backend, *data_comm, source);
  const std::unique_ptr<zt::Decoder> decoder = zt::make_decoder(*layout, *backend, params, positions, slots,
                                                                       a.batch_invariant);
  // At stage 3 every rank runs every pass (its gathers are collectives), idle where it has no work.
  zt::PassSync sync{[&](bool mine) { return comm.all_reduce_max(mine ? 1.0 : 0.0) > 0; },
                    [&](bool another) { params.end_pass(another); }};

  std::vector<std::vector<int32_t>> ids;
  for (const zt::Prompt& p : prompts) ids.push_back(p.input_ids);
  zt::GenerationStats g;
  std::vector<std::vector<int32_t>> continuations = zt::generate_continuations(
      *decoder, ids, a.sampling, a.seed, stop, config.vocab_size, g, params.lockstep() ? &sync : nullptr);
  std::vector<Continuation> mine;
  for (size_t i = 0; i < prompts.size(); ++i) {
    mine.push_back({prompts[i].index, prompts[i].input_ids, std::move(continuations[i])});
  }
  auto text_of = [&](const std::vector<int32_t>& ids) {
    return tokenizer->decode(std::vector<uint32_t>(ids.begin(), ids.end()), !a.keep_special_tokens);
  };

  if (a.prompts.empty()) {
    const std::vector<int32_t>& generated = mine.front().output_ids;
    if (print_ids) {
      for (size_t i = 0; i < generated.size(); ++i) std::cout << (i ? " " : "") << generated[i];
      std::cout << "\n";
    } else {
      std::cout << text_of(generated) << "\n";
    }
  } else {
    const std::vector<Continuation> all = gather_to_rank0(mine, total);
    if (place.rank == 0) {
      std::string lines;
      for (const Continuation& c : all) {
        boost::json::object line{{"index", c.index}, {"input_ids", json_ids(c.input_ids)},
                                 {"output_ids", json_ids(c.output_ids)}};
        if (tokenizer) line["text"] = text_of(c.output_ids);
        lines += boost::json::serialize(line) + "\n";
      }
      if (a.output.empty()) {
        std::cout << lines << std::flush;
      } else {
        zt::write_file_atomically(a.output, lines, false);
      }
    }
  }
  // Each prompt's first new token comes from its prompt's last pass; the decoding passes make the rest.
  zt::log_info(who, prompts.size(), prompts.size() == 1 ? " prompt, " : " prompts, ", g.prompt_tokens, " tokens in ",
               g.prefill_s * 1e3, " ms (", g.prefill_passes, " passes); ", g.new_tokens, " new tokens at ",
               g.decode_s > 0 ? double(g.new_tokens - prompts.size()) / g.decode_s : 0.0, " tokens/s (",
               g.decode_passes, " steps of up to ", slots, " sequences; ", backend->describe(),
               decoder->batch_invariant() ? "; batch-invariant GEMMs)" : "; library GEMMs)");
  const size_t held = params.lockstep() ? params.plan().partition.partition_size : layout->flat_size();
  zt::log_info(who, "ZeRO stage ", ds.zero.stage, ", ", zt::dtype_name(params.plan().dtype), " weights, ", held,
               " of the model's ", layout->flat_size(), " parameters held",
               params.lockstep() ? zt::cat(", ", g.idle_passes, " idle passes, at most ",
                                           params.peak_live_parameters(), " parameters gathered")
                                 : std::string());
  log_memory_peaks(place);
  return 0;
}

}  // namespace

// MPI for --prompts under mpirun or srun (a plain run is a world of one). A failure on one rank
// ends every rank (MpiRuntime::abort_job), never leaving the others in the gather.
int main(int argc, char** argv) {
  zt::set_log_program("zero_generate");
  std::optional<zt::MpiRuntime> mpi;
  try {
    mpi.emplace(&argc, &argv);
  } catch (const std::exception& e) {
    zt::log_line(zt::LogLevel::kError, e.what());
    return 1;
  }
  const zt::ProcessPlace& place = mpi->place();
  std::optional<Args> args;
  try {
    args = parse_args(argc, argv, place);
  } catch (const zt::UsageError& e) {
    if (place.rank == 0) zt::log_line(zt::LogLevel::kError, e.what());  // every rank saw the same
    return 2;
  }
  if (!args) return 0;
  zt::MpiComm comm(MPI_COMM_WORLD);
  if (place.world_size == 1) return zt::run_tool("zero_generate", [&] { return generate(*args, place, comm); });
  try {
    const int code = generate(*args, place, comm);
    zt::check_log_written();
    return code;
  } catch (const zt::UsageError& e) {
    zt::MpiRuntime::abort_job(2, e.what());
  } catch (const std::exception& e) {
    zt::MpiRuntime::abort_job(1, e.what());
  }
}
