// MiCS (DeepSpeed's mics_shard_size, stage 3): the model states partitioned within shard groups of
// S consecutive ranks and replicated across the world / S groups. The engine runs over its shard
// group as over a world of S ranks (its gathers and reduce-scatters stay inside the group: a node
// when S is a node's ranks); at the step the gradient partition is all-reduced across the
// replicas (the ranks with the same index in every group: DeepSpeed's all-reduce at the
// accumulation boundary), and the step divides by all the ranks. The first shard group alone
// writes checkpoints, which are those of a stage-3 run of S ranks.
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "comm/data_comm.h"
#include "config/ds_config.h"

namespace zt {

/// The ranks the model states are partitioned over: mics_shard_size at stage 3 where it is set and
/// below `world`, else `world`.
int mics_shard_ranks(const DsConfig& config, int world);

struct MicsGroups {
  std::unique_ptr<HostComm> shard_control;  ///< this rank's shard group: the engine's control
  std::unique_ptr<DataComm> shard;          ///< its data path
  std::unique_ptr<DataComm> replicas;       ///< this rank's index in every shard group
  int replica = 0;                          ///< which shard group this rank is in
  bool active() const { return shard != nullptr; }
  /// The communicators the engine runs over: the shard group's, or without MiCS the run's own.
  DataComm& engine_data(DataComm& data) const { return shard ? *shard : data; }
  HostComm& engine_control(HostComm& control) const { return shard_control ? *shard_control : control; }
};

/// The groups, split from `data` and `control` (collective); none where MiCS is off.
MicsGroups split_mics(const DsConfig& config, DataComm& data, HostComm& control);

}  // namespace zt
