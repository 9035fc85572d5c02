#include "train/output_dir.h"

#include <filesystem>

#include "core/error.h"

namespace zt {

void check_output_dir_usable(const std::string& dir, bool overwrite) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return;
  ZT_USAGE_CHECK(fs::is_directory(dir, ec), dir, ": --output_dir exists and is not a directory");
  ZT_USAGE_CHECK(overwrite || fs::is_empty(dir, ec), dir,
                 ": --output_dir exists and is not empty; pass --overwrite_output_dir to write into it");
}

void prepare_output_dir(const std::string& dir, bool overwrite) {
  check_output_dir_usable(dir, overwrite);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  ZT_USAGE_CHECK(!ec, dir, ": cannot create --output_dir: ", ec.message());
}

}  // namespace zt
