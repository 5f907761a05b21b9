// libFuzzer target: guided_grammar (EBNF/GBNF) text -> grammar -> compile
// over a small vocabulary -> a few matcher steps (grammar_fuzz_run.h); the
// grammar also prints back to EBNF that parses again. Any input must either
// work or throw brioche::Error.
#include "grammar_fuzz_run.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace brioche::grammar;
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    Grammar grammar = Grammar::from_ebnf(text);
    // to_ebnf() promises text that parses back; root is rule 0's name there.
    (void)Grammar::from_ebnf(grammar.to_ebnf(), grammar.rules[grammar.root].name);
    fuzz::compile_and_walk(grammar, fuzz::seed_of(data, size));
  } catch (const brioche::Error&) {
  }
  return 0;
}
