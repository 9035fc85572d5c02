#include "train/progress.h"

#include <unistd.h>

#include <cstdio>

#include "core/error.h"

namespace zt {

std::string format_duration(double seconds) {
  long s = long(seconds + 0.5);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof(buf), "%ldh%02ldm", s / 3600, (s % 3600) / 60);
  else if (s >= 60) std::snprintf(buf, sizeof(buf), "%ldm%02lds", s / 60, s % 60);
  else std::snprintf(buf, sizeof(buf), "%lds", s);
  return buf;
}

ProgressLine::ProgressLine(int64_t total_steps, bool enabled)
    : total_(total_steps),
      out_(isatty(STDERR_FILENO) ? stderr : isatty(STDOUT_FILENO) ? stdout : nullptr),
      enabled_(enabled && out_ != nullptr) {}

ProgressLine::~ProgressLine() { clear(); }

void ProgressLine::update(int64_t step, const std::string& summary) {
  if (!enabled_) return;
  const int width = 24;
  int filled = total_ > 0 ? int(width * step / total_) : 0;
  std::string bar(size_t(filled), '#');
  bar.resize(width, '.');
  double elapsed = clock_.seconds();
  double eta = step > 0 ? elapsed / double(step) * double(total_ - step) : 0.0;
  std::fprintf(out_, "\r\033[K[%s] %lld/%lld %s | %s<%s", bar.c_str(), (long long)step, (long long)total_,
               summary.c_str(), format_duration(elapsed).c_str(), format_duration(eta).c_str());
  std::fflush(out_);
  drawn_ = true;
}

void ProgressLine::clear() {
  if (!enabled_ || !drawn_) return;
  std::fprintf(out_, "\r\033[K");
  std::fflush(out_);
  drawn_ = false;
}

}  // namespace zt
