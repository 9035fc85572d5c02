// Wall-clock timers: a stopwatch, and named accumulating timers for `wall_clock_breakdown`.
#pragma once

#include <chrono>
#include <map>
#include <string>

namespace zt {

/// Seconds since construction or the last reset(), from a monotonic clock.
class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  void reset() { start_ = std::chrono::steady_clock::now(); }
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  double ms() const { return seconds() * 1e3; }

 private:
  std::chrono::steady_clock::time_point start_;
};

/// Named timers that accumulate milliseconds between start() and stop(), as DeepSpeed's
/// `wall_clock_breakdown` reports forward, backward and step time.
class TimerSet {
 public:
  void start(const std::string& name) { running_[name].reset(); }
  void stop(const std::string& name) { total_ms_[name] += running_[name].ms(); }
  /// Accumulated milliseconds per name since the last clear().
  const std::map<std::string, double>& totals() const { return total_ms_; }
  void clear() { total_ms_.clear(); }

 private:
  std::map<std::string, Stopwatch> running_;
  std::map<std::string, double> total_ms_;
};

/// Starts a named timer in a TimerSet for the lifetime of the scope.
class ScopedTimer {
 public:
  ScopedTimer(TimerSet& set, std::string name) : set_(set), name_(std::move(name)) { set_.start(name_); }
  ~ScopedTimer() { set_.stop(name_); }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  TimerSet& set_;
  std::string name_;
};

}  // namespace zt
