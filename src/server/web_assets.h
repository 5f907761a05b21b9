// The web UI compiled into the binary: every file under web/ and Chart.js
// (Debian's libjs-chart.js, at /lib/chart.umd.js), embedded at build time by
// cmake/web_assets.cmake, so the page needs no files and no network.
#pragma once

#include <span>
#include <string_view>

namespace brioche::server {

struct EmbeddedAsset {
  std::string_view url_path;  // "/index.html", "/js/app.js"
  std::string_view bytes;
  std::string_view etag;  // quoted: "\"<20 hex digits of the SHA-256>\""
};

// Sorted by url_path (the manifest is); generated at build time.
std::span<const EmbeddedAsset> embedded_web_assets();

}  // namespace brioche::server
