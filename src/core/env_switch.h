// Switches read from the environment, all declared in one registry
// (core/env_registry.cpp: name, kind, default, what it does), listed by
// `brioche info --env` and in the README. They serve A/B runs of features
// that are on by default (BRIOCHE_CUDA_GRAPHS, BRIOCHE_CUDA_PDL, ...),
// checks that are off by default (BRIOCHE_POISON), and a few paths.
//
// Reading a name the registry does not declare is an Error, so a new switch
// cannot be added without its line in the registry (tests/core/
// env_registry_test.cpp also checks every name the sources read).
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace brioche {

enum class EnvKind {
  OnUnlessZero,  // a feature that is on; "0" turns it off
  OffUnlessOne,  // a check or mode that is off; "1" turns it on
  Integer,       // a number (a default when unset)
  Text,          // a path or name (empty when unset)
};

struct EnvVariable {
  std::string_view name;
  EnvKind kind;
  std::string_view default_value;  // as the user would write it; "" when unset means none
  std::string_view effect;         // what it does, one line
};

// Every variable brioche reads, sorted by name.
std::span<const EnvVariable> env_registry();

// The registry's entry for `name`; throws brioche::Error when it has none.
const EnvVariable& registered_env(std::string_view name);

// False only when the variable `name` is set to "0".
bool env_switch_on(const char* name);

// True only when the variable `name` is set to "1".
bool env_flag_set(const char* name);

// The integer in the variable `name`, or `fallback` when it is unset.
long env_int(const char* name, long fallback);

// The number in the variable `name`, or `fallback` when it is unset.
double env_number(const char* name, double fallback);

// The text of the variable `name`, or "" when it is unset.
std::string env_text(const char* name);

}  // namespace brioche
