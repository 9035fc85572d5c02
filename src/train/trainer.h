// The training program behind `zerotrain`: config in, metrics and model states out.
#pragma once

#include "comm/communicator.h"
#include "comm/mpi_runtime.h"
#include "config/train_args.h"

namespace zt {

/// Runs training (and evaluation) as the flags say, on every rank of `comm`. Returns the exit
/// code. Bad input found while setting up is agreed on by all ranks first: the lowest failing
/// rank prints its one line, every rank returns 2, and nothing has been written. A failure once
/// training runs throws (the caller ends every rank).
int run_trainer(const TrainArgs& args, const ProcessPlace& place, HostComm& comm);

}  // namespace zt
