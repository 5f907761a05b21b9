// `brioche eval perplexity`: token-weighted NLL and perplexity of a model
// (and each --adapter) on a text, messages or prompt/completion file, with
// 95% bootstrap intervals (eval/perplexity.h has the definitions).
#include <cstdio>
#include <fstream>

#include "cli/common.h"
#include "cli/eval_commands.h"
#include "cli/scoring_models.h"
#include "core/error.h"
#include "data/layout.h"
#include "eval/perplexity.h"

namespace brioche::cli {

namespace {

struct PerplexityFlags {
  ScoringFlags scoring;
  std::string scope = "response";
};

std::string fixed(double x, int digits) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}

std::string interval(const eval::MeanInterval& m, int digits) {
  return fixed(m.mean, digits) + " [" + fixed(m.low, digits) + ", " + fixed(m.high, digits) + "]";
}

// A file of preference pairs is for `eval preference`: said before the
// trainer's loader would answer with its training-method hint.
void refuse_preference_file(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const data::json row = data::json::parse(line, nullptr, /*allow_exceptions=*/false);
    const auto layout = data::detect_layout(row);
    if (layout && data::row_kind(*layout) != data::RowKind::Sft)
      throw UsageError{path + ":" + std::to_string(line_no) + ": a " + data::layout_name(*layout) +
                       " row; perplexity reads {\"text\"}, {\"messages\"} or {\"prompt\", \"completion\"} rows "
                       "(pairs: `brioche eval preference`; other layouts: `brioche data convert`)"};
    return;
  }
}

int run(const PerplexityFlags& f) {
  const ScoringFlags& flags = f.scoring;
  const train::SftScope scope = f.scope == "full" ? train::SftScope::Full : train::SftScope::Response;
  ScoringModels models(flags);
  refuse_preference_file(flags.data);
  train::Dataset ds;
  try {
    ds = train::load_dataset(flags.data, models.dataset_options(/*preference=*/false));
  } catch (const Error& e) {
    throw UsageError{e.what()};
  }
  std::vector<std::vector<eval::RowLogps>> scores;
  for (size_t m = 0; m < models.size(); ++m) {
    const auto lp = train::score_examples(models.model(m), ds.examples, scope, models.options(m));
    std::vector<eval::RowLogps> rows;
    for (const train::SequenceLogps& s : lp)
      rows.push_back({.logp_sum = s.response_sum + s.prompt_sum, .tokens = s.response_n + s.prompt_n});
    scores.push_back(std::move(rows));
  }
  nlohmann::ordered_json results = models.describe();
  results["data"] = flags.data;
  results["scope"] = f.scope;
  results["scoring"] = f.scope == "full" ? "every token after the first of each row (prompt and reply)"
                                         : "reply tokens (a text row: every token after the first)";
  results["truncated"] = ds.truncated;
  std::string text = "perplexity: " + std::to_string(ds.examples.size()) + " rows from " + flags.data + " (" +
                     results["scoring"].get<std::string>() + "; token-weighted; 95% bootstrap intervals)\n";
  if (ds.truncated > 0)
    text += "note: " + std::to_string(ds.truncated) + " rows longer than --max-seq-length " +
            std::to_string(flags.max_seq_length) + " were cut\n";
  char line[256];
  std::snprintf(line, sizeof line, "%-16s %-9s %-28s %s\n", "model", "tokens", "NLL (nats/token)", "perplexity");
  text += line;
  results["models"] = nlohmann::ordered_json::array();
  for (size_t m = 0; m < models.size(); ++m) {
    const eval::PerplexitySummary s = eval::summarize_perplexity(scores[m]);
    std::snprintf(line, sizeof line, "%-16s %-9lld %-28s %s\n", models.name(m).c_str(), (long long)s.tokens,
                  interval(s.nll, 4).c_str(), interval(s.perplexity, 3).c_str());
    text += line;
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    for (const eval::RowLogps& r : scores[m]) rows.push_back({r.logp_sum, r.tokens});
    results["models"].push_back({{"name", models.name(m)}, {"summary", s.to_json()}, {"rows", rows}});
  }
  results["comparisons"] = nlohmann::ordered_json::array();
  for (size_t m = 1; m < models.size(); ++m) {
    const eval::MeanInterval d = eval::compare_perplexity(scores[0], scores[m]);
    text += models.name(m) + " - base: NLL " + (d.mean >= 0 ? "+" : "") + fixed(d.mean, 4) + " [" + fixed(d.low, 4) +
            ", " + fixed(d.high, 4) + "] nats/token (paired bootstrap over rows)\n";
    results["comparisons"].push_back({{"name", models.name(m)},
                                      {"versus", "base"},
                                      {"nll_difference", {{"mean", d.mean}, {"low", d.low}, {"high", d.high}}}});
  }
  finish_scoring(flags, text, results);
  return kExitOk;
}

}  // namespace

Subcommand add_eval_perplexity_command(CLI::App& eval) {
  auto flags = std::make_shared<PerplexityFlags>();
  CLI::App* app = eval.add_subcommand(
      "perplexity", "token-weighted NLL and perplexity on a text or messages file (base and each --adapter)");
  flags->scoring.add_to(app, "JSONL of {\"text\"}, {\"messages\"} or {\"prompt\", \"completion\"} rows");
  app->add_option("--scope", flags->scope, "response: reply tokens only (text rows: all); full: prompt tokens too")
      ->check(CLI::IsMember({"response", "full"}))
      ->capture_default_str();
  return {app, [flags] { return run(*flags); }};
}

}  // namespace brioche::cli
