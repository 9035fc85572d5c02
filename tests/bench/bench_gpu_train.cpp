// Training throughput on one GPU: GPT-2 124M (12 layers, 768 wide, vocab 50257), batch 16 x 1024
// tokens, bf16 mixed precision, ZeRO stage 0 on one rank: tokens per second and MFU (model FLOPs
// over the device's dense bf16 peak), printed beside llm.c's published figure for the same model
// and shape (about 145K tokens/s on one A100 40GB with cuDNN attention). The check: at least
// --target tokens/s (160K, the target on one H100); exits 1 when missed, 77 without a GPU.
// --model llama trains the Llama family's shape instead (--kv_heads, --intermediate; untied head).
// --activation_dtype auto (bf16 activations in a bf16 run, as the trainer on a GPU) | fp32 | bf16.
// ZeRO-Offload's headline (a model larger than the GPU, its optimizer stepped by the CPU):
// --stage 2 --offload_optimizer cpu --gradient_checkpointing --accumulation N, and
// --delayed_param_update W (W >= 2): steps W and later run the CPU Adam beside the next step
// (zerotrain's --delayed_param_update with --delayed_param_update_warmup W; -1, the default:
// never). One run then times both: steps 1 .. W-1 undelayed (RESULT's tokens_per_s, step_ms,
// mfu), steps W+1 .. --steps delayed (RESULT's dpu_tokens_per_s, dpu_step_ms, dpu_mfu); step W,
// whose own update is the first delayed and overlaps nothing, is in neither.
// --classifier_chunk_tokens auto | 0 | N, as zerotrain's (auto: chunks when the batch's logits would
// pass 1 GiB).
// --loss_check N instead trains N steps of the same batch twice, a bf16 model (bf16 parameters
// and activations) and an fp32 one from the same initialisation, and checks that both learn (the
// last loss at least 0.5 under the first) and that the bf16 losses stay within --loss_tolerance
// (default 0.10: 10 %) of the fp32 ones, relative, at every step. Learning one batch by heart is
// chaotic: the two trajectories part by bf16's rounding and wander. On an H100, 2026-11-26, GPT-2
// 124M at 4 x 1024 ours differed by up to 1.9 % (issue 30's first kernels) and 6.3 % (its padded
// lm_head GEMMs, which sum in another order: a new trajectory, not an error; the kernels match
// the CPU's op by op), and PyTorch's own bf16 autocast from its fp32 by up to 69 % on the same
// test (torch_gpu_train.py --loss_check 50): the tolerance catches a bf16 path that does not
// learn or learns something else, not rounding. gpu_perf.sh prints both drifts side by side.
// 'RESULT loss_steps=N max_loss_diff=X max_rel_diff=X final_bf16=X final_fp32=X tolerance=X',
// exit 1 when missed.
// Usage: bench_gpu_train [--model gpt2 --layers 12 --embd 768 --heads 12 --kv_heads 0 --intermediate 0
//                         --vocab 50257 --block 1024 --batch 16 --steps 10 --dtype bf16
//                         --activation_dtype auto --stage 0 --offload_optimizer none
//                         --gradient_checkpointing --accumulation 1 --target 160000 --peak_tflops 0
//                         --classifier_chunk_tokens auto --loss_check 0 --loss_tolerance 0.10
//                         --delayed_param_update -1]
// Its last line: RESULT tokens_per_s=... step_ms=... mfu=... peak_device_bytes=... target=...
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/accelerator.h"
#include "backend/cuda/cublaslt_gemm.h"
#include "backend/cuda/cuda_backend.h"
#include "comm/data_comm.h"
#include "comm/self_comm.h"
#include "config/tool_options.h"
#include "core/error.h"
#include "core/timer.h"
#include "config/train_args.h"
#include "core/memory_pool.h"
#include "zero/engine_model.h"
#include "zero/engine.h"

using namespace zt;
namespace po = boost::program_options;

namespace {

constexpr double kLlmcA100TokensPerSecond = 145e3;

// Dense bf16 tensor-core peak of the GPUs we run on (NVIDIA's data sheets, without sparsity).
double peak_bf16_tflops(const std::string& device) {
  if (device.find("H200") != std::string::npos) return 989;
  if (device.find("H100") != std::string::npos) return device.find("PCIe") != std::string::npos ? 756 : 989;
  if (device.find("A100") != std::string::npos) return 312;
  return 0;
}

}  // namespace

int main(int argc, char** argv) try {
  int layers = 12, embd = 768, heads = 12, kv_heads = 0, intermediate = 0, vocab = 50257, block = 1024, batch = 16,
      steps = 10, stage = 0, accumulation = 1, loss_check = 0;
  int64_t delayed_update = -1;
  double loss_tolerance = 0.10;
  bool checkpointing = false;
  std::string offload = "none";
  double target = 160e3, peak_tflops = 0;
  std::string dtype = "bf16", model_type = "gpt2", activation_dtype = "auto", classifier_chunk = "auto";
  po::options_description opts("bench_gpu_train");
  opts.add_options()("layers", po::value(&layers))("embd", po::value(&embd))("heads", po::value(&heads))(
      "vocab", po::value(&vocab))("block", po::value(&block))("batch", po::value(&batch))("steps", po::value(&steps))(
      "dtype", po::value(&dtype))("target", po::value(&target))("peak_tflops", po::value(&peak_tflops))(
      "model", po::value(&model_type))("kv_heads", po::value(&kv_heads))("intermediate", po::value(&intermediate))(
      "activation_dtype", po::value(&activation_dtype))("stage", po::value(&stage))(
      "offload_optimizer", po::value(&offload))("gradient_checkpointing", po::bool_switch(&checkpointing))(
      "accumulation", po::value(&accumulation))("loss_check", po::value(&loss_check))(
      "loss_tolerance", po::value(&loss_tolerance))("classifier_chunk_tokens", po::value(&classifier_chunk))(
      "delayed_param_update", po::value(&delayed_update));
  po::variables_map vm;
  parse_tool_command_line(argc, argv, opts, vm);
  ZT_USAGE_CHECK(steps >= 1 && batch >= 1 && block >= 1, "--steps, --batch and --block must be >= 1");
  ZT_USAGE_CHECK(stage >= 0 && stage <= 3 && accumulation >= 1, "--stage must be 0-3 and --accumulation >= 1");
  ZT_USAGE_CHECK(loss_check >= 0 && loss_tolerance > 0, "--loss_check must be >= 0 and --loss_tolerance > 0");
  ZT_USAGE_CHECK(offload == "none" || offload == "cpu", "--offload_optimizer must be none or cpu, got '", offload, "'");
  ZT_USAGE_CHECK(delayed_update < 0 || (offload == "cpu" && delayed_update >= 2 && steps > delayed_update),
                 "--delayed_param_update W needs --offload_optimizer cpu, W >= 2 and --steps > W (steps 1 .. W-1 "
                 "are timed undelayed, W+1 .. --steps delayed)");
  ZT_USAGE_CHECK(model_type == "gpt2" || model_type == "llama", "--model must be gpt2 or llama, got '", model_type,
                 "'");
  if (cuda::device_count() == 0) {
    std::printf("skipped: no usable GPU (%s)\n", cuda::unavailable_reason().c_str());
    return 77;
  }

  ModelConfig mc;
  mc.n_layer = layers;
  mc.n_embd = embd;
  mc.n_head = heads;
  mc.vocab_size = vocab;
  mc.n_positions = block;
  if (model_type == "llama") {
    mc.model_type = "llama";
    mc.n_kv_head = kv_heads > 0 ? kv_heads : heads;
    mc.intermediate_size = intermediate > 0 ? intermediate : 4 * embd;
    mc.rope_theta = 500000.0;  // Llama 3's
    mc.tie_word_embeddings = false;
    mc.layer_norm_epsilon = 1e-5;
  }
  DsConfig ds;
  ds.train_micro_batch_size_per_gpu = batch;
  ds.gradient_accumulation_steps = accumulation;
  ds.train_batch_size = int64_t(batch) * accumulation;
  ds.zero.stage = stage;
  if (offload == "cpu") {
    ds.zero.offload_optimizer.device = OffloadConfig::Device::kCpu;
    ds.zero.offload_optimizer.pin_memory = true;
  }
  ds.zero.delayed_param_update_after = delayed_update;
  ds.optimizer.lr = 1e-4;
  ds.gradient_clipping = 1.0;
  ds.bf16 = dtype == "bf16";
  ds.fp16.enabled = dtype == "fp16";

  auto backend = make_backend("cuda", 0, "bench_gpu_train");
  const std::unique_ptr<ModelLayout> layout_ptr = make_model_layout(mc);
  const ModelLayout& layout = *layout_ptr;
  SelfComm comm;
  auto data_comm = make_data_comm(*backend, comm);
  const int BT = batch * block;
  const double tokens_per_step = double(BT) * accumulation;
  std::vector<int32_t> in(BT), tg(BT);
  for (int i = 0; i < BT; ++i) {
    in[i] = int32_t((uint64_t(i) * 2654435761u) % uint64_t(vocab));
    tg[i] = int32_t((uint64_t(i + 1) * 2654435761u) % uint64_t(vocab));
  }
  // An engine and the model computing with it, from the same initialisation every time.
  struct Run {
    std::unique_ptr<ZeroEngine> engine;
    std::unique_ptr<BoundModel> model;
    /// One optimizer step over the batch; returns its mean loss.
    double step(const std::vector<int32_t>& in, const std::vector<int32_t>& tg, int batch, int block, int micro) {
      for (int m = 0; m < micro; ++m) {
        model->forward(in.data(), tg.data(), batch, block, 1.0, engine->backward_scale());
        model->backward(engine->backward_scale());
      }
      engine->step();
      return model->take_loss() / micro;  // reads the loss: the step's work has finished on the device
    }
  };
  auto make_run = [&](const DsConfig& cfg, DType activations) {
    Run r;
    r.engine = std::make_unique<ZeroEngine>(layout, *backend, *data_comm, comm, cfg, activations);
    r.engine->init_params(1);
    r.model = make_engine_model(*r.engine, layout, *backend, batch, block, checkpointing,
                                parse_classifier_chunk(classifier_chunk));
    return r;
  };

  if (loss_check > 0) {
    DsConfig fp32 = ds;
    fp32.optimizer.lr = 6e-4;  // GPT-2's: the batch is learnt within the steps
    fp32.bf16 = false;
    fp32.fp16.enabled = false;
    DsConfig half = fp32;
    half.bf16 = true;
    std::vector<double> lb, lf;
    {
      Run r = make_run(half, DType::kBF16);
      for (int s = 0; s < loss_check; ++s) lb.push_back(r.step(in, tg, batch, block, accumulation));
    }
    {
      Run r = make_run(fp32, DType::kF32);
      for (int s = 0; s < loss_check; ++s) lf.push_back(r.step(in, tg, batch, block, accumulation));
    }
    double worst = 0, worst_rel = 0;
    std::printf("# loss check: %s, %d steps of one batch, a bf16 model against fp32\n%8s %10s %10s %10s\n",
                backend->describe().c_str(), loss_check, "step", "bf16", "fp32", "diff");
    for (int s = 0; s < loss_check; ++s) {
      worst = std::max(worst, std::fabs(lb[size_t(s)] - lf[size_t(s)]));
      worst_rel = std::max(worst_rel, std::fabs(lb[size_t(s)] - lf[size_t(s)]) / std::fabs(lf[size_t(s)]));
      if (s % 10 == 0 || s + 1 == loss_check) {
        std::printf("%8d %10.4f %10.4f %10.4f\n", s + 1, lb[size_t(s)], lf[size_t(s)], lb[size_t(s)] - lf[size_t(s)]);
      }
    }
    std::printf("RESULT loss_steps=%d max_loss_diff=%.5f max_rel_diff=%.5f final_bf16=%.5f final_fp32=%.5f "
                "tolerance=%.3f\n",
                loss_check, worst, worst_rel, lb.back(), lf.back(), loss_tolerance);
    if (!(worst_rel <= loss_tolerance) || !(lf.back() < lf.front() - 0.5) || !(lb.back() < lb.front() - 0.5)) {
      std::printf("FAIL: the bf16 losses differ by up to %.2f %% (tolerance %.1f %%), or a run did not learn\n",
                  worst_rel * 100, loss_tolerance * 100);
      return 1;
    }
    return 0;
  }

  const DType activations = resolve_activation_dtype(activation_dtype, ds.param_dtype(), true);
  Run run = make_run(ds, activations);
  BoundModel& model = *run.model;

  const std::string device = backend->describe();
  if (peak_tflops <= 0) peak_tflops = peak_bf16_tflops(device);
  std::printf("# zerotrain GPU training benchmark: %s\n", device.c_str());
  std::printf("# model %s %dL %dC %dH vocab %d, %zu params, batch %dx%d x %d micro-steps, %s (activations %s), "
              "ZeRO stage %d, offload_optimizer %s%s%s\n",
              model_type.c_str(), layers, embd, heads, vocab, layout.num_params(), batch, block, accumulation,
              dtype.c_str(), dtype_name(activations), stage, offload.c_str(),
              checkpointing ? ", gradient checkpointing" : "",
              delayed_update >= 0 ? cat(", delayed parameter update after ", delayed_update, " steps").c_str() : "");
  std::printf("%8s %12s %14s %8s\n", "step", "ms", "tokens/s", "MFU");
  // Model FLOPs: forward and backward, not checkpointing's recompute (MFU, not hardware FLOPs).
  const double flops_per_step = 3.0 * model.flops_per_token_forward(block) * tokens_per_step;
  // MFU of a step that took `sec` (0 where the card's peak is unknown); the median of some steps.
  auto mfu_of = [&](double sec) { return peak_tflops > 0 ? flops_per_step / sec / (peak_tflops * 1e12) : 0.0; };
  auto median_of = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::vector<double> times, delayed_times;
  // The engine delays the steps whose update starts after W updates (the warm-up's step 0 is one).
  const int first_delayed = delayed_update >= 0 ? int(delayed_update) : steps + 1;
  for (int s = 0; s <= steps; ++s) {  // step 0 warms up (cuBLASLt heuristics, allocator) and is not counted
    Stopwatch w;
    run.step(in, tg, batch, block, accumulation);
    const double sec = w.seconds();
    const double mfu = mfu_of(sec);
    const char* what = s == 0 ? "  (warm-up)" : s == first_delayed ? "  (first delayed: not counted)"
                                            : s > first_delayed ? "  (delayed)" : "";
    std::printf("%8d %12.1f %14.0f %7.1f%%%s\n", s, sec * 1e3, tokens_per_step / sec, mfu * 100, what);
    if (s > 0 && s < first_delayed) times.push_back(sec);
    if (s > first_delayed) delayed_times.push_back(sec);
  }
  const double median = median_of(times);
  const double tokens = tokens_per_step / median, mfu = mfu_of(median);
  std::printf("# median step %.1f ms: %.0f tokens/s, MFU %.1f%% of %.0f TFLOP/s dense bf16\n", median * 1e3, tokens,
              mfu * 100, peak_tflops);
  std::printf("# llm.c, same model and shape: about %.0fK tokens/s on one A100 (its README); ours / that: %.2f\n",
              kLlmcA100TokensPerSecond / 1e3, tokens / kLlmcA100TokensPerSecond);
  // Which GEMM path ran: a fused op cuBLASLt declined ran composed, correct but slower.
  const cuda::GemmCounts gemms = cuda::gemm_counts();
  std::printf("# cuBLASLt: %zu fused GEMMs launched (residual addend, GELU epilogues), %zu declined and composed\n",
              gemms.fused_launches, gemms.declined_calls);
  const size_t peak_device = pool_peaks().bytes[size_t(Pool::kDevice)];
  std::string delayed;
  if (!delayed_times.empty()) {
    const double d = median_of(delayed_times), dmfu = mfu_of(d);
    std::printf("# delayed parameter update: median step %.1f ms: %.0f tokens/s, MFU %.1f%% (undelayed %.1f ms)\n",
                d * 1e3, tokens_per_step / d, dmfu * 100, median * 1e3);
    char text[160];
    std::snprintf(text, sizeof(text), " dpu_tokens_per_s=%.0f dpu_step_ms=%.2f dpu_mfu=%.4f", tokens_per_step / d,
                  d * 1e3, dmfu);
    delayed = text;
  }
  std::printf("RESULT tokens_per_s=%.0f step_ms=%.2f mfu=%.4f peak_device_bytes=%zu target=%.0f%s\n", tokens,
              median * 1e3, mfu, peak_device, target, delayed.c_str());
  if (tokens < target) {
    std::printf("FAIL: %.0f tokens/s is below the target of %.0f\n", tokens, target);
    return 1;
  }
  return 0;
} catch (const UsageError& e) {
  std::fprintf(stderr, "bench_gpu_train: %s\n", e.what());
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_gpu_train: error: %s\n", e.what());
  return 1;
}
