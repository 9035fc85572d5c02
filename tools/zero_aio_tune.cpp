// zero_aio_tune --nvme_path DIR [--io_size_mb N] [--max_seconds S] [--write_config FILE]
//
// Finds the ds_config "aio" block for a drive: sweeps block_size, queue_depth,
// intra_op_parallelism, single_submit and overlap_events with the engine's own swapper (the
// AioEngine that ZeRO-Infinity's swaps go through, on an O_DIRECT SwapFile like theirs), writing
// then reading the same file with each, and prints a table, the best block for a swap (which
// reads and writes: the least read + write time) as JSON to paste into ds_config, and, where fio
// is installed, fio's figure at the best block's size and depth. DeepSpeed asks its users to run
// such a sweep on the target setup (its aio_bench_perf_sweep); this is ours.
//
// The swap file is unlinked as soon as it is open, so no exit leaves it behind; fio's file is
// removed on exit and on SIGINT/SIGTERM. A path on tmpfs or a network file system is refused:
// the sweep would measure memory or the network, not the drive.
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json.hpp>
#include <boost/program_options.hpp>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "config/ds_config.h"
#include "config/tool_options.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "core/tool_main.h"
#include "offload/aio_engine.h"
#include "offload/swap_file.h"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace {

// fio's data file, removed at exit and on SIGINT/SIGTERM (a fixed buffer: the handler may only
// call async-signal-safe functions).
char g_fio_file[4096] = "";

void remove_fio_file() {
  if (g_fio_file[0] != 0) ::unlink(g_fio_file);
}

void on_signal(int sig) {
  remove_fio_file();
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

// The file systems a sweep would not measure a drive on, by statfs's f_type (linux/magic.h).
const char* not_a_drive(const std::string& dir) {
  struct statfs s {};
  if (::statfs(dir.c_str(), &s) != 0) return nullptr;  // stat's error comes from SwapFile
  switch (static_cast<unsigned long>(s.f_type)) {
    case 0x01021994: return "tmpfs (memory, not a drive)";
    case 0x858458f6: return "ramfs (memory, not a drive)";
    case 0x6969: return "NFS (a network file system)";
    case 0xFF534D42: return "CIFS (a network file system)";
    case 0xFE534D42: return "SMB2 (a network file system)";
    case 0x517B: return "SMB (a network file system)";
    case 0x01021997: return "9p (a network file system)";
    case 0x00C36400: return "CephFS (a network file system)";
    case 0x0BD00BD0: return "Lustre (a network file system)";
    case 0x47504653: return "GPFS (a network file system)";
    default: return nullptr;
  }
}

std::vector<int64_t> parse_list(const std::string& text, const char* flag, int64_t lo, int64_t hi) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != 0 || v < lo || v > hi) {
      throw zt::UsageError(zt::cat(flag, ": '", item, "' is not a whole number in [", lo, ", ", hi, "]"));
    }
    out.push_back(v);
  }
  if (out.empty()) throw zt::UsageError(zt::cat(flag, ": no values"));
  return out;
}

struct Measured {
  zt::AioConfig aio;
  double write_gbs = 0, read_gbs = 0, seconds = 0;  // seconds: the write and the read together
};

boost::json::object aio_json(const zt::AioConfig& a) {
  return {{"block_size", a.block_size},       {"queue_depth", a.queue_depth},
          {"intra_op_parallelism", a.intra_op_parallelism}, {"single_submit", a.single_submit},
          {"overlap_events", a.overlap_events}};
}

// fio's bandwidth in GB/s for `rw` (read or write) at the block size and depth of `a`, or a
// negative number when fio fails (its message logged).
double fio_gbs(const std::string& rw, const zt::AioConfig& a, size_t bytes) {
  const std::string cmd = zt::cat("fio --name=zero_aio_tune --filename=", g_fio_file, " --direct=1 --ioengine=io_uring",
                                  " --bs=", a.block_size, " --iodepth=", a.queue_depth, " --rw=", rw, " --size=", bytes,
                                  " --output-format=json 2>&1");
  std::string out;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    if (::pclose(p) == 0) {
      try {
        const size_t at = out.find('{');  // fio may print notes before its JSON
        const boost::json::value v = boost::json::parse(at == std::string::npos ? out : out.substr(at));
        return v.at("jobs").at(0).at(rw).at("bw_bytes").to_number<double>() / 1e9;
      } catch (const std::exception&) {
      }
    }
  }
  zt::log_warn("fio ", rw, " failed: ", out.substr(0, 300));
  return -1;
}

bool on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "");
  for (std::string dir; std::getline(ss, dir, ':');) {
    if (!dir.empty() && ::access((fs::path(dir) / program).c_str(), X_OK) == 0) return true;
  }
  return false;
}

int run(int argc, char** argv) {
  std::string dir, write_config, block_sizes = "131072,262144,1048576", depths = "4,16,32", threads = "1,2,4";
  int64_t io_size_mb = 256;
  double max_seconds = 300;
  bool no_fio = false;
  po::options_description opts("zero_aio_tune --nvme_path DIR");
  opts.add_options()
    ("help,h", "print this help")
    ("nvme_path", po::value(&dir), "a directory on the drive to tune for (offload_*.nvme_path)")
    ("io_size_mb", po::value(&io_size_mb)->default_value(256), "MiB each configuration writes and then reads")
    ("block_sizes", po::value(&block_sizes)->default_value(block_sizes), "aio.block_size values, bytes, comma-separated")
    ("queue_depths", po::value(&depths)->default_value(depths), "aio.queue_depth values")
    ("intra_op_parallelism", po::value(&threads)->default_value(threads), "aio.intra_op_parallelism values (rings)")
    ("max_seconds", po::value(&max_seconds)->default_value(300),
     "time budget: no configuration starts past it (the best so far is reported)")
    ("write_config", po::value(&write_config), "also write {\"aio\": {...}} to this new file")
    ("no_fio", po::bool_switch(&no_fio), "skip fio's figure even where fio is installed");
  po::variables_map vm;
  if (!zt::parse_tool_command_line(argc, argv, opts, vm)) return 0;
  ZT_USAGE_CHECK(!dir.empty(), "--nvme_path is required");
  ZT_USAGE_CHECK(io_size_mb >= 1 && io_size_mb <= (int64_t(1) << 20), "--io_size_mb must be in [1, 1048576]");
  ZT_USAGE_CHECK(max_seconds > 0, "--max_seconds must be > 0");
  std::error_code ec;
  ZT_USAGE_CHECK(fs::is_directory(dir, ec), "--nvme_path: ", dir, ": not a directory");
  ZT_USAGE_CHECK(::access(dir.c_str(), W_OK) == 0, "--nvme_path: ", dir, ": not writable (", std::strerror(errno), ")");
  if (const char* what = not_a_drive(dir)) {
    throw zt::UsageError(zt::cat("--nvme_path: ", dir, " is on ", what,
                                 ": the sweep would not measure a drive; give a directory on the NVMe drive"));
  }
  ZT_USAGE_CHECK(write_config.empty() || !fs::exists(write_config, ec), "--write_config: ", write_config,
                 " exists; give a new file (nothing is overwritten)");
  const std::vector<int64_t> depth_list = parse_list(depths, "--queue_depths", 1, 4096);
  const std::vector<int64_t> thread_list = parse_list(threads, "--intra_op_parallelism", 1, 64);
  std::vector<zt::AioConfig> sweep;
  for (int64_t b : parse_list(block_sizes, "--block_sizes", 4096, int64_t(1) << 30)) {
    ZT_USAGE_CHECK(b % 4096 == 0, "--block_sizes: ", b, " is not a multiple of 4096 (O_DIRECT)");
    for (int64_t q : depth_list) {
      for (int64_t t : thread_list) {
        for (bool single : {false, true}) {
          for (bool overlap : {true, false}) sweep.push_back({b, q, t, single, overlap});
        }
      }
    }
  }

  const size_t bytes = size_t(io_size_mb) << 20;
  zt::SwapFile file(dir, "aio_tune", bytes, "--nvme_path");  // unlinked already: no exit leaves it
  void* raw = nullptr;
  ZT_CHECK(::posix_memalign(&raw, zt::kDirectAlignment, bytes) == 0, "cannot allocate ", bytes, " bytes");
  std::unique_ptr<void, decltype(&std::free)> buffer(raw, &std::free);
  std::memset(raw, 0x5a, bytes);
  std::printf("# zero_aio_tune: %s, %lld MiB written then read a configuration, %zu configurations, O_DIRECT %s\n",
              dir.c_str(), static_cast<long long>(io_size_mb), sweep.size(), file.direct() ? "yes" : "no");
  std::printf("%11s %6s %6s %6s %8s %10s %10s\n", "block_size", "depth", "rings", "single", "overlap", "write GB/s",
              "read GB/s");
  zt::Stopwatch budget;
  std::vector<Measured> done;
  for (const zt::AioConfig& a : sweep) {
    if (!done.empty() && budget.seconds() > max_seconds) break;  // the first always runs
    zt::AioEngine engine(a);
    Measured m{a};
    zt::Stopwatch w;
    engine.write(file.fd(), file.path(), raw, bytes, 0)->wait();
    const double write_s = w.seconds();
    zt::Stopwatch r;
    engine.read(file.fd(), file.path(), raw, bytes, 0)->wait();
    const double read_s = r.seconds();
    m.write_gbs = double(bytes) / write_s / 1e9;
    m.read_gbs = double(bytes) / read_s / 1e9;
    m.seconds = write_s + read_s;
    std::printf("%11lld %6lld %6lld %6s %8s %10.3f %10.3f\n", static_cast<long long>(a.block_size),
                static_cast<long long>(a.queue_depth), static_cast<long long>(a.intra_op_parallelism),
                a.single_submit ? "true" : "false", a.overlap_events ? "true" : "false", m.write_gbs, m.read_gbs);
    std::fflush(stdout);
    done.push_back(m);
  }
  if (done.size() < sweep.size()) {
    zt::log_warn("--max_seconds ", max_seconds, ": stopped after ", done.size(), " of ", sweep.size(),
                 " configurations; the best is of those");
  }
  const auto by = [&](auto key) { return *std::max_element(done.begin(), done.end(), key); };
  const Measured best = by([](const Measured& x, const Measured& y) { return x.seconds > y.seconds; });
  const Measured best_read = by([](const Measured& x, const Measured& y) { return x.read_gbs < y.read_gbs; });
  const Measured best_write = by([](const Measured& x, const Measured& y) { return x.write_gbs < y.write_gbs; });
  std::printf("# best read %.3f GB/s, best write %.3f GB/s; best for a swap (read + write): %.3f / %.3f GB/s\n",
              best_read.read_gbs, best_write.write_gbs, best.read_gbs, best.write_gbs);

  if (!no_fio && on_path("fio")) {
    std::snprintf(g_fio_file, sizeof g_fio_file, "%s/zero_aio_tune-%d.fio", dir.c_str(), int(::getpid()));
    std::atexit(remove_fio_file);
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    const double fw = fio_gbs("write", best.aio, bytes), fr = fio_gbs("read", best.aio, bytes);
    remove_fio_file();
    if (fw > 0 && fr > 0) {
      std::printf("# fio at block_size %lld, iodepth %lld, io_uring, O_DIRECT: write %.3f GB/s, read %.3f GB/s; "
                  "the best block reaches %.2f of fio's write and %.2f of its read\n",
                  static_cast<long long>(best.aio.block_size), static_cast<long long>(best.aio.queue_depth), fw, fr,
                  best.write_gbs / fw, best.read_gbs / fr);
    }
  } else if (!no_fio) {
    std::printf("# fio is not installed: no figure to compare with (apt-get install fio)\n");
  }
  const std::string json = boost::json::serialize(boost::json::object{{"aio", aio_json(best.aio)}});
  std::printf("%s\n", json.c_str());
  if (!write_config.empty()) {
    zt::write_file_atomically(write_config, json + "\n", false);  // every write checked; no stray temporary
    zt::log_info("wrote ", write_config);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return zt::run_tool("zero_aio_tune", [&] { return run(argc, argv); }); }
