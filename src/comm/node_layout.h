// How a communicator's ranks sit on nodes (the ranks that share memory: MPI_COMM_TYPE_SHARED),
// asked once for the choice between ShmComm, HierComm and MPI (make_shm_comm).
#pragma once

#include <mpi.h>

namespace zt {

struct NodeLayout {
  bool one_node = false;   ///< every rank is on this node
  int ranks_per_node = 0;  ///< L when every node holds L consecutive ranks (rank = node * L + local); else 0
};

/// The layout of `comm`'s ranks: the same answer on every rank. Collective.
NodeLayout node_layout(MPI_Comm comm);

}  // namespace zt
