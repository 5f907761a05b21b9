// Rows as `brioche train` reads them (train/dataset.h):
//   preference  {"prompt": str|messages, "chosen": str, "rejected": str}
//   sft         {"prompt": str, "completion": str} when the prompt is one user
//               message, else {"messages": [..., assistant reply]}
//   text        {"text": str}
// A prompt that is exactly one user message is written as its string, which
// the trainer reads back as that same message.
#pragma once

#include "data/example.h"

namespace brioche::data {

json prompt_field(const json& prompt_messages);  // string or messages, as above
json preference_row(const json& prompt_messages, const Reply& chosen, const Reply& rejected);
json sft_row(const Example& example);  // an sft-kind example (one reply, or text)

// The key that identifies a prompt for de-duplication: its messages with
// each content trimmed of surrounding whitespace, as compact JSON.
std::string prompt_key(const json& prompt_messages);

}  // namespace brioche::data
