#include "formats/file_write.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace brioche::formats {

void write_file_atomically(const std::string& path, const std::vector<uint8_t>& bytes) {
  const std::string part = path + ".part";
  {
    std::ofstream file(part, std::ios::binary | std::ios::trunc);
    if (!file) fail(path, ": cannot open ", part, " for writing");
    file.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    file.close();
    if (!file) {
      std::remove(part.c_str());
      fail(path, ": write of ", bytes.size(), " bytes failed");
    }
  }
  std::error_code error;
  std::filesystem::rename(part, path, error);
  if (error) {
    std::remove(part.c_str());
    fail(path, ": cannot replace with ", part, ": ", error.message());
  }
}

}  // namespace brioche::formats
