// Thin RAII wrappers over the HDF5 C API (in the manner of HighFive): every call is checked and a
// failure throws with file:line, the HDF5 file name and HDF5's own error stack message.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>

namespace zt {

/// An owned HDF5 identifier, closed with the matching H5*close.
class H5Id {
 public:
  H5Id() = default;
  H5Id(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~H5Id() { reset(); }
  H5Id(H5Id&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = -1; }
  H5Id& operator=(H5Id&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = o.id_;
      close_ = o.close_;
      o.id_ = -1;
    }
    return *this;
  }
  H5Id(const H5Id&) = delete;
  H5Id& operator=(const H5Id&) = delete;
  hid_t get() const { return id_; }
  void reset() {
    if (id_ >= 0 && close_) close_(id_);
    id_ = -1;
  }

 private:
  hid_t id_ = -1;
  herr_t (*close_)(hid_t) = nullptr;
};

/// One HDF5 file holding 1-D fp32/16-bit datasets and scalar attributes.
class H5File {
 public:
  /// Creates (truncating) `path` for writing.
  static H5File create(const std::string& path);
  /// Opens an existing file read-only. A missing or non-HDF5 file is a UsageError naming it.
  static H5File open(const std::string& path);
  void close();

  /// A chunked 1-D dataset of `count` elements (fp32 or raw uint16 for 16-bit), with HDF5's
  /// Fletcher32 checksum filter on every chunk.
  void write(const std::string& name, const float* data, size_t count);
  void write(const std::string& name, const uint16_t* data, size_t count);
  void write(const std::string& name, const double* data, size_t count);
  /// The same fp32 dataset, written one chunk at a time: `fill(offset, n, out)` provides
  /// elements [offset, offset + n). Memory stays at one chunk whatever the dataset's size.
  void write(const std::string& name, size_t count, const std::function<void(size_t, size_t, float*)>& fill);
  /// Reads elements [offset, offset + count) of a dataset (a hyperslab): only those chunks are
  /// read and checksummed.
  void read(const std::string& name, size_t offset, size_t count, float* out) const;
  void read(const std::string& name, size_t offset, size_t count, uint16_t* out) const;
  void read(const std::string& name, size_t offset, size_t count, double* out) const;
  /// From now on reads skip the Fletcher32 check of each chunk: for a reader that checks every
  /// byte of the file another way (a whole-file CRC-32) before it uses what it read.
  void skip_chunk_checksums();
  /// From now on datasets keep two chunks in HDF5's cache: for a reader of many small hyperslabs
  /// in order (an export, tensor by tensor), which would otherwise read and check a 16 MB chunk
  /// once per small tensor. A reader of whole partitions (a resume) is faster without: HDF5 then
  /// reads each chunk straight into place instead of through the cache.
  void cache_chunks() { cache_chunks_ = true; }
  /// The element count of a dataset (throws UsageError if missing).
  size_t length(const std::string& name) const;
  bool has(const std::string& name) const;

  void set_attribute(const std::string& name, int64_t value);
  void set_attribute(const std::string& name, double value);
  void set_attribute(const std::string& name, const std::string& value);
  int64_t int_attribute(const std::string& name) const;
  double double_attribute(const std::string& name) const;
  std::string string_attribute(const std::string& name) const;

  const std::string& path() const { return path_; }

 private:
  void write_raw(const std::string& name, const void* data, size_t count, hid_t type);
  H5Id create_dataset(const std::string& name, size_t count, hid_t type);
  void read_scalar_attribute(const std::string& name, hid_t type, void* out) const;
  void read_raw(const std::string& name, size_t offset, size_t count, void* out, hid_t type) const;
  const H5Id& open_dataset(const std::string& name) const;
  H5Id file_;
  std::string path_;
  // Datasets opened for reading, kept open so that their chunk cache survives from one hyperslab
  // to the next (declared after file_: closed before it).
  mutable std::map<std::string, H5Id> datasets_;
  H5Id transfer_;  // dataset transfer properties of reads; none: HDF5's defaults
  bool cache_chunks_ = false;
};

/// HDF5's current error stack as one line (for messages).
std::string h5_error_stack();

}  // namespace zt
