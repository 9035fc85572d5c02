// Collectives over a whole padded flat buffer of which each rank holds its partition.
#pragma once

#include <cstddef>

#include "backend/backend.h"
#include "comm/data_comm.h"
#include "zero/partition.h"

namespace zt {

/// Elements per collective call for a bucket-size setting: the bucket, capped by the model and
/// by what the transport moves best in one call.
/// `max_collective`: DataComm::max_collective_elements.
size_t collective_chunk(const PartitionMap& partition, size_t max_collective, int64_t bucket_elements);

/// In place: every rank's partition of `base` (padded_size elements of `dtype`) to every rank,
/// in pieces of `chunk` elements. `stream` is ordered after it.
void all_gather_partitions(DataComm& comm, Stream& stream, const PartitionMap& partition, void* base, DType dtype,
                           size_t chunk);

/// The same through one broadcast per partition from its owner (allgather_partitions: false).
void broadcast_partitions(DataComm& comm, Stream& stream, const PartitionMap& partition, void* base, DType dtype);

}  // namespace zt
