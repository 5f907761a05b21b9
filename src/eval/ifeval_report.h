// What `brioche eval ifeval` prints and writes: the accuracy table, the
// per-instruction table, and for every adapter its paired comparison with
// the base (difference, bootstrap interval, McNemar p, flipped prompts).
#pragma once

#include <string>
#include <vector>

#include "eval/ifeval_results.h"
#include "eval/paired_stats.h"

namespace brioche::eval {

struct MetricComparison {
  const char* name;  // "prompt strict", ...
  double base = 0, other = 0;
  BootstrapInterval interval;
  McNemarResult mcnemar;  // prompt-level metrics only (p_value < 0: not applicable)
  bool has_mcnemar = false;
};

struct FlippedPrompt {
  int64_t key = 0;
  size_t index = 0;     // row in the runs
  bool gained = false;  // the adapter follows it, the base did not (strict)
};

struct RunComparison {
  std::string base_label, other_label;
  std::vector<MetricComparison> metrics;  // prompt strict, prompt loose, inst strict, inst loose
  std::vector<FlippedPrompt> flips;       // prompt-level strict
};

// Paired comparison of `other` with `base`; both must hold the same prompts
// in the same order (keys checked).
RunComparison compare_runs(const IfevalRun& base, const IfevalRun& other);

// Plain-text tables for the terminal.
std::string accuracy_table(const std::vector<IfevalRun>& runs);
std::string per_instruction_table(const std::vector<IfevalRun>& runs);
std::string comparison_text(const RunComparison& c, const IfevalRun& base, int max_flips_shown = 20);

struct HtmlReportInput {
  std::string title;         // e.g. the model file
  std::string command_line;  // how the runs were made
  const std::vector<IfevalRun>* runs = nullptr;
  const std::vector<RunComparison>* comparisons = nullptr;
};
// A self-contained HTML page (inline CSS and SVG charts, no script, no
// network): summary, per-instruction chart and table, comparisons, flips
// with both responses.
std::string html_report(const HtmlReportInput& input);

}  // namespace brioche::eval
