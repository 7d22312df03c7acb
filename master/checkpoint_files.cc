#include "master/checkpoint_files.h"

#include <filesystem>
#include <system_error>

namespace hippo::master {

std::string checkpoint_file_name(const std::string& incarnation, int64_t state) {
  return "state-" + incarnation + "-" + std::to_string(state) + ".ckpt";
}

bool named_by(const std::string& incarnation, const std::string& file) {
  return file.rfind("state-" + incarnation + "-", 0) == 0;
}

void remove_checkpoint_file(const std::string& dir, const std::string& file) {
  if (file.empty()) return;
  std::error_code ec;  // already gone is fine
  std::filesystem::remove(std::filesystem::path(dir) / file, ec);
}

}  // namespace hippo::master
