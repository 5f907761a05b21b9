#include "cli/speculative_flags.h"

#include "cli/common.h"

namespace brioche::cli {

void SpeculativeFlags::add_to(CLI::App& app) {
  app.add_option("--speculative", method,
                 "speculative decoding: prompt-lookup (drafts copied from the prompt and output; same output, "
                 "fewer forwards when the output repeats the prompt) or none")
      ->check(CLI::IsMember({"none", "prompt-lookup"}))
      ->capture_default_str();
  app.add_option("--spec-tokens", tokens, "draft tokens verified per sequence and step")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  app.add_option("--spec-min-ngram", min_ngram, "shortest n-gram prompt lookup matches")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  app.add_option("--spec-max-ngram", max_ngram, "longest n-gram prompt lookup matches (tried first)")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  app.add_option("--spec-max-batch", max_batch,
                 "a step with more decoding sequences than this does not speculate (compute-bound)")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
}

void SpeculativeFlags::apply(engine::SchedulerOptions& options) const {
  if (min_ngram > max_ngram)
    throw UsageError{"--spec-min-ngram " + std::to_string(min_ngram) + " is above --spec-max-ngram " +
                     std::to_string(max_ngram)};
  options.speculative_tokens = enabled() ? tokens : 0;
  options.speculative_min_ngram = min_ngram;
  options.speculative_max_ngram = max_ngram;
  options.speculative_max_batch = max_batch;
}

}  // namespace brioche::cli
