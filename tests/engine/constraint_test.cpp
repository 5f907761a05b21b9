// SequenceConstraint without a model, on the Qwen3 vocabulary (a thinking
// model's tokenizer: `<think>` and `</think>` are single tokens): the grammar
// is dormant inside the reasoning block and constrains the answer after it.
#include <gtest/gtest.h>

#include <algorithm>

#include "engine/constraint.h"
#include "grammar/grammar.h"
#include "tokenizer/golden_reader.h"
#include "tokenizer/tokenizer.h"

namespace brioche::engine {
namespace {

using tokenizer::testing::read_zstd_file;
using tokenizer::testing::source_path;

struct Qwen3 {
  std::unique_ptr<tokenizer::Tokenizer> tok;
  std::unique_ptr<grammar::GrammarCache> cache;
  int32_t think_open = -1, think_close = -1;
};

Qwen3& qwen3() {
  static Qwen3 q = [] {
    Qwen3 out;
    const std::string dir = "tests/fixtures/tokenizers/qwen3/";
    out.tok = tokenizer::Tokenizer::from_tokenizer_json(read_zstd_file(source_path(dir + "tokenizer.json.zst")),
                                                        read_zstd_file(source_path(dir + "tokenizer_config.json.zst")));
    out.cache = std::make_unique<grammar::GrammarCache>(grammar_vocabulary(*out.tok, out.tok->vocab_size()));
    out.think_open = *out.tok->token_id("<think>");
    out.think_close = *out.tok->token_id("</think>");
    return out;
  }();
  return q;
}

bool allowed(const uint32_t* mask, int32_t id) { return (mask[id >> 5] >> (id & 31)) & 1u; }

// Feeds `text` token by token (as the tokenizer splits it).
void feed(SequenceConstraint& c, const std::string& text) {
  Qwen3& q = qwen3();
  for (int32_t id : q.tok->encode(text, {.add_special = false, .parse_special = true}))
    ASSERT_TRUE(c.accept(id, q.tok->token_bytes(id))) << "rejected token " << id << " of " << text;
}

TEST(SequenceConstraint, ThinkingModelMayOpenAReasoningBlockThenTheAnswerIsConstrained) {
  Qwen3& q = qwen3();
  GrammarConstraint gc{.compiled = q.cache->get(grammar::Grammar::from_choices({"yes", "no"})),
                       .reasoning_open_token = q.think_open,
                       .reasoning_close = "</think>"};
  SequenceConstraint c(gc);
  bool any = false;
  const uint32_t* mask = c.next_mask(&any);
  ASSERT_NE(mask, nullptr);
  EXPECT_TRUE(allowed(mask, q.think_open));
  EXPECT_TRUE(allowed(mask, *q.tok->token_id("yes")));
  EXPECT_FALSE(allowed(mask, *q.tok->token_id("maybe")));
  ASSERT_TRUE(c.accept(q.think_open, "<think>"));
  // Inside the block: free text, no mask.
  EXPECT_EQ(c.next_mask(&any), nullptr);
  feed(c, "\nThe user asks { whether } maybe; I think yes.\n");
  EXPECT_EQ(c.next_mask(&any), nullptr);
  ASSERT_TRUE(c.accept(q.think_close, "</think>"));
  mask = c.next_mask(&any);
  ASSERT_NE(mask, nullptr);
  EXPECT_TRUE(allowed(mask, *q.tok->token_id("no")));
  EXPECT_FALSE(allowed(mask, q.think_open));
  EXPECT_FALSE(allowed(mask, *q.tok->token_id("maybe")));
  feed(c, "no");
  EXPECT_TRUE(c.terminated());
}

TEST(SequenceConstraint, AnsweringDirectlyStartsTheGrammarAtOnce) {
  Qwen3& q = qwen3();
  GrammarConstraint gc{.compiled = q.cache->get(grammar::Grammar::from_choices({"yes", "no"})),
                       .reasoning_open_token = q.think_open,
                       .reasoning_close = "</think>"};
  SequenceConstraint c(gc);
  feed(c, "yes");
  EXPECT_TRUE(c.terminated());
}

TEST(SequenceConstraint, PromptOpenedBlockAndACloseTagSplitAcrossTokens) {
  Qwen3& q = qwen3();
  GrammarConstraint gc{.compiled = q.cache->get(grammar::Grammar::from_regex("[0-9]+")),
                       .starts_in_reasoning = true,
                       .reasoning_close = "END."};
  SequenceConstraint c(gc);
  bool any = false;
  EXPECT_EQ(c.next_mask(&any), nullptr);
  // "EN" + "D.4" : the tag spans two tokens; the bytes after it go to the matcher.
  ASSERT_TRUE(c.accept(0, "thinking... EN"));
  EXPECT_FALSE(c.active());
  ASSERT_TRUE(c.accept(0, "D.4"));
  EXPECT_TRUE(c.active());
  EXPECT_EQ(c.rejected_tokens(), 0);
  const uint32_t* mask = c.next_mask(&any);
  ASSERT_NE(mask, nullptr);
  EXPECT_TRUE(allowed(mask, *q.tok->token_id("7")));
  EXPECT_FALSE(allowed(mask, *q.tok->token_id("a")));
  // EOS is allowed: "4" already matches.
  for (int32_t eos : q.tok->eos_ids()) EXPECT_TRUE(allowed(mask, eos));
}

TEST(SequenceConstraint, TerminatedGrammarAllowsNothingAndJumpForwardIsTheForcedText) {
  Qwen3& q = qwen3();
  auto g = grammar::Grammar::from_json_schema(
      std::string(R"({"type":"object","properties":{"city":{"enum":["Paris"]}},"required":["city"]})"),
      {.any_whitespace = false});
  SequenceConstraint c(GrammarConstraint{.compiled = q.cache->get(g)});
  EXPECT_EQ(c.forced_continuation(), "{\"city\": \"Paris\"}");
  feed(c, "{\"city\": \"Paris\"}");
  EXPECT_TRUE(c.terminated());
  EXPECT_EQ(c.forced_continuation(), "");
  // A wrong token is refused and counted, the state stays.
  SequenceConstraint d(GrammarConstraint{.compiled = q.cache->get(g)});
  EXPECT_FALSE(d.accept(*q.tok->token_id("a"), "a"));
  EXPECT_EQ(d.rejected_tokens(), 1);
  EXPECT_EQ(d.forced_continuation(), "{\"city\": \"Paris\"}");
}

TEST(SequenceConstraint, VocabularyMarksSpecialAndEosAndPadsTheMask) {
  Qwen3& q = qwen3();
  auto v = grammar_vocabulary(*q.tok, q.tok->vocab_size() + 64);
  EXPECT_EQ(v->size(), q.tok->vocab_size() + 64);
  EXPECT_EQ(v->num_tokens(), q.tok->vocab_size());
  int32_t im_start = *q.tok->token_id("<|im_start|>");
  EXPECT_TRUE(v->is_special(im_start));
  EXPECT_FALSE(v->is_special(*q.tok->token_id("yes")));
  for (int32_t eos : q.tok->eos_ids())
    EXPECT_NE(std::find(v->eos_ids().begin(), v->eos_ids().end(), eos), v->eos_ids().end());
}

}  // namespace
}  // namespace brioche::engine

namespace brioche::engine {
namespace {

// The token jump-forward may skip: the only one the mask allows, never while
// dormant or while the model may still open a reasoning block.
TEST(SequenceConstraint, SoleAllowedTokenIsTheOnlyAllowedOne) {
  Qwen3& q = qwen3();
  auto g = grammar::Grammar::from_json_schema(
      std::string(R"({"type":"object","properties":{"city":{"enum":["Paris"]}},"required":["city"]})"),
      {.any_whitespace = false});
  SequenceConstraint c(GrammarConstraint{.compiled = q.cache->get(g)});
  EXPECT_EQ(c.sole_allowed_token(), -1);  // `{` and `{"` both start the text
  feed(c, "{\"city\": \"Paris\"");
  const int32_t close = c.sole_allowed_token();  // only `}` completes it
  ASSERT_GE(close, 0);
  EXPECT_EQ(q.tok->token_bytes(close), "}");
  bool any = false;
  const uint32_t* mask = c.next_mask(&any);
  int32_t count = 0;
  for (int32_t id = 0; id < q.tok->vocab_size(); ++id) count += allowed(mask, id) ? 1 : 0;
  EXPECT_EQ(count, 1);
  ASSERT_TRUE(c.accept(close, "}"));
  EXPECT_EQ(c.sole_allowed_token(), -1);  // terminated

  GrammarConstraint thinking{.compiled = q.cache->get(grammar::Grammar::from_choices({"yes"})),
                             .reasoning_open_token = q.think_open,
                             .reasoning_close = "</think>"};
  SequenceConstraint t(thinking);
  EXPECT_EQ(t.sole_allowed_token(), -1);  // `<think>` is allowed too
  ASSERT_TRUE(t.accept(q.think_open, "<think>"));
  EXPECT_EQ(t.sole_allowed_token(), -1);  // dormant: free text
}

TEST(SequenceConstraint, AllowedPrefixOfDraftsLeavesTheMatcherWhereItWas) {
  Qwen3& q = qwen3();
  SequenceConstraint c(
      GrammarConstraint{.compiled = q.cache->get(grammar::Grammar::from_choices({"yes please", "no"}))});
  std::vector<int32_t> drafts = q.tok->encode("yes please", {.add_special = false});
  const int32_t n_good = int32_t(drafts.size());
  drafts.push_back(*q.tok->token_id("maybe"));
  drafts.push_back(*q.tok->token_id("yes"));
  EXPECT_EQ(c.allowed_prefix(drafts), n_good);
  // Nothing was consumed: the first draft is still allowed and "no" too.
  bool any = false;
  const uint32_t* mask = c.next_mask(&any);
  ASSERT_NE(mask, nullptr);
  EXPECT_TRUE(allowed(mask, drafts[0]));
  EXPECT_TRUE(allowed(mask, *q.tok->token_id("no")));
  // A forbidden first draft: none.
  EXPECT_EQ(c.allowed_prefix(std::vector<int32_t>{*q.tok->token_id("maybe")}), 0);
  feed(c, "no");
  EXPECT_TRUE(c.terminated());
  EXPECT_EQ(c.allowed_prefix(std::vector<int32_t>{drafts[0]}), 0);
}

}  // namespace
}  // namespace brioche::engine
