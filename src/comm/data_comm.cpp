// What every data communicator shares: its groups (split) and their counts.
#include "comm/data_comm.h"

#include <algorithm>

#include "core/error.h"

namespace zt {

std::shared_ptr<Work> HostComm::all_to_all_v(const void*, const std::vector<size_t>&, void*,
                                             const std::vector<size_t>&, DType) {
  throw std::logic_error(cat("the ", name(), " communicator has no all_to_all_v"));
}

std::unique_ptr<HostComm> HostComm::split(int color) {
  (void)color;
  throw std::logic_error(cat("the ", name(), " communicator cannot be split into groups"));
}

DataComm::~DataComm() {
  if (parent_) {
    auto& siblings = parent_->groups_;
    siblings.erase(std::remove(siblings.begin(), siblings.end(), this), siblings.end());
  }
  for (DataComm* g : groups_) g->parent_ = nullptr;
}

std::unique_ptr<DataComm> DataComm::split(int color) {
  ZT_CHECK(color >= 0, "DataComm::split: color ", color, " is negative");
  std::unique_ptr<DataComm> group = make_group(color);
  if (group->parent_ == nullptr) {  // else a wrapped communicator's group, counted there
    group->parent_ = this;
    groups_.push_back(group.get());
  }
  return group;
}

CommStats DataComm::stats() const {
  CommStats total = stats_;
  for (const DataComm* g : groups_) total += g->stats();
  return total;
}

void DataComm::reset_stats() {
  stats_ = {};
  for (DataComm* g : groups_) g->reset_stats();
}

}  // namespace zt
