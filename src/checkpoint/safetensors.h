// The safetensors format (HF's): an 8-byte little-endian header length, a JSON header naming each
// tensor's dtype, shape and byte range, then the raw little-endian data. Written and read as a
// stream, one tensor at a time, so that memory never holds more than one tensor.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/atomic_file.h"
#include "core/dtype.h"

namespace zt {

struct TensorSpec {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  size_t numel() const;
  size_t bytes() const { return numel() * dtype_size(dtype); }
};

/// "F32", "BF16", "F16".
const char* safetensors_dtype(DType t);

/// Writes one .safetensors file: the header for all tensors first, then write_next() in order.
/// Through an AtomicFile: `path` appears only at publish(), complete; a writer destroyed before
/// that leaves nothing behind.
class SafetensorsWriter {
 public:
  SafetensorsWriter(const std::string& path, std::vector<TensorSpec> tensors);
  /// The next tensor's data, `bytes()` long, in its dtype.
  void write_next(const void* data);
  /// Closes the file (fsyncing when `durable`); every tensor must have been written.
  void finish(bool durable);
  /// Renames it into place (after finish).
  void publish(bool durable) { file_.publish(durable); }

 private:
  std::vector<TensorSpec> tensors_;
  size_t next_ = 0;
  AtomicFile file_;
};

/// The shard files a model.safetensors.index.json's weight_map names (`text` is the index, `source`
/// names it in errors): each once, sorted, every one a relative path that stays inside the
/// model's folder. Anything else is a UsageError naming `source`.
std::vector<std::string> parse_safetensors_index(std::string_view text, const std::string& source);

/// Reads tensors from one or more .safetensors files (a sharded model through its index).
class SafetensorsReader {
 public:
  /// `path` is a .safetensors file, or a directory with model.safetensors or
  /// model.safetensors.index.json. Header problems are UsageErrors naming the file.
  explicit SafetensorsReader(const std::string& path);
  ~SafetensorsReader();
  SafetensorsReader(SafetensorsReader&& other) noexcept { swap(other); }
  SafetensorsReader& operator=(SafetensorsReader&& other) noexcept {
    swap(other);
    return *this;
  }
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  bool has(const std::string& name) const { return tensors_.count(name) > 0; }
  const TensorSpec& spec(const std::string& name) const;
  /// Elements [offset, offset + count) of a tensor, converted to fp32.
  void read(const std::string& name, size_t offset, size_t count, float* out) const;
  std::vector<std::string> names() const;

 private:
  struct Entry {
    TensorSpec spec;
    int file = 0;
    uint64_t begin = 0;  // absolute byte offset of the data in the file
  };
  void open(const std::string& path);  // the constructor's work: a file, or a folder's files
  void add_file(const std::string& path);
  void swap(SafetensorsReader& other) noexcept {
    paths_.swap(other.paths_);
    fds_.swap(other.fds_);  // the file descriptors move with their owner, never get copied
    tensors_.swap(other.tensors_);
  }
  std::vector<std::string> paths_;
  std::vector<int> fds_;
  std::map<std::string, Entry> tensors_;
};

}  // namespace zt
