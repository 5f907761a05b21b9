#include "server/http_framing.h"

namespace brioche::server {

namespace http = boost::beast::http;

std::optional<std::string> framing_problem(const http::request<http::string_body>& request) {
  auto te = request.find(http::field::transfer_encoding);
  if (te == request.end()) return std::nullopt;
  if (request.count(http::field::transfer_encoding) > 1 || !boost::beast::iequals(te->value(), "chunked"))
    return "unsupported Transfer-Encoding '" + std::string(te->value()) + "': only 'chunked' is accepted";
  if (request.count(http::field::content_length) > 0)
    return std::string("a request may not carry both Transfer-Encoding and Content-Length");
  return std::nullopt;
}

}  // namespace brioche::server
