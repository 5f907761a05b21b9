#include "formats/mapped_file.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "formats/regular_file.h"

namespace brioche::formats {

std::shared_ptr<MappedFile> MappedFile::open(const std::string& path) {
  // Refuses FIFOs, devices and directories before opening (regular_file.h):
  // the mapping's size is then the file's, and every parser bounds its reads by it.
  RegularFile fd = RegularFile::open(path);
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->size_ = fd.size();
  if (file->size_ > 0) {
    void* p = ::mmap(nullptr, file->size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd.fd(), 0);
    if (p == MAP_FAILED) fail(path, ": cannot mmap ", file->size_, " bytes: ", std::strerror(errno));
    file->data_ = static_cast<uint8_t*>(p);
  }
  return file;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

}  // namespace brioche::formats
