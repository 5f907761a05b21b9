#include "formats/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace brioche::formats {

std::string_view file_type_name(unsigned mode) {
  switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO (named pipe)";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFSOCK: return "a socket";
    case S_IFLNK: return "a symbolic link";
  }
  return "a file of unknown type";
}

RegularFile RegularFile::open(const std::string& path) {
  // stat() first: opening a FIFO for reading blocks until a writer appears,
  // and opening a device can have effects of its own. stat follows symbolic
  // links, so a link to a regular file is accepted.
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) fail(path, ": cannot open: ", std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail(path, ": expected a regular file, found ", file_type_name(st.st_mode));
  // O_NONBLOCK: should the path turn into a FIFO after the stat, the open
  // still returns at once (and the fstat below refuses it).
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail(path, ": cannot open: ", std::strerror(errno));
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    fail(path, ": cannot stat: ", std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, ": expected a regular file, found ", file_type_name(st.st_mode));
  }
  return RegularFile(fd, size_t(st.st_size));
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

RegularFile::RegularFile(RegularFile&& other) noexcept : fd_(other.fd_), size_(other.size_) { other.fd_ = -1; }

std::string read_regular_file(const std::string& path, size_t max_bytes) {
  RegularFile file = RegularFile::open(path);
  if (file.size() > max_bytes) {
    fail(path, ": expected at most ", max_bytes, " bytes, found ", file.size(), " (not a file of this kind?)");
  }
  std::string bytes(file.size(), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::pread(file.fd(), bytes.data() + done, bytes.size() - done, off_t(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(path, ": cannot read at byte ", done, ": ", std::strerror(errno));
    if (n == 0)
      fail(path, ": expected ", bytes.size(), " bytes, found the file ending at byte ", done,
           " (truncated while read)");
    done += size_t(n);
  }
  return bytes;
}

std::optional<std::string> read_regular_file_if_present(const std::string& path, size_t max_bytes) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 && errno == ENOENT) return std::nullopt;
  return read_regular_file(path, max_bytes);
}

}  // namespace brioche::formats
