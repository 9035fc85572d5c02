// TensorBoard event files as torch.utils.tensorboard's SummaryWriter writes them (DeepSpeed's
// tensorboard monitor uses it): TFRecord records around Event protobufs, the first one carrying
// file_version "brain.Event:2", each scalar a Summary.Value with tag and simple_value.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace zt {

class CheckedFile;

/// CRC-32C (Castagnoli polynomial, reflected), the checksum TFRecord uses.
uint32_t crc32c(std::string_view bytes);
/// TFRecord's masked CRC: rotated right by 15 bits, plus 0xa282ead8.
uint32_t masked_crc32c(std::string_view bytes);
/// One TFRecord: the length as uint64 little-endian, the masked CRC of those 8 bytes, the data,
/// the masked CRC of the data (CRCs little-endian).
std::string frame_tfrecord(std::string_view data);

/// TensorBoard's file name for a new event file: events.out.tfevents.<seconds since the epoch,
/// 10 digits>.<host name>.<pid>.<n>, n counting the event files this process has opened from 0.
std::string tensorboard_event_file_name(double wall_time);

/// Seconds since the epoch, as Python's time.time().
double wall_clock_seconds();

/// Writes one event file. Records are kept until flush(), which writes them all at once.
class EventFileWriter {
 public:
  /// Creates a new event file under TensorBoard's name in `log_dir` (which must exist) and writes
  /// its first event (file_version "brain.Event:2", source_metadata.writer "zerotrain").
  explicit EventFileWriter(const std::string& log_dir);
  /// The same at exactly `path` (truncated), for tests.
  static std::unique_ptr<EventFileWriter> at_path(const std::string& path);
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  /// Queues an Event{wall_time, step, summary{value{tag, simple_value = float(value)}}}, as
  /// SummaryWriter.add_scalar(tag, value, step, walltime) does.
  void add_scalar(const std::string& tag, double value, int64_t step, double wall_time);
  /// Writes the queued records; throws zt::Error naming the file on failure.
  void flush();
  /// Flushes and closes; throws zt::Error naming the file on failure.
  void close();

  const std::string& path() const;

 private:
  struct PathTag {};
  EventFileWriter(PathTag, const std::string& path);
  void add_event(const std::string& serialized);

  std::unique_ptr<CheckedFile> file_;
  std::string pending_;
};

}  // namespace zt
