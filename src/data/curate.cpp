#include "data/curate.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "engine/rng.h"
#include "data/train_rows.h"

namespace brioche::data {

std::string selection_name(PairSelection s) {
  return s == PairSelection::BestVsWorst ? "best-vs-worst" : "best-vs-random";
}

int64_t utf8_length(const std::string& text) {
  int64_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;
  return n;
}

namespace {

bool blank(const std::string& s) { return s.find_first_not_of(" \t\r\n") == std::string::npos; }

// A per-row seed: the user's seed and the row's place mixed by one splitmix64 round.
uint64_t row_seed(uint64_t seed, const RowLocation& at) {
  uint64_t z = seed ^ (uint64_t(at.number) * 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

struct Summary {
  int64_t completions = 0, unrated = 0, empty = 0;
  double chosen_sum = 0, rejected_sum = 0, gap_sum = 0;
  int64_t tokens_max = 0;
  double tokens_sum = 0;
  int64_t token_rows = 0;
  json sources = json::object();  // score source → rows
};

}  // namespace

CurateResult curate(const std::string& path, const CurateOptions& o) {
  BRIOCHE_CHECK(o.max_tokens == 0 || o.counter, "--max-tokens needs a model (-m) whose tokenizer measures the rows");
  BRIOCHE_CHECK(o.min_gap >= 0, "--min-gap must be >= 0, got ", o.min_gap);
  BRIOCHE_CHECK(o.max_length_ratio == 0 || o.max_length_ratio >= 1,
                "--max-length-ratio must be >= 1 (or 0 = off), got ", o.max_length_ratio);
  BRIOCHE_CHECK(o.valid_fraction >= 0 && o.valid_fraction < 1, "--valid-fraction must be in [0, 1), got ",
                o.valid_fraction);
  CurateResult result;
  RowReport& report = result.report;
  Summary sum;
  std::vector<json> kept;
  std::unordered_set<std::string> seen_prompts;
  auto drop = [&](const RowLocation& at, const char* reason, std::string message) {
    drop_row(report, path, o.read.strict, {.at = at, .reason = reason, .message = std::move(message)});
  };
  const std::optional<RowKind> kind = read_examples(path, o.read, report, [&](const RowLocation& at, Example& ex) {
    if (ex.layout != Layout::UltraFeedback && ex.layout != Layout::UltraFeedbackBinarized) {
      return drop(at, "bad_row",
                  "a " + layout_name(ex.layout) + " row has no ratings to curate (expected " +
                      "ultrafeedback or ultrafeedback-binarized; `brioche data convert` takes " +
                      layout_name(ex.layout) + ")");
    }
    std::vector<const Reply*> candidates;
    for (const Reply& r : ex.replies) {
      ++sum.completions;
      if (!r.score)
        ++sum.unrated;
      else if (blank(r.content()))
        ++sum.empty;
      else
        candidates.push_back(&r);
    }
    if (candidates.size() < 2)
      return drop(at, "too_few_completions",
                  std::to_string(candidates.size()) + " of " + std::to_string(ex.replies.size()) +
                      " completions have a score and text (expected at least 2)");
    const Reply* best = candidates[0];
    const Reply* worst = candidates[0];
    for (const Reply* r : candidates) {
      if (*r->score > *best->score) best = r;
      if (*r->score < *worst->score) worst = r;
    }
    const Reply* rejected = worst;
    if (o.selection == PairSelection::BestVsRandom) {
      std::vector<const Reply*> lower;
      for (const Reply* r : candidates)
        if (*r->score < *best->score) lower.push_back(r);
      if (!lower.empty()) {
        engine::SamplerRng rng(row_seed(o.seed, at));
        rejected = lower[size_t(rng.next_u64() % lower.size())];
      }
    }
    const double gap = *best->score - *rejected->score;
    if (gap <= 0) return drop(at, "tie", "every scored completion is rated " + json(*best->score).dump());
    if (gap < o.min_gap)
      return drop(at, "gap_below_min", "score gap " + json(gap).dump() + " < --min-gap " + json(o.min_gap).dump());
    if (o.max_length_ratio > 0) {
      const double a = double(utf8_length(best->content())), b = double(utf8_length(rejected->content()));
      const double ratio = std::max(a, b) / std::max(1.0, std::min(a, b));
      if (ratio > o.max_length_ratio)
        return drop(at, "length_ratio",
                    "length ratio " + json(ratio).dump() + " > --max-length-ratio " + json(o.max_length_ratio).dump());
    }
    int64_t tokens = -1;
    if (o.counter) {
      const Reply* pair[] = {best, rejected};
      tokens = example_tokens(*o.counter, ex, pair);
      if (o.max_tokens > 0 && tokens > o.max_tokens)
        return drop(at, "too_long", std::to_string(tokens) + " tokens > --max-tokens " + std::to_string(o.max_tokens));
    }
    if (o.dedup && !seen_prompts.insert(prompt_key(ex.prompt)).second)
      return drop(at, "duplicate_prompt", "the prompt of an earlier kept row");
    json row = preference_row(ex.prompt, *best, *rejected);
    row["score_chosen"] = *best->score;
    row["score_rejected"] = *rejected->score;
    kept.push_back(std::move(row));
    report.keep();
    sum.chosen_sum += *best->score, sum.rejected_sum += *rejected->score, sum.gap_sum += gap;
    sum.sources[ex.score_source] = sum.sources.value(ex.score_source, int64_t(0)) + 1;
    if (tokens >= 0)
      sum.tokens_max = std::max(sum.tokens_max, tokens), sum.tokens_sum += double(tokens), ++sum.token_rows;
  });
  (void)kind;
  const int64_t n = report.kept();
  result.rows = split_rows(std::move(kept), o.valid_fraction, o.seed);
  json& s = result.stats;
  s = report.to_json();
  s["input"] = path;
  s["train"] = result.rows.train.size();
  s["valid"] = result.rows.valid.size();
  s["options"] = {{"selection", selection_name(o.selection)},
                  {"seed", o.seed},
                  {"min_gap", o.min_gap},
                  {"max_length_ratio", o.max_length_ratio},
                  {"dedup", o.dedup},
                  {"max_tokens", o.max_tokens},
                  {"valid_fraction", o.valid_fraction},
                  {"score", o.read.scores.source}};
  s["completions"] = {{"total", sum.completions}, {"unrated", sum.unrated}, {"empty", sum.empty}};
  s["score_source"] = sum.sources;
  if (n > 0)
    s["scores"] = {{"chosen_mean", sum.chosen_sum / double(n)},
                   {"rejected_mean", sum.rejected_sum / double(n)},
                   {"gap_mean", sum.gap_sum / double(n)}};
  if (o.counter) {
    s["tokenizer"] = o.counter->description();
    if (sum.token_rows > 0) s["tokens"] = {{"max", sum.tokens_max}, {"mean", sum.tokens_sum / double(sum.token_rows)}};
  }
  return result;
}

}  // namespace brioche::data
