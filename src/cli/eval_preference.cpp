// `brioche eval preference`: how often a model (and each --adapter) puts
// the chosen reply of a held-out {prompt, chosen, rejected} pair above the
// rejected one, by summed reply-token log-probability, with the mean margin
// and 95% intervals (eval/preference_eval.h has the definitions).
#include <cstdio>
#include <filesystem>

#include "cli/common.h"
#include "cli/eval_commands.h"
#include "cli/scoring_models.h"
#include "core/error.h"
#include "eval/preference_eval.h"

namespace brioche::cli {

namespace {

std::string fixed(double x, int digits) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}

std::string signed_fixed(double x, int digits) { return (x >= 0 ? "+" : "") + fixed(x, digits); }

std::string interval(const eval::MeanInterval& m, int digits) {
  return fixed(m.mean, digits) + " [" + fixed(m.low, digits) + ", " + fixed(m.high, digits) + "]";
}

int run(const ScoringFlags& flags) {
  ScoringModels models(flags);
  train::Dataset ds;
  try {
    ds = train::load_dataset(flags.data, models.dataset_options(/*preference=*/true));
  } catch (const Error& e) {
    throw UsageError{e.what()};
  }
  std::vector<std::vector<eval::PairLogps>> scores;
  for (size_t m = 0; m < models.size(); ++m) {
    const auto lp = train::score_pairs(models.model(m), ds.pairs, models.options(m));
    std::vector<eval::PairLogps> pairs(ds.pairs.size());
    for (size_t i = 0; i < pairs.size(); ++i)
      pairs[i] = {.chosen_sum = lp[2 * i].response_sum,
                  .rejected_sum = lp[2 * i + 1].response_sum,
                  .chosen_tokens = lp[2 * i].response_n,
                  .rejected_tokens = lp[2 * i + 1].response_n};
    scores.push_back(std::move(pairs));
  }
  nlohmann::ordered_json results = models.describe();
  results["data"] = flags.data;
  results["scoring"] =
      "sum of log p over each reply's tokens (the prompt is not scored); accuracy: chosen sum > "
      "rejected sum; 95% intervals (Wilson for accuracy, normal for margins)";
  results["truncated"] = ds.truncated;
  std::string text = "preference: " + std::to_string(ds.pairs.size()) + " pairs from " + flags.data +
                     " (score: summed reply-token log-probs; 95% intervals)\n";
  if (ds.truncated > 0)
    text += "note: " + std::to_string(ds.truncated) + " pairs longer than --max-seq-length " +
            std::to_string(flags.max_seq_length) + " were cut (prompt side)\n";
  char line[256];
  std::snprintf(line, sizeof line, "%-16s %-26s %-10s %-30s %s\n", "model", "accuracy", "per-token", "margin (nats)",
                "margin/token");
  text += line;
  results["models"] = nlohmann::ordered_json::array();
  for (size_t m = 0; m < models.size(); ++m) {
    const eval::PreferenceSummary s = eval::summarize_preferences(scores[m]);
    std::snprintf(line, sizeof line, "%-16s %-26s %-10s %-30s %s\n", models.name(m).c_str(),
                  interval(s.accuracy, 3).c_str(), fixed(s.accuracy_per_token.mean, 3).c_str(),
                  interval(s.margin, 3).c_str(), interval(s.margin_per_token, 4).c_str());
    text += line;
    nlohmann::ordered_json r = s.to_json();
    r = {{"name", models.name(m)}, {"summary", r}, {"pairs", nlohmann::ordered_json::array()}};
    for (const eval::PairLogps& p : scores[m])
      r["pairs"].push_back({p.chosen_sum, p.chosen_tokens, p.rejected_sum, p.rejected_tokens});
    results["models"].push_back(std::move(r));
  }
  results["comparisons"] = nlohmann::ordered_json::array();
  for (size_t m = 1; m < models.size(); ++m) {
    const eval::PreferenceComparison c = eval::compare_preferences(scores[0], scores[m]);
    text += models.name(m) + " - base: accuracy " + signed_fixed(c.accuracy.difference, 3) + " [" +
            signed_fixed(c.accuracy.low, 3) + ", " + signed_fixed(c.accuracy.high, 3) + "] (paired bootstrap; " +
            std::to_string(c.mcnemar.b_only) + " pairs flipped right, " + std::to_string(c.mcnemar.a_only) +
            " wrong, McNemar p " + fixed(c.mcnemar.p_value, 3) + "), margin " + signed_fixed(c.margin.mean, 3) + " [" +
            signed_fixed(c.margin.low, 3) + ", " + signed_fixed(c.margin.high, 3) + "]\n";
    nlohmann::ordered_json j = c.to_json();
    j = {{"name", models.name(m)}, {"versus", "base"}, {"difference", j}};
    results["comparisons"].push_back(std::move(j));
  }
  finish_scoring(flags, text, results);
  return kExitOk;
}

}  // namespace

Subcommand add_eval_preference_command(CLI::App& eval) {
  auto flags = std::make_shared<ScoringFlags>();
  CLI::App* app = eval.add_subcommand(
      "preference",
      "preference accuracy and mean margin on {prompt, chosen, rejected} pairs (base and each --adapter)");
  flags->add_to(app, "JSONL of {prompt, chosen, rejected} pairs (what `brioche train` reads for dpo/orpo)");
  return {app, [flags] { return run(*flags); }};
}

}  // namespace brioche::cli
