#include "zero/mics_groups.h"

namespace zt {

int mics_shard_ranks(const DsConfig& config, int world) {
  const int64_t s = config.zero.mics_shard_size;
  return config.zero.stage == 3 && s > 0 && s < world ? int(s) : world;
}

MicsGroups split_mics(const DsConfig& config, DataComm& data, HostComm& control) {
  MicsGroups g;
  const int shard = mics_shard_ranks(config, control.size());
  if (shard == control.size()) return g;
  const int rank = control.rank();
  g.replica = rank / shard;
  g.shard_control = control.split(g.replica);
  g.shard = data.split(g.replica);
  g.replicas = data.split(rank % shard);
  return g;
}

}  // namespace zt
