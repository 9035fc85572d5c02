// Token shards in llm.c's format: a header of 256 int32 (magic 20240520, version 1, token count,
// the rest zero), then the tokens as uint16. GPT-2-tokenized shards made by llm.c's scripts load
// as they are; zero_prepare_data writes byte-level ones (vocab 256).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace zt {

inline constexpr int32_t kShardMagic = 20240520;
inline constexpr int32_t kShardVersion = 1;
inline constexpr size_t kShardHeaderInts = 256;
inline constexpr size_t kShardHeaderBytes = kShardHeaderInts * sizeof(int32_t);

/// Writes a shard atomically: to PATH.tmp, fsync, then rename. Throws on I/O errors.
void write_token_shard(const std::string& path, const uint16_t* tokens, size_t count);

/// One shard, memory-mapped read-only. The constructor validates the header and the file size;
/// every problem is a UsageError naming the file.
class TokenShard {
 public:
  explicit TokenShard(const std::string& path);
  ~TokenShard();
  TokenShard(TokenShard&& other) noexcept;
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;
  TokenShard& operator=(TokenShard&&) = delete;

  const std::string& path() const { return path_; }
  size_t size() const { return count_; }
  const uint16_t* tokens() const { return tokens_; }

 private:
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const uint16_t* tokens_ = nullptr;
  size_t count_ = 0;
};

/// The concatenation of every shard matching a glob (sorted by name), checked against the
/// vocabulary: a token id >= vocab_size is a UsageError naming the file and the position.
class TokenDataset {
 public:
  TokenDataset(const std::string& glob_pattern, int vocab_size);

  size_t size() const { return total_; }
  size_t num_shards() const { return shards_.size(); }
  const std::string& pattern() const { return pattern_; }
  /// Copies tokens [offset, offset + count) of the concatenation into `out` as int32.
  void read(size_t offset, size_t count, int32_t* out) const;

 private:
  std::string pattern_;
  std::vector<TokenShard> shards_;
  std::vector<size_t> starts_;  // global offset of each shard's first token
  size_t total_ = 0;
};

/// The files matching a glob pattern, sorted; a pattern with no match is a UsageError.
std::vector<std::string> expand_glob(const std::string& pattern);

}  // namespace zt
