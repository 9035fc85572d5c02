// The output directory rule HF Trainer users expect: an existing, non-empty output_dir is an
// error unless --overwrite_output_dir; nothing is written before this check.
#pragma once

#include <string>

namespace zt {

/// Throws UsageError if `dir` exists and is not a directory, or holds files and `overwrite` is false.
void check_output_dir_usable(const std::string& dir, bool overwrite);
/// Checks, then creates `dir` if needed.
void prepare_output_dir(const std::string& dir, bool overwrite);

}  // namespace zt
