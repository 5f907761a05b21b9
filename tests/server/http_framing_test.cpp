// framing_problem: only Content-Length or a lone "chunked" frames a request.
#include <gtest/gtest.h>

#include "server/http_framing.h"

namespace brioche::server {
namespace {

namespace http = boost::beast::http;

// Parses a raw request as the server does; the framing verdict of what parsed.
std::optional<std::string> verdict(const std::string& raw) {
  http::request_parser<http::string_body> parser;
  parser.eager(true);
  boost::beast::error_code ec;
  parser.put(boost::asio::buffer(raw), ec);
  if (ec) return "parser: " + ec.message();
  return framing_problem(parser.get());
}

TEST(HttpFraming, ContentLengthOrChunkedAlone) {
  EXPECT_FALSE(verdict("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"));
  EXPECT_FALSE(verdict("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"));
  EXPECT_FALSE(verdict("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"));
}

TEST(HttpFraming, EverythingElseIsRefused) {
  for (const char* te : {"gzip", "identity", "chunked, gzip", "gzip, chunked", "xchunked"}) {
    std::optional<std::string> why = verdict(std::string("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: ") + te +
                                             "\r\nContent-Length: 2\r\n\r\n{}");
    ASSERT_TRUE(why) << te;
  }
  EXPECT_TRUE(verdict(
      "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n2\r\n{}\r\n0\r\n\r\n"));
}

}  // namespace
}  // namespace brioche::server
