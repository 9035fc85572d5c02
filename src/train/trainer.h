// The training program behind `zerotrain`: config in, metrics and model states out.
#pragma once

#include "config/train_args.h"

namespace zt {

/// Runs training (and evaluation) as the flags say. Returns the process exit code; throws
/// UsageError for bad input before anything is written.
int run_trainer(const TrainArgs& args);

}  // namespace zt
