#include "formats/file_write.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace brioche::formats {

void write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& write_body) {
  const std::string part = path + ".part";
  {
    std::ofstream file(part, std::ios::binary | std::ios::trunc);
    if (!file) fail(path, ": cannot open ", part, " for writing");
    try {
      write_body(file);
    } catch (...) {
      file.close();
      std::remove(part.c_str());
      throw;
    }
    file.close();
    if (!file) {
      std::remove(part.c_str());
      fail(path, ": writing ", part, " failed (disk full or an I/O error); nothing was replaced");
    }
  }
  std::error_code error;
  std::filesystem::rename(part, path, error);
  if (error) {
    std::remove(part.c_str());
    fail(path, ": cannot replace with ", part, ": ", error.message());
  }
}

std::vector<uint8_t> streamed_bytes(const std::function<void(std::ostream&)>& write_body) {
  std::ostringstream out;
  write_body(out);
  const std::string bytes = std::move(out).str();
  return {bytes.begin(), bytes.end()};
}

}  // namespace brioche::formats
