// The web UI's static files (--web-dir): which URL path may be served as
// which file.
//
// Only regular files inside the web directory are served. The directory is
// resolved once (symlinks followed) and every request's file is resolved the
// same way before it is compared against it, so no spelling of a path
// ("..", "//etc/passwd", "%2e%2e" is not decoded at all, a symlink to /proc)
// leaves it, and devices, FIFOs and directories are never opened.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace brioche::server {

inline constexpr uintmax_t kMaxStaticFileBytes = 64u << 20;

struct StaticFile {
  std::filesystem::path path;  // resolved, inside the web root
  uintmax_t size = 0;
  std::string content_type;
};

// The resolved web root; throws brioche::Error when `web_dir` is not a directory.
std::filesystem::path resolve_web_root(const std::string& web_dir);

// The file that URL path `url_path` ("/", "/app.js") names under `web_root`
// (as resolve_web_root returned it), or nothing: outside the root, missing,
// not a regular file, or larger than kMaxStaticFileBytes.
std::optional<StaticFile> find_static_file(const std::filesystem::path& web_root, std::string_view url_path);

}  // namespace brioche::server
