#include "comm/staged_comm.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace zt {

namespace {

class StagedWork final : public DataWork {
 public:
  StagedWork(Backend& backend, std::unique_ptr<Event> done) : backend_(backend), done_(std::move(done)) {}
  void wait(Stream& stream) override { backend_.wait(stream, *done_); }
  void synchronize() override { backend_.synchronize(*done_); }

 private:
  Backend& backend_;
  std::unique_ptr<Event> done_;
};

// Rank r's elements of a chunk [a, b) of a concatenation in rank order.
std::vector<size_t> chunk_counts(const std::vector<size_t>& counts, size_t a, size_t b) {
  std::vector<size_t> out(counts.size());
  size_t displ = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    const size_t lo = std::max(a, displ), hi = std::min(b, displ + counts[r]);
    out[r] = hi > lo ? hi - lo : 0;
    displ += counts[r];
  }
  return out;
}

class StagedComm final : public DataComm {
 public:
  StagedComm(Backend& backend, std::unique_ptr<HostComm> host)
      : backend_(backend), host_(std::move(host)), stream_(backend.create_stream("communication")) {}
  ~StagedComm() override {
    try {
      backend_.synchronize(*stream_);
    } catch (const Error&) {
    }
    release();
  }

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  std::string name() const override { return host_->name() + ", staged through pinned memory"; }
  size_t max_collective_elements() const override { return host_->max_collective_elements(); }
  std::vector<int> node_of_ranks() const override { return host_->node_of_ranks(); }

 protected:
  std::unique_ptr<DataComm> make_group(int color) override {
    return std::make_unique<StagedComm>(backend_, host_->split(color));
  }

 public:

  std::shared_ptr<DataWork> all_reduce(void* buffer, size_t count, DType dtype, Stream& after) override {
    stats_.all_reduce += count * dtype_size(dtype);
    auto* bytes = static_cast<unsigned char*>(buffer);
    const size_t e = dtype_size(dtype);
    begin(after, count * e);
    for (size_t a = 0; a < count; a += chunk(e)) {
      const size_t n = std::min(chunk(e), count - a);
      unsigned char* stage = send_;
      count_traffic(*host_, {Collective::kAllReduce, {n}, e});
      backend_.copy_async(stage, bytes + a * e, n * e, *stream_);
      on_stream([host = host_.get(), stage, n, dtype] { host->all_reduce(stage, n, dtype)->wait(); });
      backend_.copy_async(bytes + a * e, stage, n * e, *stream_);
    }
    return end();
  }

  std::shared_ptr<DataWork> reduce_scatter(const void* send, void* recv, const std::vector<size_t>& counts, DType dtype,
                                           Stream& after) override {
    const auto [e, total, mine_at, mine_end] =
        begin_per_rank("reduce_scatter", counts, dtype, stats_.reduce_scatter, after);
    for (size_t a = 0; a < total; a += chunk(e)) {
      const size_t b = std::min(total, a + chunk(e));
      std::vector<size_t> cc = chunk_counts(counts, a, b);
      const size_t mine = cc[size_t(rank())];
      count_traffic(*host_, {Collective::kReduceScatter, cc, e});
      unsigned char *s = send_, *r = recv_;
      backend_.copy_async(s, static_cast<const unsigned char*>(send) + a * e, (b - a) * e, *stream_);
      on_stream([host = host_.get(), s, r, cc = std::move(cc), dtype] { host->reduce_scatter(s, r, cc, dtype)->wait(); });
      if (mine > 0) {
        backend_.copy_async(static_cast<unsigned char*>(recv) + (std::max(a, mine_at) - mine_at) * e, r, mine * e,
                            *stream_);
      }
    }
    return end();
  }

  std::shared_ptr<DataWork> all_gather(const void* send, void* recv, const std::vector<size_t>& counts, DType dtype,
                                       Stream& after) override {
    const auto [e, total, mine_at, mine_end] =
        begin_per_rank("all_gather", counts, dtype, stats_.all_gather, after);
    for (size_t a = 0; a < total; a += chunk(e)) {
      const size_t b = std::min(total, a + chunk(e));
      std::vector<size_t> cc = chunk_counts(counts, a, b);
      const size_t before = std::accumulate(cc.begin(), cc.begin() + rank(), size_t(0));
      count_traffic(*host_, {Collective::kAllGather, cc, e});
      unsigned char* stage = send_;
      const size_t lo = std::max(a, mine_at), hi = std::min(b, mine_end);
      if (hi > lo) {
        backend_.copy_async(stage + before * e, static_cast<const unsigned char*>(send) + (lo - mine_at) * e,
                            (hi - lo) * e, *stream_);
      }
      on_stream([host = host_.get(), stage, before, e, cc = std::move(cc), dtype] {
        host->all_gather(stage + before * e, stage, cc, dtype)->wait();  // in place
      });
      backend_.copy_async(static_cast<unsigned char*>(recv) + a * e, stage, (b - a) * e, *stream_);
    }
    return end();
  }

  std::shared_ptr<DataWork> all_to_all(const void* send, void* recv, size_t count, DType dtype,
                                       Stream& after) override {
    const size_t e = dtype_size(dtype), p = size_t(size());
    stats_.all_to_all += count * p * e;
    begin(after, count * p * e);
    // Pieces of every block at once: staging holds piece elements of each rank's block.
    const size_t piece = std::max<size_t>(1, chunk(e) / p);
    for (size_t a = 0; a < count; a += piece) {
      const size_t n = std::min(piece, count - a);
      count_traffic(*host_, {Collective::kAllToAll, {n}, e});
      unsigned char *s = send_, *r = recv_;
      for (size_t q = 0; q < p; ++q) {
        backend_.copy_async(s + q * n * e, static_cast<const unsigned char*>(send) + (q * count + a) * e, n * e,
                            *stream_);
      }
      on_stream([host = host_.get(), s, r, n, dtype] { host->all_to_all(s, r, n, dtype)->wait(); });
      for (size_t q = 0; q < p; ++q) {
        backend_.copy_async(static_cast<unsigned char*>(recv) + (q * count + a) * e, r + q * n * e, n * e, *stream_);
      }
    }
    return end();
  }

  // In one piece through the staging (qgZ's packets: a bucket's fraction): pieces would need every
  // rank to know every block's size.
  std::shared_ptr<DataWork> all_to_all_v(const void* send, const std::vector<size_t>& send_counts, void* recv,
                                         const std::vector<size_t>& recv_counts, DType dtype, Stream& after) override {
    const size_t e = dtype_size(dtype);
    size_t sent = 0, received = 0;
    for (size_t c : send_counts) sent += c;
    for (size_t c : recv_counts) received += c;
    ZT_CHECK(std::max(sent, received) * e <= kMaxStagingBytes, "all_to_all_v of ", std::max(sent, received) * e,
             " bytes through staging of at most ", kMaxStagingBytes);
    stats_.all_to_all += sent * e;
    begin(after, std::max(sent, received) * e);
    count_traffic(*host_, {Collective::kAllToAll, send_counts, e, 0, recv_counts});
    unsigned char *s = send_, *r = recv_;
    backend_.copy_async(s, send, sent * e, *stream_);
    on_stream([host = host_.get(), s, r, send_counts, recv_counts, dtype] {
      host->all_to_all_v(s, send_counts, r, recv_counts, dtype)->wait();
    });
    backend_.copy_async(recv, r, received * e, *stream_);
    return end();
  }

  std::shared_ptr<DataWork> broadcast(void* buffer, size_t count, DType dtype, int root, Stream& after) override {
    stats_.broadcast += count * dtype_size(dtype);
    auto* bytes = static_cast<unsigned char*>(buffer);
    const size_t e = dtype_size(dtype);
    begin(after, count * e);
    for (size_t a = 0; a < count; a += chunk(e)) {
      const size_t n = std::min(chunk(e), count - a);
      unsigned char* stage = send_;
      count_traffic(*host_, {Collective::kBroadcast, {n}, e, root});
      if (rank() == root) backend_.copy_async(stage, bytes + a * e, n * e, *stream_);
      on_stream([host = host_.get(), stage, n, dtype, root] { host->broadcast(stage, n, dtype, root)->wait(); });
      backend_.copy_async(bytes + a * e, stage, n * e, *stream_);
    }
    return end();
  }

 private:
  // Staging holds at most this much per buffer: collectives beyond it go in pieces.
  static constexpr size_t kMaxStagingBytes = size_t(16) << 20;

  size_t chunk(size_t elem) const { return capacity_ / elem; }

  // The collective's inputs are what `after` has enqueued so far; the staging grows to the
  // collective (up to the cap) once the stream no longer uses the old one.
  void begin(Stream& after, size_t bytes) {
    ++stats_.calls;
    const size_t want = std::min(std::max<size_t>(bytes, 4096), kMaxStagingBytes);
    if (want > capacity_) {
      backend_.synchronize(*stream_);
      release();
      send_ = static_cast<unsigned char*>(backend_.allocate(Pool::kPinned, want));
      recv_ = static_cast<unsigned char*>(backend_.allocate(Pool::kPinned, want));
      capacity_ = want;
    }
    auto ready = backend_.create_event();
    backend_.record(*ready, after);
    backend_.wait(*stream_, *ready);
  }
  // What a collective with a count per rank needs, over the concatenation of the ranks' pieces
  // in rank order: the element size, the total, and where this rank's piece starts and ends.
  struct PerRank {
    size_t elem, total, mine_at, mine_end;
  };
  // The preamble of reduce_scatter and all_gather: checks the counts, adds the bytes to the
  // collective's statistic and begins it on the communication stream (begin above).
  PerRank begin_per_rank(const char* op, const std::vector<size_t>& counts, DType dtype, uint64_t& stat,
                         Stream& after) {
    ZT_CHECK(int(counts.size()) == size(), op, " needs one count per rank");
    PerRank p;
    p.elem = dtype_size(dtype);
    p.total = std::accumulate(counts.begin(), counts.end(), size_t(0));
    p.mine_at = std::accumulate(counts.begin(), counts.begin() + rank(), size_t(0));
    p.mine_end = p.mine_at + counts[size_t(rank())];
    stat += p.total * p.elem;
    begin(after, p.total * p.elem);
    return p;
  }
  std::shared_ptr<DataWork> end() {
    auto done = backend_.create_event();
    backend_.record(*done, *stream_);
    return std::make_shared<StagedWork>(backend_, std::move(done));
  }
  void on_stream(std::function<void()> fn) { backend_.launch_host_func(*stream_, std::move(fn)); }
  void release() {
    if (capacity_ == 0) return;
    backend_.deallocate(Pool::kPinned, send_, capacity_);
    backend_.deallocate(Pool::kPinned, recv_, capacity_);
    capacity_ = 0;
  }

  Backend& backend_;
  std::unique_ptr<HostComm> host_;
  std::unique_ptr<Stream> stream_;
  unsigned char *send_ = nullptr, *recv_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace

std::unique_ptr<DataComm> make_staged_comm(Backend& backend, std::unique_ptr<HostComm> transport) {
  return std::make_unique<StagedComm>(backend, std::move(transport));
}

}  // namespace zt
