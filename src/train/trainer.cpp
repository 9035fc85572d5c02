// The training loop. Read it top to bottom: set-up, then per step the batch, forward, backward,
// the optimizer step, then logging; evaluation at --eval_steps and at the end.
#include "train/trainer.h"

#include <omp.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "config/ds_config.h"
#include "config/model_config.h"
#include "core/log.h"
#include "core/memory_pool.h"
#include "core/timer.h"
#include "data/sampler.h"
#include "data/token_shard.h"
#include "model/gpt2.h"
#include "model/gpt2_layout.h"
#include "train/metrics.h"
#include "train/output_dir.h"
#include "train/progress.h"
#include "zero/engine.h"

namespace zt {

namespace {

boost::json::object pool_json(const PoolBytes& bytes) {
  boost::json::object o;
  for (int p = 0; p < kNumPools; ++p) o[pool_name(Pool(p))] = bytes.bytes[p];
  return o;
}

// The mean loss over every prediction of the eval windows (DESIGN.md's fixed definition).
double evaluate(Gpt2Model<float>& model, ZeroEngine& engine, const EvalWindows& windows, int batch, int seq_len) {
  std::vector<int32_t> inputs(size_t(batch) * seq_len), targets(size_t(batch) * seq_len);
  double total = 0;
  int64_t predictions = 0;
  for (int64_t first = 0; first < windows.count(); first += batch) {
    int n = int(std::min<int64_t>(batch, windows.count() - first));
    windows.fill(first, n, inputs.data(), targets.data());
    total += model.forward(engine, inputs.data(), targets.data(), n, seq_len) * double(n) * seq_len;
    predictions += int64_t(n) * seq_len;
  }
  return predictions > 0 ? total / double(predictions) : 0.0;
}

std::string human_count(double x) {
  char buf[32];
  if (x >= 1e9) std::snprintf(buf, sizeof(buf), "%.2fB", x / 1e9);
  else if (x >= 1e6) std::snprintf(buf, sizeof(buf), "%.2fM", x / 1e6);
  else if (x >= 1e3) std::snprintf(buf, sizeof(buf), "%.1fk", x / 1e3);
  else std::snprintf(buf, sizeof(buf), "%.0f", x);
  return buf;
}

}  // namespace

int run_trainer(const TrainArgs& args) {
  // ---- configuration: everything is validated before anything is written ----
  ZT_USAGE_CHECK(args.model_name_or_path.empty(),
                 "--model_name_or_path: loading pretrained weights is not implemented in this build yet; "
                 "use --config_name MODEL.json");
  const ModelConfig model_config = load_model_config(args.config_name);
  const int world_size = 1;
  const int seq_len = args.block_size > 0 ? int(args.block_size) : model_config.n_positions;
  ZT_USAGE_CHECK(seq_len <= model_config.n_positions, "--block_size ", seq_len, " exceeds n_positions ",
                 model_config.n_positions, " of ", args.config_name);
  const DsConfig ds = load_ds_config(args.deepspeed, args.auto_values(world_size, model_config.n_embd));
  const int micro_batch = int(ds.train_micro_batch_size_per_gpu);
  const int64_t accumulation = ds.gradient_accumulation_steps;

  std::optional<TokenDataset> train_data, eval_data;
  if (args.max_steps > 0) train_data.emplace(args.train_data, model_config.vocab_size);
  if (!args.eval_data.empty()) eval_data.emplace(args.eval_data, model_config.vocab_size);
  std::optional<DistributedSampler> sampler;
  if (train_data) sampler.emplace(*train_data, seq_len, args.seed);
  std::optional<EvalWindows> eval_windows;
  if (eval_data) eval_windows.emplace(*eval_data, seq_len, args.max_eval_samples);

  prepare_output_dir(args.output_dir, args.overwrite_output_dir);
  MetricsWriter metrics(args.output_dir + "/metrics.jsonl");

  // ---- model and engine ----
  std::unique_ptr<Backend> backend = make_cpu_backend();
  const Gpt2Layout layout(model_config);
  ZeroEngine engine(layout, *backend, ds);
  engine.init_params(args.seed);
  const int eval_batch = int(args.per_device_eval_batch_size);
  Gpt2Model<float> model(layout, *backend, backend->ops(), std::max(micro_batch, eval_batch), seq_len,
                         args.gradient_checkpointing);

  const ModelStateBytes states = engine.model_state_bytes();
  log_info("model: GPT-2 ", model_config.n_layer, "L ", model_config.n_embd, "C ", model_config.n_head, "H, ",
           human_count(double(layout.num_params())), " parameters, vocab ", model_config.vocab_size, ", block ",
           seq_len);
  log_info("backend: ", backend->describe());
  log_info("training: ", dtype_name(ds.param_dtype()), ", ZeRO stage ", ds.zero.stage, ", world size ", world_size,
           ", batch ", ds.train_batch_size, " = ", micro_batch, " x ", accumulation, " x ", world_size,
           args.gradient_checkpointing ? ", gradient checkpointing" : "");
  metrics.write("start",
                {{"world_size", world_size},
                 {"stage", ds.zero.stage},
                 {"dtype", dtype_name(ds.param_dtype())},
                 {"num_params", layout.num_params()},
                 {"model_state_bytes",
                  {{"params", states.params}, {"grads", states.grads}, {"master", states.master},
                   {"exp_avg", states.exp_avg}, {"exp_avg_sq", states.exp_avg_sq}}},
                 {"buffer_bytes", {{"buckets", 0}, {"gather", 0}, {"prefetch", 0}, {"working", engine.buffer_bytes()}}},
                 {"activation_bytes", model.activation_bytes()},
                 {"train_batch_size", ds.train_batch_size},
                 {"block_size", seq_len},
                 {"max_steps", args.max_steps}});

  auto run_eval = [&](int64_t step) {
    Stopwatch clock;
    double eval_loss = evaluate(model, engine, *eval_windows, eval_batch, seq_len);
    metrics.write("eval", {{"step", step}, {"eval_loss", eval_loss}, {"windows", eval_windows->count()},
                           {"seconds", clock.seconds()}});
    return eval_loss;
  };

  // ---- the training loop ----
  const int64_t tokens_per_step = ds.train_batch_size * seq_len;
  const double flops_per_step = 3.0 * model.flops_per_token_forward(seq_len) * double(tokens_per_step);
  std::vector<int32_t> inputs(size_t(micro_batch) * seq_len), targets(size_t(micro_batch) * seq_len);
  DataPosition position;
  ProgressLine progress(args.max_steps, !args.disable_tqdm);
  TimerSet timers;
  double last_loss = 0, last_eval = NAN;
  Stopwatch run_clock;
  if (eval_windows && args.eval_on_start) {
    last_eval = run_eval(0);
    log_info("step 0: eval_loss ", last_eval);
  }

  for (int64_t step = 1; step <= args.max_steps; ++step) {
    Stopwatch step_clock;
    reset_pool_peaks();
    timers.clear();
    // This rank's slice of the global batch; micro-step m takes the m-th micro-batch of it.
    const uint64_t rank_first = position.next_sample;  // rank 0 of 1
    double loss_sum = 0;
    for (int64_t micro = 0; micro < accumulation; ++micro) {
      sampler->fill(rank_first + uint64_t(micro * micro_batch), micro_batch, inputs.data(), targets.data());
      timers.start("forward");
      loss_sum += model.forward(engine, inputs.data(), targets.data(), micro_batch, seq_len);
      timers.stop("forward");
      timers.start("backward");
      model.backward(engine, engine.backward_scale());
      timers.stop("backward");
    }
    timers.start("step");
    const StepOutcome outcome = engine.step();
    timers.stop("step");
    position.next_sample += uint64_t(ds.train_batch_size);
    last_loss = loss_sum / double(accumulation);

    const double step_ms = step_clock.ms();
    const double tokens_per_s = double(tokens_per_step) / (step_ms / 1e3);
    const double gflops = flops_per_step / (step_ms * 1e6);
    if (step % args.logging_steps == 0 || step == args.max_steps) {
      boost::json::object line{{"step", step},
                               {"loss", last_loss},
                               {"lr", outcome.lr},
                               {"grad_norm", outcome.grad_norm},
                               {"loss_scale", outcome.loss_scale},
                               {"skipped", outcome.skipped},
                               {"step_ms", step_ms},
                               {"tokens_per_s", tokens_per_s},
                               {"data_position", position.next_sample},
                               {"gflops", gflops},
                               {"pool_peak_bytes", pool_json(pool_peaks())}};
      if (ds.wall_clock_breakdown) {
        for (const auto& [name, ms] : timers.totals()) line[name + "_ms"] = ms;
      }
      metrics.write("step", std::move(line));
    }
    char summary[160];
    std::snprintf(summary, sizeof(summary), "loss %.4f | lr %.3g | %s tok/s | %.1f GFLOP/s%s", last_loss,
                  outcome.lr, human_count(tokens_per_s).c_str(), gflops, outcome.skipped ? " | skipped" : "");
    if (step % ds.steps_per_print == 0 || step == args.max_steps) {
      progress.clear();
      std::string breakdown;
      if (ds.wall_clock_breakdown) {
        for (const auto& [name, ms] : timers.totals()) breakdown += cat(" | ", name, " ", int(ms + 0.5), " ms");
      }
      log_info("step ", step, "/", args.max_steps, ": ", summary, " | grad_norm ", outcome.grad_norm,
               outcome.loss_scale != 1 ? cat(" | loss_scale ", outcome.loss_scale) : std::string(), breakdown);
    }
    if (eval_windows && args.eval_steps > 0 && step % args.eval_steps == 0) {
      progress.clear();
      last_eval = run_eval(step);
      log_info("step ", step, ": eval_loss ", last_eval);
    }
    progress.update(step, summary);
  }
  progress.clear();

  if (eval_windows && (args.do_eval || args.max_steps == 0) &&
      !(args.eval_steps > 0 && args.max_steps > 0 && args.max_steps % args.eval_steps == 0)) {
    last_eval = run_eval(args.max_steps);
    log_info("eval_loss ", last_eval, " over ", eval_windows->count(), " windows of ", seq_len, " tokens");
  }
  const PoolBytes peaks_total = pool_peaks();
  metrics.write("end", {{"steps", args.max_steps},
                        {"loss", last_loss},
                        {"seconds", run_clock.seconds()},
                        {"pool_in_use_bytes", pool_json(pool_in_use())},
                        {"last_step_pool_peak_bytes", pool_json(peaks_total)}});
  log_info("done in ", format_duration(run_clock.seconds()), ": final loss ", last_loss,
           std::isnan(last_eval) ? std::string() : cat(", eval_loss ", last_eval));
  log_info("metrics: ", metrics.path());
  log_info("outputs: ", args.output_dir);
  return 0;
}

}  // namespace zt
