// The evaluations under `brioche eval` (cli/eval.cpp registers them).
#pragma once

#include "cli/subcommands.h"

namespace brioche::cli {

Subcommand add_eval_ifeval_command(CLI::App& eval);      // eval_ifeval.cpp
Subcommand add_eval_preference_command(CLI::App& eval);  // eval_preference.cpp
Subcommand add_eval_perplexity_command(CLI::App& eval);  // eval_perplexity.cpp

}  // namespace brioche::cli
