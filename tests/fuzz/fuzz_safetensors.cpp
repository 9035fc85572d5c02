// Fuzz harness: a .safetensors file's header (SafetensorsReader, checkpoint/safetensors.h: the
// 8-byte little-endian length, the JSON header, the data ranges) on any bytes, written to a
// scratch file and opened as a model's file is; then every tensor it accepted is read whole.
// Built twice from this file: with fuzz_driver.cpp as a ctest test (seeded mutations of
// corpus/safetensors/), and with ZT_FUZZ=ON as a libFuzzer target.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/safetensors.h"
#include "config/json_reader.h"
#include "fuzz_check.h"
#include "fuzz_temp_file.h"

namespace {

uint64_t header_length(std::string_view file) {
  uint64_t length = 0;
  for (int i = 0; i < 8; ++i) length |= uint64_t(static_cast<unsigned char>(file[size_t(i)])) << (8 * i);
  return length;
}

void check(std::string_view file) {
  static zt::fuzz::TempFile temp("model.safetensors");
  const std::string& path = temp.write(file);
  zt::fuzz::check_reader(path, [&] {
    const zt::SafetensorsReader reader(path);
    // What an accepted file guarantees the loader: each tensor's shape is non-negative, its
    // bytes (the product, without overflow) lie in the data after the header, and reading it
    // whole succeeds.
    const uint64_t data_bytes = file.size() - 8 - header_length(file);
    const boost::json::object header =
        zt::parse_json_lenient(file.substr(8, header_length(file)), path).as_object();
    for (const std::string& name : reader.names()) {
      const zt::TensorSpec& spec = reader.spec(name);
      // The range as the file gives it, read here on its own: it must end inside the data (an
      // offset that wraps around 2^64 would read the header as weights).
      if (header.at(name).at("data_offsets").at(1).to_number<uint64_t>() > data_bytes) {
        zt::fuzz::finding("data_offsets accepted past the file's end: " + name);
      }
      bool empty = false;
      for (int64_t d : spec.shape) {
        if (d < 0) zt::fuzz::finding("a negative dimension accepted: " + name);
        empty = empty || d == 0;
      }
      // Without a zero the product only grows: stop at the first partial product past the data.
      unsigned __int128 bytes = zt::dtype_size(spec.dtype);
      for (size_t i = 0; i < spec.shape.size() && !empty; ++i) {
        bytes *= uint64_t(spec.shape[i]);
        if (bytes > data_bytes) zt::fuzz::finding("a tensor accepted that is larger than the file's data: " + name);
      }
      std::vector<float> values(spec.numel());
      try {
        reader.read(name, 0, values.size(), values.data());
      } catch (const zt::UsageError& e) {
        zt::fuzz::finding(std::string("an accepted tensor cannot be read: ") + e.what());
      }
    }
  });
}

// The length that makes the header end where its JSON object ends: a mutation that changed the
// header's size is otherwise refused at the length, before the checks behind it.
std::string with_header_length_fixed(std::string_view file) {
  size_t at = 8;
  while (at < file.size() && (file[at] == ' ' || file[at] == '\n' || file[at] == '\t' || file[at] == '\r')) ++at;
  if (at >= file.size() || file[at] != '{') return {};
  int depth = 0;
  bool in_string = false;
  for (; at < file.size(); ++at) {
    const char c = file[at];
    if (in_string) {
      if (c == '\\') ++at;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if ((c == '}' || c == ']') && --depth == 0) {
      break;
    }
  }
  if (at >= file.size()) return {};
  std::string fixed(file);
  const uint64_t length = at + 1 - 8;
  for (int i = 0; i < 8; ++i) fixed[size_t(i)] = char(length >> (8 * i));
  return fixed;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view file(reinterpret_cast<const char*>(data), size);
  check(file);
  // What the driver counts is the input as given.
  const zt::fuzz::Outcome outcome = zt::fuzz::last_outcome;
  const std::string message = zt::fuzz::last_message;
  if (size >= 8) {
    const std::string fixed = with_header_length_fixed(file);
    if (!fixed.empty() && fixed != file) check(fixed);
  }
  zt::fuzz::last_outcome = outcome;
  zt::fuzz::last_message = message;
  return 0;
}
