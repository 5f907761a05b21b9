// Speculative decoding flags shared by `run`, `serve` and `bench`
// (docs/speculative.md).
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "cli/common.h"
#include "engine/engine.h"

namespace brioche::cli {

struct SpeculativeFlags {
  std::string method = "none";  // none | prompt-lookup | draft-model
  std::string draft_model;      // --draft-model FILE (implies --speculative draft-model)
  bool fixed_length = false;    // --spec-fixed-length: always `tokens` drafts, no adaptation
  double row_cost = 0.1;        // --spec-row-cost
  int tokens = 4;               // drafts per sequence and step
  int min_ngram = 1;
  int max_ngram = 3;
  int max_batch = 4;  // decoding sequences above which a step does not speculate

  void add_to(CLI::App& app);
  // Sets options.speculative_* (speculative_tokens 0 when method is none).
  void apply(engine::SchedulerOptions& options) const;
  bool enabled() const { return method != "none" || !draft_model.empty(); }
  // The proposer's name as reported ("prompt-lookup", "draft-model").
  std::string proposer() const { return draft_model.empty() ? method : "draft-model"; }
  // With --draft-model: loads it on the target's device and threads into
  // options.draft_model (a model it cannot use is a UsageError).
  void load_draft(const ModelFlags& target, engine::EngineOptions& options) const;
};

}  // namespace brioche::cli
