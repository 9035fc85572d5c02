#include "core/progress.h"

#include <cstdio>

#include "core/error.h"
#include "core/log.h"

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
    : total_(total_steps), enabled_(enabled && log_is_terminal()) {}

ProgressLine::~ProgressLine() { clear(); }

void ProgressLine::update(int64_t step, const std::string& summary) {
  if (!enabled_) return;
  const int width = 24;
  int filled = total_ > 0 ? int(width * step / total_) : 0;
  std::string bar(size_t(filled), '#');
  bar.resize(width, '.');
  double elapsed = clock_.seconds();
  double eta = step > 0 ? elapsed / double(step) * double(total_ - step) : 0.0;
  set_status_line(cat("[", bar, "] ", step, "/", total_, " ", summary, " | ", format_duration(elapsed), "<",
                      format_duration(eta)));
}

void ProgressLine::clear() {
  if (enabled_) set_status_line("");
}

}  // namespace zt
