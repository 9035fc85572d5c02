#include "train/metrics.h"

#include <cmath>

namespace zt {

MetricsWriter::MetricsWriter(const std::string& path, bool append) : path_(path) {
  if (!path.empty()) file_.emplace(path, append ? CheckedFile::Mode::kAppend : CheckedFile::Mode::kTruncate);
}

namespace {

// JSON has no NaN or infinity (Boost.JSON would write the invalid tokens NaN and Infinity): such
// a value becomes null and its dotted key goes into `names`, so that every line parses.
void null_nonfinite(boost::json::object& object, const std::string& prefix, boost::json::array& names) {
  for (auto& [key, value] : object) {
    if (value.is_double() && !std::isfinite(value.get_double())) {
      value = nullptr;
      names.emplace_back(prefix + std::string(key));
    } else if (value.is_object()) {
      null_nonfinite(value.get_object(), prefix + std::string(key) + ".", names);
    }
  }
}

}  // namespace

void MetricsWriter::write(const std::string& event, boost::json::object fields) {
  if (!file_) return;
  boost::json::object line;
  line["event"] = event;
  for (auto& [key, value] : fields) line[key] = std::move(value);
  boost::json::array nonfinite;
  null_nonfinite(line, "", nonfinite);
  if (!nonfinite.empty()) line["nonfinite"] = std::move(nonfinite);
  // One unbuffered write per line: in the kernel when this returns, whatever happens next.
  file_->write(boost::json::serialize(line) + '\n');
}

}  // namespace zt
