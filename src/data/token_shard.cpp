#include "data/token_shard.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/regular_file.h"

namespace zt {

std::vector<std::string> expand_glob(const std::string& pattern) {
  glob_t g{};
  int rc = glob(pattern.c_str(), GLOB_ERR, nullptr, &g);
  std::vector<std::string> files;
  if (rc == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) files.emplace_back(g.gl_pathv[i]);
  }
  globfree(&g);
  ZT_USAGE_CHECK(rc != GLOB_NOMATCH && !files.empty(), pattern, ": no file matches");
  ZT_USAGE_CHECK(rc == 0, pattern, ": cannot read the directory");
  std::sort(files.begin(), files.end());
  return files;
}

namespace {

template <typename Token>
void write_shard(const std::string& path, const Token* tokens, size_t count, int32_t version) {
  ZT_CHECK(count <= size_t(INT32_MAX), "a shard holds at most 2^31-1 tokens, got ", count);
  int32_t header[kShardHeaderInts] = {};
  header[0] = kShardMagic;
  header[1] = version;
  header[2] = int32_t(count);
  AtomicFile file(path);
  file.write(header, sizeof(header));
  file.write(tokens, count * sizeof(Token));
  file.commit(/*durable=*/true);
}

template <typename Token>
size_t first_at_or_above(const Token* t, size_t n, int64_t limit) {
  size_t first = SIZE_MAX;
#pragma omp parallel for reduction(min : first) schedule(static)
  for (size_t i = 0; i < n; ++i) {
    if (int64_t(t[i]) >= limit && i < first) first = i;
  }
  return first;
}

}  // namespace

void write_token_shard(const std::string& path, const uint16_t* tokens, size_t count) {
  write_shard(path, tokens, count, kShardVersionUint16);
}

void write_token_shard(const std::string& path, const uint32_t* tokens, size_t count) {
  write_shard(path, tokens, count, kShardVersionUint32);
}

TokenShard::TokenShard(const std::string& path) : path_(path) {
  // A regular file only: opening a FIFO would wait for a writer, /dev/zero would map as zeros.
  RegularFile file(path);
  const size_t bytes = size_t(file.size());
  ZT_USAGE_CHECK(bytes >= kShardHeaderBytes, path, ": not a token shard: ", bytes,
                 " bytes is shorter than the 1024-byte header");
  map_ = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, file.fd(), 0);
  ZT_USAGE_CHECK(map_ != MAP_FAILED, path, ": mmap failed: ", std::strerror(errno));
  map_bytes_ = bytes;
  const auto* header = static_cast<const int32_t*>(map_);
  auto fail = [&](const std::string& what) {
    ::munmap(map_, map_bytes_);
    map_ = nullptr;
    throw UsageError(cat(path, ": ", what));
  };
  if (header[0] != kShardMagic) fail(cat("bad magic ", header[0], " (expected ", kShardMagic, "): not an llm.c token shard"));
  if (header[1] != kShardVersionUint16 && header[1] != kShardVersionUint32) {
    fail(cat("unsupported shard version ", header[1], " (", kShardVersionUint16, ": uint16 tokens, ",
             kShardVersionUint32, ": uint32 tokens)"));
  }
  if (header[2] < 0) fail(cat("negative token count ", header[2]));
  token_bytes_ = header[1] == kShardVersionUint16 ? 2 : 4;
  count_ = size_t(header[2]);
  size_t expected = kShardHeaderBytes + count_ * token_bytes_;
  if (bytes != expected) {
    fail(cat("the header promises ", count_, " tokens of ", token_bytes_, " bytes (", expected,
             " bytes) but the file has ", bytes, " bytes: truncated or corrupt"));
  }
  tokens_ = static_cast<const char*>(map_) + kShardHeaderBytes;
}

void TokenShard::read(size_t offset, size_t n, int32_t* out) const {
  ZT_CHECK(offset + n <= count_, "read past the end of ", path_);
  if (token_bytes_ == 2) {
    std::copy_n(static_cast<const uint16_t*>(tokens_) + offset, n, out);
  } else {
    std::copy_n(static_cast<const uint32_t*>(tokens_) + offset, n, out);
  }
}

size_t TokenShard::first_token_at_or_above(int64_t limit) const {
  return token_bytes_ == 2 ? first_at_or_above(static_cast<const uint16_t*>(tokens_), count_, limit)
                           : first_at_or_above(static_cast<const uint32_t*>(tokens_), count_, limit);
}

TokenShard::TokenShard(TokenShard&& o) noexcept
    : path_(std::move(o.path_)), map_(o.map_), map_bytes_(o.map_bytes_), tokens_(o.tokens_),
      token_bytes_(o.token_bytes_), count_(o.count_) {
  o.map_ = nullptr;
  o.tokens_ = nullptr;
}

TokenShard::~TokenShard() {
  if (map_) ::munmap(map_, map_bytes_);
}

TokenDataset::TokenDataset(const std::string& pattern, int vocab_size) : pattern_(pattern) {
  for (const auto& file : expand_glob(pattern)) {
    TokenShard shard(file);
    // Check every token once, here, so a bad id can never reach an embedding lookup.
    const size_t first_bad = shard.first_token_at_or_above(vocab_size);
    if (first_bad != SIZE_MAX) {
      throw UsageError(cat(file, ": token ", shard.token(first_bad), " at position ", first_bad,
                           " is >= vocab_size ", vocab_size));
    }
    starts_.push_back(total_);
    total_ += shard.size();
    shards_.push_back(std::move(shard));
  }
}

void TokenDataset::read(size_t offset, size_t count, int32_t* out) const {
  ZT_CHECK(offset + count <= total_, "read past the end of ", pattern_);
  size_t s = size_t(std::upper_bound(starts_.begin(), starts_.end(), offset) - starts_.begin()) - 1;
  while (count > 0) {
    size_t local = offset - starts_[s];
    size_t take = std::min(count, shards_[s].size() - local);
    shards_[s].read(local, take, out);
    out += take;
    offset += take;
    count -= take;
    ++s;
  }
}

}  // namespace zt
