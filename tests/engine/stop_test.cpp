// GCC 12 warns about members left to their defaults in designated
// initializers, which is how these tests spell sampling parameters.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include "engine/stop.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"

namespace brioche::engine {
namespace {

// Feeds pieces, returns everything emitted (plus flush if no stop) and the
// stop index.
struct Streamed {
  std::vector<std::string> emits;
  std::string text;
  int stop_index = -1;
};

Streamed stream(StopMatcher& matcher, const std::vector<std::string>& pieces) {
  Streamed out;
  for (const std::string& piece : pieces) {
    const StopMatcher::Step step = matcher.push(piece);
    out.emits.push_back(step.emit);
    out.text += step.emit;
    if (step.stopped) {
      out.stop_index = step.stop_index;
      return out;
    }
  }
  out.text += matcher.flush();
  return out;
}

TEST(StopMatcher, StopSpanningThreePieces) {
  StopMatcher matcher({"\nUser:"});
  const Streamed out = stream(matcher, {"Hel", "lo\nUs", "er:", " never shown"});
  EXPECT_EQ(out.emits, (std::vector<std::string>{"Hel", "lo", ""}));
  EXPECT_EQ(out.text, "Hello");
  EXPECT_EQ(out.stop_index, 0);
  EXPECT_TRUE(matcher.stopped());
  const auto after = matcher.push("more");
  EXPECT_TRUE(after.stopped);
  EXPECT_EQ(after.emit, "");
  EXPECT_EQ(matcher.flush(), "");
}

TEST(StopMatcher, HeldPrefixIsReleasedWhenItDiverges) {
  StopMatcher matcher({"\nUser:"});
  const Streamed out = stream(matcher, {"a\nU", "x", "\n"});
  EXPECT_EQ(out.emits, (std::vector<std::string>{"a", "\nUx", ""}));
  EXPECT_EQ(out.text, "a\nUx\n");  // the trailing "\n" comes back from flush()
  EXPECT_EQ(out.stop_index, -1);
}

TEST(StopMatcher, EarliestStopWins) {
  StopMatcher matcher({"STOP", "END", "ND bar"});
  const Streamed out = stream(matcher, {"foo END bar STOP"});
  EXPECT_EQ(out.text, "foo ");
  EXPECT_EQ(out.stop_index, 1);
}

TEST(StopMatcher, OverlappingSelfPrefix) {
  StopMatcher matcher({"aab"});
  const Streamed out = stream(matcher, {"a", "a", "a", "b", "c"});
  EXPECT_EQ(out.text, "a");
  EXPECT_EQ(out.stop_index, 0);
}

TEST(StopMatcher, StopAtStartAndInsideOnePiece) {
  StopMatcher at_start({"User:"});
  EXPECT_EQ(stream(at_start, {"User: hi"}).text, "");
  StopMatcher inside({"</s>"});
  EXPECT_EQ(stream(inside, {"x</s>y"}).text, "x");
}

TEST(StopMatcher, NoStopsPassesTextThrough) {
  StopMatcher matcher({});
  const Streamed out = stream(matcher, {"a", "b\n", "c"});
  EXPECT_EQ(out.emits, (std::vector<std::string>{"a", "b\n", "c"}));
  EXPECT_EQ(out.text, "ab\nc");
}

TEST(StopMatcher, UnicodeStopSplitInsideACharacter) {
  // "。" is E3 80 82; the token boundary falls inside it.
  StopMatcher matcher({"。\n"});
  const Streamed out = stream(matcher, {"你好\xE3\x80", "\x82", "\n再见"});
  EXPECT_EQ(out.text, "你好");
  EXPECT_EQ(out.emits[0], "你好");
  EXPECT_EQ(out.stop_index, 0);
}

TEST(StopMatcher, IncompleteUtf8IsHeldBack) {
  StopMatcher matcher({"zzz"});
  // 👋 is F0 9F 91 8B, split over two pieces; é is C3 A9.
  const Streamed out = stream(matcher, {"hi \xF0\x9F", "\x91\x8B \xC3", "\xA9"});
  EXPECT_EQ(out.emits, (std::vector<std::string>{"hi ", "👋 ", "é"}));
  EXPECT_EQ(out.text, "hi 👋 é");
}

TEST(StopMatcher, FlushReturnsHeldText) {
  StopMatcher matcher({"###"});
  EXPECT_EQ(matcher.push("done #").emit, "done ");
  EXPECT_EQ(matcher.push("#").emit, "");
  EXPECT_EQ(matcher.flush(), "##");
  EXPECT_FALSE(matcher.stopped());
}

TEST(StopMatcher, RejectsEmptyStop) { EXPECT_THROW(StopMatcher({"ok", ""}), Error); }

}  // namespace
}  // namespace brioche::engine
