// Read-only view of a whole file through mmap, shared by every tensor view
// taken from it (the mapping lives until the last view is gone).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace brioche::formats {

class MappedFile {
 public:
  // Maps `path` privately (copy-on-write, so a stray write through a view never
  // reaches the file). Throws brioche::Error naming the file and the errno text.
  static std::shared_ptr<MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  MappedFile() = default;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace brioche::formats
