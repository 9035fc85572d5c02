#include "comm/work_queue.h"

#include <sys/prctl.h>

#include <exception>

namespace zt {

class WorkQueue::QueuedWork final : public Work {
 public:
  explicit QueuedWork(WorkQueue* queue) : queue_(queue) {}
  void wait() override {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!done_) {
      queue_->add_waiter(+1);
      done_cv_.wait(lock, [&] { return done_; });
      queue_->add_waiter(-1);
    }
    if (error_) std::rethrow_exception(error_);
  }
  void finish(std::exception_ptr error) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
      error_ = error;
    }
    done_cv_.notify_all();
  }

 private:
  WorkQueue* queue_;
  std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

WorkQueue::WorkQueue() {
  thread_ = std::thread([this] {
    prctl(PR_SET_TIMERSLACK, 1000UL);  // 1 us: the default 50 us slack would stretch every pause
    run();
  });
}

WorkQueue::~WorkQueue() { stop(); }

void WorkQueue::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void WorkQueue::add_waiter(int delta) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    waiters_ += delta;
  }
  if (delta > 0) wake_.notify_all();
}

void WorkQueue::pause_unless_waited(std::chrono::microseconds pause) {
  std::unique_lock<std::mutex> lock(mutex_);
  wake_.wait_for(lock, pause, [&] { return waiters_.load(std::memory_order_relaxed) > 0; });
}

void WorkQueue::run() {
  for (;;) {
    std::pair<std::function<void()>, std::shared_ptr<QueuedWork>> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    std::exception_ptr error;
    try {
      task.first();
    } catch (...) {
      error = std::current_exception();
    }
    task.second->finish(error);
  }
}

std::shared_ptr<Work> WorkQueue::enqueue(std::function<void()> task) {
  auto work = std::make_shared<QueuedWork>(this);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.emplace_back(std::move(task), work);
  }
  wake_.notify_all();
  return work;
}

}  // namespace zt
