// Opening the files a model is read from: only regular files, only as many
// bytes as they hold.
//
// A path a user or a model directory names can be a FIFO (open() for reading
// blocks until a writer comes: `brioche run -m fifo` hung forever), a device
// (/dev/zero never ends; opening some devices has side effects), or a
// directory where a file belongs. Every reader in formats/ and model/ opens
// through here, so that each of those is refused with one line before the
// file is opened, and every read is bounded by the size stat() reported.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace brioche::formats {

// "a FIFO (named pipe)", "a directory", "a character device", ... for messages.
std::string_view file_type_name(unsigned mode);

// A regular file open for reading; the descriptor closes with the object.
class RegularFile {
 public:
  // Refuses (brioche::Error "<path>: expected a regular file, found a FIFO
  // (named pipe)") anything but a regular file, checked with stat() before
  // the open and again on the descriptor (the path may change in between).
  // The open never blocks.
  static RegularFile open(const std::string& path);
  ~RegularFile();
  RegularFile(RegularFile&& other) noexcept;
  RegularFile& operator=(RegularFile&&) = delete;
  RegularFile(const RegularFile&) = delete;

  int fd() const { return fd_; }
  size_t size() const { return size_; }

 private:
  RegularFile(int fd, size_t size) : fd_(fd), size_(size) {}
  int fd_ = -1;
  size_t size_ = 0;
};

// The whole file as bytes. Refuses non-regular files (as RegularFile::open)
// and files above `max_bytes` ("<path>: expected at most N bytes, found M"),
// and a file that ends before the size stat() gave.
std::string read_regular_file(const std::string& path, size_t max_bytes);
// The same, or nothing when `path` does not exist (optional companions such as
// tokenizer_config.json). Anything else that exists but cannot be read is an error.
std::optional<std::string> read_regular_file_if_present(const std::string& path, size_t max_bytes);

// Caps on the text files next to a model's weights: a hundred times the
// largest real one seen (config.json of an MLX model with per-layer
// quantization ~200 KB; DeepSeek-V3's weight index ~9 MB; Gemma 3's
// tokenizer.json ~33 MB), so that a hostile 40 GB "config.json" is refused
// before it is read into memory.
inline constexpr size_t kMaxConfigJsonBytes = 64u << 20;
inline constexpr size_t kMaxIndexJsonBytes = 256u << 20;
inline constexpr size_t kMaxTokenizerJsonBytes = 512u << 20;

}  // namespace brioche::formats
