// Training data: JSONL files, one example per line, rendered through the
// model's chat template and tokenized.
//
// Formats (detected per line by its keys):
//   chat        {"messages": [{"role": "user", "content": ...}, ..., {"role": "assistant", ...}]}
//   completion  {"prompt": "...", "completion": "..."}
//   text        {"text": "..."}                       (no prompt: every token is a target)
//   preference  {"prompt": "...", "chosen": "...", "rejected": "..."}   (also under "dpo": {...})
// prompt may also be a message list; chosen/rejected may be a message list
// whose last message is the assistant reply.
//
// The prompt is the template render of the conversation before the final
// assistant message with add_generation_prompt; the response is what the
// full render adds after it. Sequences longer than max_seq_length are
// truncated on the left of the prompt, keeping the prompt/response boundary;
// a response that alone reaches max_seq_length keeps one prompt token, is cut
// on the right and warned about. A malformed line is an error naming the file
// and the line number.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/batch_builder.h"

namespace brioche::tokenizer {
class Tokenizer;
}

namespace brioche::train {

// messages -> text, as the chat template renders them.
using ChatRenderer = std::function<std::string(const nlohmann::ordered_json& messages, bool add_generation_prompt)>;

// The renderer of a Jinja chat template source (GGUF tokenizer.chat_template);
// an empty source gives the plain "User: ...\n\nAssistant:" format.
ChatRenderer make_chat_renderer(const std::string& template_source, const tokenizer::Tokenizer& tokenizer);

struct DatasetOptions {
  bool preference = false;  // the method needs {prompt, chosen, rejected}
  int max_seq_length = 2048;
  const tokenizer::Tokenizer* tokenizer = nullptr;
  ChatRenderer render;
  bool quiet = false;  // no truncation warnings on stderr
};

struct Dataset {
  std::vector<TokenizedExample> examples;  // SFT
  std::vector<TokenizedPair> pairs;        // preference methods
  int truncated = 0;                       // examples shortened to max_seq_length
  int response_overflow = 0;               // of those, responses that alone exceeded it
  size_t size() const { return examples.size() + pairs.size(); }
};

Dataset load_dataset(const std::string& path, const DatasetOptions& options);

// Moves round(fraction · n) rows (at least one), drawn with `seed`, out of
// `data` into the returned set (a held-out test split); both keep the file's
// order. The draw is a Fisher–Yates over std::mt19937_64, whose outputs the
// standard fixes, so the same rows, fraction and seed give the same split on
// every machine. At least one row must stay for training.
Dataset split_off(Dataset& data, double fraction, uint64_t seed);

}  // namespace brioche::train
