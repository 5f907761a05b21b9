// The web UI's static files: the copies embedded in the binary
// (server/web_assets.h), or a folder on disk (--web-dir, for development),
// and the HTTP answer for a GET of one (content type, ETag, 304).
//
// From disk, only regular files inside the web directory are served. The directory is
// resolved once (symlinks followed) and every request's file is resolved the
// same way before it is compared against it, so no spelling of a path
// ("..", "//etc/passwd", "%2e%2e" is not decoded at all, a symlink to /proc)
// leaves it, and devices, FIFOs and directories are never opened. Embedded
// files are found by exact URL path in a fixed table, so nothing else exists.
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

// The answer to GET `url_path`. With a web root, a file there wins and the
// embedded copies fill in the rest (Chart.js is not in web/); without one,
// only embedded files exist. Every answer may be cached but is revalidated
// (Cache-Control: no-cache): a new binary or an edited file shows at the
// next load, and an unchanged one costs a 304. `if_none_match` is the
// request's If-None-Match header ("" when absent).
struct StaticReply {
  int status = 404;  // 200, 304 or 404
  std::string body;  // 200: the file
  std::string content_type;
  std::string etag;  // quoted strong validator ("" with 404)
};
StaticReply static_reply(const std::filesystem::path& web_root, std::string_view url_path,
                         std::string_view if_none_match);

}  // namespace brioche::server
