// Checkpoint save and load throughput for a GPT-2 shape on one rank (fp32, stage 0): the save
// writes master weights, exp_avg and exp_avg_sq (12 bytes per parameter) through HDF5 with
// Fletcher32, fsync and the manifest's CRC-32; the load validates every file (sizes, CRC-32) and
// reads the state back. bench_checkpoint.sh runs it next to fio on the same disk.
// Usage: bench_checkpoint DIR [--layers 24 --embd 1024 --heads 16 --vocab 50257]
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "comm/data_comm.h"
#include "checkpoint/checkpoint.h"
#include "comm/self_comm.h"
#include "core/timer.h"
#include "model/model_layout.h"
#include "zero/engine.h"

using namespace zt;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_checkpoint DIR [--layers N --embd C --heads H --vocab V]\n");
    return 2;
  }
  const std::string dir = argv[1];
  ModelConfig mc;
  mc.n_layer = 24;
  mc.n_embd = 1024;
  mc.n_head = 16;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    int v = std::atoi(argv[i + 1]);
    if (k == "--layers") mc.n_layer = v;
    else if (k == "--embd") mc.n_embd = v;
    else if (k == "--heads") mc.n_head = v;
    else if (k == "--vocab") mc.vocab_size = v;
  }
  auto backend = make_cpu_backend();
  const std::unique_ptr<ModelLayout> layout_ptr = make_model_layout(mc);
  const ModelLayout& layout = *layout_ptr;
  DsConfig ds;
  ds.train_micro_batch_size_per_gpu = 1;
  ds.train_batch_size = 1;
  SelfComm comm;
  auto engine_comm = make_data_comm(*backend, comm);
  ZeroEngine engine(layout, *backend, *engine_comm, comm, ds);
  engine.init_params(1);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);

  Stopwatch save_clock;
  const SavedCheckpoint saved = save_checkpoint(dir, engine, layout, ds, comm, TrainingPosition{1, 0, 1});
  const double save_s = save_clock.seconds();
  // Cold caches for the load when we may drop them (root); otherwise the load reads page cache.
  std::ofstream drop("/proc/sys/vm/drop_caches");
  const bool cold = drop.good() && (drop << "3\n").good();
  drop.close();
  Stopwatch load_clock;
  CheckpointReader reader(dir, dir, &mc);
  engine.load({[&](StateField f, size_t lo, size_t hi, float* out) { reader.read(f, lo, hi, out); }, true,
              reader.engine_state(), nullptr, nullptr, nullptr, nullptr});
  const double load_s = load_clock.seconds();
  const double gb = double(saved.bytes) / 1e9;
  std::printf("# checkpoint of %zu parameters (%dL %dC), %.3f GB in %s\n", layout.num_params(), mc.n_layer, mc.n_embd,
              gb, saved.path.c_str());
  std::printf("save: %.2f s, %.3f GB/s (write, fsync, CRC-32 read-back)\n", save_s, gb / save_s);
  std::printf("load: %.2f s, %.3f GB/s (CRC-32 of every file, then the state)%s\n", load_s, gb / load_s,
              cold ? ", caches dropped" : ", warm page cache");
  std::printf("RESULT save_gbps=%.3f load_gbps=%.3f bytes=%llu\n", gb / save_s, gb / load_s,
              (unsigned long long)saved.bytes);
  return 0;
}
