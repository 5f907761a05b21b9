// Speculative decoding flags shared by `run`, `serve` and `bench`
// (docs/speculative.md).
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "engine/engine.h"

namespace brioche::cli {

struct SpeculativeFlags {
  std::string method = "none";  // none | prompt-lookup
  int tokens = 4;               // drafts per sequence and step
  int min_ngram = 1;
  int max_ngram = 3;
  int max_batch = 4;            // decoding sequences above which a step does not speculate

  void add_to(CLI::App& app);
  // Sets options.speculative_* (speculative_tokens 0 when method is none).
  void apply(engine::SchedulerOptions& options) const;
  bool enabled() const { return method != "none"; }
};

}  // namespace brioche::cli
