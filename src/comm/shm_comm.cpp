#include "comm/shm_comm.h"

#include <immintrin.h>
#include <sched.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>

#include "comm/block_offsets.h"
#include "comm/mpi_comm.h"
#include "comm/mpi_runtime.h"
#include "core/log.h"

namespace zt {

namespace {

// A segment: the barrier flag on a cache line of its own, a line for the post of each staging
// buffer's collectives (ShmComm::post), then the two staging buffers.
constexpr size_t kFlagBytes = 64;
constexpr size_t kPostBytes = 64;
constexpr size_t kHeaderBytes = kFlagBytes + 2 * kPostBytes;
constexpr size_t kAlign = 64;

uint64_t* flag_of(unsigned char* segment) { return reinterpret_cast<uint64_t*>(segment); }
unsigned char* post_of(unsigned char* segment, int buffer) {
  return segment + kFlagBytes + size_t(buffer) * kPostBytes;
}

// Free bytes where Open MPI backs shared windows (its osc_sm_backing_directory: /dev/shm on Linux
// unless OMPI_MCA_osc_sm_backing_directory says otherwise; a value set in an MCA parameter file is
// not seen here), or 0 when that cannot be read.
size_t shared_room(std::string& where) {
  const char* dir = std::getenv("OMPI_MCA_osc_sm_backing_directory");
  where = dir && *dir ? dir : "/dev/shm";
  struct statvfs fs {};
  if (statvfs(where.c_str(), &fs) != 0) return 0;
  return size_t(fs.f_bavail) * size_t(fs.f_frsize);
}

// A window of `bytes` per rank of `comm` (`size` ranks), each rank's part in its own pages
// (alloc_shared_noncontig: near its own NUMA node once first touched), and every rank's part as
// this process maps it: ShmComm's segments and its shared buffers.
struct Window {
  MPI_Win win = MPI_WIN_NULL;
  std::vector<unsigned char*> bases;
  std::vector<size_t> sizes;
};

Window allocate_window(MPI_Comm comm, size_t bytes, int size) {
  MPI_Info info;
  ZT_MPI_CHECK(MPI_Info_create(&info));
  ZT_MPI_CHECK(MPI_Info_set(info, "alloc_shared_noncontig", "true"));
  void* mine = nullptr;
  Window w;
  const int rc = MPI_Win_allocate_shared(MPI_Aint(bytes), 1, info, comm, &mine, &w.win);
  MPI_Info_free(&info);
  ZT_MPI_CHECK(rc);
  for (int r = 0; r < size; ++r) {
    MPI_Aint part = 0;
    int disp = 0;
    void* base = nullptr;
    ZT_MPI_CHECK(MPI_Win_shared_query(w.win, r, &part, &disp, &base));
    w.bases.push_back(static_cast<unsigned char*>(base));
    w.sizes.push_back(size_t(part));
  }
  return w;
}

// A window of the ShmComm's ranks holding one buffer per rank (ShmComm::allocate_shared).
class ShmBuffer final : public SharedBuffer {
 public:
  ShmBuffer(std::shared_ptr<ShmComm::Registry> registry, uint64_t id, MPI_Win win, unsigned char* data, size_t bytes)
      : registry_(std::move(registry)), id_(id), win_(win), data_(data), bytes_(bytes) {}
  ~ShmBuffer() override {
    {
      std::lock_guard<std::mutex> lock(registry_->mutex);
      registry_->regions.erase(id_);
    }
    // Collective, as the allocation; not while an exception unwinds (a rank failed, its peers may
    // never come, and MPI_Abort at the top ends them all): that would hang the failing rank.
    if (std::uncaught_exceptions() == 0 && MpiRuntime::initialized()) MPI_Win_free(&win_);
  }
  unsigned char* data() override { return data_; }
  size_t bytes() const override { return bytes_; }

 private:
  std::shared_ptr<ShmComm::Registry> registry_;
  uint64_t id_;
  MPI_Win win_;
  unsigned char* data_;
  size_t bytes_;
};

// A copy with non-temporal stores: the destination's lines are not read before they are
// overwritten (a third of a copy's memory traffic), nor kept in the caches.
void stream_copy(void* dst, const void* src, size_t bytes) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  const size_t head = std::min(bytes, size_t(-reinterpret_cast<uintptr_t>(d) & 31));
  std::memcpy(d, s, head);
  d += head, s += head, bytes -= head;
  for (; bytes >= 32; d += 32, s += 32, bytes -= 32) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s)));
  }
  std::memcpy(d, s, bytes);
}

void copy_out(void* dst, const void* src, size_t bytes, bool stream) {
  if (stream) stream_copy(dst, src, bytes);
  else std::memcpy(dst, src, bytes);
}

// The sum in rank order of `inputs[0..P)` into `out` (streamed when `stream`) and into `also` when
// not null, n elements: blocks of kBlock in fp32 so the loops vectorise; 16-bit sums round back
// after every addition (MpiComm's operator). An output may be an input: each block is read whole
// before it is written.
constexpr size_t kBlock = 1024;

void sum_f32(float* out, float* also, const std::vector<const void*>& inputs, size_t n, bool stream) {
  const size_t p = inputs.size();
  if (!also) {
    // One pass, 8 lanes at a time, every input added into a register in rank order and the sum
    // stored once (streamed when asked, from the first 32-byte boundary of `out`): the same bits
    // as the blocks below, without their copies through a scratch block. `out` may be an input:
    // each 8 are read whole before they are written. At 2 ranks, 256 MB: the in-place all-reduce
    // 0.53 -> 0.62 of the copy bandwidth, the in-place reduce-scatter 0.79 -> 0.95-1.14.
    std::vector<const float*> x(p);
    for (size_t q = 0; q < p; ++q) x[q] = static_cast<const float*>(inputs[q]);
    auto one = [&](size_t i) {
      float acc = x[0][i];
      for (size_t q = 1; q < p; ++q) acc += x[q][i];
      out[i] = acc;
    };
    size_t i = 0;
    if (stream) {
      for (; i < n && reinterpret_cast<uintptr_t>(out + i) % 32 != 0; ++i) one(i);
    }
    for (; i + 8 <= n; i += 8) {
      __m256 acc = _mm256_loadu_ps(x[0] + i);
      for (size_t q = 1; q < p; ++q) acc = _mm256_add_ps(acc, _mm256_loadu_ps(x[q] + i));
      if (stream) _mm256_stream_ps(out + i, acc);
      else _mm256_storeu_ps(out + i, acc);
    }
    for (; i < n; ++i) one(i);
    return;
  }
  for (size_t a = 0; a < n; a += kBlock) {
    const size_t m = std::min(kBlock, n - a);
    float acc[kBlock];
    const float* x0 = static_cast<const float*>(inputs[0]) + a;
    for (size_t i = 0; i < m; ++i) acc[i] = x0[i];
    for (size_t q = 1; q < p; ++q) {
      const float* x = static_cast<const float*>(inputs[q]) + a;
      for (size_t i = 0; i < m; ++i) acc[i] += x[i];
    }
    copy_out(out + a, acc, m * sizeof(float), stream);
    if (also) std::memcpy(also + a, acc, m * sizeof(float));
  }
}

template <typename Half>
void sum_half(Half* out, Half* also, const std::vector<const void*>& inputs, size_t n, bool stream) {
  const size_t p = inputs.size();
  for (size_t a = 0; a < n; a += kBlock) {
    const size_t m = std::min(kBlock, n - a);
    float acc[kBlock], x[kBlock];
    Half rounded[kBlock];
    convert(static_cast<const Half*>(inputs[0]) + a, acc, m);
    for (size_t q = 1; q < p; ++q) {
      convert(static_cast<const Half*>(inputs[q]) + a, x, m);
      for (size_t i = 0; i < m; ++i) acc[i] += x[i];
      convert(acc, rounded, m);
      if (q + 1 < p) convert(rounded, acc, m);
    }
    if (p == 1) convert(acc, rounded, m);
    copy_out(out + a, rounded, m * sizeof(Half), stream);
    if (also) std::memcpy(also + a, rounded, m * sizeof(Half));
  }
}

void sum(void* out, void* also, const std::vector<const void*>& inputs, size_t n, DType dtype, bool stream) {
  if (n == 0) return;
  switch (dtype) {
    case DType::kF32: return sum_f32(static_cast<float*>(out), static_cast<float*>(also), inputs, n, stream);
    case DType::kBF16: return sum_half(static_cast<bf16*>(out), static_cast<bf16*>(also), inputs, n, stream);
    case DType::kF16: return sum_half(static_cast<fp16*>(out), static_cast<fp16*>(also), inputs, n, stream);
  }
}

// Elements of a block of `count` left from `offset` in a step of `piece`.
size_t step_elems(size_t count, size_t offset, size_t piece) {
  return offset < count ? std::min(piece, count - offset) : 0;
}

}  // namespace

ShmComm::ShmComm(MPI_Comm parent, size_t chunk_bytes, size_t stream_from_bytes)
    : chunk_bytes_(chunk_bytes / kAlign * kAlign), stream_from_(stream_from_bytes) {
  ZT_CHECK(chunk_bytes_ >= 4096, "ShmComm: staging of ", chunk_bytes, " bytes is too small");
  ZT_MPI_CHECK(MPI_Comm_dup(parent, &comm_));
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  ZT_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  ZT_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  Window window = allocate_window(comm_, kHeaderBytes + 2 * chunk_bytes_, size_);
  win_ = window.win;
  segments_ = std::move(window.bases);
  for (int r = 0; r < size_; ++r) {
    ZT_CHECK(reinterpret_cast<uintptr_t>(segments_[size_t(r)]) % 8 == 0, "ShmComm: segment of rank ", r,
             " is not aligned");
  }
  __atomic_store_n(flag_of(segments_[size_t(rank_)]), uint64_t(0), __ATOMIC_RELEASE);
  ZT_MPI_CHECK(MPI_Barrier(comm_));  // every flag is 0 before anyone waits on it
}

std::unique_ptr<HostComm> ShmComm::split(int color) {
  ColorSplit s = split_by_color(comm_, color);
  std::unique_ptr<HostComm> out;
  if (s.members.size() > 1) {
    out = std::make_unique<ShmComm>(s.comm, chunk_bytes_, stream_from_);
  } else {
    out = std::make_unique<MpiComm>(s.comm, std::vector<int>{0});  // a group of one moves nothing
  }
  MPI_Comm_free(&s.comm);
  return out;
}

ShmComm::~ShmComm() {
  // Destroyed while an exception unwinds (a rank failed mid-step, and MPI_Abort follows at the
  // top): the peers may never reach this rank's next barrier nor MPI_Win_free, so the worker gives
  // up waiting and the window is left to the abort. Otherwise this would hang the failing rank.
  const bool abandon = std::uncaught_exceptions() > 0;
  if (abandon) abandoned_.store(true, std::memory_order_relaxed);
  queue_.stop();
  if (MpiRuntime::initialized() && !abandon) {
    MPI_Win_free(&win_);  // collective: no rank unmaps a segment another still reads
    MPI_Comm_free(&comm_);
  }
}

size_t ShmComm::max_collective_elements() const { return kMpiMaxCollectiveElements; }

std::shared_ptr<Work> ShmComm::enqueue(std::function<void()> run) {
  ++stats_.calls;
  return queue_.enqueue([this, run = std::move(run)] {
    if (abandoned_.load(std::memory_order_relaxed)) throw Error("ShmComm: abandoned (this rank failed)");
    run();
  });
}

unsigned char* ShmComm::staging(int rank, int buffer) const {
  return segments_[size_t(rank)] + kHeaderBytes + size_t(buffer) * chunk_bytes_;
}

std::unique_ptr<SharedBuffer> ShmComm::allocate_shared(size_t bytes) {
  // Room for every rank's buffer at once, with some to spare, or no rank allocates: a full
  // tmpfs would otherwise kill a rank with SIGBUS when it first touches a page.
  unsigned long long total = bytes;
  ZT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &total, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, comm_));
  if (total == 0) return nullptr;
  std::string where;
  const size_t room = shared_room(where);
  const size_t spare = total / 8 + (size_t(size_) << 21);  // and 2 MiB a rank for page rounding
  int fits = room >= total && room - total >= spare;
  ZT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &fits, 1, MPI_INT, MPI_MIN, comm_));
  if (!fits) {
    if (rank_ == 0) {
      log_warn("shared-memory buffers: ", where, " has ", room >> 20, " MiB free on rank 0, and the ranks' ",
               total >> 20, " MiB (with 1/8 and 2 MiB a rank to spare) do not fit on every rank: they stay ",
               "private and their collectives are staged");
    }
    return nullptr;
  }
  Window window = allocate_window(comm_, bytes, size_);
  unsigned char* mine = window.bases[size_t(rank_)];
  // First touch here: the pages exist before training starts, and near this rank.
  if (bytes > 0) std::memset(mine, 0, bytes);
  std::lock_guard<std::mutex> lock(registry_->mutex);
  const uint64_t id = registry_->next++;
  registry_->regions.emplace(id, Region{mine, bytes, std::move(window.bases), std::move(window.sizes)});
  return std::make_unique<ShmBuffer>(registry_, id, window.win, mine, bytes);
}

ShmComm::Post ShmComm::find_shared(const void* p, size_t bytes) const {
  if (bytes == 0) return {};
  const auto at = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(registry_->mutex);
  for (const auto& [id, r] : registry_->regions) {
    const auto base = reinterpret_cast<uintptr_t>(r.mine);
    if (at >= base && at + bytes <= base + r.bytes) return Post{id, at - base};
  }
  return {};
}

void ShmComm::post(Post where, int b) { std::memcpy(post_of(segments_[size_t(rank_)], b), &where, sizeof where); }

std::vector<unsigned char*> ShmComm::posted_buffers(int b, size_t bytes) {
  std::vector<Post> posts(static_cast<size_t>(size_));
  for (int q = 0; q < size_; ++q) std::memcpy(&posts[size_t(q)], post_of(segments_[size_t(q)], b), sizeof(Post));
  const auto in_shared = [](const Post& x) { return x.region != 0; };
  const auto shared = std::count_if(posts.begin(), posts.end(), in_shared);
  if (shared == 0) return {};
  if (shared < size_) {
    const auto yes = std::find_if(posts.begin(), posts.end(), in_shared) - posts.begin();
    const auto no = std::find_if_not(posts.begin(), posts.end(), in_shared) - posts.begin();
    throw Error(cat("ShmComm: rank ", yes, "'s buffer is in shared memory and rank ", no,
                    "'s is not: the ranks allocated their buffers differently"));
  }
  std::vector<unsigned char*> buffers(static_cast<size_t>(size_));
  std::lock_guard<std::mutex> lock(registry_->mutex);
  for (size_t q = 0; q < buffers.size(); ++q) {
    const auto it = registry_->regions.find(posts[q].region);
    ZT_CHECK(it != registry_->regions.end() && posts[q].offset + bytes <= it->second.sizes[q], "ShmComm: rank ", q,
             "'s buffer (shared allocation ", posts[q].region, ", offset ", posts[q].offset, ", ", bytes,
             " bytes) is not mapped here");
    buffers[q] = it->second.bases[q] + posts[q].offset;
  }
  return buffers;
}

// Arrive (release: this rank's writes to the window before it), then wait until every rank has
// arrived (acquire: their writes are visible after it). Counters only grow, so nothing resets.
// The wait spins for a few microseconds (the peers are usually in the same step). Then, while
// a thread waits for the result, it yields (handing the core to a peer that has not arrived: with
// 4 ranks on 2 cores, sleeping at once cost 5-10 ms a barrier) and later sleeps 5 us between
// checks; while nobody waits, it sleeps 50 us, taking almost nothing from the computation.
void ShmComm::sync() {
  const uint64_t epoch = ++epoch_;
  __atomic_store_n(flag_of(segments_[size_t(rank_)]), epoch, __ATOMIC_RELEASE);
  for (int q = 0; q < size_; ++q) {
    const uint64_t* flag = flag_of(segments_[size_t(q)]);
    for (int spins = 0; __atomic_load_n(flag, __ATOMIC_ACQUIRE) < epoch; ++spins) {
      if (spins < 200) {
        _mm_pause();
      } else if (abandoned_.load(std::memory_order_relaxed)) {
        throw Error("ShmComm: abandoned while waiting for the other ranks (this rank failed)");
      } else if (queue_.waiters() == 0) {
        // Nobody waits for this collective yet (it overlaps the backward pass): check rarely,
        // so as to take almost no CPU from the computation, as MpiComm's progress thread does.
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      } else if (spins < 2000) {
        sched_yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(5));
      }
    }
  }
}

// A step of a reduce-scatter through the window, in two halves around the barrier: this rank
// stages its part of every other rank's slice (its own part stays put); after the barrier it sums
// its own slice's part, read from every rank in rank order, into `out` (streamed when `stream`)
// and `also`, when not null.
void ShmComm::stage_step(const unsigned char* send, const std::vector<size_t>& counts,
                         const std::vector<size_t>& displ, size_t offset, size_t piece, DType dtype, int b) {
  const size_t e = dtype_size(dtype), p = size_t(size_), me = size_t(rank_);
  for (size_t q = 0; q < p; ++q) {
    const size_t n = step_elems(counts[q], offset, piece);
    if (q != me && n > 0) std::memcpy(staging(rank_, b) + q * piece * e, send + (displ[q] + offset) * e, n * e);
  }
}

void ShmComm::sum_step(const unsigned char* send, const std::vector<size_t>& counts, const std::vector<size_t>& displ,
                       size_t offset, size_t piece, DType dtype, int b, unsigned char* out, unsigned char* also,
                       bool stream) {
  const size_t e = dtype_size(dtype), p = size_t(size_), me = size_t(rank_);
  std::vector<const void*> inputs(p);
  for (size_t q = 0; q < p; ++q) {
    inputs[q] = q == me ? send + (displ[me] + offset) * e : staging(int(q), b) + me * piece * e;
  }
  sum(out, also, inputs, step_elems(counts[me], offset, piece), dtype, stream);
}

void ShmComm::run_reduce_scatter(const unsigned char* send, unsigned char* recv, const std::vector<size_t>& counts,
                                 DType dtype, Post where) {
  const size_t e = dtype_size(dtype);
  const std::vector<size_t> displ = block_offsets(counts);
  const size_t largest = *std::max_element(counts.begin(), counts.end());
  const bool stream = counts[size_t(rank_)] * e >= stream_from_;
  if (largest == 0) return;  // no step, no barrier (on every rank alike)
  post(where, buffer_);
  for (size_t offset = 0; offset < largest; offset += reduce_piece(e)) {
    const int b = buffer_;
    buffer_ ^= 1;
    if (!where.region) stage_step(send, counts, displ, offset, reduce_piece(e), dtype, b);
    sync();
    if (offset == 0) {
      const std::vector<unsigned char*> sends = posted_buffers(b, (displ.back() + counts.back()) * e);
      if (!sends.empty()) return run_reduce_scatter_in_place(recv, counts, displ, dtype, sends);
    }
    sum_step(send, counts, displ, offset, reduce_piece(e), dtype, b, recv + offset * e, nullptr, stream);
  }
  if (stream) _mm_sfence();  // the streamed stores are ordered before the Work says done
}

// Every rank's input in place: this rank sums its slice over them, in rank order, and waits until
// every rank is done reading its input (the caller may write it after).
void ShmComm::run_reduce_scatter_in_place(unsigned char* recv, const std::vector<size_t>& counts,
                                          const std::vector<size_t>& displ, DType dtype,
                                          const std::vector<unsigned char*>& sends) {
  const size_t e = dtype_size(dtype), me = size_t(rank_);
  const bool stream = counts[me] * e >= stream_from_;
  std::vector<const void*> inputs(sends.size());
  for (size_t q = 0; q < sends.size(); ++q) inputs[q] = sends[q] + displ[me] * e;
  sum(recv, nullptr, inputs, counts[me], dtype, stream);
  if (stream) _mm_sfence();
  sync();
}

void ShmComm::run_all_gather(const unsigned char* send, unsigned char* recv, const std::vector<size_t>& counts,
                             DType dtype) {
  const size_t e = dtype_size(dtype), p = size_t(size_), me = size_t(rank_);
  const std::vector<size_t> displ = block_offsets(counts);
  const size_t largest = *std::max_element(counts.begin(), counts.end());
  const size_t piece = chunk_bytes_ / e;
  const bool in_place = send == recv + displ[me] * e;
  const bool stream = (displ.back() + counts.back()) * e >= stream_from_;
  for (size_t offset = 0; offset < largest; offset += piece) {
    const int b = buffer_;
    buffer_ ^= 1;
    const size_t mine = step_elems(counts[me], offset, piece);
    if (mine > 0) std::memcpy(staging(rank_, b), send + offset * e, mine * e);
    sync();
    for (size_t q = 0; q < p; ++q) {
      const size_t n = step_elems(counts[q], offset, piece);
      if (n == 0 || (q == me && in_place)) continue;
      const unsigned char* from = q == me ? send + offset * e : staging(int(q), b);
      copy_out(recv + (displ[q] + offset) * e, from, n * e, stream);
    }
  }
  if (stream) _mm_sfence();  // the streamed stores are ordered before the Work says done
}

void ShmComm::run_all_to_all(const unsigned char* send, unsigned char* recv, size_t bytes) {
  if (bytes == 0) return;  // no step, no barrier (on every rank alike: the count is everyone's)
  const size_t p = size_t(size_), me = size_t(rank_);
  std::memcpy(recv + me * bytes, send + me * bytes, bytes);
  // Round d pairs each rank with the one d places on: every rank stages and reads one block a
  // step, so no buffer holds more than one rank's block for one reader.
  for (size_t d = 1; d < p; ++d) {
    const size_t to = (me + d) % p, from = (me + p - d) % p;
    for (size_t offset = 0; offset < bytes; offset += chunk_bytes_) {
      const int b = buffer_;
      buffer_ ^= 1;
      const size_t n = std::min(chunk_bytes_, bytes - offset);
      std::memcpy(staging(rank_, b), send + to * bytes + offset, n);
      sync();
      std::memcpy(recv + from * bytes + offset, staging(int(from), b), n);
    }
  }
}

// Slices of count/P elements (the first count%P one more), summed as a reduce-scatter whose
// results also go to the window. Each step's barrier also publishes the step before's results,
// which every rank copies right after it: one barrier a step, not two (each waits for the slowest
// rank; 128 steps at 256 MB). The double buffer keeps this safe: a rank writes buffer b again two
// steps later, after a barrier that every rank reaches only once done reading b.
void ShmComm::run_all_reduce(unsigned char* buffer, size_t count, DType dtype, Post where) {
  const size_t e = dtype_size(dtype), p = size_t(size_), me = size_t(rank_), piece = reduce_piece(e);
  if (count == 0) return;  // no step, no barrier (on every rank alike)
  post(where, buffer_);
  std::vector<size_t> counts(p, count / p);
  for (size_t r = 0; r < count % p; ++r) ++counts[r];
  const std::vector<size_t> displ = block_offsets(counts);
  // The other ranks' results of the step at `offset` (in buffer b) into this rank's buffer.
  auto gather = [&](size_t offset, int b) {
    for (size_t q = 0; q < p; ++q) {
      const size_t m = step_elems(counts[q], offset, piece);
      if (q != me && m > 0) std::memcpy(buffer + (displ[q] + offset) * e, staging(int(q), b) + q * piece * e, m * e);
    }
  };
  size_t previous = 0;
  int previous_b = -1;  // no step yet
  for (size_t offset = 0; offset < counts[0]; offset += piece) {
    const int b = buffer_;
    buffer_ ^= 1;
    if (!where.region) stage_step(buffer, counts, displ, offset, piece, dtype, b);
    sync();
    if (offset == 0) {
      const std::vector<unsigned char*> buffers = posted_buffers(b, count * e);
      if (!buffers.empty()) return run_all_reduce_in_place(buffer, counts, displ, dtype, buffers);
    }
    if (previous_b >= 0) gather(previous, previous_b);
    // Into the window's place for this rank's own slice (which nobody else reads in this step)
    // and, in the same pass, into the buffer: one read of the inputs fewer than a copy after.
    unsigned char* result = staging(rank_, b) + me * piece * e;
    sum_step(buffer, counts, displ, offset, piece, dtype, b, result, buffer + (displ[me] + offset) * e, false);
    previous = offset;
    previous_b = b;
  }
  sync();
  gather(previous, previous_b);
}

// Every rank's buffer in place: this rank sums its slice over them in rank order (into its own
// buffer, which the others read only outside that slice now), a barrier, then it copies the other
// slices' sums from their owners, and a last barrier keeps its buffer unwritten until every rank
// has copied from it. Two passes over the data where the staged path makes four.
void ShmComm::run_all_reduce_in_place(unsigned char* buffer, const std::vector<size_t>& counts,
                                      const std::vector<size_t>& displ, DType dtype,
                                      const std::vector<unsigned char*>& buffers) {
  const size_t e = dtype_size(dtype), p = size_t(size_), me = size_t(rank_);
  std::vector<const void*> inputs(p);
  for (size_t q = 0; q < p; ++q) inputs[q] = buffers[q] + displ[me] * e;
  sum(buffer + displ[me] * e, nullptr, inputs, counts[me], dtype, false);
  sync();
  for (size_t q = 0; q < p; ++q) {
    if (q != me) std::memcpy(buffer + displ[q] * e, buffers[q] + displ[q] * e, counts[q] * e);
  }
  sync();
}

void ShmComm::run_broadcast(unsigned char* buffer, size_t bytes, int root) {
  for (size_t offset = 0; offset < bytes; offset += chunk_bytes_) {
    const int b = buffer_;
    buffer_ ^= 1;
    const size_t n = std::min(chunk_bytes_, bytes - offset);
    if (rank_ == root) std::memcpy(staging(rank_, b), buffer + offset, n);
    sync();
    if (rank_ != root) std::memcpy(buffer + offset, staging(root, b), n);
  }
}

// Every rank sums (or takes the max of) every rank's values itself, in rank order.
void ShmComm::run_all_reduce_doubles(double* values, size_t count, bool max) {
  const size_t piece = chunk_bytes_ / sizeof(double);
  for (size_t offset = 0; offset < count; offset += piece) {
    const int b = buffer_;
    buffer_ ^= 1;
    const size_t n = std::min(piece, count - offset);
    std::memcpy(staging(rank_, b), values + offset, n * sizeof(double));
    sync();
    for (size_t i = 0; i < n; ++i) {
      double acc = 0;
      for (int q = 0; q < size_; ++q) {
        double x;
        std::memcpy(&x, staging(q, b) + i * sizeof(double), sizeof x);
        acc = q == 0 ? x : max ? std::max(acc, x) : acc + x;
      }
      values[offset + i] = acc;
    }
  }
}

std::shared_ptr<Work> ShmComm::all_reduce(void* buffer, size_t count, DType dtype) {
  stats_.all_reduce += count * dtype_size(dtype);
  auto* bytes = static_cast<unsigned char*>(buffer);
  const Post where = find_shared(buffer, count * dtype_size(dtype));
  stats_.in_place += where.region != 0;
  return enqueue([=, this] { run_all_reduce(bytes, count, dtype, where); });
}

std::shared_ptr<Work> ShmComm::reduce_scatter(const void* send, void* recv, const std::vector<size_t>& recv_counts,
                                              DType dtype) {
  ZT_CHECK(int(recv_counts.size()) == size_, "reduce_scatter needs one count per rank");
  const size_t bytes = std::accumulate(recv_counts.begin(), recv_counts.end(), size_t(0)) * dtype_size(dtype);
  stats_.reduce_scatter += bytes;
  auto* s = static_cast<const unsigned char*>(send);
  auto* r = static_cast<unsigned char*>(recv);
  const Post where = find_shared(send, bytes);
  stats_.in_place += where.region != 0;
  return enqueue([=, this, counts = recv_counts] { run_reduce_scatter(s, r, counts, dtype, where); });
}

std::shared_ptr<Work> ShmComm::all_gather(const void* send, void* recv, const std::vector<size_t>& counts,
                                          DType dtype) {
  ZT_CHECK(int(counts.size()) == size_, "all_gather needs one count per rank");
  stats_.all_gather += std::accumulate(counts.begin(), counts.end(), size_t(0)) * dtype_size(dtype);
  auto* s = static_cast<const unsigned char*>(send);
  auto* r = static_cast<unsigned char*>(recv);
  return enqueue([=, this, counts = counts] { run_all_gather(s, r, counts, dtype); });
}

std::shared_ptr<Work> ShmComm::broadcast(void* buffer, size_t count, DType dtype, int root) {
  ZT_CHECK(root >= 0 && root < size_, "broadcast from rank ", root, " of ", size_);
  stats_.broadcast += count * dtype_size(dtype);
  auto* bytes = static_cast<unsigned char*>(buffer);
  const size_t n = count * dtype_size(dtype);
  return enqueue([=, this] { run_broadcast(bytes, n, root); });
}

std::shared_ptr<Work> ShmComm::all_to_all(const void* send, void* recv, size_t count, DType dtype) {
  stats_.all_to_all += count * size_t(size_) * dtype_size(dtype);
  const auto* s = static_cast<const unsigned char*>(send);
  auto* r = static_cast<unsigned char*>(recv);
  const size_t n = count * dtype_size(dtype);
  return enqueue([=, this] { run_all_to_all(s, r, n); });
}

std::shared_ptr<Work> ShmComm::barrier() {
  return enqueue([this] { sync(); });
}

void ShmComm::all_reduce_doubles(std::vector<double>& values, bool max) {
  double* data = values.data();
  const size_t n = values.size();
  enqueue([=, this] { run_all_reduce_doubles(data, n, max); })->wait();
}

}  // namespace zt
