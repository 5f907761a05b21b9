#include "cli/speculative_flags.h"

#include "cli/common.h"
#include "cli/load_engine.h"

namespace brioche::cli {

void SpeculativeFlags::add_to(CLI::App& app) {
  app.add_option("--speculative", method,
                 "speculative decoding: prompt-lookup (drafts copied from the prompt and output; same output, "
                 "fewer forwards when the output repeats the prompt), draft-model (with --draft-model) or none")
      ->check(CLI::IsMember({"none", "prompt-lookup", "draft-model"}))
      ->capture_default_str();
  app.add_option("--draft-model", draft_model,
                 "speculate with this smaller model (GGUF or safetensors) as the proposer; it must share the "
                 "model's tokenizer (implies --speculative draft-model)");
  app.add_flag("--spec-fixed-length", fixed_length,
               "always verify --spec-tokens drafts (default: each sequence's length follows its acceptance rate)");
  app.add_option("--spec-row-cost", row_cost,
                 "cost of one more verify row relative to a decode step, for the adaptive length")
      ->check(CLI::Range(0.0, 10.0))
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
  if (method == "draft-model" && draft_model.empty())
    throw UsageError{"--speculative draft-model needs --draft-model FILE"};
  if (!draft_model.empty() && method == "prompt-lookup")
    throw UsageError{"--draft-model and --speculative prompt-lookup: pick one proposer"};
  options.speculative_tokens = enabled() ? tokens : 0;
  options.speculative_adaptive = !fixed_length;
  options.speculative_row_cost = row_cost;
  options.speculative_min_ngram = min_ngram;
  options.speculative_max_ngram = max_ngram;
  options.speculative_max_batch = max_batch;
}

}  // namespace brioche::cli

namespace brioche::cli {

void SpeculativeFlags::load_draft(const ModelFlags& target, engine::EngineOptions& options) const {
  if (draft_model.empty()) return;
  if (target.tensor_parallel > 1 || target.tp_rank >= 0)
    throw UsageError{"--draft-model is not supported with tensor parallelism yet"};
  ModelFlags draft = target;
  draft.model = draft_model;
  draft.adapter.clear();
  draft.weights_dtype = "stored";
  options.draft_model = load_model(draft, options.kv.max_context);
}

}  // namespace brioche::cli
