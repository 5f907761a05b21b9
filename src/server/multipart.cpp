#include "server/multipart.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"

namespace brioche::server {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// RFC 2046 bchars: DIGIT / ALPHA / "'()+_,-./:=? " (space not last).
bool is_bchar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) ||
         std::string_view("'()+_,-./:=? ").find(c) != std::string_view::npos;
}

// Parameters of a header value: `type; key=value; key="quoted \" value"`.
// Returns the value before the first ';' and fills params (keys lower-cased).
std::string_view parse_parameters(std::string_view value, std::vector<std::pair<std::string, std::string>>& params,
                                  std::string_view header) {
  size_t semi = value.find(';');
  std::string_view head = trim(value.substr(0, semi));
  size_t i = semi;
  while (i != std::string_view::npos && i < value.size()) {
    ++i;  // past ';'
    while (i < value.size() && (value[i] == ' ' || value[i] == '\t')) ++i;
    if (i >= value.size()) break;
    const size_t eq = value.find('=', i);
    const size_t next_semi = value.find(';', i);
    if (eq == std::string_view::npos || (next_semi != std::string_view::npos && next_semi < eq)) {
      // A parameter without a value: skip it.
      i = next_semi;
      continue;
    }
    std::string key = lower(trim(value.substr(i, eq - i)));
    i = eq + 1;
    std::string v;
    if (i < value.size() && value[i] == '"') {
      ++i;
      bool closed = false;
      while (i < value.size()) {
        char c = value[i++];
        if (c == '\\' && i < value.size()) {
          v.push_back(value[i++]);
        } else if (c == '"') {
          closed = true;
          break;
        } else {
          v.push_back(c);
        }
      }
      if (!closed) fail(header, ": parameter '", key, "' has an unterminated quoted string");
      i = value.find(';', i);
    } else {
      const size_t end = value.find(';', i);
      v = std::string(trim(value.substr(i, end == std::string_view::npos ? std::string_view::npos : end - i)));
      i = end;
    }
    params.emplace_back(std::move(key), std::move(v));
  }
  return head;
}

const std::string* param(const std::vector<std::pair<std::string, std::string>>& params, std::string_view key) {
  for (const auto& [k, v] : params)
    if (k == key) return &v;
  return nullptr;
}

MultipartPart parse_part_headers(std::string_view headers, size_t index) {
  MultipartPart part;
  bool disposition = false;
  size_t pos = 0;
  while (pos < headers.size()) {
    size_t end = headers.find("\r\n", pos);
    if (end == std::string_view::npos) end = headers.size();
    std::string_view line = headers.substr(pos, end - pos);
    pos = end + 2;
    if (line.empty()) continue;
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0)
      fail("multipart part ", index, ": expected a 'Name: value' header line, found '", std::string(line.substr(0, 80)),
           "'");
    const std::string name = lower(trim(line.substr(0, colon)));
    const std::string_view value = trim(line.substr(colon + 1));
    if (name == "content-disposition") {
      std::vector<std::pair<std::string, std::string>> params;
      const std::string type = lower(parse_parameters(value, params, "Content-Disposition"));
      if (type != "form-data")
        fail("multipart part ", index, ": expected Content-Disposition 'form-data', found '", type, "'");
      const std::string* n = param(params, "name");
      if (!n) fail("multipart part ", index, ": Content-Disposition has no name parameter");
      part.name = *n;
      if (const std::string* f = param(params, "filename")) part.filename = *f;
      disposition = true;
    } else if (name == "content-type") {
      part.content_type = std::string(value);
    }
  }
  if (!disposition) fail("multipart part ", index, ": no Content-Disposition header");
  return part;
}

}  // namespace

std::string multipart_boundary(std::string_view content_type) {
  std::vector<std::pair<std::string, std::string>> params;
  const std::string type = lower(parse_parameters(content_type, params, "Content-Type"));
  if (type != "multipart/form-data")
    fail("expected Content-Type multipart/form-data, found '", type.empty() ? std::string("(none)") : type, "'");
  const std::string* boundary = param(params, "boundary");
  if (!boundary) fail("Content-Type multipart/form-data has no boundary parameter");
  if (boundary->empty() || boundary->size() > 70)
    fail("multipart boundary: expected 1 to 70 characters, found ", boundary->size());
  if (!std::all_of(boundary->begin(), boundary->end(), is_bchar) || boundary->back() == ' ')
    fail("multipart boundary '", *boundary, "': only letters, digits and '()+_,-./:=? are allowed (RFC 2046)");
  return *boundary;
}

std::vector<MultipartPart> parse_multipart(std::string_view body, std::string_view boundary,
                                           const MultipartLimits& limits) {
  BRIOCHE_CHECK(!boundary.empty(), "multipart: empty boundary");
  const std::string dash = "--" + std::string(boundary);
  const std::string delimiter = "\r\n" + dash;
  // The first delimiter opens the body, or ends a preamble (ignored).
  size_t pos;
  if (body.substr(0, dash.size()) == dash) {
    pos = dash.size();
  } else {
    const size_t at = body.find(delimiter);
    if (at == std::string_view::npos) fail("multipart body: no '", dash, "' delimiter (is the boundary right?)");
    pos = at + delimiter.size();
  }
  std::vector<MultipartPart> parts;
  while (true) {
    // After a delimiter: "--" closes the body; else transport padding and CRLF.
    if (body.substr(pos, 2) == "--") return parts;  // an epilogue after the close is ignored
    while (pos < body.size() && (body[pos] == ' ' || body[pos] == '\t')) ++pos;
    if (body.substr(pos, 2) != "\r\n") {
      if (pos >= body.size()) fail("multipart body ends after a delimiter, before its closing '", dash, "--'");
      fail("multipart body: expected CRLF after the delimiter at byte ", pos);
    }
    pos += 2;
    if (parts.size() == limits.max_parts) fail("multipart body: more than ", limits.max_parts, " parts");
    const size_t headers_end = body.find("\r\n\r\n", pos);
    // A part with no headers at all starts with the blank line directly.
    const bool no_headers = body.substr(pos, 2) == "\r\n";
    if (!no_headers && (headers_end == std::string_view::npos || headers_end - pos > limits.max_header_bytes)) {
      if (headers_end == std::string_view::npos && body.size() - pos <= limits.max_header_bytes)
        fail("multipart part ", parts.size(), ": its headers never end (no blank line): the body is truncated");
      fail("multipart part ", parts.size(), ": headers longer than ", limits.max_header_bytes, " bytes");
    }
    if (no_headers) fail("multipart part ", parts.size(), ": no Content-Disposition header");
    MultipartPart part = parse_part_headers(body.substr(pos, headers_end - pos), parts.size());
    pos = headers_end + 4;
    const size_t end = body.find(delimiter, pos);
    if (end == std::string_view::npos)
      fail("multipart part ", parts.size(), " ('", part.name, "'): no closing delimiter: the body is truncated");
    part.body = body.substr(pos, end - pos);
    parts.push_back(std::move(part));
    pos = end + delimiter.size();
  }
}

const MultipartPart* find_part(const std::vector<MultipartPart>& parts, std::string_view name) {
  for (const MultipartPart& p : parts)
    if (p.name == name) return &p;
  return nullptr;
}

}  // namespace brioche::server
