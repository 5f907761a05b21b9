// Errors that carry context: what was expected, what was found, and where.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace brioche {

// Every failure the user can cause (bad file, bad flag, bad request) is an
// Error with a message that names the thing, the expectation and the finding.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Build a message from streamable parts: error_message("expected ", n, " got ", m).
template <typename... Parts>
std::string error_message(Parts&&... parts) {
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  return out.str();
}

template <typename... Parts>
[[noreturn]] void fail(Parts&&... parts) {
  throw Error(error_message(std::forward<Parts>(parts)...));
}

}  // namespace brioche

// Internal invariant or user-facing precondition; throws brioche::Error.
#define BRIOCHE_CHECK(cond, ...)    \
  do {                              \
    if (!(cond)) [[unlikely]]       \
      ::brioche::fail(__VA_ARGS__); \
  } while (0)
