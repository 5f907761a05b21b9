#include "cli/bench_speculative.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/prompt.h"
#include "core/error.h"
#include "engine/engine.h"

namespace brioche::cli {
namespace {

// The default workload: an edit that copies most of its input (where
// prompt lookup shines; a draft model helps on any text).
constexpr const char* kEditPrompt =
    "Rewrite the paragraph, replacing the word \"cat\" with \"dog\". Keep everything else exactly as it is.\n\n"
    "The cat sat on the mat near the window of the old house. Every morning the cat watched the birds in the "
    "garden, and every evening the cat slept by the fire. The neighbours said the cat was the calmest animal "
    "on the street, and the children who lived next door brought the cat small gifts on Sundays.";

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError{"--spec-prompt: cannot read '" + path + "'"};
  std::stringstream buffer;
  buffer << in.rdbuf();
  // Without the file's final newlines, as "$(cat FILE)" gives them to
  // `brioche run -p`: the same prompt, so the same replies as there.
  std::string text = buffer.str();
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  return text;
}

struct Run {
  double seconds = 0;
  size_t generated = 0;
  std::vector<std::vector<int32_t>> tokens;  // per request
};

}  // namespace

void run_speculative_bench(std::shared_ptr<model::Model> model, const SpeculativeBench& bench) {
  engine::EngineOptions options;
  int max_batch = 1;
  for (int b : bench.batch_sizes) max_batch = std::max(max_batch, b);
  options.scheduler.max_running = std::max(64, max_batch);
  bench.speculative->apply(options.scheduler);
  bench.speculative->load_draft(*bench.model_flags, options);
  auto engine = engine::Engine::from_model(std::move(model), options);

  std::vector<std::pair<std::string, std::string>> prompts;  // (name, text)
  if (bench.prompt_files.empty()) prompts.push_back({"edit", kEditPrompt});
  for (const std::string& path : bench.prompt_files) {
    const size_t slash = path.find_last_of('/');
    prompts.push_back({slash == std::string::npos ? path : path.substr(slash + 1), read_text(path)});
  }
  const bool greedy = bench.sampling.temperature < 1e-5f;
  std::printf(
      "speculative: %s, up to %d drafts%s, T %.2f, %d tokens per request, %d repetitions (plain and "
      "speculative alternate)\n",
      bench.speculative->proposer().c_str(), options.scheduler.speculative_tokens,
      options.scheduler.speculative_adaptive ? " (adaptive)" : "", bench.sampling.temperature, bench.max_tokens,
      bench.repetitions);
  std::printf("| %-18s | %9s | %9s | %8s | %8s | %8s |%s\n", "test", "plain t/s", "spec t/s", "speed-up", "accepted",
              "per step", greedy ? " same output |" : "");
  std::printf("|--------------------|-----------|-----------|----------|----------|----------|%s\n",
              greedy ? "-------------|" : "");

  using Clock = std::chrono::steady_clock;
  for (const auto& [name, text] : prompts) {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    messages.push_back({{"role", "user"}, {"content", text}});
    const std::vector<int32_t> prompt_tokens = chat_prompt_tokens(*engine, messages);
    for (int b : bench.batch_sizes) {
      auto run = [&](bool speculative, uint64_t seed) {
        std::vector<engine::GenerationRequest> requests;
        for (int s = 0; s < b; ++s) {
          engine::GenerationRequest r;
          r.prompt_tokens = prompt_tokens;
          r.max_tokens = bench.max_tokens;
          r.sampling = bench.sampling;
          r.sampling.seed = seed + uint64_t(s);
          r.speculative = speculative;
          requests.push_back(std::move(r));
        }
        Run out;
        const auto start = Clock::now();
        std::vector<std::shared_ptr<engine::RequestHandle>> handles = engine->submit_all(std::move(requests));
        for (auto& h : handles) {
          out.tokens.emplace_back();
          while (std::optional<engine::GenerationEvent> e = h->next()) {
            if (e->finish == engine::FinishReason::Error) fail("bench: engine request failed: ", e->error);
            out.tokens.back().insert(out.tokens.back().end(), e->tokens.begin(), e->tokens.end());
            out.generated += e->tokens.size();
          }
        }
        out.seconds = std::chrono::duration<double>(Clock::now() - start).count();
        return out;
      };
      // One untimed pair first (page-in, first-shape costs), then alternate.
      run(false, 1);
      run(true, 1);
      Run plain_total, spec_total;
      bool same = true;
      uint64_t drafts = 0, accepted = 0, verify_steps = 0;
      for (int r = 0; r < bench.repetitions; ++r) {
        const uint64_t seed = 1000 * uint64_t(r + 1);
        Run plain = run(false, seed);
        const engine::EngineStats before = engine->stats();
        Run spec = run(true, seed);
        const engine::EngineStats after = engine->stats();
        drafts += after.spec_draft_tokens - before.spec_draft_tokens;
        accepted += after.spec_accepted_tokens - before.spec_accepted_tokens;
        verify_steps += after.spec_verify_steps - before.spec_verify_steps;
        plain_total.seconds += plain.seconds;
        plain_total.generated += plain.generated;
        spec_total.seconds += spec.seconds;
        spec_total.generated += spec.generated;
        same = same && plain.tokens == spec.tokens;
      }
      const double plain_rate = double(plain_total.generated) / plain_total.seconds;
      const double spec_rate = double(spec_total.generated) / spec_total.seconds;
      const std::string test = name + (b > 1 ? " x" + std::to_string(b) : "");
      std::printf("| %-18s | %9.2f | %9.2f | %7.2fx | %7.1f%% | %8.2f |%s\n", test.c_str(), plain_rate, spec_rate,
                  spec_rate / plain_rate, drafts ? 100.0 * double(accepted) / double(drafts) : 0.0,
                  verify_steps ? double(accepted) / double(verify_steps) : 0.0,
                  greedy ? (same ? " yes         |" : " NO          |") : "");
      std::fflush(stdout);
    }
  }
}

}  // namespace brioche::cli
