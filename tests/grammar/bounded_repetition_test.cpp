// Bounded repetitions (`maxLength`, `minLength`, `maxItems`): near the bound
// of an unrolled repetition each copy has its own mask, and the compiler
// derives it from an earlier copy that walks every short token alike
// (MaskBuilder::derive, Automaton::walk_class_offsets' prefix twins). The
// check here is independent of the masks: at every step of walks that run
// into the bounds, a token's mask bit must equal whether the matcher accepts
// its bytes (GrammarMatcher::accept_token walks the stacks, no mask).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "grammar/compiler.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "mask_check.h"

namespace brioche::grammar {
namespace {

// Walks `walks` times and checks every token's bit at every step. Returns
// the number of steps checked.
int check_walks(const nlohmann::ordered_json& schema, int walks) {
  // Multi-byte tokens cross the bounds, and the longest token (4) is what
  // the derivation relies on.
  auto vocab = testing_masks::alphabet_vocabulary("a\"\\n[], \xC3\xA9");
  auto compiled = CompiledGrammar::compile(
      Grammar::from_json_schema(schema, SchemaOptions{.any_whitespace = false, .strict = false}), vocab);
  std::vector<uint32_t> mask(vocab->num_words());
  uint64_t rng = 99;
  auto next = [&] {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(rng >> 33);
  };
  int steps = 0;
  for (int walk = 0; walk < walks; ++walk) {
    GrammarMatcher m(compiled);
    std::string text;
    for (int step = 0; step < 600 && !m.is_terminated(); ++step) {
      m.fill_next_token_bitmask(mask.data());
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < vocab->size(); ++id) {
        const bool bit = (mask[id >> 5] >> (id & 31) & 1) != 0;
        bool accepted;
        if (id == 0) {
          accepted = m.can_terminate();
        } else {
          accepted = m.accept_token(id);
          if (accepted) m.rollback(1);
        }
        EXPECT_EQ(bit, accepted) << schema.dump() << ": token '" << vocab->token(id) << "' after " << text.size()
                                 << " bytes: " << text;
        if (bit != accepted) return steps;
        if (accepted) allowed.push_back(id);
      }
      ++steps;
      if (allowed.empty()) {
        ADD_FAILURE() << schema.dump() << ": dead end after " << text;
        return steps;
      }
      // After the first walk: the longest of a few allowed tokens after
      // which the document is still open (so the walk runs into the bound).
      int32_t pick = allowed[next() % allowed.size()];
      for (int tries = 0; tries < 16 && walk > 0; ++tries) {
        const int32_t p = allowed[next() % allowed.size()];
        if (p == 0 || vocab->token(p).size() < vocab->token(pick).size()) continue;
        m.accept_token(p);
        const bool open = !m.can_terminate();
        m.rollback(1);
        if (open || pick == 0) pick = p;
      }
      if (pick != 0) text += vocab->token(pick);
      EXPECT_TRUE(m.accept_token(pick));
    }
  }
  return steps;
}

TEST(BoundedRepetition, StringMaxLengthMasksAreExact) {
  EXPECT_GT(check_walks({{"type", "string"}, {"maxLength", 300}}, 3), 150);
}

TEST(BoundedRepetition, StringLengthRangeMasksAreExact) {
  EXPECT_GT(check_walks({{"type", "string"}, {"minLength", 270}, {"maxLength", 290}}, 2), 100);
}

TEST(BoundedRepetition, ArrayMaxItemsMasksAreExact) {
  const nlohmann::ordered_json schema = {
      {"type", "array"}, {"items", {{"type", "string"}, {"maxLength", 2}}}, {"maxItems", 120}};
  EXPECT_GT(check_walks(schema, 2), 100);
}

}  // namespace
}  // namespace brioche::grammar
