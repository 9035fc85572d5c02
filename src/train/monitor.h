// DeepSpeed's monitors ("tensorboard" and "csv_monitor" in ds_config.json): rank 0 writes the
// training scalars, indexed by samples seen (DeepSpeed's global_samples), where DeepSpeed writes
// them: output_path/job_name (os.path.join, so output_path "" puts job_name in the working
// directory). TensorBoard gets a new event file per run; the CSVs are appended to.
//
// What DeepSpeed writes when (deepspeed/runtime/engine.py):
//   - Train/Samples/train_loss at the accumulation boundary's backward, before the step: index
//     global_samples before the step adds train_batch_size, value the mean of rank 0's micro-batch
//     losses (engine up to 0.18.2; the pipeline engine writes it after the step, averaged over
//     data-parallel ranks; the engine from 0.18.3 on no longer writes it);
//   - Train/Samples/lr and (fp16 only) Train/Samples/loss_scale after the step: index
//     global_samples after the increment, the lr after the scheduler's step (the next step's;
//     the scheduler does not step on a step skipped for fp16 overflow),
//     the loss scale after its update;
//   - Train/Samples/eval_loss (pipeline engine's eval_batch only) at the current global_samples.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/ds_config.h"

namespace zt {

class CsvMonitor;
class EventFileWriter;

/// DeepSpeed's tags.
inline constexpr const char* kMonitorTrainLoss = "Train/Samples/train_loss";
inline constexpr const char* kMonitorLr = "Train/Samples/lr";
inline constexpr const char* kMonitorLossScale = "Train/Samples/loss_scale";  ///< fp16 only
inline constexpr const char* kMonitorEvalLoss = "Train/Samples/eval_loss";    ///< DeepSpeed's pipe engine

/// One scalar, as DeepSpeed's (tag, value, step) tuples.
struct MonitorEvent {
  std::string tag;
  double value = 0;
  int64_t step = 0;  ///< DeepSpeed's global_samples
  /// The CSV shows the value as Python shows an int ("65536" rather than "65536.0"); DeepSpeed's
  /// loss scale is an int until its first change. The value must then be integral.
  bool as_int = false;
};

/// os.path.join(output_path, job_name): job_name alone when output_path is "" or job_name is
/// absolute, no '/' added after an output_path that ends in one.
std::string monitor_log_dir(const MonitorConfig& config);

/// DeepSpeed's MonitorMaster: the enabled monitors, on the rank that writes.
class MonitorMaster {
 public:
  /// On the writing rank (`this_rank_writes`, rank 0), creates each enabled monitor's log
  /// directory (and its parents), and for TensorBoard a new event file with its first event.
  /// Throws UsageError naming the directory or file when that fails. Other ranks touch nothing.
  MonitorMaster(const MonitorConfig& tensorboard, const MonitorConfig& csv, bool this_rank_writes);
  /// Closes without reporting; call close() to see a failure.
  ~MonitorMaster();
  MonitorMaster(const MonitorMaster&) = delete;
  MonitorMaster& operator=(const MonitorMaster&) = delete;

  /// Whether any monitor is enabled in the config: the same on every rank, as DeepSpeed's
  /// monitor.enabled, so that every rank takes the same branch.
  bool enabled() const { return enabled_; }
  /// Writes `events` to every enabled monitor on the writing rank (a no-op elsewhere), and
  /// flushes: when this returns, the events are in the files. Throws zt::Error naming the file
  /// when a write fails.
  void write_events(const std::vector<MonitorEvent>& events);
  /// Closes the files; throws zt::Error naming a file that fails to close.
  void close();

  /// The directories and the event file written to ("" when not written on this rank).
  const std::string& tensorboard_log_dir() const { return tensorboard_dir_; }
  const std::string& csv_log_dir() const { return csv_dir_; }
  std::string event_file_path() const;

 private:
  bool enabled_ = false;
  std::string tensorboard_dir_, csv_dir_;
  std::unique_ptr<EventFileWriter> tensorboard_;
  std::unique_ptr<CsvMonitor> csv_;
};

}  // namespace zt
