// A draft model proposing under the request's grammar against proposing
// blind (drafts cut at the first token the grammar forbids), and against no
// speculation, on JSON-schema requests, side by side in one process.
//
// The target is the default model (SmolLM2-135M Q4_1) as stored or
// converted to f32 at load (--target f32); the draft is the same file
// converted at load (--draft f32 | q8_0 | f16) or as stored (--draft same). Two engines share both models'
// weights: one drafts under the grammar (speculative_grammar_drafts), one
// blind; "plain" is the first with speculation off per request. Every round
// runs each prompt in the three modes, in an order that rotates per round;
// per mode it prints each round's tokens/s over all prompts, the median and
// the spread, the acceptance rate (kept / proposed), drafts kept per verify
// step, and whether every greedy output equalled plain decoding.
//
//   cmake --build build/cpu --target spec_grammar_bench
//   build/cpu/bench/spec_grammar_bench [--target f32] [--draft q8_0] [--rounds 5] [--tokens 96] [--spec-tokens 4] [--fixed]
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/prompt.h"
#include "engine/engine.h"
#include "grammar/grammar.h"
#include "model/model.h"

namespace {

using namespace brioche;
using Clock = std::chrono::steady_clock;

struct Task {
  const char* name;
  const char* prompt;
  const char* schema;
};

const Task kTasks[] = {
    {"person",
     "Extract the person as JSON with the fields name, born, city and occupation: Alan Turing was born in 1912 in "
     "London and worked as a mathematician.",
     R"({"type":"object","properties":{"name":{"type":"string","maxLength":32},
       "born":{"type":"integer","minimum":0,"maximum":2100},"city":{"type":"string","maxLength":32},
       "occupation":{"type":"string","maxLength":32}},"required":["name","born","city","occupation"],
       "additionalProperties":false})"},
    {"fruits", "List three fruits and their colors as a JSON array of objects with name and color.",
     R"({"type":"array","minItems":3,"maxItems":3,"items":{"type":"object","properties":{
       "name":{"type":"string","maxLength":16},"color":{"type":"string","maxLength":16}},
       "required":["name","color"],"additionalProperties":false}})"},
    {"laptop",
     "Describe a laptop for sale as JSON with brand, model, price in dollars, whether it is in stock, and a list "
     "of up to three features.",
     R"({"type":"object","properties":{"brand":{"type":"string","maxLength":20},
       "model":{"type":"string","maxLength":20},"price":{"type":"number"},"in_stock":{"type":"boolean"},
       "features":{"type":"array","maxItems":3,"items":{"type":"string","maxLength":30}}},
       "required":["brand","model","price","in_stock","features"],"additionalProperties":false})"},
    // Keys, enums and patterns the model would not pick unprompted: its
    // unmasked guesses are often forbidden here.
    {"weather", "What is the weather like in Paris in spring? Answer as JSON.",
     R"({"type":"object","properties":{"sky":{"enum":["clear","cloudy","rain","snow"]},
       "temp_c":{"type":"integer","minimum":-50,"maximum":60},"wind":{"enum":["calm","breeze","gale"]},
       "humidity_pct":{"type":"integer","minimum":0,"maximum":100}},
       "required":["sky","temp_c","wind","humidity_pct"],"additionalProperties":false})"},
    {"ticket", "File a support ticket as JSON: the user cannot log in after resetting their password.",
     R"({"type":"object","properties":{"id":{"type":"string","pattern":"^[A-Z]{3}-[0-9]{4}$"},
       "priority":{"enum":["P1","P2","P3"]},"component":{"enum":["auth","billing","ui","api"]},
       "summary":{"type":"string","maxLength":60}},
       "required":["id","priority","component","summary"],"additionalProperties":false})"},
};

enum Mode { kPlain = 0, kBlind = 1, kMasked = 2 };
const char* const kModeNames[] = {"plain", "blind drafts", "masked drafts"};

struct Tally {
  std::vector<double> rates;  // tokens/s of each round, over all prompts
  uint64_t drafts = 0, accepted = 0, verify_steps = 0;
  bool same = true;
};

std::string loadavg() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  std::string draft = "q8_0", target_dtype = "same";
  int rounds = 5, tokens = 96, spec_tokens = 4;
  bool adaptive = true;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s: expected a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--draft")
      draft = value();
    else if (arg == "--target")
      target_dtype = value();
    else if (arg == "--rounds")
      rounds = std::stoi(value());
    else if (arg == "--tokens")
      tokens = std::stoi(value());
    else if (arg == "--spec-tokens")
      spec_tokens = std::stoi(value());
    else if (arg == "--fixed")
      adaptive = false;
    else {
      std::fprintf(
          stderr,
          "unknown argument '%s'; expected --target same|f32, --draft same|f32|f16|q8_0, --rounds N, --tokens N, "
          "--spec-tokens K, --fixed\n",
          arg.c_str());
      return 2;
    }
  }
  const char* home = std::getenv("HOME");
  const std::string path = std::getenv("BRIOCHE_MODEL") ? std::getenv("BRIOCHE_MODEL")
                                                        : std::string(home ? home : "") +
                                                              "/.cache/brioche/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) {
    std::fprintf(stderr, "skipped: default model not found at %s\n", path.c_str());
    return 77;
  }
  model::LoadOptions draft_load{.max_context = 2048};
  if (draft == "f32")
    draft_load.convert_weights = DType::F32;
  else if (draft == "f16")
    draft_load.convert_weights = DType::F16;
  else if (draft == "q8_0")
    draft_load.convert_weights = DType::Q8_0;
  else if (draft != "same") {
    std::fprintf(stderr, "--draft: expected same, f32, f16 or q8_0, got '%s'\n", draft.c_str());
    return 2;
  }
  model::LoadOptions target_load{.max_context = 2048};
  if (target_dtype == "f32")
    target_load.convert_weights = DType::F32;
  else if (target_dtype != "same") {
    std::fprintf(stderr, "--target: expected same or f32, got '%s'\n", target_dtype.c_str());
    return 2;
  }
  std::shared_ptr<model::Model> target = model::Model::load(path, target_load);
  engine::EngineOptions options{.kv = {.max_context = 2048}};
  options.scheduler.speculative_tokens = spec_tokens;
  options.scheduler.speculative_adaptive = adaptive;
  options.draft_model = model::Model::load(path, draft_load);
  options.scheduler.speculative_grammar_drafts = true;
  std::unique_ptr<engine::Engine> masked = engine::Engine::from_model(target, options);
  options.scheduler.speculative_grammar_drafts = false;
  std::unique_ptr<engine::Engine> blind = engine::Engine::from_model(target, options);
  grammar::GrammarCache cache(engine::grammar_vocabulary(*masked->tokenizer(), masked->vocab_size()));

  std::vector<engine::GenerationRequest> requests;
  for (const Task& task : kTasks) {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    messages.push_back({{"role", "user"}, {"content", task.prompt}});
    engine::GenerationRequest r;
    r.prompt_tokens = cli::chat_prompt_tokens(*masked, messages);
    r.sampling.temperature = 0;
    r.max_tokens = tokens;
    r.constraint.compiled = cache.get(grammar::Grammar::from_json_schema(std::string(task.schema)));
    requests.push_back(std::move(r));
  }

  struct Result {
    std::vector<int32_t> tokens;
    double seconds = 0;
    uint64_t drafts = 0, accepted = 0, verify_steps = 0;
  };
  auto run = [&](Mode mode, engine::GenerationRequest r) {
    engine::Engine& e = mode == kBlind ? *blind : *masked;
    r.speculative = mode != kPlain;
    Result out;
    const engine::EngineStats before = e.stats();
    const auto start = Clock::now();
    std::shared_ptr<engine::RequestHandle> handle = e.submit(std::move(r));
    while (std::optional<engine::GenerationEvent> ev = handle->next()) {
      if (ev->finish == engine::FinishReason::Error) {
        std::fprintf(stderr, "request failed: %s\n", ev->error.c_str());
        std::exit(1);
      }
      out.tokens.insert(out.tokens.end(), ev->tokens.begin(), ev->tokens.end());
    }
    out.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    const engine::EngineStats after = e.stats();
    out.drafts = after.spec_draft_tokens - before.spec_draft_tokens;
    out.accepted = after.spec_accepted_tokens - before.spec_accepted_tokens;
    out.verify_steps = after.spec_verify_steps - before.spec_verify_steps;
    return out;
  };

  std::printf("spec_grammar_bench: %s, target %s, draft %s, %s up to %d drafts, greedy, %d tokens at most\n",
              std::filesystem::path(path).filename().c_str(), target_dtype.c_str(), draft.c_str(),
              adaptive ? "adaptive" : "fixed", spec_tokens, tokens);
  std::printf("load average at start: %s\n", loadavg().c_str());
  // Untimed: every prompt once in every mode (page-in, first shapes).
  std::vector<std::vector<int32_t>> reference;
  for (const engine::GenerationRequest& r : requests) {
    reference.push_back(run(kPlain, r).tokens);
    run(kBlind, r);
    run(kMasked, r);
  }
  Tally tally[3];
  std::vector<std::array<uint64_t, 6>> per_task(requests.size());  // (drafts, accepted) per mode
  for (int round = 0; round < rounds; ++round) {
    double seconds[3] = {0, 0, 0};
    size_t generated[3] = {0, 0, 0};
    for (size_t p = 0; p < requests.size(); ++p) {
      for (int k = 0; k < 3; ++k) {
        const Mode mode = Mode((k + round + int(p)) % 3);  // rotating order
        Result res = run(mode, requests[p]);
        seconds[mode] += res.seconds;
        generated[mode] += res.tokens.size();
        tally[mode].drafts += res.drafts;
        tally[mode].accepted += res.accepted;
        tally[mode].verify_steps += res.verify_steps;
        per_task[p][2 * mode] += res.drafts;
        per_task[p][2 * mode + 1] += res.accepted;
        tally[mode].same = tally[mode].same && res.tokens == reference[p];
      }
    }
    std::printf("round %d:", round + 1);
    for (int m = 0; m < 3; ++m) {
      tally[m].rates.push_back(double(generated[m]) / seconds[m]);
      std::printf("  %s %.2f t/s", kModeNames[m], tally[m].rates.back());
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  std::printf("load average at end: %s\n", loadavg().c_str());
  std::printf("| mode          | median t/s | min-max t/s   | vs plain | accepted | per step | same output |\n");
  std::printf("|---------------|------------|---------------|----------|----------|----------|-------------|\n");
  const double plain = median(tally[kPlain].rates);
  for (int m = 0; m < 3; ++m) {
    const Tally& t = tally[m];
    const auto [lo, hi] = std::minmax_element(t.rates.begin(), t.rates.end());
    char accepted[32] = "-", per_step[32] = "-";
    if (m != kPlain) {
      std::snprintf(accepted, sizeof accepted, "%.1f%%",
                    t.drafts ? 100.0 * double(t.accepted) / double(t.drafts) : 0.0);
      std::snprintf(per_step, sizeof per_step, "%.2f",
                    t.verify_steps ? double(t.accepted) / double(t.verify_steps) : 0.0);
    }
    std::printf("| %-13s | %10.2f | %6.2f-%-6.2f | %7.2fx | %8s | %8s | %-11s |\n", kModeNames[m], median(t.rates), *lo,
                *hi, median(t.rates) / plain, accepted, per_step, t.same ? "yes" : "NO");
  }
  for (size_t p = 0; p < requests.size(); ++p) {
    const auto& c = per_task[p];
    std::printf("%-8s blind: %llu kept of %llu drafts; masked: %llu kept of %llu drafts\n", kTasks[p].name,
                (unsigned long long)c[2 * kBlind + 1], (unsigned long long)c[2 * kBlind],
                (unsigned long long)c[2 * kMasked + 1], (unsigned long long)c[2 * kMasked]);
  }
  std::printf("drafts proposed: blind %llu, masked %llu\n", (unsigned long long)tally[kBlind].drafts,
              (unsigned long long)tally[kMasked].drafts);
  return 0;
}
