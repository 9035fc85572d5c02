// OUTPUT/metrics.jsonl: one JSON object per line, each with an "event" (start, step, profile,
// eval, checkpoint, preempted, interrupted, end; every field in docs/formats.md), written by rank 0
// and flushed line by line so a crashed run keeps everything before the crash.
// A NaN or infinite value is written as null and its key listed in "nonfinite", so that every
// line is valid JSON.
#pragma once

#include <boost/json.hpp>
#include <optional>
#include <string>

#include "train/checked_file.h"

namespace zt {

class MetricsWriter {
 public:
  /// Opens `path` (truncating, or appending when a resumed run continues the file); a null
  /// writer (empty path) discards everything.
  explicit MetricsWriter(const std::string& path, bool append = false);

  /// Writes `fields` with "event": event.
  void write(const std::string& event, boost::json::object fields);
  /// Closes the file, checked (the destructor cannot report a failure).
  void close() {
    if (file_) file_->close();
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::optional<CheckedFile> file_;  // empty: the null writer
};

}  // namespace zt
