// The output directory rule HF Trainer users expect: an existing, non-empty output_dir is an
// error unless --overwrite_output_dir; nothing is written before this check.
#pragma once

#include <string>

namespace zt {

/// Creates `dir` if needed; throws UsageError if it holds files and `overwrite` is false.
void prepare_output_dir(const std::string& dir, bool overwrite);

}  // namespace zt
