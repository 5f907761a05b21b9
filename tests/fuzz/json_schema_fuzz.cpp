// libFuzzer target: a JSON schema as text -> grammar (both whitespace
// modes, alternating by input) -> compile over a small vocabulary -> a few
// matcher steps (grammar_fuzz_run.h). Any input must either work or throw
// brioche::Error (malformed or too deep JSON included).
#include "grammar_fuzz_run.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace brioche::grammar;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const uint64_t seed = fuzz::seed_of(data, size);
  try {
    const SchemaOptions options{.any_whitespace = (seed & 1) != 0, .max_whitespace = (seed & 2) ? 20 : 0};
    fuzz::compile_and_walk(Grammar::from_json_schema(text, options), seed);
  } catch (const brioche::Error&) {
  }
  return 0;
}
