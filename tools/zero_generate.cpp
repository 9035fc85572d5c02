// zero_generate --model_name_or_path DIR (--prompt TEXT | --prompt_file FILE | --input_ids "1 2 3")
//               [--max_new_tokens N] [--do_sample --temperature T --top_k K --top_p P --seed S]
//
// Generates from an HF model folder (config.json and safetensors, sharded or not: GPT-2, Llama,
// Mistral, Qwen2, or zero_to_fp32's export) with a KV cache: the prompt runs once, then one token
// per step. Text goes in and comes out through the folder's tokenizer.json (or --tokenizer);
// --input_ids and --output_ids skip it (and --input_ids alone prints ids where there is none). Sampling defaults come from generation_config.json as in
// HF generate, and flags override them. The continuation goes to stdout; speeds to stderr.
#include <boost/program_options.hpp>
#include <charconv>
#include <filesystem>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "backend/accelerator.h"
#include "checkpoint/pretrained.h"
#include "checkpoint/safetensors.h"
#include "config/generation_config.h"
#include "config/json_reader.h"
#include "config/model_config.h"
#include "config/tool_options.h"
#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "core/tool_main.h"
#include "model/decoder.h"
#include "model/sampler.h"
#include "tokenizer/tokenizer.h"

namespace po = boost::program_options;

namespace {

struct Args {
  std::string model, tokenizer, prompt, prompt_file, input_ids, accelerator = "auto";
  int max_new_tokens = 32, max_length = 0;
  zt::SamplingParams sampling;
  uint64_t seed = 42;
  bool output_ids = false, no_special_tokens = false, keep_special_tokens = false;
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

int run(int argc, char** argv) {
  Args a;
  po::options_description opts("zero_generate --model_name_or_path DIR --prompt TEXT");
  opts.add_options()
    ("help,h", "print this help")
    ("model_name_or_path", po::value(&a.model), "an HF model folder: config.json and *.safetensors")
    ("tokenizer", po::value(&a.tokenizer), "the tokenizer's folder or tokenizer.json (default: the model folder)")
    ("prompt", po::value(&a.prompt), "the text to continue")
    ("prompt_file", po::value(&a.prompt_file), "a file holding the text to continue")
    ("input_ids", po::value(&a.input_ids), "the prompt as token ids (\"1 2 3\" or \"1,2,3\"), no tokenizer needed")
    ("max_new_tokens", po::value(&a.max_new_tokens)->default_value(32), "tokens to generate at most")
    ("max_length", po::value(&a.max_length)->default_value(0),
     "the KV cache's length in tokens (default: prompt + max_new_tokens, at most max_position_embeddings)")
    ("do_sample", po::bool_switch(&a.sampling.do_sample), "sample instead of greedy decoding")
    ("temperature", po::value(&a.sampling.temperature)->default_value(1.0), "with --do_sample: divides the logits")
    ("top_k", po::value(&a.sampling.top_k)->default_value(50), "with --do_sample: keep the k most likely (0: all)")
    ("top_p", po::value(&a.sampling.top_p)->default_value(1.0), "with --do_sample: nucleus mass to keep")
    ("seed", po::value(&a.seed)->default_value(42), "with --do_sample: the draws' seed (a seed repeats a run)")
    ("no_special_tokens", po::bool_switch(&a.no_special_tokens), "encode the prompt without the BOS/post-processor")
    ("keep_special_tokens", po::bool_switch(&a.keep_special_tokens), "print special tokens in the output text")
    ("output_ids", po::bool_switch(&a.output_ids), "print the generated token ids instead of text")
    ("accelerator", po::value(&a.accelerator)->default_value("auto"), zt::kAcceleratorChoices);
  po::variables_map vm;
  if (!zt::parse_tool_command_line(argc, argv, opts, vm)) return 0;
  ZT_USAGE_CHECK(!a.model.empty(), "--model_name_or_path is required");
  ZT_USAGE_CHECK((!a.prompt.empty()) + (!a.prompt_file.empty()) + (!a.input_ids.empty()) == 1,
                 "give exactly one of --prompt, --prompt_file and --input_ids");
  ZT_USAGE_CHECK(a.max_new_tokens >= 1, "--max_new_tokens must be at least 1");

  const zt::ModelConfig config = zt::load_model_config(a.model + "/config.json");
  const zt::GenerationConfig gen = zt::load_generation_config(a.model + "/generation_config.json");
  apply_generation_config(vm, gen, a);
  for (const auto& what : gen.not_applied) {
    zt::log_warn(a.model, "/generation_config.json: ", what, " is not implemented; generating without it");
  }
  ZT_USAGE_CHECK(a.sampling.temperature > 0, "--temperature must be > 0");
  ZT_USAGE_CHECK(a.sampling.top_p > 0 && a.sampling.top_p <= 1, "--top_p must be in (0, 1]");
  ZT_USAGE_CHECK(a.sampling.top_k >= 0, "--top_k must be >= 0");

  // The prompt's ids; the tokenizer is needed for text in or out. Ids in need none: where the
  // model folder has no tokenizer.json (and --tokenizer names none), ids come out too.
  const bool no_tokenizer =
      a.tokenizer.empty() && !std::filesystem::exists(std::filesystem::path(a.model) / "tokenizer.json");
  const bool print_ids = a.output_ids || (!a.input_ids.empty() && no_tokenizer);
  if (print_ids && !a.output_ids) {
    zt::log_info(a.model, ": no tokenizer.json, so the generated token ids are printed (as with --output_ids)");
  }
  std::unique_ptr<zt::Tokenizer> tokenizer;
  if (a.input_ids.empty() || !print_ids) tokenizer = zt::load_tokenizer(a.tokenizer.empty() ? a.model : a.tokenizer);
  std::vector<int32_t> prompt;
  if (!a.input_ids.empty()) {
    prompt = parse_ids(a.input_ids);
  } else {
    const std::string text = a.prompt_file.empty() ? a.prompt : zt::read_text_file(a.prompt_file);
    for (uint32_t id : tokenizer->encode(text, !a.no_special_tokens)) prompt.push_back(int32_t(id));
    ZT_USAGE_CHECK(!prompt.empty(), "the prompt encodes to no tokens");
  }
  for (int32_t id : prompt) {
    ZT_USAGE_CHECK(id < config.vocab_size, "prompt token ", id, " is outside the model's vocab_size ", config.vocab_size);
  }
  const int wanted = a.max_length > 0 ? a.max_length : int(prompt.size()) + a.max_new_tokens;
  const int positions = std::min(wanted, config.n_positions);
  ZT_USAGE_CHECK(int(prompt.size()) < positions, "the prompt's ", prompt.size(), " tokens leave no room in ", positions,
                 " positions");

  // Stop at any EOS HF would stop at: config.json's, generation_config.json's, the tokenizer's.
  std::set<int32_t> eos(config.eos_token_ids.begin(), config.eos_token_ids.end());
  eos.insert(gen.eos_token_ids.begin(), gen.eos_token_ids.end());
  if (tokenizer && tokenizer->eos_token_id()) eos.insert(int32_t(*tokenizer->eos_token_id()));

  // The weights, converted to fp32 once and copied to the device.
  std::unique_ptr<zt::Backend> backend = zt::make_backend(a.accelerator, 0, "--accelerator");
  const std::unique_ptr<zt::ModelLayout> layout = zt::make_model_layout(config);
  zt::SafetensorsReader weights(a.model);
  zt::check_pretrained(weights, *layout, a.model);
  zt::DeviceArray<float> device_weights(*backend, layout->flat_size());
  {
    zt::DeviceArray<float> staging(*backend, layout->flat_size(), zt::Pool::kPinned);
    zt::pretrained_source(weights, *layout).read(zt::StateField::kMaster, 0, layout->flat_size(), staging.data());
    backend->copy_async(device_weights.data(), staging.data(), staging.bytes(), backend->compute_stream());
    backend->synchronize(backend->compute_stream());
  }
  const std::unique_ptr<zt::Decoder> decoder = zt::make_decoder(*layout, *backend, device_weights.data(), positions);
  zt::Sampler sampler(a.sampling, a.seed);

  zt::Stopwatch prefill_clock;
  const float* logits = decoder->append(prompt);
  const double prefill_s = prefill_clock.seconds();
  zt::Stopwatch decode_clock;
  std::vector<int32_t> generated;
  while (true) {
    const int32_t next = sampler.next(logits, config.vocab_size);
    generated.push_back(next);
    if (eos.count(next) || int(generated.size()) >= a.max_new_tokens || decoder->position() >= positions) break;
    logits = decoder->append({next});
  }
  const double decode_s = decode_clock.seconds();

  if (print_ids) {
    for (size_t i = 0; i < generated.size(); ++i) std::cout << (i ? " " : "") << generated[i];
    std::cout << "\n";
  } else {
    const std::vector<uint32_t> ids(generated.begin(), generated.end());
    std::cout << tokenizer->decode(ids, !a.keep_special_tokens) << "\n";
  }
  zt::log_info("prompt ", prompt.size(), " tokens in ", prefill_s * 1e3, " ms; ", generated.size(),
               " new tokens at ", generated.size() > 1 ? double(generated.size() - 1) / decode_s : 0.0,
               " tokens/s (", backend->describe(), ")");
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return zt::run_tool("zero_generate", [&] { return run(argc, argv); }); }
