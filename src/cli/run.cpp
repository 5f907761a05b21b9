// `brioche run`: one prompt in, streamed tokens out, speed on stderr.
#include <chrono>
#include <cstdio>
#include <iostream>

#include "cli/common.h"
#include "cli/generation_flags.h"
#include "cli/load_engine.h"
#include "cli/prompt.h"
#include "cli/speculative_flags.h"
#include "cli/subcommands.h"
#include "core/error.h"

namespace brioche::cli {

namespace {

struct RunFlags {
  ModelFlags model;
  GenerationFlags generation;
  SpeculativeFlags speculative;
  std::string prompt;
  std::string system;
  bool raw = false;
};

int run(const RunFlags& flags) {
  if (flags.prompt.empty()) throw UsageError{"no prompt: pass -p \"your prompt\" (or '-p -' to read stdin)"};
  std::string prompt = flags.prompt;
  if (prompt == "-") prompt.assign(std::istreambuf_iterator<char>(std::cin), {});

  engine::EngineOptions options;
  flags.speculative.apply(options.scheduler);
  flags.speculative.load_draft(flags.model, options);
  auto engine = load_engine(flags.model, options);
  std::vector<int32_t> tokens;
  if (flags.raw) {
    tokens = raw_prompt_tokens(*engine, prompt);
  } else {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    if (!flags.system.empty()) messages.push_back({{"role", "system"}, {"content", flags.system}});
    messages.push_back({{"role", "user"}, {"content", prompt}});
    tokens = chat_prompt_tokens(*engine, messages);
  }

  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  Clock::time_point first_token{};
  int generated = 0;
  auto done = engine->generate(flags.generation.to_request(tokens), [&](const engine::GenerationEvent& event) {
    if (!event.tokens.empty() && generated == 0) first_token = Clock::now();
    generated += int(event.tokens.size());
    std::fwrite(event.text.data(), 1, event.text.size(), stdout);
    std::fflush(stdout);
  });
  const auto end = Clock::now();
  std::fputc('\n', stdout);
  if (done.finish == engine::FinishReason::Error) throw brioche::Error(done.error);

  auto seconds = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
  const double prefill_s = generated > 0 ? seconds(start, first_token) : seconds(start, end);
  const double decode_s = generated > 1 ? seconds(first_token, end) : 0.0;
  std::fprintf(stderr, "\n[%d prompt tokens in %.2f s (%.1f tok/s), %d generated in %.2f s (%.1f tok/s), finish: %s]\n",
               int(tokens.size()), prefill_s, tokens.size() / std::max(prefill_s, 1e-9), generated, decode_s,
               generated > 1 ? (generated - 1) / decode_s : 0.0,
               done.finish ? engine::finish_reason_name(*done.finish) : "?");
  if (flags.speculative.enabled()) {
    engine->shutdown();  // the stats of the last step are in once the engine thread is done
    const engine::EngineStats s = engine->stats();
    std::fprintf(stderr,
                 "[speculative %s: %llu drafts in %llu verify steps, %llu accepted (%.1f%%), %.2f accepted per step]\n",
                 flags.speculative.proposer().c_str(), (unsigned long long)s.spec_draft_tokens,
                 (unsigned long long)s.spec_verify_steps, (unsigned long long)s.spec_accepted_tokens,
                 s.spec_draft_tokens ? 100.0 * double(s.spec_accepted_tokens) / double(s.spec_draft_tokens) : 0.0,
                 s.spec_verify_steps ? double(s.spec_accepted_tokens) / double(s.spec_verify_steps) : 0.0);
  }
  return kExitOk;
}

}  // namespace

Subcommand add_run_command(CLI::App& root) {
  auto flags = std::make_shared<RunFlags>();
  CLI::App* app = root.add_subcommand("run", "generate from one prompt, streaming tokens to stdout");
  flags->model.add_to(*app);
  flags->generation.add_to(*app);
  flags->speculative.add_to(*app);
  app->add_option("-p,--prompt", flags->prompt, "the prompt ('-' reads stdin)");
  app->add_option("-s,--system", flags->system, "system message (chat models)");
  app->add_flag("--raw", flags->raw, "send the prompt as plain text, without the chat template");
  return {app, [flags] { return run(*flags); }};
}

}  // namespace brioche::cli
