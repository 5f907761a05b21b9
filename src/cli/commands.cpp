#include "cli/commands.h"

#include <cstdio>
#include <vector>

#include "cli/common.h"
#include "cli/subcommands.h"
#include "core/error.h"
#include "core/printable.h"

namespace brioche::cli {

int main(int argc, char** argv) {
  CLI::App root{"brioche: run, serve and fine-tune LLMs on one machine (CPU or NVIDIA GPU)", "brioche"};
  root.require_subcommand(1);
  root.set_version_flag("--version", "brioche 0.1.0");
  std::vector<Subcommand> subcommands = {
      add_run_command(root),    add_chat_command(root),  add_info_command(root),
      add_bench_command(root),  add_serve_command(root), add_train_command(root),
      add_export_command(root), add_eval_command(root),  add_data_command(root),
  };
  try {
    root.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return root.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return root.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return root.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string where = "brioche";
    for (const auto& sub : subcommands) {
      if (sub.app->parsed()) where += " " + sub.app->get_name();
    }
    std::fprintf(stderr, "brioche: %s (see '%s --help')\n", printable(e.what()).c_str(), where.c_str());
    return kExitUsage;
  }
  for (const auto& sub : subcommands) {
    if (!sub.app->parsed()) continue;
    try {
      return sub.run();
    } catch (const UsageError& e) {
      std::fprintf(stderr, "brioche %s: %s\n", sub.app->get_name().c_str(), printable(e.message).c_str());
      return kExitUsage;
    } catch (const Error& e) {
      std::fprintf(stderr, "brioche %s: %s\n", sub.app->get_name().c_str(), printable(e.what()).c_str());
      return kExitFailure;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "brioche %s: unexpected error: %s\n", sub.app->get_name().c_str(),
                   printable(e.what()).c_str());
      return kExitFailure;
    }
  }
  return kExitUsage;
}

}  // namespace brioche::cli
