// WorkQueue: the thread a host communicator runs its collectives on, one after another in issue
// order, completing each one's Work handle (with the exception the collective threw, if any).
// A thread blocked in Work::wait() counts as a waiter, so that the collective running may poll
// fast while somebody waits for it and sleep long while it only overlaps computation. MpiComm
// and ShmComm both run on one.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "comm/communicator.h"

namespace zt {

class WorkQueue {
 public:
  /// Starts the thread; it sleeps until the first task.
  WorkQueue();
  /// stop().
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  /// Queues `task` behind every task queued before it; its Work completes when it returns.
  std::shared_ptr<Work> enqueue(std::function<void()> task);
  /// Runs what is queued, then ends the thread. A communicator calls it before it frees what its
  /// tasks use (the MPI communicator, a window); later calls do nothing.
  void stop();

  /// Threads blocked in wait() on one of this queue's handles.
  int waiters() const { return waiters_.load(std::memory_order_relaxed); }
  /// On the queue's thread, between two polls of a collective: sleeps for `pause`, or less once a
  /// thread starts waiting.
  void pause_unless_waited(std::chrono::microseconds pause);

 private:
  class QueuedWork;
  void run();
  void add_waiter(int delta);

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::pair<std::function<void()>, std::shared_ptr<QueuedWork>>> queue_;
  std::atomic<int> waiters_{0};
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace zt
