// A standalone driver for the libFuzzer harnesses in this folder, so that they run in the normal
// gcc build as ctest tests (label fuzz) with no clang: every file of a seed corpus as it is, then
// a fixed number of seeded, deterministic mutations of them (bit flips, byte changes,
// insertions, deletions, truncations, copied or spliced ranges, and JSON-aware swaps of numbers
// and values for edge cases). A run is reproducible from (corpus, iterations, seed).
//
//   fuzz_manifest CORPUS_DIR [ITERATIONS (20000)] [SEED (1)]
//
// Findings: the harness aborts (fuzz_check.h), an exception escapes, the process crashes, or an
// input runs longer than 10 s. The input at fault is saved as ./<program>-crash.bin (replay it
// with a one-file corpus); the process then dies of the signal, which fails the test. A seed
// named valid* must be accepted: the corpus keeps the reader honest about what it must take.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "core/hash.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

namespace fs = std::filesystem;

constexpr unsigned kSecondsPerInput = 10;

// The input being run, for the signal handler (plain globals: it may touch nothing else).
const char* g_data = nullptr;
size_t g_size = 0;
char g_crash_path[4096] = "fuzz-crash.bin";

void write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w <= 0) return;
    p += w;
    n -= size_t(w);
  }
}

void on_fatal_signal(int sig) {
  const char* what = sig == SIGALRM ? "fuzz_driver: an input ran longer than 10 s; saved as "
                                    : "fuzz_driver: the harness crashed; the input is saved as ";
  write_all(2, what, std::strlen(what));
  write_all(2, g_crash_path, std::strlen(g_crash_path));
  write_all(2, "\n", 1);
  const int fd = ::open(g_crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    write_all(fd, g_data, g_size);
    ::close(fd);
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

// splitmix64 (core/hash.h): the same sequence on every platform and standard library. mix64(x)
// adds the increment itself and is the value a generator in state x returns next, so the state
// moves on after the call; adding the increment before it as well would drop the first value
// (seed s would run as seed s + kSplitmix64Gamma), and with it every input a seed reproduces.
struct Rng {
  uint64_t state;
  uint64_t next() {
    const uint64_t z = zt::mix64(state);
    state += zt::kSplitmix64Gamma;
    return z;
  }
  size_t below(size_t n) { return n == 0 ? 0 : size_t(next() % n); }
};

// Values at the edges of what the readers check: integer widths, signs, huge and tiny doubles.
const char* const kNumbers[] = {"0", "-1", "1", "2", "3", "4", "16", "-16", "65536", "1048576", "2147483647",
                                "2147483648", "4294967295", "4294967296", "9223372036854775807",
                                "9223372036854775808", "-9223372036854775808", "18446744073709551615",
                                "18446744073709551616", "1e308", "1e999", "-0", "0.5", "1E-5", "1.0", "-1e-300"};
const char* const kValues[] = {"null", "true", "false", "[]", "{}", "\"\"", "[0,0]", "[[0,0]]", "\"auto\"",
                               "\"fp32\"", "\"x\"", "{\"a\":1}", "[1,2,3]"};
const char kBytes[] = {'{', '}', '[', ']', '"', ',', ':', '\\', '0', '9', '-', 'e', '.', ' ', '\n', '/', '*', '\0',
                       '\x7f', '\xff'};

bool is_number_char(char c) { return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'; }

void mutate_once(std::string& s, Rng& rng, const std::vector<std::string>& corpus) {
  const size_t n = s.size();
  switch (rng.below(11)) {
    case 0:  // flip a bit
      if (n) s[rng.below(n)] ^= char(1u << rng.below(8));
      break;
    case 1:  // any byte
      if (n) s[rng.below(n)] = char(rng.below(256));
      break;
    case 2:  // a byte that means something in JSON
      if (n) s[rng.below(n)] = kBytes[rng.below(sizeof(kBytes))];
      break;
    case 3: {  // insert a few bytes
      std::string bytes(1 + rng.below(8), '\0');
      for (char& c : bytes) c = rng.below(2) ? kBytes[rng.below(sizeof(kBytes))] : char(rng.below(256));
      s.insert(rng.below(n + 1), bytes);
      break;
    }
    case 4:  // delete a range
      if (n) {
        const size_t at = rng.below(n);
        s.erase(at, 1 + rng.below(std::min<size_t>(n - at, 64)));
      }
      break;
    case 5:  // truncate
      s.resize(rng.below(n + 1));
      break;
    case 6:  // copy a range elsewhere
      if (n) {
        const size_t from = rng.below(n), len = 1 + rng.below(std::min<size_t>(n - from, 128));
        s.insert(rng.below(n + 1), s.substr(from, len));
      }
      break;
    case 7: {  // splice: this input's head, another's tail
      const std::string& other = corpus[rng.below(corpus.size())];
      s = s.substr(0, rng.below(n + 1)) + other.substr(rng.below(other.size() + 1));
      break;
    }
    case 8:
    case 9: {  // a number (the one at or after a random place) swapped for an edge value
      size_t at = rng.below(n + 1);
      while (at < n && !(s[at] >= '0' && s[at] <= '9')) ++at;
      if (at >= n) break;
      size_t begin = at, end = at;
      while (begin > 0 && is_number_char(s[begin - 1])) --begin;
      while (end < n && is_number_char(s[end])) ++end;
      s.replace(begin, end - begin, kNumbers[rng.below(std::size(kNumbers))]);
      break;
    }
    case 10: {  // the value after a random ':' swapped for another kind of value
      const size_t colon = s.find(':', rng.below(n + 1));
      if (colon == std::string::npos) break;
      size_t end = colon + 1;
      int depth = 0;
      bool in_string = false;
      for (; end < n; ++end) {
        const char c = s[end];
        if (in_string) {
          if (c == '\\') ++end;
          else if (c == '"') in_string = false;
        } else if (c == '"') {
          in_string = true;
        } else if (c == '[' || c == '{') {
          ++depth;
        } else if (c == ']' || c == '}' || c == ',') {
          if (depth == 0) break;
          if (c != ',') --depth;
        }
      }
      s.replace(colon + 1, std::min(end, n) - (colon + 1), kValues[rng.below(std::size(kValues))]);
      break;
    }
  }
}

std::vector<std::pair<std::string, std::string>> read_corpus(const fs::path& dir) {
  std::vector<std::pair<std::string, std::string>> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    files.emplace_back(entry.path().filename().string(),
                       std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()));
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 4) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR [ITERATIONS (20000)] [SEED (1)]\n", argv[0]);
    return 2;
  }
  const std::string program = fs::path(argv[0]).filename().string();
  std::snprintf(g_crash_path, sizeof g_crash_path, "%s/%s-crash.bin", fs::current_path().c_str(), program.c_str());
  const long iterations = argc > 2 ? std::atol(argv[2]) : 20000;
  Rng rng{argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 1};
  for (int sig : {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL, SIGALRM}) ::signal(sig, on_fatal_signal);

  const auto files = read_corpus(argv[1]);
  if (files.empty()) {
    std::fprintf(stderr, "%s: no seed files in %s\n", program.c_str(), argv[1]);
    return 2;
  }
  std::vector<std::string> corpus;
  for (const auto& [name, data] : files) corpus.push_back(data);

  long counts[3] = {0, 0, 0};
  auto run = [&](const std::string& input) {
    g_data = input.data();
    g_size = input.size();
    ::alarm(kSecondsPerInput);
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
    ::alarm(0);
    ++counts[int(zt::fuzz::last_outcome)];
  };
  const auto start = std::chrono::steady_clock::now();
  for (const auto& [name, data] : files) {
    run(data);
    if (name.rfind("valid", 0) == 0 && zt::fuzz::last_outcome != zt::fuzz::Outcome::kAccepted) {
      std::fprintf(stderr, "%s: seed %s is named valid but was not accepted: %s\n", program.c_str(), name.c_str(),
                   zt::fuzz::last_message.c_str());
      return 1;
    }
  }
  for (long i = 0; i < iterations; ++i) {
    std::string input = corpus[rng.below(corpus.size())];
    for (size_t k = 1 + rng.below(4); k > 0; --k) mutate_once(input, rng, corpus);
    run(input);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%s: %zu seeds and %ld mutations in %.1f s: %ld accepted, %ld refused (UsageError), %ld Error; OK\n",
              program.c_str(), files.size(), iterations, seconds, counts[0], counts[1], counts[2]);
  return 0;
}
