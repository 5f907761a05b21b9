// The dataset layouts `brioche data` reads, told apart by a row's keys.
//
//   preference         {"prompt": str|messages, "chosen": str, "rejected": str}    (what `brioche train` reads;
//                      also TRL's standard preference format; {"dpo": {...}} is unwrapped)
//   trl-conversational {"prompt": [messages]?, "chosen": [messages], "rejected": [messages]}
//                      (TRL's conversational preference format, explicit or implicit prompt)
//   hh-rlhf            {"chosen": "\n\nHuman: ...\n\nAssistant: ...", "rejected": "..."}  (Anthropic HH-RLHF)
//   ultrafeedback      {"instruction"|"prompt": str, "completions": [{"response", "overall_score",
//                       "fine-grained_score", "annotations": {aspect: {"Rating"}}}, ...]}
//   ultrafeedback-binarized {"prompt", "chosen", "rejected", "score_chosen", "score_rejected"}
//                      (also what `brioche data curate` writes)
//   chat               {"messages": [{"role", "content"}, ...]}                     (brioche train SFT)
//   sharegpt           {"conversations": [{"from": "human"|"gpt"|"system", "value"}, ...]}
//   alpaca             {"instruction", "input"?, "output", "system"?}
//   completion         {"prompt", "completion"}                                      (brioche train SFT)
//   text               {"text"}                                                      (brioche train SFT)
//
// Detection, first match wins: "completions" → ultrafeedback; "conversations"
// → sharegpt; "chosen"/"rejected" with "score_chosen"/"score_rejected" →
// ultrafeedback-binarized, with string transcripts and no "prompt" → hh-rlhf,
// with any message list → trl-conversational, else preference; "messages" →
// chat; "instruction" + "output" → alpaca; "prompt" + "completion" →
// completion; "text" → text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace brioche::data {

using json = nlohmann::ordered_json;

enum class Layout : uint8_t {
  Preference,
  TrlConversational,
  HhRlhf,
  UltraFeedback,
  UltraFeedbackBinarized,
  Chat,
  ShareGpt,
  Alpaca,
  Completion,
  Text,
};

// What `brioche train` gets from a row of this layout.
enum class RowKind : uint8_t {
  Preference,  // {prompt, chosen, rejected}: dpo, orpo, simpo, ipo
  Sft,         // messages, prompt/completion or text: sft
  Rated,       // several rated completions: `brioche data curate` makes pairs of them
  // (ultrafeedback-binarized is one pair with scores: a Preference row that curate can also filter)
};

std::string layout_name(Layout layout);
std::optional<Layout> parse_layout(const std::string& name);  // the names above
std::string layout_names();                                   // "preference, trl-conversational, ..."
RowKind row_kind(Layout layout);
std::string row_kind_name(RowKind kind);  // "preference pairs", "sft examples", "rated completions"

// The layout of one row (an object; {"dpo": {...}} already unwrapped), or
// nullopt when no rule matches.
std::optional<Layout> detect_layout(const nlohmann::ordered_json& row);

// The row's keys, for "found keys [...]" in errors.
std::string key_list(const nlohmann::ordered_json& row);

}  // namespace brioche::data
