#include "cli/commands.h"

int main(int argc, char** argv) { return brioche::cli::main(argc, argv); }
