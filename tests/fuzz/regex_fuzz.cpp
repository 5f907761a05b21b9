// libFuzzer target: guided_regex / schema `pattern` text -> grammar ->
// compile over a small vocabulary -> a few matcher steps (grammar_fuzz_run.h).
// Any input must either work or throw brioche::Error.
#include "grammar_fuzz_run.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace brioche::grammar;
  const std::string pattern(reinterpret_cast<const char*>(data), size);
  try {
    (void)regex_to_ebnf_expr(pattern, /*inside_json_string=*/true);  // the schema `pattern` flavour
  } catch (const brioche::Error&) {
  }
  try {
    fuzz::compile_and_walk(Grammar::from_regex(pattern), fuzz::seed_of(data, size));
  } catch (const brioche::Error&) {
  }
  return 0;
}
