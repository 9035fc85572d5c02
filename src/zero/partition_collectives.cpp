#include "zero/partition_collectives.h"

#include <algorithm>
#include <memory>
#include <vector>

namespace zt {

size_t collective_chunk(const PartitionMap& partition, size_t max_collective, int64_t bucket_elements) {
  return std::min({size_t(bucket_elements), partition.padded_size, max_collective});
}

void all_gather_partitions(DataComm& comm, Stream& stream, const PartitionMap& partition, void* base, DType dtype,
                           size_t chunk) {
  auto* bytes = static_cast<unsigned char*>(base);
  const size_t padded = partition.padded_size, esize = dtype_size(dtype);
  const size_t begin = partition.begin(comm.rank());
  std::vector<std::shared_ptr<DataWork>> pending;
  for (size_t lo = 0; lo < padded; lo += chunk) {
    const size_t hi = std::min(padded, lo + chunk);
    const size_t mine = std::min(hi, std::max(lo, begin));
    pending.push_back(comm.all_gather(bytes + mine * esize, bytes + lo * esize, partition.split(lo, hi), dtype, stream));
  }
  for (auto& w : pending) w->wait(stream);
}

void broadcast_partitions(DataComm& comm, Stream& stream, const PartitionMap& partition, void* base, DType dtype) {
  auto* bytes = static_cast<unsigned char*>(base);
  for (int r = 0; r < partition.world_size; ++r) {
    comm.broadcast(bytes + partition.begin(r) * dtype_size(dtype), partition.partition_size, dtype, r, stream)
        ->wait(stream);
  }
}

}  // namespace zt
