#include "data/convert.h"

#include <unordered_set>

#include "data/train_rows.h"

namespace brioche::data {

namespace {

bool blank(const std::string& s) { return s.find_first_not_of(" \t\r\n") == std::string::npos; }

}  // namespace

ConvertResult convert(const std::string& path, const ConvertOptions& o) {
  BRIOCHE_CHECK(o.max_tokens == 0 || o.counter, "--max-tokens needs a model (-m) whose tokenizer measures the rows");
  BRIOCHE_CHECK(o.valid_fraction >= 0 && o.valid_fraction < 1, "--valid-fraction must be in [0, 1), got ",
                o.valid_fraction);
  if (o.read.layout && row_kind(*o.read.layout) == RowKind::Rated)
    fail("--from ", layout_name(*o.read.layout), ": rated completions become pairs with `brioche data curate`");
  ConvertResult result;
  RowReport& report = result.report;
  std::vector<json> kept;
  std::unordered_set<std::string> seen_prompts;
  json layouts = json::object();
  int64_t tokens_max = 0;
  auto drop = [&](const RowLocation& at, const char* reason, std::string message) {
    drop_row(report, path, o.read.strict, {.at = at, .reason = reason, .message = std::move(message)});
  };
  read_examples(path, o.read, report, [&](const RowLocation& at, Example& ex) {
    const RowKind kind = row_kind(ex.layout);
    if (kind == RowKind::Rated)
      return drop(at, "bad_row",
                  layout_name(ex.layout) +
                      " rows hold rated completions: make pairs of them with "
                      "`brioche data curate`");
    if (ex.layout == Layout::Text ? blank(ex.text) : false) return drop(at, "empty_reply", "\"text\" is blank");
    for (size_t i = 0; i < ex.replies.size(); ++i) {
      if (blank(ex.replies[i].content()) && !ex.replies[i].message.contains("tool_calls")) {
        const char* which = kind == RowKind::Preference ? (i == 0 ? "chosen" : "rejected") : "the reply";
        return drop(at, "empty_reply", std::string(which) + " has no text");
      }
    }
    if (o.counter) {
      const int64_t tokens = example_tokens(*o.counter, ex);
      if (o.max_tokens > 0 && tokens > o.max_tokens)
        return drop(at, "too_long", std::to_string(tokens) + " tokens > --max-tokens " + std::to_string(o.max_tokens));
      tokens_max = std::max(tokens_max, tokens);
    }
    if (o.dedup && ex.layout != Layout::Text && !seen_prompts.insert(prompt_key(ex.prompt)).second)
      return drop(at, "duplicate_prompt", "the prompt of an earlier kept row");
    kept.push_back(kind == RowKind::Preference ? preference_row(ex.prompt, ex.replies[0], ex.replies[1]) : sft_row(ex));
    layouts[layout_name(ex.layout)] = layouts.value(layout_name(ex.layout), int64_t(0)) + 1;
    report.keep();
  });
  result.rows = split_rows(std::move(kept), o.valid_fraction, o.seed);
  json& s = result.stats;
  s = report.to_json();
  s["input"] = path;
  s["layouts"] = layouts;
  s["train"] = result.rows.train.size();
  s["valid"] = result.rows.valid.size();
  s["options"] = {{"from", o.read.layout ? layout_name(*o.read.layout) : "auto"},
                  {"dedup", o.dedup},
                  {"max_tokens", o.max_tokens},
                  {"valid_fraction", o.valid_fraction},
                  {"seed", o.seed}};
  if (o.counter) s["tokenizer"] = o.counter->description(), s["tokens_max"] = tokens_max;
  return result;
}

}  // namespace brioche::data
