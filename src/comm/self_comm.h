// A one-rank HostComm without MPI: every collective is a copy (or nothing). For tools and
// tests that run a single process without an MPI launcher.
#pragma once

#include <cstring>
#include <memory>

#include "comm/communicator.h"

namespace zt {

class SelfComm final : public HostComm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "self"; }

  std::shared_ptr<Work> all_reduce(void*, size_t count, DType dtype) override {
    stats_.all_reduce += count * dtype_size(dtype);
    return done();
  }
  std::shared_ptr<Work> reduce_scatter(const void* send, void* recv, const std::vector<size_t>& counts,
                                       DType dtype) override {
    stats_.reduce_scatter += counts.at(0) * dtype_size(dtype);
    std::memmove(recv, send, counts.at(0) * dtype_size(dtype));
    return done();
  }
  std::shared_ptr<Work> all_gather(const void* send, void* recv, const std::vector<size_t>& counts,
                                   DType dtype) override {
    stats_.all_gather += counts.at(0) * dtype_size(dtype);
    if (send != recv) std::memmove(recv, send, counts.at(0) * dtype_size(dtype));
    return done();
  }
  std::shared_ptr<Work> broadcast(void*, size_t count, DType dtype, int) override {
    stats_.broadcast += count * dtype_size(dtype);
    return done();
  }
  std::shared_ptr<Work> all_to_all(const void* send, void* recv, size_t count, DType dtype) override {
    stats_.all_to_all += count * dtype_size(dtype);
    if (count > 0) std::memmove(recv, send, count * dtype_size(dtype));
    return done();
  }
  std::shared_ptr<Work> all_to_all_v(const void* send, const std::vector<size_t>& send_counts, void* recv,
                                     const std::vector<size_t>&, DType dtype) override {
    stats_.all_to_all += send_counts.at(0) * dtype_size(dtype);
    if (send_counts[0] > 0) std::memmove(recv, send, send_counts[0] * dtype_size(dtype));
    return done();
  }
  std::shared_ptr<Work> barrier() override { return done(); }
  std::unique_ptr<HostComm> duplicate() override { return std::make_unique<SelfComm>(); }
  std::unique_ptr<HostComm> split(int) override { return std::make_unique<SelfComm>(); }
  void all_reduce_doubles(std::vector<double>&, bool) override {}

 private:
  struct Done final : Work {
    void wait() override {}
  };
  static std::shared_ptr<Work> done() { return std::make_shared<Done>(); }
};

}  // namespace zt
