#include "train/metrics.h"

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace zt {

MetricsWriter::MetricsWriter(const std::string& path, bool append) : path_(path) {
  if (path.empty()) return;
  file_ = std::fopen(path.c_str(), append ? "a" : "w");
  ZT_USAGE_CHECK(file_ != nullptr, path, ": cannot create metrics file: ", std::strerror(errno));
}

MetricsWriter::~MetricsWriter() {
  if (file_) std::fclose(file_);
}

void MetricsWriter::write(const std::string& event, boost::json::object fields) {
  if (!file_) return;
  boost::json::object line;
  line["event"] = event;
  for (auto& [key, value] : fields) line[key] = std::move(value);
  std::string text = boost::json::serialize(line);
  text += '\n';
  ZT_CHECK(std::fwrite(text.data(), 1, text.size(), file_) == text.size(), path_, ": write failed: ",
           std::strerror(errno));
  std::fflush(file_);
}

}  // namespace zt
