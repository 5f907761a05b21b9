#include "cli/commands.h"

#include <cstdio>

namespace brioche::cli {

int main(int argc, char** argv) {
  std::fprintf(stderr, "brioche: no subcommands are built yet\n");
  return 2;
}

}  // namespace brioche::cli
