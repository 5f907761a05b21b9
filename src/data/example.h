// A dataset row of any layout (layout.h) in one shape: the conversation
// before the reply, and the reply or replies. Curation, conversion and
// inspection all work on this shape; train_rows.h writes it back out as
// what `brioche train` reads.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/layout.h"

namespace brioche::data {

struct Reply {
  json message;                 // {"role": "assistant", "content": ...}
  std::optional<double> score;  // rated layouts; nullopt: the completion carries no usable rating
  std::string content() const;  // the message's text (content parts joined)
};

struct Example {
  Layout layout = Layout::Text;
  json prompt = json::array();  // messages before the reply; empty for text
  // sft: one reply; preference: chosen, then rejected; rated: every completion, in file order.
  std::vector<Reply> replies;
  std::string text;          // text layout: the whole document
  std::string score_source;  // rated layouts: which rating `score` holds ("overall_score", ...)
};

// Which rating of an UltraFeedback completion is its score:
//   "auto"         overall_score when every completion of the row has one, else fine-grained
//   "overall"      overall_score
//   "fine-grained" fine-grained_score, else the mean of the annotation ratings that are numbers
//   an aspect      annotations[aspect].Rating (helpfulness, honesty, instruction_following, truthfulness)
// "N/A" or a missing rating leaves the completion unrated.
struct ScoreOptions {
  std::string source = "auto";
};

// A row that does not have the shape its layout needs; the message says
// what was expected and what was found (the caller adds the line).
class RowError : public Error {
 public:
  explicit RowError(const std::string& message) : Error(message) {}
};

// row: a JSON object of `layout` ({"dpo": {...}} already unwrapped).
Example parse_example(const json& row, Layout layout, const ScoreOptions& scores = {});

// Anthropic HH-RLHF transcript "\n\nHuman: a\n\nAssistant: b..." as messages
// (user/assistant, contents trimmed of surrounding whitespace). Throws
// RowError when it does not start with a Human turn or has no turns.
json parse_hh_transcript(const std::string& transcript);

}  // namespace brioche::data
