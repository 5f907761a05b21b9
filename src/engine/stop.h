// Stop strings (OpenAI `stop`) over streamed text.
//
// The detokenizer hands over text one piece per token; a stop string may span
// pieces ("Hel" + "lo\nUs" + "er:" with stop "\nUser:"). push() returns the
// text that is safe to show now and holds back the longest suffix that could
// still begin a stop string. On a match, the text is cut right before the
// stop string, which is not emitted (vLLM's default, OpenAI's behaviour).
// With several stop strings, the one that starts earliest in the text wins.
//
// Matching is on bytes (UTF-8 stop strings match UTF-8 text exactly). An
// incomplete UTF-8 sequence at the end of the text is held back as well, so
// emitted text never ends in the middle of a character, even if a token
// ends inside one; flush() returns whatever is left at the end.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace brioche::engine {

class StopMatcher {
 public:
  // Fails on an empty stop string. No stop strings: push() passes text through.
  explicit StopMatcher(std::vector<std::string> stops);

  struct Step {
    std::string emit;      // text to show now
    bool stopped = false;  // a stop string matched; emit ends right before it
    int stop_index = -1;   // which of `stops` matched, or -1
  };

  // After a stop, every further push() returns {"", true, same index}.
  Step push(std::string_view piece);

  // End of generation without a stop: the held-back text, and the matcher
  // empties. Empty after a stop.
  std::string flush();

  bool stopped() const { return stop_index_ >= 0; }
  const std::vector<std::string>& stops() const { return stops_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;  // held back: a possible stop-string start or partial UTF-8
  int stop_index_ = -1;
};

}  // namespace brioche::engine
