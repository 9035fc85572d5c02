#include "comm/node_layout.h"

#include "comm/mpi_runtime.h"

namespace zt {

NodeLayout node_layout(MPI_Comm comm) {
  int rank = 0, size = 0, local_size = 0;
  ZT_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  ZT_MPI_CHECK(MPI_Comm_size(comm, &size));
  MPI_Comm node;
  ZT_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
  ZT_MPI_CHECK(MPI_Comm_size(node, &local_size));
  int span[2] = {rank, -rank};  // this node's lowest rank and (negated) highest
  ZT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, span, 2, MPI_INT, MPI_MIN, node));
  ZT_MPI_CHECK(MPI_Comm_free(&node));
  // Regular here: this node's ranks are consecutive and start at a multiple of its size. Then
  // over all ranks: the smallest and largest node, and whether every node is regular.
  const int consecutive = -span[1] - span[0] == local_size - 1 && span[0] % local_size == 0 ? 1 : 0;
  int all[3] = {local_size, -local_size, consecutive};
  ZT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, all, 3, MPI_INT, MPI_MIN, comm));
  NodeLayout layout;
  layout.one_node = all[0] == size;
  layout.ranks_per_node = all[2] == 1 && all[0] == -all[1] ? local_size : 0;
  return layout;
}

}  // namespace zt
