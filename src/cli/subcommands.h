// Each subcommand registers its flags on the root app and returns how to run.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace brioche::cli {

struct Subcommand {
  CLI::App* app = nullptr;
  std::function<int()> run;  // returns the exit code; may throw UsageError or brioche::Error
};

Subcommand add_run_command(CLI::App& root);
Subcommand add_chat_command(CLI::App& root);
Subcommand add_info_command(CLI::App& root);
Subcommand add_bench_command(CLI::App& root);
Subcommand add_serve_command(CLI::App& root);
Subcommand add_train_command(CLI::App& root);
Subcommand add_export_command(CLI::App& root);
Subcommand add_eval_command(CLI::App& root);  // eval ifeval | ... (cli/eval_commands.h)
Subcommand add_data_command(CLI::App& root);  // data curate | convert | inspect

}  // namespace brioche::cli
