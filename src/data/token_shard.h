// Token shards in llm.c's format: a header of 256 int32 (magic 20240520, version, token count, the
// rest zero), then the tokens. As llm.c: version 1 holds uint16 tokens (GPT-2's vocabulary),
// version 2 uint32 (Llama 3's 128K, Qwen2's 151K). Shards made by llm.c's scripts load as they
// are; zero_prepare_data writes the narrowest width the vocabulary allows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace zt {

inline constexpr int32_t kShardMagic = 20240520;
inline constexpr int32_t kShardVersionUint16 = 1;
inline constexpr int32_t kShardVersionUint32 = 2;
inline constexpr size_t kShardHeaderInts = 256;
inline constexpr size_t kShardHeaderBytes = kShardHeaderInts * sizeof(int32_t);

/// Writes a shard atomically: to PATH.tmp, fsync, then rename. Throws on I/O errors. The width
/// follows the type: uint16 tokens make a version-1 shard, uint32 a version-2 one.
void write_token_shard(const std::string& path, const uint16_t* tokens, size_t count);
void write_token_shard(const std::string& path, const uint32_t* tokens, size_t count);

/// The bytes per token a shard needs for ids below vocab_size: 2 while they fit uint16, else 4.
inline size_t token_bytes_for_vocab(int64_t vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

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
  /// 2 (version 1) or 4 (version 2).
  size_t token_bytes() const { return token_bytes_; }
  /// Token i, whatever the width.
  uint32_t token(size_t i) const {
    return token_bytes_ == 2 ? static_cast<const uint16_t*>(tokens_)[i] : static_cast<const uint32_t*>(tokens_)[i];
  }
  /// Tokens [offset, offset + n) as int32 (TokenDataset checks the ids against a vocab_size that
  /// int32 holds).
  void read(size_t offset, size_t n, int32_t* out) const;
  /// The position of the first token >= limit, or SIZE_MAX when there is none.
  size_t first_token_at_or_above(int64_t limit) const;

 private:
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const void* tokens_ = nullptr;
  size_t token_bytes_ = 2;
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
