// The training program. run_trainer, at the end of this file, is the whole run read top to
// bottom; each of its steps is a function above it, in the order it calls them:
//   1. set-up, in phases that every rank checks and all ranks agree on before the next, so that
//      bad input is one line and exit 2 with nothing written (load_setup, open_resume_checkpoint,
//      make_batches, the backend, build_engine);
//   2. the starting state: fresh, pretrained or resumed (load_starting_state), then what the run
//      says about itself (log_run_config, write_start_event);
//   3. the training loop (train): per step this rank's slice of the global batch, forward,
//      backward, the ZeRO engine's step (train_step), logging (log_step), checkpointing
//      (save_checkpoint_if_due) and a stop by a signal (stop_after_signal); evaluation (run_eval)
//      at --eval_steps; with --profile_steps, the self-profile's table (train/step_profile.h);
//   4. the end: the final evaluation, metrics.jsonl's end line and the closing log (finish_run).
#include "train/trainer.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/accelerator.h"
#include "backend/backend.h"
#include "comm/data_comm.h"
#include "comm/traffic.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/pretrained.h"
#include "checkpoint/safetensors.h"
#include "config/build_info_json.h"
#include "config/ds_config.h"
#include "config/model_config.h"
#include "core/human_units.h"
#include "core/log.h"
#include "core/memory_pool.h"
#include "core/timer.h"
#include "data/sampler.h"
#include "data/token_shard.h"
#include "model/bound_model.h"
#include "model/model_layout.h"
#include "model/model_memory.h"
#include "train/metrics.h"
#include "train/monitor.h"
#include "train/output_dir.h"
#include "train/step_profile.h"
#include "train/stop_signals.h"
#include "core/progress.h"
#include "zero/comm_estimate.h"
#include "zero/engine.h"
#include "zero/engine_model.h"
#include "zero/mics_groups.h"

namespace zt {

namespace {

// ---- 1. set-up ----------------------------------------------------------------------------

// Everything derived from the flags and files, before any state is created.
struct Setup {
  ModelConfig model;
  DsConfig ds;
  int seq_len = 0;
  std::optional<TokenDataset> train_data, eval_data;
  std::optional<CheckpointReader> resume;      ///< validated before any state exists
  std::optional<SafetensorsReader> pretrained;  ///< --model_name_or_path weights, checked likewise
};

// Resuming writes into an output_dir that holds the run so far; that is the point of it.
bool may_write_into_output_dir(const TrainArgs& args) {
  return args.overwrite_output_dir || !args.resume_from_checkpoint.empty();
}

Setup load_setup(const TrainArgs& args, int world_size, bool check_output_dir) {
  Setup s;
  const bool pretrained = !args.model_name_or_path.empty();
  // As HF: the shape comes from --config_name when given, else from the model directory.
  s.model = load_model_config(!args.config_name.empty() ? args.config_name
                                                         : args.model_name_or_path + "/config.json");
  if (pretrained) {
    s.pretrained.emplace(args.model_name_or_path);
    check_pretrained(*s.pretrained, *make_model_layout(s.model), args.model_name_or_path);
  }
  s.seq_len = args.block_size > 0 ? int(args.block_size) : default_block_size(s.model);
  ZT_USAGE_CHECK(s.seq_len <= s.model.n_positions, "--block_size ", s.seq_len, " exceeds n_positions ",
                 s.model.n_positions, " of ", args.config_name);
  s.ds = load_ds_config(args.deepspeed, args.auto_values(world_size, s.model.n_embd));
  s.ds.zero.delayed_param_update_after = args.delayed_param_update ? args.delayed_param_update_warmup : -1;
  // The model counts the tokens of a batch in 32-bit ints.
  for (auto [what, rows] : {std::pair{"train_micro_batch_size_per_gpu", s.ds.train_micro_batch_size_per_gpu},
                            std::pair{"--per_device_eval_batch_size", args.per_device_eval_batch_size}}) {
    int64_t tokens = 0;
    ZT_USAGE_CHECK(!__builtin_mul_overflow(rows, int64_t(s.seq_len), &tokens) && tokens <= INT32_MAX, what, " ", rows,
                   " x block size ", s.seq_len, " tokens exceeds ", INT32_MAX, " per micro-batch");
  }
  if (args.max_steps > 0) s.train_data.emplace(args.train_data, s.model.vocab_size);
  if (!args.eval_data.empty()) s.eval_data.emplace(args.eval_data, s.model.vocab_size);
  if (check_output_dir) check_output_dir_usable(args.output_dir, may_write_into_output_dir(args));
  return s;
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

// Runs one phase of the set-up on every rank. Bad input (UsageError) on any rank is agreed on
// before any rank goes further: then the lowest failing rank has printed its message, and every
// rank gets true (and returns 2, nothing written), rather than some ranks waiting in a collective.
template <class Phase>
bool any_rank_fails(HostComm& comm, Phase&& phase) {
  std::string error;
  try {
    phase();
  } catch (const UsageError& e) {
    error = e.what();
  }
  return agree_on_failure(comm, error);
}

// The second phase when resuming, collective: which checkpoint (with node-local storage the nodes
// agree on the oldest `latest`), validated, and holding what this rank will read.
void open_resume_checkpoint(Setup& setup, const TrainArgs& args, const ProcessPlace& place, HostComm& comm) {
  const int rank = comm.rank(), world_size = comm.size();
  std::string where = args.resume_from_checkpoint;
  const bool node_local = setup.ds.checkpoint_node_local;
  if (node_local && where == "auto") where = agree_on_latest(args.output_dir, comm);
  // The ranks sharing a file system share the checksum pass: the whole job on a shared one, each
  // node's ranks on node-local disks.
  setup.resume.emplace(where, args.output_dir, &setup.model, node_local, node_local ? place.local_rank : rank,
                       node_local ? place.local_size : world_size, CheckpointReader::Verify::kWholeFiles,
                       setup.ds.optimizer);
  // Every rank reads only its own partition (ZeroEngine::load gathers the rest).
  const size_t flat = make_model_layout(setup.model)->flat_size();
  const PartitionMap needed(flat, world_size);
  setup.resume->require_local(std::min(needed.begin(rank), flat), std::min(needed.end(rank), flat));
}

// Which samples the run reads, in which order.
struct Batches {
  uint64_t data_seed = 0;                     ///< the data order's seed, saved in checkpoints
  std::optional<DistributedSampler> sampler;  ///< the training windows; none in an eval-only run
  std::optional<EvalWindows> eval_windows;    ///< none without --eval_data
};

Batches make_batches(const Setup& setup, const TrainArgs& args) {
  Batches b;
  // The data order is the checkpoint's when resuming, whatever --seed says now.
  b.data_seed = setup.resume ? setup.resume->position().seed : args.seed;
  if (setup.resume && args.given("seed") && b.data_seed != args.seed) {
    log_warn("--seed ", args.seed, " differs from the checkpoint's ", b.data_seed,
             "; the data order follows the checkpoint");
  }
  if (setup.train_data) b.sampler.emplace(*setup.train_data, setup.seq_len, b.data_seed);
  if (setup.eval_data) b.eval_windows.emplace(*setup.eval_data, setup.seq_len, args.max_eval_samples);
  return b;
}

// The engine holding the model states, the model computing with them, and DeepSpeed's monitors.
struct EngineParts {
  MicsGroups mics;  // MiCS's groups, which the engine runs over (before it: destroyed after it)
  std::unique_ptr<ZeroEngine> engine;
  std::unique_ptr<BoundModel> model;
  std::unique_ptr<MonitorMaster> monitors;
};

// Built together, so that whatever cannot be had fails on any rank now, before metrics.jsonl is
// opened (truncating it under --overwrite_output_dir) or a step is written: the engine reserves
// its memory and NVMe swap files (a bad nvme_path, a full disk), the model its activations (a
// micro-batch too large for memory), and rank 0 creates the monitors' directories and files.
// Both are built over the profiler's kernels and communicator (the backend's own unless profiling).
static_assert(kClassifierChunkAuto == -1, "parse_classifier_chunk gives -1 for auto");

EngineParts build_engine(const Setup& setup, const TrainArgs& args, const ModelLayout& layout, Backend& backend,
                         StepProfiler& profiler, HostComm& comm) {
  const int micro_batch = int(setup.ds.train_micro_batch_size_per_gpu);
  const int eval_batch = int(args.per_device_eval_batch_size);
  EngineParts parts;
  try {
    const DType activations =
        resolve_activation_dtype(args.activation_dtype, setup.ds.param_dtype(), backend.native_bf16_gemm());
    // As HF's --tf32, which raises where the hardware has no TF32.
    ZT_USAGE_CHECK(!args.tf32 || backend.ops().set_allow_tf32(true), "--tf32 needs a GPU with TF32 (Ampere or "
                   "newer); the ", backend.name(), " backend computes fp32 GEMMs in exact fp32");
    parts.mics = split_mics(setup.ds, profiler.data_comm(), comm);
    parts.engine = std::make_unique<ZeroEngine>(layout, backend, parts.mics.engine_data(profiler.data_comm()),
                                                parts.mics.engine_control(comm), setup.ds, activations,
                                                parts.mics.replicas.get());
    if (parts.mics.active() && comm.rank() == 0) {
      log_info("MiCS: the model states partitioned within ", comm.size() / parts.mics.replicas->size(),
               " shard groups of ", parts.mics.shard->size(), " consecutive ranks, gradients all-reduced across them "
               "at each step");
    }
    if (args.delayed_param_update && backend.name() != "cuda" && comm.rank() == 0) {
      log_warn("--delayed_param_update on the ", backend.name(), " backend: the CPU optimizer step runs on the cores that "
               "compute the model, so it overlaps nothing; it pays where the model runs on a GPU");
    }
    parts.model = make_engine_model(*parts.engine, layout, backend, profiler.kernels<float>(),
                                    profiler.kernels<bf16>(), std::max(micro_batch, eval_batch), setup.seq_len,
                                    args.gradient_checkpointing, parse_classifier_chunk(args.classifier_chunk_tokens));
    parts.monitors = std::make_unique<MonitorMaster>(setup.ds.tensorboard, setup.ds.csv_monitor, comm.rank() == 0);
  } catch (const OutOfMemory& e) {
    // A run that does not fit is bad input like any other here: agreed on, one line, exit 2.
    throw UsageError(
        cat(e.what(), "; a smaller micro-batch, gradient checkpointing, a higher ZeRO stage or offload needs less"));
  }
  return parts;
}

// ---- 2. the starting state --------------------------------------------------------------------

// Where the engine's state comes from. Resuming: weights, moments, optimizer step, schedule and
// loss scaler from the checkpoint, written at any world size and stage. Pretrained (HF weights,
// e.g. zero_to_fp32's output): the master weights only. Otherwise GPT-2's initialisation. What
// a source does not carry starts as the config says (ZeroEngine::load), on every path alike.
StateSource starting_state(Setup& setup, const ModelLayout& layout, uint64_t seed) {
  if (setup.resume) {
    CheckpointReader& ckpt = *setup.resume;
    return {[&ckpt](StateField f, size_t lo, size_t hi, float* out) { ckpt.read(f, lo, hi, out); }, true,
            ckpt.engine_state(),
            [&ckpt](float* rows, size_t nr, float* cols, size_t nc) { ckpt.read_factors(rows, nr, cols, nc); },
            [&ckpt](int rank, int world, float* out, size_t n) { return ckpt.read_onebit_errors(rank, world, out, n); },
            [&ckpt](int rank, int world, float* out, size_t n) { return ckpt.read_zero_one_local(rank, world, out, n); },
            [&ckpt](double* out, size_t n) { return ckpt.read_onebit_lamb(out, n); }};
  }
  if (setup.pretrained) return pretrained_source(*setup.pretrained, layout);
  return init_source(layout, seed);
}

// What the training loop carries from step to step: the part of HF's TrainerState kept here.
struct TrainerState {
  int64_t global_step = 0;          ///< the last step done (the checkpoint's when resuming)
  DataPosition position;            ///< the next sample of the global order
  double last_loss = 0;             ///< the last step's loss, averaged over ranks
  double last_eval = NAN;           ///< the last eval_loss; NaN until an evaluation
  bool loss_scale_changed = false;  ///< fp16: whether the dynamic loss scale has moved (step_events)
  std::array<size_t, kNumPools> run_peaks{};  ///< each pool's peak on this rank over the whole run
  TrafficTotals run_traffic;                  ///< the data path's bytes over this run's steps, all ranks
  int64_t traffic_steps = 0;                  ///< ... and how many steps (this process's)
  TrafficTotals last_traffic;                 ///< the last step's (steady state: zero_estimate's figure)
};

// Loads the engine and says where its state came from. Returns where the loop starts: step 0 at
// the first sample, or the checkpoint's step and data position.
TrainerState load_starting_state(ZeroEngine& engine, Setup& setup, const ModelLayout& layout, const TrainArgs& args) {
  TrainerState state;
  engine.load(starting_state(setup, layout, args.seed));
  if (setup.resume) {
    const CheckpointReader& ckpt = *setup.resume;
    state.position.next_sample = ckpt.position().data_position;
    state.global_step = ckpt.position().step;
    log_info("resumed from ", ckpt.dir(), " (step ", ckpt.position().step, ", saved by ", ckpt.saved_world_size(),
             " rank(s) at stage ", ckpt.saved_stage(), ")");
  } else if (setup.pretrained) {
    log_info("initialised from ", args.model_name_or_path);
  }
  return state;
}

void log_offload(const DsConfig& ds) {
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
}

// The run's first log lines: the model, where it runs, how it trains, what is offloaded.
void log_run_config(const Setup& setup, const TrainArgs& args, const ModelLayout& layout, const Backend& backend,
                    const ZeroEngine& engine, const ProcessPlace& place, int world_size) {
  const ModelConfig& m = setup.model;
  const DsConfig& ds = setup.ds;
  log_info("model: ", m.model_type, " ", m.n_layer, "L ", m.n_embd, "C ", m.n_head, "H",
           m.kv_heads() != m.n_head ? cat(" (", m.kv_heads(), " kv)") : std::string(), ", ", human_count(double(layout.num_params())),
           " parameters, vocab ", m.vocab_size, ", block ", setup.seq_len);
  log_info("backend: ", backend.describe(), "; ", world_size, " rank(s) on ", place.num_nodes, " node(s)");
  log_info("training: ", dtype_name(ds.param_dtype()), " (activations in ", dtype_name(engine.activation_dtype()),
           ", matmuls in ", dtype_name(engine.matmul_dtype()),
           args.tf32 && engine.matmul_dtype() == DType::kF32 ? " on TF32 tensor cores" : "",
           engine.weight_packs() ? ", weights packed for oneDNN" : "", ", gradients accumulated in ",
           dtype_name(ds.grad_dtype()), "), ", optimizer_name(ds.optimizer.type),
           ", ZeRO stage ", ds.zero.stage,
           ", batch ", ds.train_batch_size, " = ", ds.train_micro_batch_size_per_gpu, " x ",
           ds.gradient_accumulation_steps, " x ", world_size,
           args.gradient_checkpointing ? ", gradient checkpointing" : "");
  if (engine.shared_gradient_bytes() > 0) {
    log_info("gradients: ", human_bytes(double(engine.shared_gradient_bytes())),
             " per rank in the node's shared memory, which the all-reduce and reduce-scatter read in place");
  }
  log_offload(ds);
}

// metrics.jsonl's first line: the run's shape and the bytes each rank holds, reported as the max
// over ranks (ranks differ only by padding), so that memory per stage reads without a profiler.
void write_start_event(MetricsWriter& metrics, const ZeroEngine& engine, const BoundModel& model,
                       HostComm& comm, const Setup& setup, const ModelLayout& layout, const ProcessPlace& place,
                       const TrainArgs& args) {
  const DsConfig& ds = setup.ds;
  const ModelStateBytes st = engine.model_state_bytes(), off = engine.offloaded_state_bytes();
  const BufferBytes buf = engine.buffer_bytes();
  std::vector<double> v{double(st.params),     double(st.grads),       double(st.master),
                        double(st.exp_avg),    double(st.exp_avg_sq),  double(buf.buckets),
                        double(buf.working),   double(model.activation_bytes()),
                        double(off.params),    double(off.grads),      double(off.master),
                        double(off.exp_avg),   double(off.exp_avg_sq), double(buf.offload),
                        double(buf.optimizer)};
  comm.all_reduce_doubles(v, true);
  auto u = [&](size_t i) { return uint64_t(v[i]); };
  auto state_bytes = [&](size_t first) {  // the five kinds, from v[first] on
    return boost::json::object{{"params", u(first)},      {"grads", u(first + 1)},     {"master", u(first + 2)},
                               {"exp_avg", u(first + 3)}, {"exp_avg_sq", u(first + 4)}};
  };
  auto offload_device = [](const OffloadConfig& o) {
    return o.device == OffloadConfig::Device::kNvme ? "nvme" : o.device == OffloadConfig::Device::kCpu ? "cpu" : "none";
  };
  metrics.write("start", {{"world_size", comm.size()},
                          {"num_nodes", place.num_nodes},
                          {"stage", ds.zero.stage},
                          {"dtype", dtype_name(ds.param_dtype())},
                          {"activation_dtype", dtype_name(engine.activation_dtype())},
                          {"num_params", layout.num_params()},
                          {"optimizer", optimizer_name(ds.optimizer.type)},
                          {"model_state_bytes", state_bytes(0)},
                          {"offloaded_state_bytes", state_bytes(8)},
                          {"offload",
                           {{"optimizer", offload_device(ds.zero.offload_optimizer)},
                            {"param", offload_device(ds.zero.offload_param)},
                            {"ratio", ds.zero.offload_optimizer.ratio},
                            // --delayed_param_update: the steps after this many are delayed (null: none).
                            {"delayed_param_update_after", ds.zero.delayed_param_update_after >= 0
                                                               ? boost::json::value(ds.zero.delayed_param_update_after)
                                                               : boost::json::value(nullptr)}}},
                          {"buffer_bytes",
                           {{"buckets", u(5)}, {"working", u(6)}, {"gather", 0}, {"offload", u(13)}, {"optimizer", u(14)}}},
                          {"activation_bytes", u(7)},
                          {"train_batch_size", ds.train_batch_size},
                          {"block_size", setup.seq_len},
                          {"max_steps", args.max_steps},
                          {"build", build_info_json()}});
}

// ---- 3. the training loop -----------------------------------------------------------------

// What the loop works with. All of it is owned by run_trainer and set up before the loop; the
// loop's own state is TrainerState.
struct Trainer {
  const TrainArgs& args;
  const DsConfig& ds;
  int seq_len;
  const ProcessPlace& place;
  HostComm& comm;       ///< control: agreement, the loss, the metrics' reductions
  DataComm& data_comm;  ///< the model states' collectives (their bytes are in each step line)
  const ModelLayout& layout;
  ZeroEngine& engine;
  BoundModel& model;
  const Batches& batches;
  MetricsWriter& metrics;
  MonitorMaster& monitors;
  const StopSignals& stop;
  StepProfiler& profiler;  ///< --profile_steps; does nothing without
  const MicsGroups& mics;  ///< MiCS: the first shard group alone writes checkpoints
};

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

// Folds the pools' current peak windows into the whole run's (each step resets the windows).
void note_run_peaks(std::array<size_t, kNumPools>& run_peaks) {
  const PoolBytes now = pool_peaks();
  for (int p = 0; p < kNumPools; ++p) run_peaks[size_t(p)] = std::max(run_peaks[size_t(p)], now.bytes[size_t(p)]);
}

// The mean loss over every prediction of the eval windows (docs/design.md's fixed definition). Ranks
// take turns by batch; every rank runs the same number of forwards (stage 3 gathers are
// collective), padding with empty ones.
double evaluate(BoundModel& model, HostComm& comm, const EvalWindows& windows, int batch, int seq_len) {
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
    model.forward(inputs.data(), targets.data(), rows, seq_len, double(predictions));
    sums[1] += double(predictions);
  }
  sums[0] = model.take_loss();
  comm.all_reduce_doubles(sums, false);
  return sums[1] > 0 ? sums[0] / sums[1] : 0.0;
}

// Evaluates and records eval_loss in metrics.jsonl and, at the samples seen so far, the monitors.
double run_eval(const Trainer& t, TrainerState& state, int64_t step) {
  Stopwatch clock;
  const EvalWindows& windows = *t.batches.eval_windows;
  state.last_eval = evaluate(t.model, t.comm, windows, int(t.args.per_device_eval_batch_size), t.seq_len);
  t.metrics.write("eval", {{"step", step}, {"eval_loss", state.last_eval}, {"windows", windows.count()},
                           {"seconds", clock.seconds()}});
  t.monitors.write_events({{kMonitorEvalLoss, state.last_eval, int64_t(state.position.next_sample)}});
  return state.last_eval;
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

// One micro-batch of token windows, [micro_batch, seq_len] each; allocated once for the run.
struct TokenBatch {
  std::vector<int32_t> inputs, targets;
};

// What one optimizer step hands to the rest of the loop.
struct StepResult {
  StepOutcome outcome;       ///< the engine's: lr, grad_norm, loss_scale, skipped
  bool preempted = false;    ///< SIGTERM or SIGUSR1 on some rank
  bool interrupted = false;  ///< SIGINT or SIGUSR2 on some rank
  double ms = 0;             ///< the step's wall time
  TimerSet timers;           ///< forward, backward, optimizer_step (wall_clock_breakdown)
  TrafficTotals traffic;     ///< the data path's bytes sent, summed over ranks (comm/traffic.h)
};

// Gradient accumulation: this rank's contiguous slice of the global batch, micro-step m taking
// its m-th micro-batch through forward and backward.
void forward_backward(const Trainer& t, const TrainerState& state, int64_t step, TokenBatch& batch, TimerSet& timers) {
  const int micro_batch = int(t.ds.train_micro_batch_size_per_gpu);
  const int64_t accumulation = t.ds.gradient_accumulation_steps;
  const uint64_t rank_samples = uint64_t(micro_batch * accumulation);
  const uint64_t rank_first = state.position.next_sample + uint64_t(t.comm.rank()) * rank_samples;
  for (int64_t micro = 0; micro < accumulation; ++micro) {
    t.batches.sampler->fill(rank_first + uint64_t(micro * micro_batch), micro_batch, batch.inputs.data(),
                            batch.targets.data());
    timers.start("forward");
    // The backward's scale, so that a chunked classifier runs its backward in the forward.
    t.model.forward(batch.inputs.data(), batch.targets.data(), micro_batch, t.seq_len, 1.0, t.engine.backward_scale());
    timers.stop("forward");
    maybe_inject_fault(t.comm.rank(), step);
    timers.start("backward");
    t.model.backward(t.engine.backward_scale());
    timers.stop("backward");
  }
}

// One optimizer step: forward and backward over the micro-batches, the ZeRO engine's step, then
// the step's one reduction, of its loss and of whether any rank was told to stop.
StepResult train_step(const Trainer& t, TrainerState& state, int64_t step, TokenBatch& batch) {
  Stopwatch clock;
  t.profiler.begin_step(step);
  note_run_peaks(state.run_peaks);  // the previous step's window (its eval and checkpoint included)
  reset_pool_peaks();
  t.data_comm.reset_stats();
  StepResult r;
  forward_backward(t, state, step, batch, r.timers);
  r.timers.start("optimizer_step");
  t.profiler.begin_optimizer();
  r.outcome = t.engine.step();
  t.profiler.end_optimizer();
  const double loss_sum = t.model.take_loss();  // the step's one read of the loss
  r.timers.stop("optimizer_step");
  state.position.next_sample += uint64_t(t.ds.train_batch_size);
  // SIGTERM, SIGUSR1: preempted; SIGINT: interrupted. Every rank stops after the same step. The
  // data path's traffic rides along (sums of byte counts below 2^53: exact in doubles).
  std::vector<double> reduced{loss_sum / double(t.ds.gradient_accumulation_steps),
                              t.stop.preemption() != 0 ? 1.0 : 0.0, t.stop.interrupted() != 0 ? 1.0 : 0.0};
  const std::vector<double> traffic = sent_bytes(t.data_comm.stats().traffic).values();
  reduced.insert(reduced.end(), traffic.begin(), traffic.end());
  t.comm.all_reduce_doubles(reduced, false);
  state.last_loss = reduced[0] / double(t.comm.size());
  state.global_step = step;
  r.preempted = reduced[1] > 0;
  r.interrupted = reduced[2] > 0;
  r.traffic = TrafficTotals::from_values(reduced.data() + 3);
  state.run_traffic += r.traffic;
  state.last_traffic = r.traffic;
  ++state.traffic_steps;
  t.profiler.end_step();
  r.ms = clock.ms();
  return r;
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

// The step's metrics.jsonl line: what DeepSpeed's engine prints, and where the time, the memory
// and the communicated bytes went.
void write_step_metrics(const Trainer& t, const TrainerState& state, int64_t step, const StepResult& r,
                        double tokens_per_s, double gflops) {
  const CommStats cs = t.data_comm.stats();
  boost::json::object line{{"step", step},
                           {"loss", state.last_loss},
                           {"lr", r.outcome.lr},
                           {"grad_norm", r.outcome.grad_norm},
                           {"loss_scale", r.outcome.loss_scale},
                           {"skipped", r.outcome.skipped},
                           {"step_ms", r.ms},
                           {"tokens_per_s", tokens_per_s},
                           {"gflops", gflops},
                           {"data_position", state.position.next_sample},
                           {"pool_peak_bytes", pool_json(pool_peaks_max_over_ranks(t.comm))},
                           {"comm_bytes",
                            {{"all_reduce", cs.all_reduce}, {"reduce_scatter", cs.reduce_scatter},
                             {"all_gather", cs.all_gather}, {"broadcast", cs.broadcast},
                             {"all_to_all", cs.all_to_all}}},
                           {"traffic_bytes", traffic_json(r.traffic)}};
  if (t.engine.stage() == 3) line["live_parameters_peak"] = t.engine.peak_live_parameters();
  if (t.ds.wall_clock_breakdown) {
    for (const auto& [name, ms] : r.timers.totals()) line[name + "_ms"] = ms;  // forward, backward, optimizer_step
  }
  t.metrics.write("step", std::move(line));
}

// Reports a step: its metrics.jsonl line every --logging_steps, DeepSpeed's monitor scalars, and a
// log line every steps_per_print; the last step always. Returns the progress line's summary.
std::string log_step(const Trainer& t, TrainerState& state, int64_t step, const StepResult& r) {
  const int64_t tokens_per_step = t.ds.train_batch_size * t.seq_len;
  // Backward costs twice the forward.
  const double flops_per_step = 3.0 * t.model.flops_per_token_forward(t.seq_len) * double(tokens_per_step);
  const double tokens_per_s = double(tokens_per_step) / (r.ms / 1e3);
  const double gflops = flops_per_step / (r.ms * 1e6);
  const bool last = step == t.args.max_steps;
  if (step % t.args.logging_steps == 0 || last) write_step_metrics(t, state, step, r, tokens_per_s, gflops);
  if (t.monitors.enabled()) {
    t.monitors.write_events(
        step_events(state.last_loss, t.engine, t.ds, state.position.next_sample, state.loss_scale_changed));
  }
  const StepOutcome& o = r.outcome;
  char summary[160];
  std::snprintf(summary, sizeof(summary), "loss %.4f | lr %.3g | %s tok/s | %.1f GFLOP/s%s", state.last_loss, o.lr,
                human_count(tokens_per_s).c_str(), gflops, o.skipped ? " | skipped" : "");
  if (step % t.ds.steps_per_print == 0 || last) {
    std::string breakdown;
    if (t.ds.wall_clock_breakdown) {
      for (const auto& [name, ms] : r.timers.totals()) breakdown += cat(" | ", name, " ", int(ms + 0.5), " ms");
    }
    log_info("step ", step, "/", t.args.max_steps, ": ", summary, " | grad_norm ", o.grad_norm,
             o.loss_scale != 1 ? cat(" | loss_scale ", o.loss_scale) : std::string(), breakdown);
  }
  return summary;
}

// Checkpoints: every --save_steps, at the end of training, and when stopped by a signal, unless
// --save_strategy no. Returns the checkpoint's path, "" when none was saved.
bool checkpoint_due(const TrainArgs& args, int64_t step, bool stopping) {
  const bool due = (args.save_steps > 0 && step % args.save_steps == 0) || step == args.max_steps || stopping;
  return args.save_strategy != "no" && due;
}

std::string save_checkpoint_if_due(const Trainer& t, const TrainerState& state, int64_t step, bool stopping) {
  const TrainArgs& args = t.args;
  if (!checkpoint_due(args, step, stopping)) return {};
  Stopwatch clock;
  // MiCS: every shard group holds the same states; the first writes them, as a stage-3 run of its
  // ranks, and the others wait for it.
  const bool writes = !t.mics.active() || t.mics.replica == 0;
  SavedCheckpoint saved{(std::filesystem::path(args.output_dir) / cat("global_step", step)).string(), 0, {}};
  if (writes) {
    HostComm& writers = t.mics.engine_control(t.comm);
    const NodePlacement placement{t.place.node, t.place.local_rank, t.place.num_nodes, t.ds.checkpoint_node_local};
    saved = save_checkpoint(args.output_dir, t.engine, t.layout, t.ds, writers,
                            TrainingPosition{step, state.position.next_sample, t.batches.data_seed}, placement,
                            args.save_total_limit);
  }
  if (t.mics.active()) t.comm.barrier()->wait();
  t.metrics.write("checkpoint",
                  {{"step", step}, {"path", saved.path}, {"seconds", clock.seconds()}, {"bytes", saved.bytes}});
  log_info("step ", step, ": saved ", saved.path, " (", human_bytes(double(saved.bytes)), " in ",
           format_duration(clock.seconds()), ")");
  for (const std::string& old : saved.removed) log_info("removed ", old, " (--save_total_limit ", args.save_total_limit, ")");
  return saved.path;
}

// Ends the run after the step at which some rank was signalled (train/stop_signals.h), with the
// checkpoint just saved. Preempted: that checkpoint is what the requeued job resumes from; exit 0
// so that Slurm's requeue (and any script around us) sees a clean stop. Interrupted: 130, as a
// program stopped by Ctrl-C.
int stop_after_signal(const Trainer& t, int64_t step, bool interrupted, const std::string& saved_path) {
  const char* what = interrupted ? "interrupted" : "preempted";
  const int signal = interrupted ? t.stop.interrupted() : t.stop.preemption();  // 0: signalled elsewhere
  t.metrics.write(what, {{"step", step}, {"signal", signal}, {"checkpoint", saved_path}});
  log_info(what, " (", signal != 0 ? strsignal(signal) : "signal on another rank", ") after step ", step,
           saved_path.empty() ? std::string(": no checkpoint (--save_strategy no)")
                              : cat(": checkpoint saved in ", saved_path, "; resume with --resume_from_checkpoint auto"));
  t.monitors.close();
  t.metrics.close();
  return interrupted ? 130 : 0;
}

// Every step after the starting state's up to --max_steps, evaluating every --eval_steps.
// Returns the exit code when a signal stopped the run, nothing when it ran to the end.
std::optional<int> train(const Trainer& t, TrainerState& state, ProgressLine& progress) {
  const size_t tokens = size_t(t.ds.train_micro_batch_size_per_gpu) * t.seq_len;
  TokenBatch batch{std::vector<int32_t>(tokens), std::vector<int32_t>(tokens)};
  for (int64_t step = state.global_step + 1; step <= t.args.max_steps; ++step) {
    const StepResult r = train_step(t, state, step, batch);
    const std::string summary = log_step(t, state, step, r);
    t.profiler.report_if_done(step, t.args.max_steps, t.comm, t.metrics);
    const bool stopping = r.preempted || r.interrupted;
    const bool eval_due = t.batches.eval_windows && t.args.eval_steps > 0 && step % t.args.eval_steps == 0;
    // --delayed_param_update: a checkpoint, an evaluation and the end of the run see the model of
    // this step, not of the one before (so a resumed run goes on as the uninterrupted one).
    if (checkpoint_due(t.args, step, stopping) || eval_due || stopping || step == t.args.max_steps) {
      t.engine.apply_delayed_update();
    }
    const std::string saved_path = save_checkpoint_if_due(t, state, step, stopping);
    if (stopping) return stop_after_signal(t, step, r.interrupted, saved_path);
    if (eval_due) {
      log_info("step ", step, ": eval_loss ", run_eval(t, state, step));
    }
    progress.update(step, summary);
  }
  progress.clear();
  return std::nullopt;
}

// ---- 4. the end ---------------------------------------------------------------------------

// With --do_eval, and in an eval-only run; not again when the last step's --eval_steps
// evaluation has just run.
bool final_eval_due(const TrainArgs& args, const Batches& batches) {
  const bool evaluated_at_last_step = args.eval_steps > 0 && args.max_steps > 0 && args.max_steps % args.eval_steps == 0;
  return batches.eval_windows && (args.do_eval || args.max_steps == 0) && !evaluated_at_last_step;
}

// The run's data-path bytes averaged over its steps.
TrafficTotals traffic_per_step(const TrainerState& state) {
  std::vector<double> v = state.run_traffic.values();
  for (double& x : v) x /= double(state.traffic_steps);
  return TrafficTotals::from_values(v.data());
}

// metrics.jsonl's end line: the results, the buffers, and each pool's peak over the last step and
// over the whole run, max over ranks. Returns the whole run's peaks.
std::vector<double> write_end_event(const Trainer& t, TrainerState& state, const Stopwatch& run_clock, bool trains) {
  const std::vector<double> peaks = pool_peaks_max_over_ranks(t.comm);
  note_run_peaks(state.run_peaks);
  std::vector<double> whole_run(state.run_peaks.begin(), state.run_peaks.end());
  t.comm.all_reduce_doubles(whole_run, true);
  const BufferBytes buffers = t.engine.buffer_bytes();
  std::vector<double> buf{double(buffers.buckets), double(buffers.gather), double(buffers.working),
                          double(buffers.offload), double(buffers.optimizer)};
  t.comm.all_reduce_doubles(buf, true);
  boost::json::object end{{"steps", t.args.max_steps},
                          {"seconds", run_clock.seconds()},
                          {"last_step_pool_peak_bytes", pool_json(peaks)},
                          {"pool_peak_bytes", pool_json(whole_run)},
                          {"buffer_bytes",
                           {{"buckets", uint64_t(buf[0])}, {"gather", uint64_t(buf[1])}, {"working", uint64_t(buf[2])},
                            {"offload", uint64_t(buf[3])}, {"optimizer", uint64_t(buf[4])}}},
                          {"live_parameters_peak", t.engine.peak_live_parameters()},
                          {"nodes", node_json(t.data_comm.node_of_ranks())}};
  if (trains) end["loss"] = state.last_loss;
  if (state.traffic_steps > 0) {
    end["traffic_bytes_mean_per_step"] = traffic_json(traffic_per_step(state));
    end["traffic_bytes_last_step"] = traffic_json(state.last_traffic);
  }
  t.metrics.write("end", std::move(end));
  return whole_run;
}

// The end line, the closing log (results, memory, where the outputs are) and the outputs closed,
// checked: a file that cannot be completed fails the run.
void finish_run(const Trainer& t, TrainerState& state, const Stopwatch& run_clock, bool trains) {
  const std::vector<double> whole_run = write_end_event(t, state, run_clock, trains);
  std::string results;
  if (trains) results = cat("final loss ", state.last_loss);
  if (!std::isnan(state.last_eval)) results += cat(results.empty() ? "" : ", ", "eval_loss ", state.last_eval);
  log_info("done in ", format_duration(run_clock.seconds()), results.empty() ? "" : ": ", results);
  log_info("memory, peak per rank (max over ranks): device ", human_bytes(whole_run[0]), ", host ",
           human_bytes(whole_run[1]), ", pinned ", human_bytes(whole_run[2]), ", nvme ", human_bytes(whole_run[3]),
           " (zero_estimate predicts these before launching)");
  if (state.traffic_steps > 0 && t.comm.size() > 1) {
    log_info("communication in the last step, all ranks' data path (", node_words(t.data_comm.node_of_ranks()),
             "): ", traffic_words(state.last_traffic), " (zero_estimate predicts these too)");
  }
  t.monitors.close();
  t.metrics.close();
  log_info("metrics: ", t.args.output_dir, "/metrics.jsonl");
  if (!t.monitors.tensorboard_log_dir().empty()) log_info("tensorboard: ", t.monitors.tensorboard_log_dir());
  if (!t.monitors.csv_log_dir().empty()) log_info("csv_monitor: ", t.monitors.csv_log_dir());
  log_info("outputs: ", t.args.output_dir);
}

}  // namespace

int run_trainer(const TrainArgs& args, const ProcessPlace& place, HostComm& comm) {
  // From the start, so that a signal during set-up or the first evaluation is kept for the end of
  // the first step rather than killing the process.
  StopSignals stop(comm.rank() == 0);

  // ---- 1. set-up: every rank checks each phase; the ranks agree before the next ----
  const bool first = comm.rank() == 0;
  Setup setup;
  OutputDirLock output_dir_lock;  // rank 0's, for the whole run: one job per output directory
  if (any_rank_fails(comm, [&] {
        setup = load_setup(args, comm.size(), first);
        if (first) output_dir_lock = prepare_output_dir(args.output_dir, may_write_into_output_dir(args));
      })) {
    return 2;
  }
  if (!args.resume_from_checkpoint.empty() &&
      any_rank_fails(comm, [&] { open_resume_checkpoint(setup, args, place, comm); })) {
    return 2;
  }
  const Batches batches = make_batches(setup, args);
  std::unique_ptr<Backend> backend;
  if (any_rank_fails(comm, [&] { backend = make_backend(args.accelerator, place.local_rank, "--accelerator"); })) {
    return 2;
  }
  // Collectives on the model states; `comm` stays the control communicator.
  const std::unique_ptr<DataComm> data_comm = make_data_comm(*backend, comm);
  const std::unique_ptr<ModelLayout> layout_ptr = make_model_layout(setup.model);
  const ModelLayout& layout = *layout_ptr;
  StepProfiler profiler(*backend, *data_comm, args.profile_steps);
  EngineParts parts;
  if (any_rank_fails(comm, [&] { parts = build_engine(setup, args, layout, *backend, profiler, comm); })) return 2;

  // ---- 2. the starting state, and what the run says about itself ----
  MetricsWriter metrics(first ? args.output_dir + "/metrics.jsonl" : std::string(), setup.resume.has_value());
  TrainerState state = load_starting_state(*parts.engine, setup, layout, args);
  log_run_config(setup, args, layout, *backend, *parts.engine, place, comm.size());
  write_start_event(metrics, *parts.engine, *parts.model, comm, setup, layout, place, args);

  // ---- 3. training, evaluating on the way ----
  const Trainer trainer{args,    setup.ds,        setup.seq_len, place,   comm,     *data_comm,
                        layout,  *parts.engine,   *parts.model,  batches, metrics,  *parts.monitors,
                        stop,    profiler,        parts.mics};
  ProgressLine progress(args.max_steps, !args.disable_tqdm && first);
  Stopwatch run_clock;
  if (batches.eval_windows && args.eval_on_start) log_info("step 0: eval_loss ", run_eval(trainer, state, 0));
  // An eval-only run, or one resumed at its end, trains nothing.
  const bool trains = state.global_step < args.max_steps;
  if (const std::optional<int> stopped = train(trainer, state, progress)) return *stopped;

  // ---- 4. the end ----
  if (final_eval_due(args, batches)) {
    const double eval_loss = run_eval(trainer, state, args.max_steps);
    log_info("eval_loss ", eval_loss, " over ", batches.eval_windows->count(), " windows of ", setup.seq_len, " tokens");
  }
  finish_run(trainer, state, run_clock, trains);
  return stop.interrupted() != 0 ? 130 : 0;  // Ctrl-C after the last step: everything above was done
}

}  // namespace zt
