// printable(): what an error message may carry to a terminal.
#include <gtest/gtest.h>

#include <string>

#include "core/printable.h"

namespace brioche {
namespace {

TEST(Printable, PlainTextAndValidUtf8PassUnchanged) {
  EXPECT_EQ(printable("tensor 'model.layers.0.q_proj' expected [4, 8]"),
            "tensor 'model.layers.0.q_proj' expected [4, 8]");
  EXPECT_EQ(printable("caf\xc3\xa9 \xe2\x80\xa6 \xf0\x9f\x8d\x9e \\n"),
            "caf\xc3\xa9 \xe2\x80\xa6 \xf0\x9f\x8d\x9e \\n");
  EXPECT_EQ(printable(""), "");
}

TEST(Printable, ControlCharactersAreEscaped) {
  // ESC [ 2 J clears the screen; a carriage return rewrites the line.
  EXPECT_EQ(printable("bad\x1b[2Jheader\rnext\x7f\x08"), "bad\\x1b[2Jheader\\x0dnext\\x7f\\x08");
  EXPECT_EQ(printable("line one\n\tline two"), "line one\n\tline two");
  EXPECT_EQ(printable(std::string("a\0b", 3)), "a\\x00b");
  // C1 controls, valid UTF-8 for U+0085 and U+009B (CSI on some terminals).
  EXPECT_EQ(printable("\xc2\x85\xc2\x9b"), "\\xc2\\x85\\xc2\\x9b");
}

TEST(Printable, InvalidUtf8IsEscapedByteByByte) {
  EXPECT_EQ(printable("\x80"), "\\x80");                             // a stray continuation byte
  EXPECT_EQ(printable("\xc3"), "\\xc3");                             // truncated at the end
  EXPECT_EQ(printable("\xe2\x80x"), "\\xe2\\x80x");                  // truncated before ASCII
  EXPECT_EQ(printable("\xc0\xaf"), "\\xc0\\xaf");                    // overlong '/'
  EXPECT_EQ(printable("\xe0\x80\xaf"), "\\xe0\\x80\\xaf");           // overlong, 3 bytes
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");           // a surrogate
  EXPECT_EQ(printable("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // above U+10FFFF
  EXPECT_EQ(printable("\xff\xfe"), "\\xff\\xfe");
  // After an invalid byte the next valid sequence is kept.
  EXPECT_EQ(printable("\xff\xc3\xa9"), "\\xff\xc3\xa9");
}

}  // namespace
}  // namespace brioche
