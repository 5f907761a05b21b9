#include "server/static_files.h"

#include <algorithm>
#include <system_error>

#include "core/error.h"

namespace brioche::server {
namespace fs = std::filesystem;

namespace {

std::string content_type_for(const fs::path& file) {
  std::string ext = file.extension().string();
  if (ext == ".html") return "text/html; charset=utf-8";
  if (ext == ".js") return "text/javascript";
  if (ext == ".css") return "text/css";
  if (ext == ".json") return "application/json";
  if (ext == ".svg") return "image/svg+xml";
  if (ext == ".png") return "image/png";
  return "application/octet-stream";
}

// Whether `inside` is `root` or lies under it (both resolved).
bool is_within(const fs::path& root, const fs::path& inside) {
  auto [r, i] = std::mismatch(root.begin(), root.end(), inside.begin(), inside.end());
  return r == root.end();
}

}  // namespace

fs::path resolve_web_root(const std::string& web_dir) {
  std::error_code ec;
  fs::path root = fs::canonical(web_dir, ec);
  if (ec) fail("--web-dir ", web_dir, ": ", ec.message());
  if (!fs::is_directory(root, ec)) fail("--web-dir ", web_dir, ": expected a directory");
  return root;
}

std::optional<StaticFile> find_static_file(const fs::path& web_root, std::string_view url_path) {
  if (url_path.empty() || url_path[0] != '/') return std::nullopt;
  std::string_view rel = url_path.substr(1);
  if (rel.empty()) rel = "index.html";
  // A relative path only: "//x" would otherwise replace the root with "/x".
  if (rel[0] == '/' || rel.find('\0') != std::string_view::npos) return std::nullopt;
  std::error_code ec;
  fs::path file = fs::weakly_canonical(web_root / fs::path(rel), ec);
  if (ec || !is_within(web_root, file)) return std::nullopt;
  fs::file_status status = fs::status(file, ec);
  if (ec || !fs::is_regular_file(status)) return std::nullopt;
  uintmax_t size = fs::file_size(file, ec);
  if (ec || size > kMaxStaticFileBytes) return std::nullopt;
  return StaticFile{.path = file, .size = size, .content_type = content_type_for(file)};
}

}  // namespace brioche::server
