// ShmComm: the HostComm for ranks that share a node, through one MPI-3 shared-memory window
// (MPI_Win_allocate_shared) instead of Open MPI's collective paths (issue 17: its reduce-scatter
// moved 0.4-0.5 GB/s at 2 ranks where a copy into a shared window moves 4-13 GB/s).
//
// Each rank owns a segment of the window: a barrier flag, a post per staging buffer (below) and
// two staging buffers of `chunk_bytes` (double buffering). A collective runs in steps; in each
// step every rank copies what the others need of its input into its own buffer, a barrier makes
// the copies visible, and every rank then works on its own disjoint slice, reading the others'
// buffers directly:
//   reduce-scatter  rank r sums slice r over ranks 0, 1, ..., P-1, in that order;
//   all-gather      rank r copies every rank's block into its own output;
//   all-to-all      P-1 rounds: in round d rank r stages its block for rank r+d, and takes rank
//                   r-d's block for r from that rank's buffer;
//   all-reduce      a reduce-scatter over P balanced slices whose sums are written to the window
//                   and to the buffer in one pass; the next step's barrier (a last one after
//                   the last step) publishes them, and each rank then copies the P-1 other slices.
// A reduce-scatter's or all-gather's output of `stream_from_bytes` or more is written with
// non-temporal stores, as glibc's memcpy does past its own threshold: far larger than the
// caches, its lines would only be read in to be overwritten (2 ranks, 64-256 MB all-gather:
// 5.2-6.1 GB/s before, 6.8-9.4 after). The all-reduce works in place on lines its step has just
// read, where streaming measured slower (4.5 against 3.4-3.8 GB/s at 256 MB).
// A step that reuses a buffer comes two barriers after the last reads of it, so one barrier per
// step suffices (the all-reduce's copies of a step's sums read buffer b before the barrier that
// lets b be written again). The barrier is a monotonic counter per rank in the window,
// stored with release and loaded with acquire ordering (the hardware's coherence is what MPI's
// unified memory model promises for shared windows); a waiting rank spins briefly, then yields or
// sleeps (50 us while nobody waits for the result, as MpiComm's progress thread), so it never
// holds a core for long.
//
// Results are deterministic: element i of a sum is ((x0 + x1) + x2) + ... in rank order on every
// run and every rank, whatever the timing. bf16 and fp16 add in fp32 and round back after every
// addition, MpiComm's operator applied in rank order: with 2 ranks both communicators give the
// same bits for every dtype; with more, MPI's own order (which Open MPI chooses by algorithm and
// message size) may differ from rank order in the last bit.
//
// Shared buffers (allocate_shared, issue 17): a window of its own per allocation, mapped on every
// rank of the node. When every rank's buffer of an all-reduce or reduce-scatter lies in one, the
// ranks read each other's inputs where they are instead of staging them (the staged all-reduce
// moves each slice through the window and back, and at 256 MB reached 0.39-0.44 of the copy
// bandwidth; in place it is one sum of the own slice over every rank's buffer, a barrier, and a
// copy of the other slices from their owners). Each collective posts where its buffer is (the
// allocation's number and the offset in it) in its segment before its first barrier, and every
// rank reads every post after it: all in shared memory, the in-place path on every rank; none,
// the staged one; a mix throws on every rank (the buffers were allocated differently).
//
// Async: as MpiComm, a worker thread (comm/work_queue.h) runs the collectives in issue order;
// the caller's Work waits for it. A failure (an MPI error while setting up) is rethrown by wait().
#pragma once

#include <mpi.h>

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "comm/communicator.h"
#include "comm/work_queue.h"

namespace zt {

/// Staging per rank and buffer: 2 MiB (so a window holds 4 MiB per rank).
inline constexpr size_t kShmChunkBytes = size_t(2) << 20;
/// Outputs this large are streamed (16 MB measured faster with ordinary stores, 64 MB slower).
inline constexpr size_t kShmStreamFromBytes = size_t(32) << 20;

class ShmComm final : public HostComm {
 public:
  /// Duplicates `parent`, whose ranks must all share this node (node_layout().one_node), and
  /// allocates the window. Collective.
  explicit ShmComm(MPI_Comm parent, size_t chunk_bytes = kShmChunkBytes,
                   size_t stream_from_bytes = kShmStreamFromBytes);
  ~ShmComm() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "shm"; }
  /// Chunking is internal; the engine's pieces stay those of MpiComm, so that buckets, and with
  /// them every sum, are the same whichever communicator runs.
  size_t max_collective_elements() const override;

  std::shared_ptr<Work> all_reduce(void* buffer, size_t count, DType dtype) override;
  std::shared_ptr<Work> reduce_scatter(const void* send, void* recv, const std::vector<size_t>& recv_counts,
                                       DType dtype) override;
  std::shared_ptr<Work> all_gather(const void* send, void* recv, const std::vector<size_t>& counts,
                                   DType dtype) override;
  std::shared_ptr<Work> broadcast(void* buffer, size_t count, DType dtype, int root) override;
  std::shared_ptr<Work> all_to_all(const void* send, void* recv, size_t count, DType dtype) override;
  std::shared_ptr<Work> barrier() override;
  std::unique_ptr<HostComm> duplicate() override {
    return std::make_unique<ShmComm>(comm_, chunk_bytes_, stream_from_);
  }
  std::unique_ptr<HostComm> split(int color) override;
  void all_reduce_doubles(std::vector<double>& values, bool max) override;
  /// A window of `bytes` per rank (zeroed), or null on every rank when the node's shared-memory
  /// file system (/dev/shm, or OMPI_MCA_osc_sm_backing_directory when set) lacks room for the
  /// ranks' buffers together, an eighth more and 2 MiB a rank: the caller then keeps private
  /// memory, staged.
  std::unique_ptr<SharedBuffer> allocate_shared(size_t bytes) override;

  /// The allocations mapped in this process, by number (the same on every rank: allocations are
  /// collective and in the same order). Shared with the buffers, which unregister themselves.
  struct Region {
    unsigned char* mine = nullptr;
    size_t bytes = 0;
    std::vector<unsigned char*> bases;  // every rank's part, in this process's mapping
    std::vector<size_t> sizes;          // and its bytes
  };
  struct Registry {
    std::mutex mutex;
    std::map<uint64_t, Region> regions;
    uint64_t next = 1;  // 0 in a post: not shared
  };

 private:
  std::shared_ptr<Work> enqueue(std::function<void()> run);

  // Run on the worker thread.
  void sync();
  unsigned char* staging(int rank, int buffer) const;
  /// Where a buffer lies in shared memory: the allocation's number and the offset in it
  /// ({0, 0}: not shared).
  struct Post {
    uint64_t region = 0, offset = 0;
  };
  /// [p, p + bytes) in one of this rank's shared allocations, or {0, 0} (also when bytes is 0).
  Post find_shared(const void* p, size_t bytes) const;
  /// Posts `where` in this rank's segment for the collective whose first step uses staging
  /// buffer `b` (written again only two barriers later, as the staging buffers).
  void post(Post where, int b);
  /// After the collective's first barrier: every rank's buffer of `bytes` in this process's
  /// mapping when all are shared, empty when none is; throws when some are.
  std::vector<unsigned char*> posted_buffers(int b, size_t bytes);
  /// The in-place paths, with the caller's slices (counts, and where they start) and every rank's
  /// buffer from posted_buffers().
  void run_all_reduce_in_place(unsigned char* buffer, const std::vector<size_t>& counts,
                               const std::vector<size_t>& displ, DType dtype,
                               const std::vector<unsigned char*>& buffers);
  void run_reduce_scatter_in_place(unsigned char* recv, const std::vector<size_t>& counts,
                                   const std::vector<size_t>& displ, DType dtype,
                                   const std::vector<unsigned char*>& sends);
  /// Elements per destination rank and step of a reduce: the staging buffer split P ways.
  size_t reduce_piece(size_t elem_bytes) const { return chunk_bytes_ / (size_t(size_) * elem_bytes) / 16 * 16; }
  void stage_step(const unsigned char* send, const std::vector<size_t>& counts, const std::vector<size_t>& displ,
                  size_t offset, size_t piece, DType dtype, int buffer);
  void sum_step(const unsigned char* send, const std::vector<size_t>& counts, const std::vector<size_t>& displ,
                size_t offset, size_t piece, DType dtype, int buffer, unsigned char* out, unsigned char* also, bool stream);
  void run_reduce_scatter(const unsigned char* send, unsigned char* recv, const std::vector<size_t>& counts,
                          DType dtype, Post where);
  void run_all_gather(const unsigned char* send, unsigned char* recv, const std::vector<size_t>& counts, DType dtype);
  void run_all_reduce(unsigned char* buffer, size_t count, DType dtype, Post where);
  void run_broadcast(unsigned char* buffer, size_t bytes, int root);
  void run_all_to_all(const unsigned char* send, unsigned char* recv, size_t bytes);
  void run_all_reduce_doubles(double* values, size_t count, bool max);

  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Win win_ = MPI_WIN_NULL;
  int rank_ = 0, size_ = 1;
  size_t chunk_bytes_;
  size_t stream_from_;
  std::vector<unsigned char*> segments_;  // each rank's segment, mapped here
  uint64_t epoch_ = 0;                    // barriers passed (worker thread)
  int buffer_ = 0;                        // staging buffer of the next step (worker thread)
  std::atomic<bool> abandoned_{false};    // destroyed during unwinding: stop waiting for peers
  std::shared_ptr<Registry> registry_ = std::make_shared<Registry>();

  WorkQueue queue_;  // the worker thread: the barrier polls faster while it has waiters
};

}  // namespace zt
