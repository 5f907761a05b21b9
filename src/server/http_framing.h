// How a request's body is delimited, and when that is ambiguous.
#pragma once

#include <optional>
#include <string>

#include <boost/beast/http.hpp>

namespace brioche::server {

// RFC 9112 §6.1, §6.3: a request is framed by Content-Length, or by a
// Transfer-Encoding whose only coding is chunked. Any other
// Transfer-Encoding, several of them, or one beside a Content-Length makes
// the body's end ambiguous between us and a proxy in front (request
// smuggling). Returns why, or nothing when the framing is sound.
std::optional<std::string> framing_problem(const boost::beast::http::request<boost::beast::http::string_body>& request);

}  // namespace brioche::server
