// Host collectives on one node (issue 17): ShmComm (comm/shm_comm.h) against MpiComm, and the
// node's shared-memory copy bandwidth measured in the same run, as nccl-tests do: fixed columns,
// the bandwidth formulas in code, a check of every result, an OK/FAILED footer and the exit
// status of every rank.
//
//   copy      every rank at once memcpy's `size` bytes from private memory into its segment of an
//             MPI_Win_allocate_shared window (the transfer a shared-memory collective is built
//             from); GB/s = size / time, per rank.
//   algbw     payload per rank / time: reduce-scatter its input (size), all-gather its output
//             (size), all-reduce its buffer (size). The check: ShmComm's algbw >= --min-ratio
//             (0.5) x copy, at sizes of at least --check-from (16 MB; below that the barriers'
//             latency dominates on an oversubscribed node), on the path the engine takes: its
//             gradients' all-reduce and reduce-scatter read buffers in shared memory
//             (allocate_shared; rows "shm-sh"), its parameters' all-gather private ones (rows
//             "shm"). The staged reduce-scatter and all-reduce of private buffers are printed too.
//   busbw     algbw x (P-1)/P for reduce-scatter and all-gather, x 2(P-1)/P for all-reduce
//             (nccl-tests' doc/PERFORMANCE.md): what each rank moves over the shared memory.
//
// Every ShmComm result is compared with a reference (reduce-scatter, all-reduce: the fp32 sum in
// rank order of small integers, exact; all-gather: the ranks' blocks), and MpiComm's too.
// Usage: mpirun -np 2|4 bench_collectives [--min-mb 1 --max-mb 256 --iters 5 --min-ratio 0.5
//        --check-from 16 --chunk-kb 2048 (ShmComm's staging per buffer)]
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "comm/mpi_comm.h"
#include "comm/mpi_runtime.h"
#include "comm/node_layout.h"
#include "comm/shm_comm.h"

using namespace zt;

namespace {

double now() { return MPI_Wtime(); }

// The slowest rank's time of the fastest of `iters` runs of `body` (each begins at a barrier).
template <typename F>
double time_best(MPI_Comm comm, int iters, F body) {
  double best = 1e30;
  for (int i = 0; i < iters; ++i) {
    MPI_Barrier(comm);
    const double t0 = now();
    body();
    double t = now() - t0;
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, comm);
    best = std::min(best, t);
  }
  return best;
}

struct Options {
  double min_mb = 1, max_mb = 256, min_ratio = 0.5, check_from = 16, chunk_kb = double(kShmChunkBytes >> 10);
  int iters = 5;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const double v = std::atof(argv[i + 1]);
    if (flag == "--min-mb") o.min_mb = v;
    else if (flag == "--max-mb") o.max_mb = v;
    else if (flag == "--iters") o.iters = int(v);
    else if (flag == "--min-ratio") o.min_ratio = v;
    else if (flag == "--check-from") o.check_from = v;
    else if (flag == "--chunk-kb") o.chunk_kb = v;
    else {
      std::fprintf(stderr, "bench_collectives: unknown flag %s\n", flag.c_str());
      std::exit(2);
    }
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  MpiRuntime runtime(&argc, &argv);
  const Options o = parse(argc, argv);
  const int me = runtime.place().rank, p = runtime.place().world_size;
  const bool root = me == 0;
  if (!node_layout(MPI_COMM_WORLD).one_node) {
    if (root) std::printf("bench_collectives: the ranks span %d nodes; run it on one\nFAILED\n", runtime.place().num_nodes);
    return 1;
  }
  ShmComm shm(MPI_COMM_WORLD, size_t(o.chunk_kb * 1024));
  MpiComm mpi(MPI_COMM_WORLD);
  const size_t max_bytes = size_t(o.max_mb * 1e6) / 64 * 64;

  // The copy's target: a window of max_bytes per rank.
  MPI_Win win;
  void* window = nullptr;
  ZT_MPI_CHECK(MPI_Win_allocate_shared(MPI_Aint(max_bytes), 1, MPI_INFO_NULL, MPI_COMM_WORLD, &window, &win));
  std::vector<float> send(max_bytes / 4), recv(max_bytes / 4), gathered(max_bytes / 4);
  std::memset(window, 0, max_bytes);  // first touch: the pages exist before anything is timed
  // The engine's gradient buffers: shared memory that the peers read in place (zeroed, so touched).
  std::unique_ptr<SharedBuffer> shared = shm.allocate_shared(max_bytes);
  if (!shared) {
    if (root) std::printf("bench_collectives: no room for %zu bytes of shared memory per rank\nFAILED\n", max_bytes);
    return 1;
  }
  // The variants: the communicator, its label, where its inputs are, and which collectives the
  // check judges (those the engine runs that way).
  struct Variant {
    HostComm* comm;
    const char* label;
    float* input;
    bool judged[3];  // reduce-scatter, all-gather, all-reduce
  };
  const Variant variants[] = {{&shm, "shm", send.data(), {false, true, false}},
                              {&shm, "shm-sh", reinterpret_cast<float*>(shared->data()), {true, false, true}},
                              {&mpi, "mpi", send.data(), {false, false, false}}};

  if (root) {
    std::printf("# bench_collectives: %d ranks on %s, %d iterations per point (best; slowest rank)\n", p,
                runtime.place().host.c_str(), o.iters);
    std::printf("%10s %6s %-14s %9s %9s %9s %9s %9s %9s\n", "size_B", "comm", "collective", "time_ms", "algbw",
                "busbw", "copy", "alg/copy", "check");
  }
  bool ok = true;
  std::vector<double> worst_ratio(3, 1e30), worst_staged(3, 1e30);
  for (double mb = o.min_mb; mb <= o.max_mb * 1.0001; mb *= 4) {
    const size_t bytes = size_t(mb * 1e6) / (64 * size_t(p)) * 64 * size_t(p);
    const size_t n = bytes / 4, slice = n / size_t(p);
    const std::vector<size_t> counts(size_t(p), slice);
    const double copy_t = time_best(MPI_COMM_WORLD, o.iters, [&] { std::memcpy(window, send.data(), bytes); });
    const double copy_bw = double(bytes) / copy_t / 1e9;
    for (const Variant& v : variants) {
      HostComm* comm = v.comm;
      float* input = v.input;
      for (int kind = 0; kind < 3; ++kind) {
        if (kind == 1 && input != send.data()) continue;  // the engine gathers from private memory
        // Inputs: small integers, so that every order of summation gives the same fp32 sum.
        auto fill = [&] {
          for (size_t i = 0; i < n; ++i) input[i] = float((i + size_t(me)) % 17);
        };
        fill();
        const char* name = kind == 0 ? "reduce_scatter" : kind == 1 ? "all_gather" : "all_reduce";
        double t = 0;
        if (kind == 0) {
          t = time_best(MPI_COMM_WORLD, o.iters,
                        [&] { comm->reduce_scatter(input, recv.data(), counts, DType::kF32)->wait(); });
        } else if (kind == 1) {
          t = time_best(MPI_COMM_WORLD, o.iters,
                        [&] { comm->all_gather(input, gathered.data(), counts, DType::kF32)->wait(); });
        } else {
          // The fill is part of each run (the sum is in place); its time is taken out.
          const double fill_t = time_best(MPI_COMM_WORLD, o.iters, fill);
          t = time_best(MPI_COMM_WORLD, o.iters, [&] {
            fill();
            comm->all_reduce(input, n, DType::kF32)->wait();
          });
          t = std::max(t - fill_t, 1e-9);
        }
        // Check the last run's result.
        bool good = true;
        if (kind == 0) {
          for (size_t i = 0; i < slice && good; i += 61) {
            const size_t g = size_t(me) * slice + i;
            float want = 0;
            for (int r = 0; r < p; ++r) want += float((g + size_t(r)) % 17);
            good = recv[i] == want;
          }
        } else if (kind == 1) {
          for (size_t i = 0; i < n && good; i += 61) good = gathered[i] == float((i % slice + (i / slice)) % 17);
        } else {
          for (size_t i = 0; i < n && good; i += 61) {
            float want = 0;
            for (int r = 0; r < p; ++r) want += float((i + size_t(r)) % 17);
            good = input[i] == want;
          }
        }
        int all_good = good;
        MPI_Allreduce(MPI_IN_PLACE, &all_good, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        const double algbw = double(bytes) / t / 1e9;
        const double factor = kind == 2 ? 2.0 * (p - 1) / p : double(p - 1) / p;
        const double ratio = algbw / copy_bw;
        const bool checked = v.judged[kind] && mb >= o.check_from;
        if (checked) worst_ratio[size_t(kind)] = std::min(worst_ratio[size_t(kind)], ratio);
        if (comm == &shm && !v.judged[kind] && mb >= o.check_from) {
          worst_staged[size_t(kind)] = std::min(worst_staged[size_t(kind)], ratio);
        }
        const bool pass = all_good && (!checked || ratio >= o.min_ratio);
        ok = ok && pass;
        if (root) {
          std::printf("%10zu %6s %-14s %9.2f %9.2f %9.2f %9.2f %9.2f %9s\n", bytes, v.label, name, t * 1e3,
                      algbw, algbw * factor, copy_bw, ratio,
                      !all_good ? "WRONG" : checked ? (ratio >= o.min_ratio ? "ok" : "SLOW") : "-");
        }
      }
    }
  }
  shared.reset();  // collective, as MPI_Win_free
  MPI_Win_free(&win);
  for (auto* worst : {&worst_ratio, &worst_staged}) {
    for (double& r : *worst) r = r > 1e29 ? 0 : r;  // no size was checked (--max-mb below --check-from)
  }
  if (root) {
    std::printf("RESULT ranks=%d shm_rs_vs_copy=%.2f shm_ag_vs_copy=%.2f shm_ar_vs_copy=%.2f (target >= %.2f; "
                "reduce-scatter and all-reduce in shared memory) staged_rs_vs_copy=%.2f staged_ar_vs_copy=%.2f\n%s\n",
                p, worst_ratio[0], worst_ratio[1], worst_ratio[2], o.min_ratio, worst_staged[0], worst_staged[2],
                ok ? "OK" : "FAILED");
  }
  return ok ? 0 : 1;
}
