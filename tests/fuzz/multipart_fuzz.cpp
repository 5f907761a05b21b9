// libFuzzer target: multipart/form-data uploads (POST /v1/files) as the
// server reads them. Input: a Content-Type header line, then the body. Any
// input must parse or throw brioche::Error; a parsed body's parts lie inside
// it, within the part limit, each with a name.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/error.h"
#include "server/multipart.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t newline = input.find('\n');
  const std::string_view content_type = input.substr(0, newline);
  const std::string_view body = newline == std::string_view::npos ? std::string_view() : input.substr(newline + 1);
  const brioche::server::MultipartLimits limits{.max_parts = 8, .max_header_bytes = 512};
  try {
    const std::string boundary = brioche::server::multipart_boundary(content_type);
    if (boundary.empty() || boundary.size() > 70) std::abort();
    for (const brioche::server::MultipartPart& part : brioche::server::parse_multipart(body, boundary, limits)) {
      if (part.body.data() < body.data() || part.body.data() + part.body.size() > body.data() + body.size())
        std::abort();
    }
    if (brioche::server::parse_multipart(body, boundary, limits).size() > limits.max_parts) std::abort();
  } catch (const brioche::Error&) {
  }
  return 0;
}
