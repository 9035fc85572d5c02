#include "offload/aio_engine.h"

#include <liburing.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <unordered_set>

#include "core/error.h"

namespace zt {

void AioTransfer::wait() {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return pending_blocks_ == 0; });
  if (!error_.empty()) throw Error(error_);
}

bool AioTransfer::done() {
  std::lock_guard lock(mutex_);
  return pending_blocks_ == 0;
}

void AioTransfer::block_done(const std::string& error) {
  std::lock_guard lock(mutex_);
  if (!error.empty() && error_.empty()) error_ = error;
  if (--pending_blocks_ == 0) cv_.notify_all();
}

namespace {

struct Block {
  bool write = false;
  int fd = -1;
  const std::string* path = nullptr;
  unsigned char* buffer = nullptr;
  size_t bytes = 0, offset = 0;
  std::shared_ptr<AioTransfer> transfer;
};

}  // namespace

// One io_uring and the thread that feeds it.
class AioRing {
 public:
  AioRing(const AioConfig& config) : config_(config) {
    const int rc = io_uring_queue_init(unsigned(config.queue_depth), &ring_, 0);
    if (rc < 0) {
      throw Error(cat("io_uring_queue_init(", config.queue_depth, ") failed: ", std::strerror(-rc),
                      " (io_uring is needed for NVMe offload; is it disabled by the kernel or a seccomp policy?)"));
    }
    thread_ = std::thread([this] { run(); });
  }
  ~AioRing() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
    io_uring_queue_exit(&ring_);
  }

  void enqueue(std::vector<Block>&& blocks) {
    {
      std::lock_guard lock(mutex_);
      if (!broken_.empty()) {
        for (Block& b : blocks) b.transfer->block_done(broken_);
        return;
      }
      for (Block& b : blocks) queue_.push_back(std::move(b));
    }
    cv_.notify_all();
  }

 private:
  void run() {
    size_t active = 0;
    for (;;) {
      // Fill the ring: whenever there is room (overlap_events) or only when it is empty (waves).
      size_t prepared = 0;
      {
        std::unique_lock lock(mutex_);
        if (active == 0) cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (active == 0 && queue_.empty() && stopping_) return;
        const bool may_fill = config_.overlap_events || active == 0;
        while (may_fill && active < size_t(config_.queue_depth) && !queue_.empty()) {
          Block* b = new Block(std::move(queue_.front()));
          queue_.pop_front();
          in_flight_.insert(b);
          prepare(b);
          ++active;
          ++prepared;
          if (config_.single_submit) io_uring_submit(&ring_);
        }
      }
      if (prepared > 0 && !config_.single_submit) io_uring_submit(&ring_);
      if (active == 0) continue;
      // Reap at least one completion, then whatever else is ready.
      io_uring_cqe* cqe = nullptr;
      int rc = io_uring_wait_cqe(&ring_, &cqe);
      while (rc == 0 && cqe) {
        Block* b = static_cast<Block*>(io_uring_cqe_get_data(cqe));
        const int res = cqe->res;
        io_uring_cqe_seen(&ring_, cqe);
        --active;
        complete(b, res);
        cqe = nullptr;
        rc = io_uring_peek_cqe(&ring_, &cqe);
      }
      if (rc < 0 && rc != -EAGAIN && rc != -EINTR) {
        // The ring itself failed: nothing more will complete. Fail every block, in flight or
        // queued, so that no waiter hangs; the thread then only fails what arrives.
        const std::string error = cat("io_uring_wait_cqe failed: ", std::strerror(-rc));
        std::lock_guard lock(mutex_);
        for (Block* b : in_flight_) {
          b->transfer->block_done(error);
          delete b;
        }
        in_flight_.clear();
        active = 0;
        for (Block& b : queue_) b.transfer->block_done(error);
        queue_.clear();
        broken_ = error;
      }
    }
  }

  void prepare(Block* b) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    ZT_CHECK(sqe != nullptr, "io_uring submission queue full");
    if (b->write) {
      io_uring_prep_write(sqe, b->fd, b->buffer, unsigned(b->bytes), b->offset);
    } else {
      io_uring_prep_read(sqe, b->fd, b->buffer, unsigned(b->bytes), b->offset);
    }
    io_uring_sqe_set_data(sqe, b);
  }

  // A short transfer (allowed by POSIX, rare on local files) continues with the rest at the
  // front of the queue; an error or an unexpected end of file ends the block with a message.
  void complete(Block* b, int res) {
    std::unique_ptr<Block> owned(b);
    in_flight_.erase(b);
    if (res < 0) {
      b->transfer->block_done(cat(*b->path, ": ", b->write ? "write" : "read", " of ", b->bytes, " bytes at offset ",
                                  b->offset, " failed: ", std::strerror(-res)));
      return;
    }
    if (res == 0) {
      b->transfer->block_done(cat(*b->path, ": ", b->write ? "write" : "read", " at offset ", b->offset,
                                  " made no progress (end of file)"));
      return;
    }
    if (size_t(res) < b->bytes) {
      Block rest = *b;
      rest.buffer += res;
      rest.bytes -= size_t(res);
      rest.offset += size_t(res);
      std::lock_guard lock(mutex_);
      queue_.push_front(std::move(rest));
      return;
    }
    b->transfer->block_done("");
  }

  const AioConfig& config_;
  io_uring ring_{};
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Block> queue_;
  std::unordered_set<Block*> in_flight_;  // submitted, owned here until their completion
  std::string broken_;                     // the ring's failure, once it has failed
  bool stopping_ = false;
  std::thread thread_;
};

AioEngine::AioEngine(const AioConfig& config) : config_(config) {
  for (int64_t i = 0; i < config.intra_op_parallelism; ++i) rings_.push_back(std::make_unique<AioRing>(config_));
}

AioEngine::~AioEngine() = default;

std::shared_ptr<AioTransfer> AioEngine::read(int fd, const std::string& path, void* buffer, size_t bytes,
                                             size_t offset) {
  return submit(false, fd, path, buffer, bytes, offset);
}

std::shared_ptr<AioTransfer> AioEngine::write(int fd, const std::string& path, const void* buffer, size_t bytes,
                                              size_t offset) {
  return submit(true, fd, path, const_cast<void*>(buffer), bytes, offset);
}

std::shared_ptr<AioTransfer> AioEngine::submit(bool write, int fd, const std::string& path, void* buffer,
                                               size_t bytes, size_t offset) {
  auto transfer = std::make_shared<AioTransfer>();
  const size_t block = size_t(config_.block_size);
  const size_t num_blocks = (bytes + block - 1) / block;
  transfer->pending_blocks_ = num_blocks;
  if (num_blocks == 0) return transfer;
  // Contiguous shares of whole blocks, one per ring: each thread streams its own region.
  const size_t rings = std::min(rings_.size(), num_blocks);
  const size_t per_ring = (num_blocks + rings - 1) / rings;
  for (size_t r = 0; r < rings; ++r) {
    std::vector<Block> blocks;
    for (size_t i = r * per_ring; i < std::min(num_blocks, (r + 1) * per_ring); ++i) {
      const size_t lo = i * block;
      blocks.push_back(Block{write, fd, &path, static_cast<unsigned char*>(buffer) + lo,
                             std::min(block, bytes - lo), offset + lo, transfer});
    }
    rings_[r]->enqueue(std::move(blocks));
  }
  return transfer;
}

}  // namespace zt
