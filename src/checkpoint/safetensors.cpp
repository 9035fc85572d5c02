#include "checkpoint/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <cstring>
#include <filesystem>
#include <set>

#include "config/json_reader.h"
#include "config/json_section.h"
#include "core/error.h"
#include "core/regular_file.h"

namespace zt {

namespace fs = std::filesystem;

size_t TensorSpec::numel() const {
  size_t n = 1;
  for (int64_t d : shape) n *= size_t(d);
  return n;
}

const char* safetensors_dtype(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
  }
  return "?";
}

SafetensorsWriter::SafetensorsWriter(const std::string& path, std::vector<TensorSpec> tensors)
    : tensors_(std::move(tensors)), file_(path) {
  boost::json::object header;
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    boost::json::array shape(t.shape.begin(), t.shape.end());
    header[t.name] = {{"dtype", safetensors_dtype(t.dtype)}, {"shape", shape},
                      {"data_offsets", boost::json::array{offset, offset + t.bytes()}}};
    offset += t.bytes();
  }
  header["__metadata__"] = {{"format", "pt"}};
  std::string text = boost::json::serialize(header);
  text.resize((text.size() + 7) / 8 * 8, ' ');  // the data starts 8-byte aligned
  uint64_t length = text.size();
  unsigned char le[8];
  for (int i = 0; i < 8; ++i) le[i] = uint8_t(length >> (8 * i));
  file_.write(le, 8);
  file_.write(text);
}

void SafetensorsWriter::write_next(const void* data) {
  ZT_CHECK(next_ < tensors_.size(), file_.path(), ": more tensors than declared");
  file_.write(data, tensors_[next_++].bytes());
}

void SafetensorsWriter::finish(bool durable) {
  ZT_CHECK(next_ == tensors_.size(), file_.path(), ": ", tensors_.size() - next_, " tensors not written");
  file_.close(durable);
}

std::vector<std::string> parse_safetensors_index(std::string_view text, const std::string& source) {
  const boost::json::value json = parse_json_lenient(text, source);
  const boost::json::value* map = json.is_object() ? json.get_object().if_contains("weight_map") : nullptr;
  if (!map || !map->is_object()) {
    throw UsageError(cat(source, ": malformed index: weight_map must be an object of tensor names to file names"));
  }
  std::set<std::string> files;
  for (const auto& [name, file] : map->get_object()) {
    // Names come from the file: one_line keeps a control character in them out of the message.
    if (!file.is_string()) {
      throw UsageError(one_line(cat(source, ": malformed index: weight_map[\"", name, "\"] is ", describe_json(file),
                                    ", not a file name")));
    }
    // HF writes plain file names beside the index. One that is absolute or climbs out through
    // ".." would have a downloaded model read any file of the machine as its weights.
    const std::string f(file.get_string());
    bool inside = !f.empty() && f.find('\0') == std::string::npos && fs::path(f).is_relative();
    for (const fs::path& part : fs::path(f)) inside = inside && part != "..";
    if (!inside) {
      throw UsageError(one_line(cat(source, ": weight_map[\"", name, "\"]: \"", f,
                                    "\" is not a file in the model's folder")));
    }
    files.insert(f);
  }
  if (files.empty()) throw UsageError(cat(source, ": weight_map names no file"));
  return {files.begin(), files.end()};
}

SafetensorsReader::SafetensorsReader(const std::string& path) {
  // A constructor that throws runs no destructor: close what was opened before the error.
  try {
    open(path);
  } catch (...) {
    for (int fd : fds_) ::close(fd);
    throw;
  }
}

void SafetensorsReader::open(const std::string& path) {
  // error_code forms: a symlink loop is then refused by add_file with one line, not thrown here.
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const fs::path index = fs::path(path) / "model.safetensors.index.json";
    if (fs::exists(index, ec) || ec) {  // an index there that cannot be read is refused by name
      for (const std::string& file : parse_safetensors_index(read_json_text(index.string()), index.string())) {
        add_file((fs::path(path) / file).string());
      }
      return;
    }
    add_file((fs::path(path) / "model.safetensors").string());
    return;
  }
  add_file(path);
}

SafetensorsReader::~SafetensorsReader() {
  for (int fd : fds_) ::close(fd);
}

void SafetensorsReader::add_file(const std::string& path) {
  RegularFile file(path);
  const uint64_t file_size = file.size();
  const int fd = file.release();
  const int index = int(fds_.size());
  fds_.push_back(fd);
  paths_.push_back(path);
  unsigned char le[8];
  ZT_USAGE_CHECK(file_size >= 8 && ::pread(fd, le, 8, 0) == 8, path, ": not a safetensors file (too short)");
  uint64_t length = 0;
  for (int i = 0; i < 8; ++i) length |= uint64_t(le[i]) << (8 * i);
  ZT_USAGE_CHECK(length <= file_size - 8 && length < (uint64_t(1) << 30), path, ": header length ", length,
                 " does not fit the file");
  std::string text(length, '\0');
  ZT_USAGE_CHECK(::pread(fd, text.data(), length, 8) == ssize_t(length), path, ": cannot read the header");
  const boost::json::value header = parse_json_lenient(text, path);
  const uint64_t data_start = 8 + length;
  try {
    for (const auto& [name, value] : header.as_object()) {
      if (name == "__metadata__") continue;
      Entry e;
      e.spec.name = std::string(name);
      const std::string dtype(value.at("dtype").as_string());
      if (dtype == "F32") e.spec.dtype = DType::kF32;
      else if (dtype == "BF16") e.spec.dtype = DType::kBF16;
      else if (dtype == "F16") e.spec.dtype = DType::kF16;
      else throw UsageError(one_line(cat(path, ": tensor ", name, " has dtype ", dtype,
                                         " (F32, BF16 or F16 are supported)")));
      // The shape's bytes, checked as they are multiplied: a negative or huge dimension must not
      // wrap around to a size that happens to match the data range.
      uint64_t bytes = dtype_size(e.spec.dtype);
      for (const auto& d : value.at("shape").as_array()) {
        const int64_t n = d.to_number<int64_t>();
        if (n < 0 || __builtin_mul_overflow(bytes, uint64_t(n), &bytes)) {
          throw UsageError(one_line(cat(path, ": tensor ", name, ": dimension ", n,
                                        " of its shape is negative or makes it larger than 2^64 bytes")));
        }
        e.spec.shape.push_back(n);
      }
      const auto& offsets = value.at("data_offsets").as_array();
      const uint64_t begin = offsets.at(0).to_number<uint64_t>(), end = offsets.at(1).to_number<uint64_t>();
      // data_start <= file_size (the length check above); comparing with the rest of the file
      // cannot overflow where data_start + end could.
      if (!(end >= begin && end - begin == bytes && end <= file_size - data_start)) {
        throw UsageError(one_line(cat(path, ": tensor ", name, ": data_offsets [", begin, ", ", end,
                                      ") do not match its shape or the file")));
      }
      e.file = index;
      e.begin = data_start + begin;
      tensors_[e.spec.name] = std::move(e);
    }
  } catch (const UsageError&) {
    throw;
  } catch (const std::exception& ex) {
    throw UsageError(one_line(cat(path, ": malformed safetensors header: ", ex.what())));
  }
}

const TensorSpec& SafetensorsReader::spec(const std::string& name) const {
  auto it = tensors_.find(name);
  ZT_USAGE_CHECK(it != tensors_.end(), paths_.empty() ? std::string("safetensors") : paths_[0], ": no tensor '", name, "'");
  return it->second.spec;
}

void SafetensorsReader::read(const std::string& name, size_t offset, size_t count, float* out) const {
  const Entry& e = tensors_.at(name);
  ZT_CHECK(offset + count <= e.spec.numel(), name, ": read past the tensor");
  const size_t elem = dtype_size(e.spec.dtype);
  std::vector<unsigned char> raw(e.spec.dtype == DType::kF32 ? 0 : count * elem);
  void* target = e.spec.dtype == DType::kF32 ? static_cast<void*>(out) : raw.data();
  size_t done = 0, bytes = count * elem;
  while (done < bytes) {
    ssize_t n = ::pread(fds_[size_t(e.file)], static_cast<char*>(target) + done, bytes - done,
                        off_t(e.begin + offset * elem + done));
    ZT_USAGE_CHECK(n > 0, paths_[size_t(e.file)], ": cannot read tensor ", name, ": ", n < 0 ? std::strerror(errno) : "truncated");
    done += size_t(n);
  }
  if (e.spec.dtype != DType::kF32) convert(raw.data(), e.spec.dtype, out, DType::kF32, count);
}

std::vector<std::string> SafetensorsReader::names() const {
  std::vector<std::string> out;
  for (const auto& [name, e] : tensors_) out.push_back(name);
  return out;
}

}  // namespace zt
