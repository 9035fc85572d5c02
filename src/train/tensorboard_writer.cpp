#include "train/tensorboard_writer.h"

#include <unistd.h>

#include <atomic>
#include <limits>
#include <boost/crc.hpp>
#include <cstdio>
#include <ctime>

#include "core/error.h"
#include "train/checked_file.h"
#include "train/proto/tensorboard_event.pb.h"

namespace zt {
namespace {

// CRC-32C: polynomial 0x1EDC6F41, initial and final XOR all ones, input and output reflected.
using Crc32c = boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true>;

void append_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(char((value >> (8 * i)) & 0xff));
}

// The files this process has opened, as tensorboard's EventFileWriter counts them (its last name
// component), so two writers in one process within one second never share a name.
std::atomic<int> event_files_opened{0};

}  // namespace

uint32_t crc32c(std::string_view bytes) {
  Crc32c crc;
  crc.process_bytes(bytes.data(), bytes.size());
  return crc.checksum();
}

uint32_t masked_crc32c(std::string_view bytes) {
  const uint32_t crc = crc32c(bytes);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string frame_tfrecord(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  append_le(out, data.size(), 8);
  append_le(out, masked_crc32c(out), 4);
  out.append(data);
  append_le(out, masked_crc32c(data), 4);
  return out;
}

double wall_clock_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

std::string tensorboard_event_file_name(double wall_time) {
  char host[256] = {};
  ZT_CHECK_ERRNO(gethostname(host, sizeof(host) - 1), "(host name for the event file's name)");
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%010lld", static_cast<long long>(wall_time));
  return cat("events.out.tfevents.", seconds, ".", host, ".", getpid(), ".", event_files_opened.fetch_add(1));
}

EventFileWriter::EventFileWriter(const std::string& log_dir)
    : EventFileWriter(PathTag{}, cat(log_dir, "/", tensorboard_event_file_name(wall_clock_seconds()))) {}

std::unique_ptr<EventFileWriter> EventFileWriter::at_path(const std::string& path) {
  return std::unique_ptr<EventFileWriter>(new EventFileWriter(PathTag{}, path));
}

EventFileWriter::EventFileWriter(PathTag, const std::string& path)
    : file_(std::make_unique<CheckedFile>(path, CheckedFile::Mode::kTruncate)) {
  tensorboard::Event first;
  first.set_wall_time(wall_clock_seconds());
  first.set_file_version("brain.Event:2");
  first.mutable_source_metadata()->set_writer("zerotrain");
  add_event(first.SerializeAsString());
  flush();
}

EventFileWriter::~EventFileWriter() = default;

void EventFileWriter::add_scalar(const std::string& tag, double value, int64_t step, double wall_time) {
  tensorboard::Event event;
  event.set_wall_time(wall_time);
  event.set_step(step);
  tensorboard::Summary::Value* v = event.mutable_summary()->add_value();
  v->set_tag(tag);
  // simple_value is a float, as in SummaryWriter: rounded to nearest (IEEE 754, so beyond
  // float's range it is +-inf).
  static_assert(std::numeric_limits<float>::is_iec559);
  v->set_simple_value(static_cast<float>(value));
  add_event(event.SerializeAsString());
}

void EventFileWriter::add_event(const std::string& serialized) { pending_ += frame_tfrecord(serialized); }

void EventFileWriter::flush() {
  if (pending_.empty()) return;
  file_->write(pending_);
  pending_.clear();
}

void EventFileWriter::close() {
  flush();
  file_->close();
}

const std::string& EventFileWriter::path() const { return file_->path(); }

}  // namespace zt
