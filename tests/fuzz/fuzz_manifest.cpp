// Fuzz harness: the checkpoint manifest reader (parse_manifest, checkpoint/manifest.h) on any
// bytes. Built twice from this file: with fuzz_driver.cpp as a ctest test (seeded mutations of
// corpus/manifest/), and with ZT_FUZZ=ON as a libFuzzer target.
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "checkpoint/manifest.h"
#include "fuzz_check.h"

namespace {

constexpr const char* kSource = "fuzz/manifest.json";

void check(std::string_view text) {
  zt::fuzz::check_reader(kSource, [&] {
    const zt::Manifest m = zt::parse_manifest(text, kSource);
    // What an accepted manifest guarantees the loader (docs/formats.md): a mutation that gets
    // past the reader with any of these broken is a finding.
    if (m.world_size < 1 || m.stage < 0 || m.stage > 3 || m.position.step < 0) zt::fuzz::finding("bad counts accepted");
    if (m.partitions.size() != size_t(m.world_size) || m.files.size() != size_t(m.world_size) + 1) {
      zt::fuzz::finding("partitions or files do not match world_size");
    }
    size_t next = 0;
    for (const auto& [begin, end] : m.partitions) {
      if (begin != next || begin > end) zt::fuzz::finding("partitions accepted that do not tile the flat buffer");
      next = end;
    }
    if (next != m.flat_size) zt::fuzz::finding("partitions accepted that do not end at flat_size");
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  check(text);
  const zt::fuzz::Outcome outcome = zt::fuzz::last_outcome;  // what the driver counts: the input as given
  // Most mutations of a signed manifest stop at its checksum. Check each once more re-signed (the
  // CRC-32 of the bytes before the member, docs/formats.md), so they reach the checks behind it.
  const std::string_view member = ",\"manifest_crc32\":";
  const size_t at = text.rfind(member);
  if (at != std::string_view::npos) {
    const std::string body(text.substr(0, at));
    const uLong crc = crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(body.data()), uInt(body.size()));
    check(body + std::string(member) + std::to_string(crc) + "}");
  }
  zt::fuzz::last_outcome = outcome;
  return 0;
}
