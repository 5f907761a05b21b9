#include "cli/generation_flags.h"

namespace brioche::cli {

void GenerationFlags::add_to(CLI::App& app) {
  app.add_option("-n,--max-tokens", max_tokens, "tokens to generate at most")->check(CLI::Range(1, 1 << 20));
  app.add_option("--temp,--temperature", temperature, "sampling temperature; 0 = greedy")
      ->check(CLI::Range(0.0f, 100.0f));
  app.add_option("--top-k", top_k, "keep the k most likely tokens; 0 = off")->check(CLI::Range(0, 1 << 24));
  app.add_option("--top-p", top_p, "nucleus sampling mass; 1 = off")->check(CLI::Range(0.0f, 1.0f));
  app.add_option("--min-p", min_p, "drop tokens below min-p x the top probability; 0 = off")
      ->check(CLI::Range(0.0f, 1.0f));
  app.add_option("--repeat-penalty", repetition_penalty, "repetition penalty; 1 = off")
      ->check(CLI::Range(0.01f, 100.0f));
  app.add_option("--presence-penalty", presence_penalty, "OpenAI presence penalty")->check(CLI::Range(-2.0f, 2.0f));
  app.add_option("--frequency-penalty", frequency_penalty, "OpenAI frequency penalty")->check(CLI::Range(-2.0f, 2.0f));
  app.add_option("--seed", seed, "random seed (same seed, same tokens); -1 = random")
      ->check(CLI::Range(int64_t(-1), INT64_MAX));
  app.add_option("--stop", stop, "stop string (repeatable); not printed");
  app.add_flag("--ignore-eos", ignore_eos, "keep generating past the end-of-text token");
}

engine::GenerationRequest GenerationFlags::to_request(std::vector<int32_t> prompt_tokens) const {
  engine::GenerationRequest request;
  request.prompt_tokens = std::move(prompt_tokens);
  request.max_tokens = max_tokens;
  request.stop = stop;
  request.ignore_eos = ignore_eos;
  request.sampling.temperature = temperature;
  request.sampling.top_k = top_k;
  request.sampling.top_p = top_p;
  request.sampling.min_p = min_p;
  request.sampling.repetition_penalty = repetition_penalty;
  request.sampling.presence_penalty = presence_penalty;
  request.sampling.frequency_penalty = frequency_penalty;
  if (seed >= 0) request.sampling.seed = uint64_t(seed);
  return request;
}

}  // namespace brioche::cli
