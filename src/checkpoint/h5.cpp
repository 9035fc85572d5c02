#include "checkpoint/h5.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "core/regular_file.h"

namespace zt {

namespace {

// HDF5 prints its error stack to stderr by default; we fold it into our exception instead.
// And no library shutdown at exit: a file whose close failed (a full disk) stays in HDF5's
// tables, and its exit handler, closing it again, crashed the process (HDF5 1.10.8, SIGSEGV in
// H5F__close_cb) instead of letting it exit with our error. Every file is closed by its H5File.
struct SilenceHdf5 {
  SilenceHdf5() {
    H5dont_atexit();
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
};
const SilenceHdf5 silence_hdf5;

herr_t collect(unsigned n, const H5E_error2_t* e, void* data) {
  static_cast<std::vector<std::string>*>(data)->push_back(e->desc ? e->desc : "?");
  (void)n;
  return 0;
}

}  // namespace

// One line: the outermost failure, and the system's own message when the file driver saw one
// (HDF5's driver descriptions span lines and repeat the whole request; ENOSPC hides in them).
std::string h5_error_stack() {
  std::vector<std::string> descs;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect, &descs);
  H5Eclear2(H5E_DEFAULT);
  if (descs.empty()) return "unknown HDF5 error";
  std::string text = descs.front();
  bool system_error = false;
  for (const std::string& d : descs) {
    const std::string marker = "error message = '";
    const size_t at = d.find(marker);
    if (at == std::string::npos) continue;
    const size_t end = d.find('\'', at + marker.size());
    text += cat(" (", d.substr(at + marker.size(), end - at - marker.size()), ")");
    system_error = true;
    break;
  }
  if (descs.size() > 1 && !system_error) text += cat("; ", descs.back());
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

#define ZT_H5_CHECK(expr, ...)                                                                        \
  do {                                                                                                \
    if ((expr) < 0) ::zt::throw_error(__FILE__, __LINE__, ::zt::cat(__VA_ARGS__, ": ", #expr, ": ", \
                                                                    ::zt::h5_error_stack()));         \
  } while (0)

H5File H5File::create(const std::string& path) {
  H5File f;
  f.path_ = path;
  hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ZT_H5_CHECK(id, path, ": cannot create");
  f.file_ = H5Id(id, H5Fclose);
  return f;
}

H5File H5File::open(const std::string& path) {
  require_regular_file(path);  // HDF5 would read a FIFO or a device as far as it could
  H5File f;
  f.path_ = path;
  hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (id < 0) throw UsageError(cat(path, ": cannot open as HDF5: ", h5_error_stack()));
  f.file_ = H5Id(id, H5Fclose);
  return f;
}

void H5File::close() {
  datasets_.clear();
  if (file_.get() >= 0) ZT_H5_CHECK(H5Fflush(file_.get(), H5F_SCOPE_GLOBAL), path_, ": flush");
  file_.reset();
}

namespace {
// 4 Mi-element chunks: big enough for streaming I/O, small enough that a hyperslab read of a
// partition boundary touches little extra data.
constexpr size_t kChunkElements = size_t(1) << 22;
}  // namespace

H5Id H5File::create_dataset(const std::string& name, size_t count, hid_t type) {
  const hsize_t dims[1] = {hsize_t(count)};
  H5Id space(H5Screate_simple(1, dims, nullptr), H5Sclose);
  ZT_H5_CHECK(space.get(), path_, ": dataspace for ", name);
  H5Id props(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  if (count > 0) {
    const hsize_t chunk[1] = {std::min<hsize_t>(count, kChunkElements)};
    ZT_H5_CHECK(H5Pset_chunk(props.get(), 1, chunk), path_, ": chunking ", name);
    ZT_H5_CHECK(H5Pset_fletcher32(props.get()), path_, ": Fletcher32 on ", name);
  }
  H5Id set(H5Dcreate2(file_.get(), name.c_str(), type, space.get(), H5P_DEFAULT, props.get(), H5P_DEFAULT),
           H5Dclose);
  ZT_H5_CHECK(set.get(), path_, ": create dataset ", name);
  return set;
}

void H5File::write_raw(const std::string& name, const void* data, size_t count, hid_t type) {
  H5Id set = create_dataset(name, count, type);
  if (count > 0) ZT_H5_CHECK(H5Dwrite(set.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), path_, ": write ", name);
}

void H5File::write(const std::string& name, size_t count, const std::function<void(size_t, size_t, float*)>& fill) {
  H5Id set = create_dataset(name, count, H5T_NATIVE_FLOAT);
  std::vector<float> chunk(std::min(count, kChunkElements));
  H5Id file_space(H5Dget_space(set.get()), H5Sclose);
  for (size_t offset = 0; offset < count; offset += chunk.size()) {
    const size_t n = std::min(chunk.size(), count - offset);
    fill(offset, n, chunk.data());
    const hsize_t start[1] = {hsize_t(offset)}, len[1] = {hsize_t(n)};
    ZT_H5_CHECK(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start, nullptr, len, nullptr), path_,
                ": select ", name);
    H5Id mem_space(H5Screate_simple(1, len, nullptr), H5Sclose);
    ZT_H5_CHECK(H5Dwrite(set.get(), H5T_NATIVE_FLOAT, mem_space.get(), file_space.get(), H5P_DEFAULT, chunk.data()),
                path_, ": write ", name);
  }
}

void H5File::write(const std::string& name, const float* data, size_t count) {
  write_raw(name, data, count, H5T_NATIVE_FLOAT);
}
void H5File::write(const std::string& name, const uint16_t* data, size_t count) {
  write_raw(name, data, count, H5T_NATIVE_UINT16);
}
void H5File::write(const std::string& name, const double* data, size_t count) {
  write_raw(name, data, count, H5T_NATIVE_DOUBLE);
}

bool H5File::has(const std::string& name) const {
  return H5Lexists(file_.get(), name.c_str(), H5P_DEFAULT) > 0;
}

size_t H5File::length(const std::string& name) const {
  if (!has(name)) throw UsageError(cat(path_, ": missing dataset '", name, "'"));
  H5Id set(H5Dopen2(file_.get(), name.c_str(), H5P_DEFAULT), H5Dclose);
  ZT_H5_CHECK(set.get(), path_, ": open dataset ", name);
  H5Id space(H5Dget_space(set.get()), H5Sclose);
  hsize_t dims[1] = {0};
  ZT_H5_CHECK(H5Sget_simple_extent_dims(space.get(), dims, nullptr), path_, ": extent of ", name);
  return size_t(dims[0]);
}

const H5Id& H5File::open_dataset(const std::string& name) const {
  auto it = datasets_.find(name);
  if (it != datasets_.end()) return it->second;
  // Every chunk carries a Fletcher32 checksum, so HDF5 reads a chunk whole, checks it and copies
  // the selected part out. With its default 1 MB chunk cache a 16 MB chunk is not kept, and a
  // run of small tensors inside one chunk (biases, layer norms) read and checked that chunk once
  // per tensor: 16 MB for a 4 KB bias. Two chunks' worth of cache (one, plus the one a hyperslab
  // straddles into) makes a front-to-back reader read and check each chunk once (cache_chunks).
  H5Id access(H5Pcreate(H5P_DATASET_ACCESS), H5Pclose);
  ZT_H5_CHECK(access.get(), path_, ": dataset access properties");
  if (cache_chunks_) {
    ZT_H5_CHECK(H5Pset_chunk_cache(access.get(), 521, 2 * kChunkElements * sizeof(float) + (size_t(1) << 20), 1.0),
                path_, ": chunk cache for ", name);
  }
  H5Id set(H5Dopen2(file_.get(), name.c_str(), access.get()), H5Dclose);
  ZT_H5_CHECK(set.get(), path_, ": open dataset ", name);
  return datasets_.emplace(name, std::move(set)).first->second;
}

void H5File::read_raw(const std::string& name, size_t offset, size_t count, void* out, hid_t type) const {
  if (count == 0) return;
  const size_t total = length(name);
  if (offset + count > total) {
    throw UsageError(cat(path_, ": dataset '", name, "' has ", total, " elements, need [", offset, ", ",
                         offset + count, ")"));
  }
  const H5Id& set = open_dataset(name);
  H5Id file_space(H5Dget_space(set.get()), H5Sclose);
  const hsize_t start[1] = {hsize_t(offset)}, n[1] = {hsize_t(count)};
  ZT_H5_CHECK(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start, nullptr, n, nullptr), path_, ": select ",
              name);
  H5Id mem_space(H5Screate_simple(1, n, nullptr), H5Sclose);
  const hid_t transfer = transfer_.get() >= 0 ? transfer_.get() : H5P_DEFAULT;
  if (H5Dread(set.get(), type, mem_space.get(), file_space.get(), transfer, out) < 0) {
    // Most often a Fletcher32 mismatch: the file is corrupt. Bad input, not a bug.
    const std::string why = h5_error_stack();
    if (why.find("fletcher32") != std::string::npos || why.find("Fletcher32") != std::string::npos) {
      throw UsageError(cat(path_, ": checksum mismatch in dataset '", name, "' (corrupt): ", why));
    }
    throw UsageError(cat(path_, ": cannot read dataset '", name, "' (corrupt or truncated): ", why));
  }
}

void H5File::skip_chunk_checksums() {
  H5Id transfer(H5Pcreate(H5P_DATASET_XFER), H5Pclose);
  ZT_H5_CHECK(transfer.get(), path_, ": dataset transfer properties");
  ZT_H5_CHECK(H5Pset_edc_check(transfer.get(), H5Z_DISABLE_EDC), path_, ": skip Fletcher32");
  transfer_ = std::move(transfer);
}

void H5File::read(const std::string& name, size_t offset, size_t count, float* out) const {
  read_raw(name, offset, count, out, H5T_NATIVE_FLOAT);
}
void H5File::read(const std::string& name, size_t offset, size_t count, double* out) const {
  read_raw(name, offset, count, out, H5T_NATIVE_DOUBLE);
}
void H5File::read(const std::string& name, size_t offset, size_t count, uint16_t* out) const {
  read_raw(name, offset, count, out, H5T_NATIVE_UINT16);
}

void H5File::set_attribute(const std::string& name, int64_t value) {
  H5Id space(H5Screate(H5S_SCALAR), H5Sclose);
  H5Id attr(H5Acreate2(file_.get(), name.c_str(), H5T_NATIVE_INT64, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  ZT_H5_CHECK(attr.get(), path_, ": attribute ", name);
  ZT_H5_CHECK(H5Awrite(attr.get(), H5T_NATIVE_INT64, &value), path_, ": attribute ", name);
}

void H5File::set_attribute(const std::string& name, double value) {
  H5Id space(H5Screate(H5S_SCALAR), H5Sclose);
  H5Id attr(H5Acreate2(file_.get(), name.c_str(), H5T_NATIVE_DOUBLE, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  ZT_H5_CHECK(attr.get(), path_, ": attribute ", name);
  ZT_H5_CHECK(H5Awrite(attr.get(), H5T_NATIVE_DOUBLE, &value), path_, ": attribute ", name);
}

void H5File::set_attribute(const std::string& name, const std::string& value) {
  H5Id type(H5Tcopy(H5T_C_S1), H5Tclose);
  ZT_H5_CHECK(H5Tset_size(type.get(), std::max<size_t>(1, value.size())), path_, ": string type");
  H5Id space(H5Screate(H5S_SCALAR), H5Sclose);
  H5Id attr(H5Acreate2(file_.get(), name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  ZT_H5_CHECK(attr.get(), path_, ": attribute ", name);
  std::string padded = value.empty() ? std::string(1, '\0') : value;
  ZT_H5_CHECK(H5Awrite(attr.get(), type.get(), padded.data()), path_, ": attribute ", name);
}

void H5File::read_scalar_attribute(const std::string& name, hid_t type, void* out) const {
  if (H5Aexists(file_.get(), name.c_str()) <= 0) throw UsageError(cat(path_, ": missing attribute '", name, "'"));
  H5Id attr(H5Aopen(file_.get(), name.c_str(), H5P_DEFAULT), H5Aclose);
  ZT_H5_CHECK(H5Aread(attr.get(), type, out), path_, ": attribute ", name);
}

int64_t H5File::int_attribute(const std::string& name) const {
  int64_t value = 0;
  read_scalar_attribute(name, H5T_NATIVE_INT64, &value);
  return value;
}

double H5File::double_attribute(const std::string& name) const {
  double value = 0;
  read_scalar_attribute(name, H5T_NATIVE_DOUBLE, &value);
  return value;
}

std::string H5File::string_attribute(const std::string& name) const {
  if (H5Aexists(file_.get(), name.c_str()) <= 0) throw UsageError(cat(path_, ": missing attribute '", name, "'"));
  H5Id attr(H5Aopen(file_.get(), name.c_str(), H5P_DEFAULT), H5Aclose);
  H5Id type(H5Aget_type(attr.get()), H5Tclose);
  const size_t size = H5Tget_size(type.get());
  std::vector<char> buffer(size + 1, '\0');
  ZT_H5_CHECK(H5Aread(attr.get(), type.get(), buffer.data()), path_, ": attribute ", name);
  return std::string(buffer.data());
}

}  // namespace zt
