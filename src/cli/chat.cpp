// `brioche chat`: a conversation in the terminal. Each turn re-renders the
// whole conversation through the chat template; the engine's prefix cache
// recognises the earlier turns, so only the new text is computed.
#include <cstdio>
#include <iostream>
#include <string>

#include "cli/common.h"
#include "cli/generation_flags.h"
#include "cli/load_engine.h"
#include "cli/prompt.h"
#include "cli/subcommands.h"
#include "core/error.h"

namespace brioche::cli {

namespace {

struct ChatFlags {
  ModelFlags model;
  GenerationFlags generation;
  std::string system;
};

int chat(const ChatFlags& flags) {
  auto engine = load_engine(flags.model);
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (!flags.system.empty()) messages.push_back({{"role", "system"}, {"content", flags.system}});
  std::fprintf(stderr, "brioche chat: type a message; /reset clears the conversation, /exit or Ctrl-D quits.\n");

  std::string line;
  while (true) {
    std::fputs("> ", stderr);
    if (!std::getline(std::cin, line)) break;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      messages.erase(messages.begin() + (flags.system.empty() ? 0 : 1), messages.end());
      std::fprintf(stderr, "(conversation cleared)\n");
      continue;
    }
    if (line.empty()) continue;
    messages.push_back({{"role", "user"}, {"content", line}});
    std::string reply;
    auto done = engine->generate(flags.generation.to_request(chat_prompt_tokens(*engine, messages)),
                                 [&](const engine::GenerationEvent& event) {
                                   reply += event.text;
                                   std::fwrite(event.text.data(), 1, event.text.size(), stdout);
                                   std::fflush(stdout);
                                 });
    std::fputc('\n', stdout);
    if (done.finish == engine::FinishReason::Error) throw brioche::Error(done.error);
    messages.push_back({{"role", "assistant"}, {"content", reply}});
  }
  return kExitOk;
}

}  // namespace

Subcommand add_chat_command(CLI::App& root) {
  auto flags = std::make_shared<ChatFlags>();
  CLI::App* app = root.add_subcommand("chat", "chat with a model in the terminal");
  flags->model.add_to(*app);
  flags->generation.add_to(*app);
  app->add_option("-s,--system", flags->system, "system message");
  return {app, [flags] { return chat(*flags); }};
}

}  // namespace brioche::cli
