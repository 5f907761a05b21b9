// Saved IFEval runs: one JSON line per prompt with the response and its
// verdicts, so a run can be re-scored (new checkers, other reports) without
// generating again. A run folder holds one file per model variant:
//   <out>/<label>.responses.jsonl   (label: "base" or the adapter's name)
// Each row: key, prompt, instruction_id_list, kwargs (the prompt row as
// given), response, finish_reason, completion_tokens, strict, loose.
#pragma once

#include <string>
#include <vector>

#include "eval/ifeval_generate.h"
#include "eval/ifeval_scoring.h"

namespace brioche::eval {

struct IfevalRun {
  std::string label;  // "base" or an adapter name
  std::vector<IfevalPrompt> prompts;
  std::vector<GeneratedResponse> responses;
  std::vector<ResponseVerdicts> verdicts;  // filled by score_run
  IfevalAccuracy accuracy;
};

// Scores every response with the checkers (strict and loose) and tallies.
void score_run(IfevalRun& run);

std::string run_file_name(const std::string& label);  // "<label>.responses.jsonl"
void save_run(const IfevalRun& run, const std::string& dir);
IfevalRun load_run(const std::string& path);
// The runs saved in `dir`: base first, then the others by name.
std::vector<IfevalRun> load_runs(const std::string& dir);

}  // namespace brioche::eval
