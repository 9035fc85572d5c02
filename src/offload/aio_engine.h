// Asynchronous file I/O for NVMe offload on io_uring (liburing), honouring DeepSpeed's "aio" block:
//
//   block_size            one transfer is cut into requests of this many bytes
//   queue_depth           requests in flight per ring
//   intra_op_parallelism  rings, each driven by its own thread; a transfer's blocks are split into
//                         that many contiguous shares, one per ring
//   single_submit         one io_uring_submit per request instead of one per batch of requests
//   overlap_events        refill the ring as each request completes; false waits for a whole wave
//
// Transfers are queued and run in the order issued per ring, several in flight at once, so a read
// of the next piece and a write of the previous one overlap with compute on the current one.
// Buffers, offsets and sizes must be multiples of 4096 when the file is opened with O_DIRECT.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "config/ds_config.h"

namespace zt {

/// One read or write in flight. wait() blocks until every block is done and throws zt::Error
/// naming the file, the offset and the system's message (ENOSPC: "No space left on device").
class AioTransfer {
 public:
  void wait();
  bool done();

 private:
  friend class AioEngine;
  friend class AioRing;
  void block_done(const std::string& error);

  std::mutex mutex_;
  std::condition_variable cv_;
  size_t pending_blocks_ = 0;
  std::string error_;  // the first failure
};

class AioRing;

class AioEngine {
 public:
  explicit AioEngine(const AioConfig& config);
  ~AioEngine();
  AioEngine(const AioEngine&) = delete;
  AioEngine& operator=(const AioEngine&) = delete;

  /// Reads `bytes` at `offset` of `fd` into `buffer`. `path` names the file in errors.
  std::shared_ptr<AioTransfer> read(int fd, const std::string& path, void* buffer, size_t bytes, size_t offset);
  std::shared_ptr<AioTransfer> write(int fd, const std::string& path, const void* buffer, size_t bytes,
                                     size_t offset);
  const AioConfig& config() const { return config_; }

 private:
  std::shared_ptr<AioTransfer> submit(bool write, int fd, const std::string& path, void* buffer, size_t bytes,
                                      size_t offset);

  AioConfig config_;
  std::vector<std::unique_ptr<AioRing>> rings_;
};

}  // namespace zt
