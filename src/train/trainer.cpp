// The training loop. Read it top to bottom: set-up (validated on every rank and agreed before
// anything is written), then per step this rank's slice of the global batch, forward, backward,
// the ZeRO engine's step, then logging; evaluation at --eval_steps and at the end.
#include "train/trainer.h"

#include <omp.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "backend/accelerator.h"
#include "backend/backend.h"
#include "comm/data_comm.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/pretrained.h"
#include "checkpoint/safetensors.h"
#include "config/ds_config.h"
#include "config/model_config.h"
#include "core/human_units.h"
#include "core/log.h"
#include "core/memory_pool.h"
#include "core/timer.h"
#include "data/sampler.h"
#include "data/token_shard.h"
#include "model/gpt2.h"
#include "model/gpt2_layout.h"
#include "train/metrics.h"
#include "train/monitor.h"
#include "train/output_dir.h"
#include "train/stop_signals.h"
#include "train/progress.h"
#include "zero/engine.h"

namespace zt {

namespace {

// Everything derived from the flags and files, before any state is created.
struct Setup {
  ModelConfig model;
  DsConfig ds;
  int seq_len = 0;
  std::optional<TokenDataset> train_data, eval_data;
  std::optional<CheckpointReader> resume;      ///< validated before any state exists
  std::optional<SafetensorsReader> pretrained;  ///< --model_name_or_path weights, checked likewise
};

Setup load_setup(const TrainArgs& args, int world_size, bool check_output_dir) {
  Setup s;
  const bool pretrained = !args.model_name_or_path.empty();
  // As HF: the shape comes from --config_name when given, else from the model directory.
  s.model = load_model_config(!args.config_name.empty() ? args.config_name
                                                         : args.model_name_or_path + "/config.json");
  if (pretrained) {
    s.pretrained.emplace(args.model_name_or_path);
    check_pretrained(*s.pretrained, Gpt2Layout(s.model), args.model_name_or_path);
  }
  s.seq_len = args.block_size > 0 ? int(args.block_size) : s.model.n_positions;
  ZT_USAGE_CHECK(s.seq_len <= s.model.n_positions, "--block_size ", s.seq_len, " exceeds n_positions ",
                 s.model.n_positions, " of ", args.config_name);
  s.ds = load_ds_config(args.deepspeed, args.auto_values(world_size, s.model.n_embd));
  // The model counts the tokens of a batch in 32-bit ints.
  for (auto [what, rows] : {std::pair{"train_micro_batch_size_per_gpu", s.ds.train_micro_batch_size_per_gpu},
                            std::pair{"--per_device_eval_batch_size", args.per_device_eval_batch_size}}) {
    int64_t tokens = 0;
    ZT_USAGE_CHECK(!__builtin_mul_overflow(rows, int64_t(s.seq_len), &tokens) && tokens <= INT32_MAX, what, " ", rows,
                   " x block size ", s.seq_len, " tokens exceeds ", INT32_MAX, " per micro-batch");
  }
  if (args.max_steps > 0) s.train_data.emplace(args.train_data, s.model.vocab_size);
  if (!args.eval_data.empty()) s.eval_data.emplace(args.eval_data, s.model.vocab_size);
  const bool resuming = !args.resume_from_checkpoint.empty();
  // Resuming writes into an output_dir that holds the run so far; that is the point of it.
  if (check_output_dir) check_output_dir_usable(args.output_dir, args.overwrite_output_dir || resuming);
  return s;
}

// Where the engine's state comes from. Resuming: weights, moments, optimizer step, schedule and
// loss scaler from the checkpoint, written at any world size and stage. Pretrained (HF weights,
// e.g. zero_to_fp32's output): the master weights only. Otherwise GPT-2's initialisation. What
// a source does not carry starts as the config says (ZeroEngine::load), on every path alike.
StateSource starting_state(Setup& setup, const Gpt2Layout& layout, uint64_t seed) {
  if (setup.resume) {
    CheckpointReader& ckpt = *setup.resume;
    return {[&ckpt](StateField f, size_t lo, size_t hi, float* out) { ckpt.read(f, lo, hi, out); }, true,
            ckpt.engine_state()};
  }
  if (setup.pretrained) return pretrained_source(*setup.pretrained, layout);
  return init_source(layout, seed);
}

// What DeepSpeed's monitors get after step k (train/monitor.h), indexed by the samples seen so
// far: the loss averaged over ranks (metrics.jsonl's, as DeepSpeed's pipeline engine writes
// train_loss), and, as its engine writes them, the lr and fp16 loss scale the next step will use.
// DeepSpeed's dynamic loss scale is a Python int until it first changes, which its CSVs show.
std::vector<MonitorEvent> step_events(double loss, const ZeroEngine& engine, const DsConfig& ds, uint64_t samples,
                                      bool& scale_changed) {
  std::vector<MonitorEvent> events{{kMonitorTrainLoss, loss, int64_t(samples)},
                                   {kMonitorLr, engine.next_lr(), int64_t(samples)}};
  if (ds.fp16.enabled) {
    const double scale = engine.loss_scale();
    scale_changed = scale_changed || scale != std::ldexp(1.0, ds.fp16.initial_scale_power);
    events.push_back({kMonitorLossScale, scale, int64_t(samples), ds.fp16.loss_scale == 0 && !scale_changed});
  }
  return events;
}

// All ranks learn whether any rank failed; the lowest failing rank prints its message.
bool agree_on_failure(HostComm& comm, const std::string& error) {
  const double mine = error.empty() ? double(comm.size()) : double(comm.rank());
  const double first = -comm.all_reduce_max(-mine);  // min over ranks
  if (first >= comm.size()) return false;
  if (int(first) == comm.rank()) {
    log_line(LogLevel::kError, comm.size() > 1 ? cat("rank ", comm.rank(), ": ", error) : error);
  }
  return true;
}

boost::json::object pool_json(const std::vector<double>& bytes) {
  boost::json::object o;
  for (int p = 0; p < kNumPools; ++p) o[pool_name(Pool(p))] = uint64_t(bytes[size_t(p)]);
  return o;
}

std::vector<double> pool_peaks_max_over_ranks(HostComm& comm) {
  const PoolBytes peaks = pool_peaks();
  std::vector<double> v(peaks.bytes.begin(), peaks.bytes.end());
  comm.all_reduce_doubles(v, true);
  return v;
}

// The mean loss over every prediction of the eval windows (docs/design.md's fixed definition). Ranks
// take turns by batch; every rank runs the same number of forwards (stage 3 gathers are
// collective), padding with empty ones.
double evaluate(Gpt2Model<float>& model, ZeroEngine& engine, HostComm& comm, const EvalWindows& windows,
                int batch, int seq_len) {
  model.take_loss();  // start from zero
  std::vector<int32_t> inputs(size_t(batch) * seq_len), targets(size_t(batch) * seq_len);
  const int64_t per_round = int64_t(batch) * comm.size();
  std::vector<double> sums{0.0, 0.0};  // loss sum, predictions
  for (int64_t round = 0; round * per_round < windows.count(); ++round) {
    const int64_t first = round * per_round + int64_t(comm.rank()) * batch;
    const int n = int(std::clamp<int64_t>(windows.count() - first, 0, batch));
    if (n > 0) {
      windows.fill(first, n, inputs.data(), targets.data());
    } else {
      std::fill(inputs.begin(), inputs.end(), 0);
      std::fill(targets.begin(), targets.end(), -1);  // no predictions: contributes nothing
    }
    const int rows = std::max(n, 1);
    int64_t predictions = 0;
    for (int i = 0; i < rows * seq_len; ++i) predictions += targets[size_t(i)] >= 0;
    // Weighted by its predictions, each forward adds its loss sum: one read at the end.
    model.forward(engine, inputs.data(), targets.data(), rows, seq_len, double(predictions));
    sums[1] += double(predictions);
  }
  sums[0] = model.take_loss();
  comm.all_reduce_doubles(sums, false);
  return sums[1] > 0 ? sums[0] / sums[1] : 0.0;
}

// Test hook: ZT_FAULT_RANK=r ZT_FAULT_STEP=k makes rank r throw in the middle of step k, to
// check that a failure on one rank ends every rank.
void maybe_inject_fault(int rank, int64_t step) {
  const char* r = std::getenv("ZT_FAULT_RANK");
  const char* s = std::getenv("ZT_FAULT_STEP");
  if (r && s && std::atoi(r) == rank && std::atoll(s) == step) {
    throw Error(cat("injected fault at step ", step, " (ZT_FAULT_RANK/ZT_FAULT_STEP)"));
  }
}

}  // namespace

int run_trainer(const TrainArgs& args, const ProcessPlace& place, HostComm& comm) {
  const int rank = comm.rank(), world_size = comm.size();
  // From the start, so that a signal during set-up or the first evaluation is kept for the end of
  // the first step rather than killing the process.
  StopSignals stop(rank == 0);

  // ---- configuration: every rank validates; they agree before anything is written ----
  Setup setup;
  std::string error;
  OutputDirLock output_dir_lock;  // rank 0's, for the whole run: one job per output directory
  try {
    setup = load_setup(args, world_size, rank == 0);
    if (rank == 0) {
      output_dir_lock = prepare_output_dir(args.output_dir,
                                           args.overwrite_output_dir || !args.resume_from_checkpoint.empty());
    }
  } catch (const UsageError& e) {
    error = e.what();
  }
  if (agree_on_failure(comm, error)) return 2;
  if (!args.resume_from_checkpoint.empty()) {
    // Second phase, collective: which checkpoint (with node-local storage the nodes agree on
    // the oldest `latest`), validated, and holding what this rank will read.
    try {
      std::string where = args.resume_from_checkpoint;
      if (setup.ds.checkpoint_node_local && where == "auto") where = agree_on_latest(args.output_dir, comm);
      // The ranks sharing a file system share the checksum pass: the whole job on a shared
      // one, each node's ranks on node-local disks.
      const bool node_local = setup.ds.checkpoint_node_local;
      setup.resume.emplace(where, args.output_dir, &setup.model, node_local, node_local ? place.local_rank : rank,
                           node_local ? place.local_size : world_size);
      // Every rank reads only its own partition (ZeroEngine::load gathers the rest).
      const size_t flat = Gpt2Layout(setup.model).flat_size();
      const PartitionMap needed(flat, world_size);
      setup.resume->require_local(std::min(needed.begin(rank), flat), std::min(needed.end(rank), flat));
    } catch (const UsageError& e) {
      error = e.what();
    }
    if (agree_on_failure(comm, error)) return 2;
  }
  const ModelConfig& model_config = setup.model;
  const DsConfig& ds = setup.ds;
  const int seq_len = setup.seq_len;
  const int micro_batch = int(ds.train_micro_batch_size_per_gpu);
  const int64_t accumulation = ds.gradient_accumulation_steps;
  std::optional<DistributedSampler> sampler;
  // The data order is the checkpoint's when resuming, whatever --seed says now.
  const uint64_t data_seed = setup.resume ? setup.resume->position().seed : args.seed;
  if (setup.resume && args.given("seed") && data_seed != args.seed) {
    log_warn("--seed ", args.seed, " differs from the checkpoint's ", data_seed, "; the data order follows the checkpoint");
  }
  if (setup.train_data) sampler.emplace(*setup.train_data, seq_len, data_seed);
  std::optional<EvalWindows> eval_windows;
  if (setup.eval_data) eval_windows.emplace(*setup.eval_data, seq_len, args.max_eval_samples);

  // ---- model and engine ----
  std::unique_ptr<Backend> backend;
  try {
    backend = make_backend(args.accelerator, place.local_rank, "--accelerator");
  } catch (const UsageError& e) {
    error = e.what();
  }
  if (agree_on_failure(comm, error)) return 2;
  // Collectives on the model states; `comm` stays the control communicator.
  const std::unique_ptr<DataComm> data_comm = make_data_comm(*backend, comm);
  const Gpt2Layout layout(model_config);
  // The engine reserves its memory and NVMe swap files here: a bad nvme_path or a full disk on
  // any rank ends every rank now, before metrics.jsonl or a step is written.
  // Rank 0 creates the monitors' directories and files here too (DeepSpeed's tensorboard and
  // csv_monitor blocks).
  // The activations too: a micro-batch too large for memory fails here, before metrics.jsonl is
  // opened (truncating it under --overwrite_output_dir) or anything else is written.
  std::unique_ptr<ZeroEngine> engine_holder;
  std::unique_ptr<Gpt2Model<float>> model_holder;
  std::unique_ptr<MonitorMaster> monitors;
  const int eval_batch = int(args.per_device_eval_batch_size);
  try {
    engine_holder = std::make_unique<ZeroEngine>(layout, *backend, *data_comm, comm, ds);
    model_holder = std::make_unique<Gpt2Model<float>>(layout, *backend, backend->ops(), std::max(micro_batch, eval_batch),
                                                      seq_len, args.gradient_checkpointing);
    monitors = std::make_unique<MonitorMaster>(ds.tensorboard, ds.csv_monitor, rank == 0);
  } catch (const UsageError& e) {
    error = e.what();
  } catch (const OutOfMemory& e) {
    error = cat(e.what(), "; a smaller micro-batch, gradient checkpointing, a higher ZeRO stage or offload needs less");
  }
  if (agree_on_failure(comm, error)) return 2;
  ZeroEngine& engine = *engine_holder;
  Gpt2Model<float>& model = *model_holder;
  MetricsWriter metrics(rank == 0 ? args.output_dir + "/metrics.jsonl" : std::string(), setup.resume.has_value());
  DataPosition position;
  int64_t first_step = 1;
  engine.load(starting_state(setup, layout, args.seed));
  if (setup.resume) {
    const CheckpointReader& ckpt = *setup.resume;
    position.next_sample = ckpt.position().data_position;
    first_step = ckpt.position().step + 1;
    log_info("resumed from ", ckpt.dir(), " (step ", ckpt.position().step, ", saved by ", ckpt.saved_world_size(),
             " rank(s) at stage ", ckpt.saved_stage(), ")");
  } else if (setup.pretrained) {
    log_info("initialised from ", args.model_name_or_path);
  }

  log_info("model: GPT-2 ", model_config.n_layer, "L ", model_config.n_embd, "C ", model_config.n_head, "H, ",
           human_count(double(layout.num_params())), " parameters, vocab ", model_config.vocab_size, ", block ",
           seq_len);
  log_info("backend: ", backend->describe(), "; ", world_size, " rank(s) on ", place.num_nodes, " node(s)");
  log_info("training: ", dtype_name(ds.param_dtype()), ", ZeRO stage ", ds.zero.stage, ", batch ",
           ds.train_batch_size, " = ", micro_batch, " x ", accumulation, " x ", world_size,
           args.gradient_checkpointing ? ", gradient checkpointing" : "");
  if (const OffloadConfig& o = ds.zero.offload_optimizer; o.enabled()) {
    log_info("offload: optimizer state ",
             o.device == OffloadConfig::Device::kNvme ? cat("on NVMe under ", o.nvme_path, " in pieces of ",
                                                            ds.zero.sub_group_size, " elements")
                                                      : std::string(o.pin_memory ? "in pinned host memory" : "in host memory"),
             o.ratio < 1 ? cat(" (", o.ratio * 100, "% of it)") : std::string(), ", stepped by the CPU");
  }
  if (const OffloadConfig& o = ds.zero.offload_param; o.enabled()) {
    log_info("offload: 16-bit parameter partitions ",
             o.device == OffloadConfig::Device::kNvme
                 ? cat("on NVMe under ", o.nvme_path, " (up to ", o.max_in_cpu, " elements kept in host memory)")
                 : std::string("in host memory"));
  }
  {
    // Per-rank bytes, reported as the max over ranks (ranks differ only by padding).
    const ModelStateBytes st = engine.model_state_bytes(), off = engine.offloaded_state_bytes();
    const BufferBytes buf = engine.buffer_bytes();
    std::vector<double> v{double(st.params),     double(st.grads),       double(st.master),
                          double(st.exp_avg),    double(st.exp_avg_sq),  double(buf.buckets),
                          double(buf.working),   double(model.activation_bytes()),
                          double(off.params),    double(off.grads),      double(off.master),
                          double(off.exp_avg),   double(off.exp_avg_sq), double(buf.offload)};
    comm.all_reduce_doubles(v, true);
    auto u = [&](size_t i) { return uint64_t(v[i]); };
    auto offload_device = [](const OffloadConfig& o) {
      return o.device == OffloadConfig::Device::kNvme ? "nvme" : o.device == OffloadConfig::Device::kCpu ? "cpu" : "none";
    };
    metrics.write("start", {{"world_size", world_size},
                            {"num_nodes", place.num_nodes},
                            {"stage", ds.zero.stage},
                            {"dtype", dtype_name(ds.param_dtype())},
                            {"num_params", layout.num_params()},
                            {"model_state_bytes",
                             {{"params", u(0)}, {"grads", u(1)}, {"master", u(2)}, {"exp_avg", u(3)},
                              {"exp_avg_sq", u(4)}}},
                            {"offloaded_state_bytes",
                             {{"params", u(8)}, {"grads", u(9)}, {"master", u(10)}, {"exp_avg", u(11)},
                              {"exp_avg_sq", u(12)}}},
                            {"offload",
                             {{"optimizer", offload_device(ds.zero.offload_optimizer)},
                              {"param", offload_device(ds.zero.offload_param)},
                              {"ratio", ds.zero.offload_optimizer.ratio}}},
                            {"buffer_bytes", {{"buckets", u(5)}, {"working", u(6)}, {"gather", 0}, {"offload", u(13)}}},
                            {"activation_bytes", u(7)},
                            {"train_batch_size", ds.train_batch_size},
                            {"block_size", seq_len},
                            {"max_steps", args.max_steps}});
  }

  auto run_eval = [&](int64_t step) {
    Stopwatch clock;
    const double eval_loss = evaluate(model, engine, comm, *eval_windows, eval_batch, seq_len);
    metrics.write("eval", {{"step", step}, {"eval_loss", eval_loss}, {"windows", eval_windows->count()},
                           {"seconds", clock.seconds()}});
    monitors->write_events({{kMonitorEvalLoss, eval_loss, int64_t(position.next_sample)}});
    return eval_loss;
  };
  bool loss_scale_changed = false;

  // ---- the training loop ----
  const int64_t tokens_per_step = ds.train_batch_size * seq_len;
  const double flops_per_step = 3.0 * model.flops_per_token_forward(seq_len) * double(tokens_per_step);
  const uint64_t rank_samples = uint64_t(micro_batch * accumulation);
  std::vector<int32_t> inputs(size_t(micro_batch) * seq_len), targets(size_t(micro_batch) * seq_len);
  ProgressLine progress(args.max_steps, !args.disable_tqdm && rank == 0);
  // Per-pool peaks over the whole run (each step resets the pools' peak windows).
  std::array<size_t, kNumPools> run_peaks{};
  auto note_run_peaks = [&] {
    const PoolBytes now = pool_peaks();
    for (int p = 0; p < kNumPools; ++p) run_peaks[size_t(p)] = std::max(run_peaks[size_t(p)], now.bytes[size_t(p)]);
  };
  TimerSet timers;
  double last_loss = 0, last_eval = NAN;
  Stopwatch run_clock;
  if (eval_windows && args.eval_on_start) {
    last_eval = run_eval(0);
    log_info("step 0: eval_loss ", last_eval);
  }

  const bool saving = args.save_strategy != "no";
  // The loop below runs every step from first_step or returns: an eval-only run, or one resumed
  // at its end, trains nothing.
  const bool trains = first_step <= args.max_steps;
  for (int64_t step = first_step; step <= args.max_steps; ++step) {
    Stopwatch step_clock;
    note_run_peaks();  // the previous step's window (its eval and checkpoint included)
    reset_pool_peaks();
    timers.clear();
    data_comm->reset_stats();
    // This rank's contiguous slice of the global batch; micro-step m takes its m-th micro-batch.
    const uint64_t rank_first = position.next_sample + uint64_t(rank) * rank_samples;
    for (int64_t micro = 0; micro < accumulation; ++micro) {
      sampler->fill(rank_first + uint64_t(micro * micro_batch), micro_batch, inputs.data(), targets.data());
      timers.start("forward");
      model.forward(engine, inputs.data(), targets.data(), micro_batch, seq_len);
      timers.stop("forward");
      maybe_inject_fault(rank, step);
      timers.start("backward");
      model.backward(engine, engine.backward_scale());
      timers.stop("backward");
    }
    timers.start("optimizer_step");
    const StepOutcome outcome = engine.step();
    const double loss_sum = model.take_loss();  // the step's one read of the loss
    timers.stop("optimizer_step");
    position.next_sample += uint64_t(ds.train_batch_size);
    // One reduction for the step's loss and for whether any rank was told to stop (SIGTERM,
    // SIGUSR1: preempted; SIGINT: interrupted).
    std::vector<double> reduced{loss_sum / double(accumulation), stop.preemption() != 0 ? 1.0 : 0.0,
                                stop.interrupted() != 0 ? 1.0 : 0.0};
    comm.all_reduce_doubles(reduced, false);
    last_loss = reduced[0] / double(world_size);
    const bool preempted = reduced[1] > 0, interrupted = reduced[2] > 0;

    const double step_ms = step_clock.ms();
    const double tokens_per_s = double(tokens_per_step) / (step_ms / 1e3);
    const double gflops = flops_per_step / (step_ms * 1e6);
    if (step % args.logging_steps == 0 || step == args.max_steps) {
      const CommStats cs = data_comm->stats();
      boost::json::object line{{"step", step},
                               {"loss", last_loss},
                               {"lr", outcome.lr},
                               {"grad_norm", outcome.grad_norm},
                               {"loss_scale", outcome.loss_scale},
                               {"skipped", outcome.skipped},
                               {"step_ms", step_ms},
                               {"tokens_per_s", tokens_per_s},
                               {"gflops", gflops},
                               {"data_position", position.next_sample},
                               {"pool_peak_bytes", pool_json(pool_peaks_max_over_ranks(comm))},
                               {"comm_bytes",
                                {{"all_reduce", cs.all_reduce}, {"reduce_scatter", cs.reduce_scatter},
                                 {"all_gather", cs.all_gather}, {"broadcast", cs.broadcast}}}};
      if (engine.stage() == 3) line["live_parameters_peak"] = engine.peak_live_parameters();
      if (ds.wall_clock_breakdown) {
        for (const auto& [name, ms] : timers.totals()) line[name + "_ms"] = ms;  // forward, backward, optimizer_step
      }
      metrics.write("step", std::move(line));
    }
    if (monitors->enabled()) {
      monitors->write_events(step_events(last_loss, engine, ds, position.next_sample, loss_scale_changed));
    }
    char summary[160];
    std::snprintf(summary, sizeof(summary), "loss %.4f | lr %.3g | %s tok/s | %.1f GFLOP/s%s", last_loss,
                  outcome.lr, human_count(tokens_per_s).c_str(), gflops, outcome.skipped ? " | skipped" : "");
    if (step % ds.steps_per_print == 0 || step == args.max_steps) {
      std::string breakdown;
      if (ds.wall_clock_breakdown) {
        for (const auto& [name, ms] : timers.totals()) breakdown += cat(" | ", name, " ", int(ms + 0.5), " ms");
      }
      log_info("step ", step, "/", args.max_steps, ": ", summary, " | grad_norm ", outcome.grad_norm,
               outcome.loss_scale != 1 ? cat(" | loss_scale ", outcome.loss_scale) : std::string(), breakdown);
    }
    // Checkpoints: every --save_steps, at the end of training, and when stopped by a signal.
    std::string saved_path;
    if (saving && ((args.save_steps > 0 && step % args.save_steps == 0) || step == args.max_steps || preempted ||
                   interrupted)) {
      Stopwatch clock;
      const SavedCheckpoint saved =
          save_checkpoint(args.output_dir, engine, layout, ds, comm, TrainingPosition{step, position.next_sample, data_seed},
                          NodePlacement{place.node, place.local_rank, place.num_nodes, ds.checkpoint_node_local},
                          args.save_total_limit);
      metrics.write("checkpoint",
                    {{"step", step}, {"path", saved.path}, {"seconds", clock.seconds()}, {"bytes", saved.bytes}});
      log_info("step ", step, ": saved ", saved.path, " (", human_bytes(double(saved.bytes)), " in ",
               format_duration(clock.seconds()), ")");
      for (const std::string& old : saved.removed) log_info("removed ", old, " (--save_total_limit ", args.save_total_limit, ")");
      saved_path = saved.path;
    }
    if (preempted || interrupted) {
      // Preempted: the checkpoint above is what the requeued job resumes from; exit 0 so that
      // Slurm's requeue (and any script around us) sees a clean stop. Interrupted: 130, as a
      // program stopped by Ctrl-C.
      const char* what = interrupted ? "interrupted" : "preempted";
      const int signal = interrupted ? stop.interrupted() : stop.preemption();  // 0: signalled elsewhere
      metrics.write(what, {{"step", step}, {"signal", signal}, {"checkpoint", saved_path}});
      log_info(what, " (", signal != 0 ? strsignal(signal) : "signal on another rank", ") after step ", step,
               saved_path.empty() ? std::string(": no checkpoint (--save_strategy no)")
                                  : cat(": checkpoint saved in ", saved_path, "; resume with --resume_from_checkpoint auto"));
      monitors->close();
      metrics.close();
      return interrupted ? 130 : 0;
    }
    if (eval_windows && args.eval_steps > 0 && step % args.eval_steps == 0) {
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
  const std::vector<double> peaks = pool_peaks_max_over_ranks(comm);
  note_run_peaks();
  std::vector<double> whole_run(run_peaks.begin(), run_peaks.end());
  comm.all_reduce_doubles(whole_run, true);
  const BufferBytes buffers = engine.buffer_bytes();
  std::vector<double> buf{double(buffers.buckets), double(buffers.gather), double(buffers.working),
                          double(buffers.offload)};
  comm.all_reduce_doubles(buf, true);
  boost::json::object end{{"steps", args.max_steps},
                          {"seconds", run_clock.seconds()},
                          {"last_step_pool_peak_bytes", pool_json(peaks)},
                          {"pool_peak_bytes", pool_json(whole_run)},
                          {"buffer_bytes",
                           {{"buckets", uint64_t(buf[0])}, {"gather", uint64_t(buf[1])}, {"working", uint64_t(buf[2])},
                            {"offload", uint64_t(buf[3])}}},
                          {"live_parameters_peak", engine.peak_live_parameters()}};
  if (trains) end["loss"] = last_loss;
  metrics.write("end", std::move(end));
  std::string results;
  if (trains) results = cat("final loss ", last_loss);
  if (!std::isnan(last_eval)) results += cat(results.empty() ? "" : ", ", "eval_loss ", last_eval);
  log_info("done in ", format_duration(run_clock.seconds()), results.empty() ? "" : ": ", results);
  log_info("memory, peak per rank (max over ranks): device ", human_bytes(whole_run[0]), ", host ",
           human_bytes(whole_run[1]), ", pinned ", human_bytes(whole_run[2]), ", nvme ", human_bytes(whole_run[3]),
           " (zero_estimate predicts these before launching)");
  monitors->close();
  metrics.close();
  log_info("metrics: ", args.output_dir, "/metrics.jsonl");
  if (!monitors->tensorboard_log_dir().empty()) log_info("tensorboard: ", monitors->tensorboard_log_dir());
  if (!monitors->csv_log_dir().empty()) log_info("csv_monitor: ", monitors->csv_log_dir());
  log_info("outputs: ", args.output_dir);
  return stop.interrupted() != 0 ? 130 : 0;  // Ctrl-C after the last step: everything above was done
}

}  // namespace zt
