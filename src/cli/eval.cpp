// `brioche eval`: measuring a model and its adapters. Each evaluation is a
// nested subcommand (declared in cli/eval_commands.h, one file each).
#include <memory>
#include <vector>

#include "cli/common.h"
#include "cli/eval_commands.h"
#include "cli/subcommands.h"

namespace brioche::cli {

Subcommand add_eval_command(CLI::App& root) {
  CLI::App* app = root.add_subcommand(
      "eval",
      "evaluate a model and adapters (ifeval: verifiable instructions; preference: accuracy on pairs; perplexity)");
  app->require_subcommand(1);
  auto evaluations = std::make_shared<std::vector<Subcommand>>(std::vector<Subcommand>{
      add_eval_ifeval_command(*app),
      add_eval_preference_command(*app),
      add_eval_perplexity_command(*app),
  });
  return {app, [evaluations] {
            for (const Subcommand& e : *evaluations)
              if (e.app->parsed()) return e.run();
            throw UsageError{"eval: name an evaluation (see 'brioche eval --help')"};
          }};
}

}  // namespace brioche::cli
