// The data communicator of a synchronous backend: device buffers are host memory and every
// operation enqueued on a stream has run, so MPI moves the buffers in place and waiting for a
// collective on a stream is waiting for it on the host.
#include "comm/data_comm.h"

#include "comm/staged_comm.h"
#include "core/error.h"

namespace zt {

namespace {

class DirectWork final : public DataWork {
 public:
  explicit DirectWork(std::shared_ptr<Work> work) : work_(std::move(work)) {}
  void wait(Stream&) override { work_->wait(); }
  void synchronize() override { work_->wait(); }

 private:
  std::shared_ptr<Work> work_;
};

class DirectComm final : public DataComm {
 public:
  explicit DirectComm(HostComm& host) : host_(host) {}
  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  std::string name() const override { return host_.name(); }
  size_t max_collective_elements() const override { return host_.max_collective_elements(); }

  std::shared_ptr<DataWork> all_reduce(void* buffer, size_t count, DType dtype, Stream&) override {
    stats_.all_reduce += count * dtype_size(dtype);
    return wrap(host_.all_reduce(buffer, count, dtype));
  }
  std::shared_ptr<DataWork> reduce_scatter(const void* send, void* recv, const std::vector<size_t>& counts, DType dtype,
                                           Stream&) override {
    for (size_t c : counts) stats_.reduce_scatter += c * dtype_size(dtype);
    return wrap(host_.reduce_scatter(send, recv, counts, dtype));
  }
  std::shared_ptr<DataWork> all_gather(const void* send, void* recv, const std::vector<size_t>& counts, DType dtype,
                                       Stream&) override {
    for (size_t c : counts) stats_.all_gather += c * dtype_size(dtype);
    return wrap(host_.all_gather(send, recv, counts, dtype));
  }
  std::shared_ptr<DataWork> broadcast(void* buffer, size_t count, DType dtype, int root, Stream&) override {
    stats_.broadcast += count * dtype_size(dtype);
    return wrap(host_.broadcast(buffer, count, dtype, root));
  }

 private:
  std::shared_ptr<DataWork> wrap(std::shared_ptr<Work> work) {
    ++stats_.calls;
    return std::make_shared<DirectWork>(std::move(work));
  }
  HostComm& host_;
};

}  // namespace

std::unique_ptr<DataComm> make_data_comm(Backend& backend, HostComm& control) {
  if (backend.synchronous()) return std::make_unique<DirectComm>(control);
  return make_staged_comm(backend, control.duplicate());
}

}  // namespace zt
