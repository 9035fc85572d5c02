#include "train/monitor.h"

#include <filesystem>
#include <system_error>

#include "core/error.h"
#include "train/csv_monitor.h"
#include "train/tensorboard_writer.h"

namespace zt {
namespace {

// os.makedirs(dir, exist_ok=True).
void create_log_dir(const std::string& dir, const char* block) {
  ZT_USAGE_CHECK(!dir.empty(), block, ": output_path and job_name are both empty: no directory to write to");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  ZT_USAGE_CHECK(!ec, dir, ": cannot create the ", block, " directory: ", ec.message());
  ZT_USAGE_CHECK(std::filesystem::is_directory(dir, ec), dir, ": the ", block, " directory is not a directory");
}

}  // namespace

std::string monitor_log_dir(const MonitorConfig& config) {
  const std::string& base = config.output_path;
  const std::string& name = config.job_name;
  if (base.empty() || (!name.empty() && name.front() == '/')) return name;
  return base.back() == '/' ? base + name : base + "/" + name;
}

MonitorMaster::MonitorMaster(const MonitorConfig& tensorboard, const MonitorConfig& csv, bool this_rank_writes)
    : enabled_(tensorboard.enabled || csv.enabled) {
  if (!this_rank_writes) return;
  if (tensorboard.enabled) {
    tensorboard_dir_ = monitor_log_dir(tensorboard);
    create_log_dir(tensorboard_dir_, "tensorboard");
    tensorboard_ = std::make_unique<EventFileWriter>(tensorboard_dir_);
  }
  if (csv.enabled) {
    csv_dir_ = monitor_log_dir(csv);
    create_log_dir(csv_dir_, "csv_monitor");
    csv_ = std::make_unique<CsvMonitor>(csv_dir_);
  }
}

MonitorMaster::~MonitorMaster() = default;

void MonitorMaster::write_events(const std::vector<MonitorEvent>& events) {
  if (tensorboard_) {
    for (const MonitorEvent& e : events) tensorboard_->add_scalar(e.tag, e.value, e.step, wall_clock_seconds());
    tensorboard_->flush();
  }
  if (csv_) {
    for (const MonitorEvent& e : events) csv_->write(e.tag, e.value, e.step, e.as_int);
  }
}

void MonitorMaster::close() {
  if (tensorboard_) tensorboard_->close();
  if (csv_) csv_->close();
}

std::string MonitorMaster::event_file_path() const { return tensorboard_ ? tensorboard_->path() : std::string(); }

}  // namespace zt
