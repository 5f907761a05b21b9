// multipart/form-data bodies (RFC 7578 over RFC 2046 §5.1): what
// POST /v1/files receives from the openai client, curl -F and browsers.
//
//   std::string boundary = multipart_boundary(content_type_header);
//   for (const MultipartPart& part : parse_multipart(body, boundary, {})) ...
//
// Hostile input is expected: the boundary is checked against RFC 2046's
// alphabet and length, every part needs its headers and a form-data name,
// header blocks and the number of parts are bounded, and a body that ends
// before its closing delimiter is an error, never a guess. Errors are
// brioche::Error saying what was expected and what was found.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace brioche::server {

struct MultipartPart {
  std::string name;                     // Content-Disposition: form-data; name="..."
  std::optional<std::string> filename;  // ...; filename="..." (as sent: may hold a path, callers check)
  std::string content_type;             // "" when the part has none
  std::string_view body;                // into the parsed body
};

struct MultipartLimits {
  size_t max_parts = 16;
  size_t max_header_bytes = 8192;  // one part's header block
};

// The boundary parameter of a Content-Type header; throws unless the type is
// multipart/form-data with a valid boundary (1 to 70 characters of RFC 2046's bchars).
std::string multipart_boundary(std::string_view content_type);

// The parts of `body`; throws on a malformed body.
std::vector<MultipartPart> parse_multipart(std::string_view body, std::string_view boundary,
                                           const MultipartLimits& limits);

// The first part named `name`, or null.
const MultipartPart* find_part(const std::vector<MultipartPart>& parts, std::string_view name);

}  // namespace brioche::server
