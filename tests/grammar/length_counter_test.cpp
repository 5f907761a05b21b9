// Counted repetitions (Automaton CounterEdge): length, item and property
// bounds far above what is unrolled. The language is checked against `jsonschema`'s
// verdicts on documents a few characters or items around each bound
// (tests/grammar/golden/length_counter.json from
// tools/oracle/length_counter_goldens.py); the masks are checked without
// trusting them: near the bounds, every token's bit must equal whether the
// matcher accepts its bytes (GrammarMatcher::accept_token walks the stacks,
// counts included, no mask).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "fixture_vocab.h"
#include "grammar/compiler.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "mask_check.h"

namespace brioche::grammar {
namespace {

using testing_masks::mask_mismatches;
using testing_masks::single_bytes;
using testing_masks::small_alphabet;
using testing_masks::text_of;

const nlohmann::ordered_json& golden() {
  static const nlohmann::ordered_json g = testing_masks::golden_file("length_counter.json");
  return g;
}

const SchemaOptions kCompact{.any_whitespace = false, .strict = false};

TEST(LengthCounter, AcceptsExactlyWhatJsonschemaValidates) {
  const int checked = testing_masks::expect_jsonschema_verdicts(
                          golden()["cases"], kCompact, single_bytes(),
                          [](const std::string& name, const Grammar&, const CompiledGrammar& compiled) {
                            // Counted, not unrolled: the automaton does not grow with the bound.
                            EXPECT_LT(compiled.stats().num_states, 2000) << name;
                            EXPECT_FALSE(compiled.automaton().counters.empty()) << name;
                          })
                          .checked;
  EXPECT_GE(checked, 200);
}

// Prefixes of the golden candidates that end a few characters before the
// bound (up to `cut` bytes off the end), for walks across it.
std::vector<std::string> prefixes_near_bounds(const nlohmann::ordered_json& c, size_t cut, size_t every) {
  std::vector<std::string> out;
  size_t i = 0;
  for (const auto& cand : c["candidates"]) {
    if (i++ % every != 0) continue;
    const std::string text = text_of(cand["parts"]);
    if (text.size() > 100) out.push_back(text.substr(0, text.size() - cut));
  }
  return out;
}

TEST(LengthCounter, MasksAreExactAcrossTheBounds) {
  int walks = 0;
  for (const auto& c : golden()["cases"]) {
    const std::string name = c["name"].get<std::string>();
    auto compiled = CompiledGrammar::compile(Grammar::from_json_schema(c["schema"], kCompact), small_alphabet());
    uint64_t seed = 7;
    for (const std::string& prefix : prefixes_near_bounds(c, 12, 5)) {
      EXPECT_EQ(mask_mismatches(compiled, prefix, 10, seed++, name), 0);
      ++walks;
    }
  }
  EXPECT_GE(walks, 40);
}

// The written-out copies after a counted part are what keeps the masks
// independent of the count. With fewer of them than a token has
// characters, a mask taken from the counted body is wrong near the bound;
// the check above must see it (so it can fail).
TEST(LengthCounter, AWindowShorterThanTheLongestTokenIsCaught) {
  CompileLimits short_window;
  short_window.automaton.counter_window = 2;  // tokens have up to 4 characters
  auto compiled = CompiledGrammar::compile(
      Grammar::from_json_schema(nlohmann::ordered_json{{"type", "string"}, {"maxLength", 20000}}, kCompact),
      small_alphabet(), short_window);
  int mismatches = 0;
  for (int written = 19990; written <= 20000; ++written)
    mismatches += mask_mismatches(compiled, "\"" + std::string(written, 'a'), 1, 3, "short window", /*report=*/false);
  EXPECT_GT(mismatches, 0);
}

// On Llama-3's 128k tokens (its longest token sets the window): every
// token's bit at positions around maxLength 20000, after ASCII, two-byte
// characters and escapes.
TEST(LengthCounter, Llama3MasksAreExactAroundTheBound) {
  auto vocab = testing::fixture_vocabulary("llama3");
  auto compiled = CompiledGrammar::compile(
      Grammar::from_json_schema(nlohmann::ordered_json{{"type", "string"}, {"maxLength", 20000}}, kCompact), vocab);
  EXPECT_LT(compiled->stats().num_states, 4000);
  const std::string far = "\"" + std::string(19000, 'x');
  for (const std::string& tail :
       {std::string(), std::string(1000 - 130, 'x'), std::string(1000 - 3, 'x'), std::string(999, 'y'),
        std::string(1000, 'z'), std::string(996, 'x') + "\xC3\xA9\\n\\u00e9"}) {
    EXPECT_EQ(mask_mismatches(compiled, far + tail, 1, 1, "llama3 after " + std::to_string(19000 + tail.size())), 0);
  }
}

}  // namespace
}  // namespace brioche::grammar
