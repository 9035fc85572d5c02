// A process started by torchrun or the deepspeed launcher (WORLD_SIZE and RANK in its
// environment, a world of one for MPI) is refused with the mpirun and srun commands that would
// run the same arguments as one job; under mpirun or srun nothing is refused.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "comm/mpi_runtime.h"

namespace zt {
namespace {

struct Env {
  std::map<std::string, std::string> vars;
  std::function<const char*(const char*)> get() const {
    return [this](const char* name) -> const char* {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  }
};

std::optional<ForeignLaunch> check(int mpi_world_size, const Env& env, std::vector<const char*> argv) {
  return check_foreign_launch(mpi_world_size, int(argv.size()), argv.data(), env.get());
}

TEST(ForeignLaunch, TorchrunChildIsRefusedWithTheEquivalentCommands) {
  const Env env{{{"WORLD_SIZE", "8"}, {"RANK", "0"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "4"}}};
  auto refusal = check(1, env, {"./zerotrain", "--deepspeed", "ds.json", "--train_data", "data/train_*.bin"});
  ASSERT_TRUE(refusal);
  EXPECT_FALSE(refusal->quiet);
  EXPECT_EQ(refusal->message,
            "started by torchrun or the deepspeed launcher (WORLD_SIZE=8, RANK=0, LOCAL_WORLD_SIZE=4) but MPI sees 1 "
            "process, which would make 8 separate runs; ranks come from MPI: launch with "
            "`mpirun -np 8 --npernode 4 ./zerotrain --deepspeed ds.json --train_data 'data/train_*.bin'` or "
            "`srun --nodes=2 --ntasks-per-node=4 ./zerotrain --deepspeed ds.json --train_data 'data/train_*.bin'`");
  EXPECT_EQ(refusal->message.find('\n'), std::string::npos);
}

TEST(ForeignLaunch, OnlyRankZeroSpeaks) {
  auto refusal = check(1, Env{{{"WORLD_SIZE", "2"}, {"RANK", "1"}}}, {"zerotrain"});
  ASSERT_TRUE(refusal);
  EXPECT_TRUE(refusal->quiet);
  refusal = check(1, Env{{{"WORLD_SIZE", "2"}}}, {"zerotrain"});  // no RANK: speak
  ASSERT_TRUE(refusal);
  EXPECT_FALSE(refusal->quiet);
  EXPECT_NE(refusal->message.find("RANK=(unset)"), std::string::npos);
}

TEST(ForeignLaunch, DeepspeedLauncherLocalSizeAndLocalRankFlag) {
  const Env env{{{"WORLD_SIZE", "4"}, {"RANK", "0"}, {"LOCAL_SIZE", "2"}}};
  auto refusal = check(1, env, {"zerotrain", "--local_rank=0", "--bf16", "--local_rank", "0", "--lr", "it's"});
  ASSERT_TRUE(refusal);
  EXPECT_NE(refusal->message.find("LOCAL_SIZE=2"), std::string::npos);
  EXPECT_NE(refusal->message.find("`mpirun -np 4 --npernode 2 zerotrain --bf16 --lr 'it'\\''s'`"), std::string::npos)
      << refusal->message;
  EXPECT_NE(refusal->message.find("`srun --nodes=2 --ntasks-per-node=2 zerotrain --bf16"), std::string::npos);
}

TEST(ForeignLaunch, LocalSizeThatDoesNotDivideIsLeftOut) {
  auto refusal = check(1, Env{{{"WORLD_SIZE", "6"}, {"RANK", "0"}, {"LOCAL_WORLD_SIZE", "4"}}}, {"zerotrain"});
  ASSERT_TRUE(refusal);
  EXPECT_NE(refusal->message.find("`mpirun -np 6 zerotrain` or `srun --ntasks=6 zerotrain`"), std::string::npos)
      << refusal->message;
}

TEST(ForeignLaunch, NotRefused) {
  EXPECT_FALSE(check(1, Env{}, {"zerotrain"}));                                   // a plain run
  EXPECT_FALSE(check(1, Env{{{"WORLD_SIZE", "1"}, {"RANK", "0"}}}, {"zerotrain"}));  // torchrun with one process
  EXPECT_FALSE(check(4, Env{{{"WORLD_SIZE", "4"}, {"RANK", "2"}}}, {"zerotrain"}));  // mpirun/srun: MPI sees them
  EXPECT_FALSE(check(2, Env{{{"WORLD_SIZE", "4"}}}, {"zerotrain"}));                 // MPI's world, not WORLD_SIZE
  for (const char* junk : {"", "four", "4x", "-4", "0", "99999999999999999999999"}) {
    EXPECT_FALSE(check(1, Env{{{"WORLD_SIZE", junk}}}, {"zerotrain"})) << junk;
  }
}

}  // namespace
}  // namespace zt
