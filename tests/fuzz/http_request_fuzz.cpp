// libFuzzer target: HTTP/1.1 request framing as the server reads it (Beast's
// parser under the server's header and body limits, then framing_problem).
// Any input must either parse or fail with an error code; nothing may crash,
// and a parsed request with a sound framing has a body no larger than the limit.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "server/http_framing.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace http = boost::beast::http;
  constexpr size_t kBodyLimit = 1 << 16;
  http::request_parser<http::string_body> parser;
  parser.body_limit(kBodyLimit);
  parser.header_limit(64 * 1024);
  parser.eager(true);
  boost::beast::error_code ec;
  size_t used = 0;
  // Feed in two pieces, as a socket might deliver them.
  size_t half = size / 2;
  used += parser.put(boost::asio::buffer(data, half), ec);
  if (!ec || ec == http::error::need_more) {
    ec = {};
    used += parser.put(boost::asio::buffer(data + used, size - used), ec);
  }
  if (!ec && parser.is_done()) {
    std::optional<std::string> problem = brioche::server::framing_problem(parser.get());
    if (!problem && parser.get().body().size() > kBodyLimit) std::abort();
  }
  return 0;
}
