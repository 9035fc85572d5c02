// The prompts of a generation run (zero_generate --prompts FILE): a text file holds one prompt a
// line; a JSONL file (*.jsonl, *.json, as zero_prepare_data tells them apart) one JSON object a
// line with the prompt's "text" or its "input_ids". Lines holding only whitespace are skipped in
// both. A line that is not such a record is a UsageError naming FILE:LINE.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/text_documents.h"

namespace zt {

struct Prompt {
  size_t index = 0;  ///< 0-based, in file order: the output's "index"
  size_t line = 0;   ///< 1-based line of the file, for errors
  std::string text;  ///< the text to encode, where input_ids is empty
  std::vector<int32_t> input_ids;
};

/// Every prompt of the file, in order; a file without one is a UsageError naming it.
std::vector<Prompt> read_prompts(const std::string& path, InputFormat format);

}  // namespace zt
