#include "server/static_files.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <system_error>

#include "core/error.h"
#include "server/web_assets.h"

namespace brioche::server {
namespace fs = std::filesystem;

namespace {

std::string content_type_for(const fs::path& file) {
  std::string ext = file.extension().string();
  if (ext == ".html") return "text/html; charset=utf-8";
  if (ext == ".js" || ext == ".mjs") return "text/javascript";
  if (ext == ".css") return "text/css";
  if (ext == ".json") return "application/json";
  if (ext == ".svg") return "image/svg+xml";
  if (ext == ".png") return "image/png";
  if (ext == ".ico") return "image/x-icon";
  if (ext == ".txt" || ext == ".md") return "text/plain; charset=utf-8";
  return "application/octet-stream";
}

// If-None-Match is "*" or a list of entity tags; it matches by the weak
// comparison (RFC 9110 13.1.2: a W/ prefix is ignored).
bool none_match_hits(std::string_view header, std::string_view etag) {
  auto trim = [](std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
  };
  while (!header.empty()) {
    const size_t comma = header.find(',');
    std::string_view tag = trim(header.substr(0, comma));
    header = comma == std::string_view::npos ? std::string_view{} : header.substr(comma + 1);
    if (tag == "*") return true;
    if (tag.substr(0, 2) == "W/") tag.remove_prefix(2);
    if (!tag.empty() && tag == etag) return true;
  }
  return false;
}

const EmbeddedAsset* find_embedded(std::string_view url_path) {
  if (url_path == "/") url_path = "/index.html";
  for (const EmbeddedAsset& asset : embedded_web_assets())
    if (asset.url_path == url_path) return &asset;
  return nullptr;
}

// A file on disk changes its validator when its size or modification time does.
std::string disk_etag(const fs::path& file, uintmax_t size) {
  std::error_code ec;
  const auto mtime = fs::last_write_time(file, ec);
  const long long ns =
      ec ? 0 : (long long)std::chrono::duration_cast<std::chrono::nanoseconds>(mtime.time_since_epoch()).count();
  char tag[64];
  std::snprintf(tag, sizeof tag, "\"d%llx-%llx\"", (unsigned long long)size, (unsigned long long)ns);
  return tag;
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

StaticReply static_reply(const fs::path& web_root, std::string_view url_path, std::string_view if_none_match) {
  StaticReply reply;
  if (!web_root.empty()) {
    if (std::optional<StaticFile> file = find_static_file(web_root, url_path)) {
      std::ifstream in(file->path, std::ios::binary);
      std::string body(size_t(file->size), '\0');
      if (in.read(body.data(), std::streamsize(body.size()))) {
        reply.content_type = file->content_type;
        reply.etag = disk_etag(file->path, file->size);
        reply.status = none_match_hits(if_none_match, reply.etag) ? 304 : 200;
        if (reply.status == 200) reply.body = std::move(body);
        return reply;
      }
    }
  }
  const EmbeddedAsset* asset = find_embedded(url_path);
  if (!asset) return reply;
  reply.content_type = content_type_for(fs::path(asset->url_path));
  reply.etag = std::string(asset->etag);
  reply.status = none_match_hits(if_none_match, reply.etag) ? 304 : 200;
  if (reply.status == 200) reply.body = std::string(asset->bytes);
  return reply;
}

}  // namespace brioche::server
