// Fuzz harness: zero_prepare_data's JSONL reader (for_each_document, data/text_documents.h) on any
// bytes, written to a scratch .jsonl file. Built twice from this file: with fuzz_driver.cpp as a
// ctest test (seeded mutations of corpus/jsonl/), and with ZT_FUZZ=ON as a libFuzzer target.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "data/text_documents.h"
#include "fuzz_check.h"
#include "fuzz_temp_file.h"
#include "tokenizer/utf8.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  static zt::fuzz::TempFile temp("docs.jsonl");
  const std::string& path = temp.write(bytes);
  zt::fuzz::check_reader(path, [&] {
    const zt::InputFormat format = zt::input_format_of(path, "auto");
    if (format != zt::InputFormat::kJsonl) zt::fuzz::finding("a .jsonl file not read as JSONL");
    // An accepted file gives one document per line that is not blank, each well-formed UTF-8
    // (the tokenizer replaces nothing in it).
    size_t documents = 0;
    zt::for_each_document(path, format, "text", [&](std::string_view text) {
      ++documents;
      if (zt::replace_invalid_utf8(text) != text) zt::fuzz::finding("a document accepted that is not UTF-8");
    });
    size_t lines = 0;
    for (size_t begin = 0; begin < bytes.size();) {
      size_t end = bytes.find('\n', begin);
      if (end == std::string_view::npos) end = bytes.size();
      const std::string_view line = bytes.substr(begin, end - begin);
      if (line.find_first_not_of(" \t\r\n\f\v") != std::string_view::npos) ++lines;
      begin = end + 1;
    }
    if (documents != lines) zt::fuzz::finding("documents accepted that are not one per line");
  });
  return 0;
}
