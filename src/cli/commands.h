// Entry point of the `brioche` program: parses the subcommand and runs it.
#pragma once

namespace brioche::cli {

// Returns the process exit code: 0 ok, 1 runtime failure, 2 usage error.
int main(int argc, char** argv);

}  // namespace brioche::cli
