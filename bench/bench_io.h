// Small I/O helpers shared by the benchmark programs (not part of the library).
#pragma once

#include <cstdio>
#include <stdexcept>
#include <string>

namespace brioche::bench {

// Standard output of a shell command (popen). Throws when the command cannot
// be started or exits with a non-zero status, naming it.
inline std::string read_command(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) throw std::runtime_error("cannot start: " + cmd);
  char buf[1 << 16];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  if (pclose(p) != 0) throw std::runtime_error("command failed: " + cmd);
  return out;
}

// A zstd-compressed file's text (through the zstd program, as the benchmarks'
// fixtures are stored).
inline std::string read_zstd_file(const std::string& path) { return read_command("zstd -dc '" + path + "'"); }

}  // namespace brioche::bench
