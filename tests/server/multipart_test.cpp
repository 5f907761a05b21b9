#include "server/multipart.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace brioche::server {
namespace {

std::string body_of(const std::string& boundary) {
  return "--" + boundary +
         "\r\n"
         "Content-Disposition: form-data; name=\"purpose\"\r\n\r\n"
         "fine-tune\r\n"
         "--" +
         boundary +
         "\r\n"
         "Content-Disposition: form-data; name=\"file\"; filename=\"a \\\"b\\\".jsonl\"\r\n"
         "Content-Type: application/octet-stream\r\n\r\n"
         "{\"text\": \"x\"}\n\r\n--not-the-boundary\r\n"
         "--" +
         boundary + "--\r\n";
}

TEST(Multipart, BoundaryFromContentType) {
  EXPECT_EQ(multipart_boundary("multipart/form-data; boundary=abc123"), "abc123");
  EXPECT_EQ(multipart_boundary("Multipart/Form-Data; charset=utf-8; boundary=\"a b:c\""), "a b:c");
  EXPECT_THROW(multipart_boundary("application/json"), Error);
  EXPECT_THROW(multipart_boundary("multipart/form-data"), Error);
  EXPECT_THROW(multipart_boundary("multipart/form-data; boundary="), Error);
  EXPECT_THROW(multipart_boundary("multipart/form-data; boundary=" + std::string(71, 'x')), Error);
  EXPECT_THROW(multipart_boundary("multipart/form-data; boundary=a\x01b"), Error);
  EXPECT_THROW(multipart_boundary("multipart/form-data; boundary=\"unterminated"), Error);
}

TEST(Multipart, PartsWithNamesFilenamesAndBodies) {
  const std::string body = body_of("XyZ");
  auto parts = parse_multipart(body, "XyZ", {});
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].name, "purpose");
  EXPECT_FALSE(parts[0].filename);
  EXPECT_EQ(parts[0].body, "fine-tune");
  EXPECT_EQ(parts[1].name, "file");
  EXPECT_EQ(*parts[1].filename, "a \"b\".jsonl");
  EXPECT_EQ(parts[1].content_type, "application/octet-stream");
  // A line that merely looks like a delimiter stays in the body.
  EXPECT_EQ(parts[1].body, "{\"text\": \"x\"}\n\r\n--not-the-boundary");
  EXPECT_EQ(find_part(parts, "file"), &parts[1]);
  EXPECT_EQ(find_part(parts, "nope"), nullptr);
}

TEST(Multipart, PreambleAndEpilogueIgnored) {
  const std::string body = "preamble text\r\n" + body_of("b1") + "epilogue";
  EXPECT_EQ(parse_multipart(body, "b1", {}).size(), 2u);
}

TEST(Multipart, MalformedBodiesAreErrors) {
  const std::string good = body_of("XyZ");
  EXPECT_THROW(parse_multipart(good, "other", {}), Error);                           // wrong boundary
  EXPECT_THROW(parse_multipart(good.substr(0, good.size() - 9), "XyZ", {}), Error);  // no closing delimiter
  EXPECT_THROW(parse_multipart(good.substr(0, 60), "XyZ", {}), Error);               // truncated inside a part
  EXPECT_THROW(parse_multipart("--XyZ\r\nContent-Type: text/plain\r\n\r\nx\r\n--XyZ--", "XyZ", {}),
               Error);  // no disposition
  EXPECT_THROW(parse_multipart("--XyZ\r\nContent-Disposition: attachment; name=\"a\"\r\n\r\nx\r\n--XyZ--", "XyZ", {}),
               Error);
  EXPECT_THROW(parse_multipart("--XyZ\r\nContent-Disposition: form-data\r\n\r\nx\r\n--XyZ--", "XyZ", {}),
               Error);  // no name
  EXPECT_THROW(parse_multipart("--XyZ\r\nno colon here\r\n\r\nx\r\n--XyZ--", "XyZ", {}), Error);
  EXPECT_THROW(parse_multipart("--XyZ\r\n\r\nx\r\n--XyZ--", "XyZ", {}), Error);  // no headers at all
  EXPECT_THROW(parse_multipart("--XyZjunk\r\n", "XyZ", {}), Error);              // not CRLF after the delimiter
  EXPECT_THROW(parse_multipart("--XyZ", "XyZ", {}), Error);                      // ends after a delimiter
  EXPECT_THROW(parse_multipart("", "XyZ", {}), Error);
}

TEST(Multipart, LimitsOnPartsAndHeaders) {
  std::string many;
  for (int i = 0; i < 5; ++i) many += "--b\r\nContent-Disposition: form-data; name=\"p\"\r\n\r\nv\r\n";
  many += "--b--";
  EXPECT_EQ(parse_multipart(many, "b", {.max_parts = 5}).size(), 5u);
  EXPECT_THROW(parse_multipart(many, "b", {.max_parts = 4}), Error);
  const std::string long_header =
      "--b\r\nContent-Disposition: form-data; name=\"p\"\r\nX-Pad: " + std::string(10000, 'a') + "\r\n\r\nv\r\n--b--";
  EXPECT_THROW(parse_multipart(long_header, "b", {.max_header_bytes = 8192}), Error);
  EXPECT_EQ(parse_multipart(long_header, "b", {.max_header_bytes = 20000}).size(), 1u);
}

}  // namespace
}  // namespace brioche::server
