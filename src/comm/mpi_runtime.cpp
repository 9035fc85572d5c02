#include "comm/mpi_runtime.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/log.h"

namespace zt {

void throw_mpi_error(const char* file, int line, const char* call, int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw_error(file, line, cat(call, " failed: ", text));
}

namespace {

// A positive decimal integer, the whole string; 0 for anything else (unset, "", "4x", overflow).
long positive_integer(const char* text) {
  if (text == nullptr || *text < '0' || *text > '9') return 0;
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text, &end, 10);
  return (*end == '\0' && errno == 0 && value > 0) ? value : 0;
}

// One argument as the shell reads it back: as is when it holds only safe characters, else in
// single quotes ('\'' for a quote inside).
std::string shell_quote(const std::string& arg) {
  const bool safe = !arg.empty() && arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                          "0123456789_-./=:,+@%") == std::string::npos;
  if (safe) return arg;
  std::string quoted = "'";
  for (char c : arg) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

}  // namespace

std::optional<ForeignLaunch> check_foreign_launch(int mpi_world_size, int argc, const char* const* argv,
                                                  const std::function<const char*(const char*)>& env) {
  const long world = positive_integer(env("WORLD_SIZE"));
  if (world <= 1 || mpi_world_size != 1) return std::nullopt;
  const char* rank_text = env("RANK");
  const char* local_name = env("LOCAL_WORLD_SIZE") ? "LOCAL_WORLD_SIZE" : "LOCAL_SIZE";  // torchrun : deepspeed
  const long local = positive_integer(env(local_name));
  const bool per_node = local > 0 && world % local == 0;

  // The user's command: argv without the --local_rank the deepspeed launcher adds to it.
  std::string command;
  for (int i = 0; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i > 0 && arg.rfind("--local_rank=", 0) == 0) continue;
    if (i > 0 && arg == "--local_rank") {
      ++i;
      continue;
    }
    if (i > 0) command += ' ';
    command += shell_quote(arg);
  }
  const std::string rank_shown = !rank_text ? "(unset)" : positive_integer(rank_text) > 0 || std::string(rank_text) == "0"
                                                             ? rank_text
                                                             : "(not a number)";
  std::string seen = cat("WORLD_SIZE=", world, ", RANK=", rank_shown);
  if (per_node) seen += cat(", ", local_name, "=", local);
  const std::string mpirun = per_node ? cat("mpirun -np ", world, " --npernode ", local) : cat("mpirun -np ", world);
  const std::string srun =
      per_node ? cat("srun --nodes=", world / local, " --ntasks-per-node=", local) : cat("srun --ntasks=", world);
  ForeignLaunch refusal;
  refusal.message = cat("started by torchrun or the deepspeed launcher (", seen, ") but MPI sees 1 process, ",
                        "which would make ", world, " separate runs; ranks come from MPI: launch with `", mpirun,
                        " ", command, "` or `", srun, " ", command, "`");
  refusal.quiet = positive_integer(rank_text) > 0;
  return refusal;
}

bool MpiRuntime::initialized() {
  int init = 0, finalized = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&finalized);
  return init && !finalized;
}

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  // MpiComm drives every collective as a non-blocking one (mpi_comm.h). Open MPI's libnbc picks
  // a binomial all-reduce for small worlds, 1.7x slower than the blocking one on 16 MB; its ring
  // is as fast (7.7 against 7.1 ms, 2 ranks on the 2-core test machine). The user's setting wins.
  setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "ring", /*overwrite=*/0);
  int provided = 0;
  ZT_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
  // Errors come back as codes so that ZT_MPI_CHECK can turn them into exceptions with MPI's text.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  if (provided < MPI_THREAD_MULTIPLE) {
    MPI_Finalize();
    throw Error(cat("MPI_Init_thread: this MPI provides thread level ", provided,
                    ", zerotrain needs MPI_THREAD_MULTIPLE (", MPI_THREAD_MULTIPLE, ")"));
  }
  ZT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &place_.rank));
  ZT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &place_.world_size));
  // Refused before anything is read or written; each torchrun child is a world of one, so each
  // decides alone, and only RANK 0 speaks.
  const auto getenv_ = [](const char* name) -> const char* { return getenv(name); };
  if (auto refusal = check_foreign_launch(place_.world_size, *argc, *argv, getenv_)) {
    if (!refusal->quiet) log_line(LogLevel::kError, refusal->message);
    MPI_Finalize();
    std::exit(2);
  }
  MPI_Comm node_comm;  // ordered as the world: node_local_rank() gives the same numbers
  ZT_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, place_.rank, MPI_INFO_NULL, &node_comm));
  ZT_MPI_CHECK(MPI_Comm_rank(node_comm, &place_.local_rank));
  ZT_MPI_CHECK(MPI_Comm_size(node_comm, &place_.local_size));
  // Node index: number the nodes by their lowest world rank, so node 0 holds rank 0.
  int leader = place_.rank;
  ZT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, node_comm));
  std::vector<int> leaders(size_t(place_.world_size));
  ZT_MPI_CHECK(MPI_Allgather(&leader, 1, MPI_INT, leaders.data(), 1, MPI_INT, MPI_COMM_WORLD));
  place_.node = 0;
  place_.num_nodes = 0;
  for (int r = 0; r < place_.world_size; ++r) {
    if (leaders[r] == r) {
      if (r < leader) ++place_.node;
      ++place_.num_nodes;
    }
  }
  MPI_Comm_free(&node_comm);
  char host[256] = "?";
  gethostname(host, sizeof(host) - 1);
  place_.host = host;
  set_log_rank(place_.rank);
}

MpiRuntime::~MpiRuntime() {
  if (initialized()) MPI_Finalize();
}

void MpiRuntime::abort_job(int exit_code, const std::string& message) {
  int rank = 0, size = 1;
  if (initialized()) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
  }
  log_line(LogLevel::kError, size > 1 ? cat("rank ", rank, ": ", message) : message);
  if (initialized() && size > 1) MPI_Abort(MPI_COMM_WORLD, exit_code);
  if (initialized()) MPI_Finalize();
  std::exit(exit_code);
}

int node_local_rank() {
  int world_rank = 0, local = 0;
  ZT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
  MPI_Comm node;
  ZT_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node));
  ZT_MPI_CHECK(MPI_Comm_rank(node, &local));
  ZT_MPI_CHECK(MPI_Comm_free(&node));
  return local;
}

}  // namespace zt
