// zerotrain: trains GPT-2 with ZeRO from a DeepSpeed config and HF Trainer-style flags.
#include <cstdio>
#include <exception>

#include "config/train_args.h"
#include "core/log.h"
#include "train/trainer.h"

int main(int argc, char** argv) {
  zt::set_log_program("zerotrain");
  try {
    std::optional<zt::TrainArgs> args = zt::parse_train_args(argc, argv);
    if (!args) return 0;
    return zt::run_trainer(*args);
  } catch (const zt::UsageError& e) {
    zt::log_line(zt::LogLevel::kError, e.what());
    return 2;
  } catch (const std::exception& e) {
    zt::log_line(zt::LogLevel::kError, e.what());
    return 1;
  }
}
