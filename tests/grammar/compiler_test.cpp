// The compiler's sharing and deferral: masks of deferred states (computed by
// the first mask that needs them, possibly from several threads at once) and
// of states taken from the process-wide cache equal those of a full eager
// compile; rules with equal structure hash alike across grammars; trie
// subtrees accepted whole give the masks that token-by-token checks give.
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <thread>
#include <tuple>

#include "grammar/automaton.h"
#include "grammar/compiler.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "fixture_vocab.h"

namespace brioche::grammar {
namespace {

// Single bytes plus multi-byte pieces of JSON, so tokens cross rule ends.
std::shared_ptr<const Vocabulary> json_vocab() {
  static auto v = [] {
    std::vector<std::string> toks;
    for (int b = 0; b < 256; ++b) toks.push_back(std::string(1, static_cast<char>(b)));
    for (const char* t :
         {"\"",   "\":", "\",",  "\"}",    "{\"",    " \"", "  ", "\n ", "12", "345", "true", "false", "null",
          "name", "na",  "me\"", "\": \"", "\", \"", "-0",  ".5", "e+",  "[{", "}]",  "ab",   "abc\""})
      toks.push_back(t);
    toks.push_back("");  // EOS
    const int32_t eos = static_cast<int32_t>(toks.size() - 1);
    return std::make_shared<const Vocabulary>(std::move(toks), VocabularyOptions{.eos_ids = {eos}, .special_ids = {}});
  }();
  return v;
}

const char* kSchema = R"({"type":"object","properties":{"name":{"type":"string"},"n":{"type":"integer","minimum":-5},
  "tags":{"type":"array","items":{"type":"string","format":"date"}},"x":{}},"required":["name"],
  "additionalProperties":{"type":"number"}})";

// Masks along seeded random walks.
std::vector<std::vector<uint32_t>> walk_masks(const std::shared_ptr<const CompiledGrammar>& g, uint32_t seed) {
  std::vector<std::vector<uint32_t>> out;
  std::mt19937 rng(seed);
  for (int walk = 0; walk < 8; ++walk) {
    GrammarMatcher m(g);
    for (int step = 0; step < 60 && !m.is_terminated(); ++step) {
      std::vector<uint32_t> mask(m.mask_words());
      m.fill_next_token_bitmask(mask.data());
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < json_vocab()->size(); ++id)
        if (mask[id >> 5] >> (id & 31) & 1) allowed.push_back(id);
      out.push_back(std::move(mask));
      if (allowed.empty()) break;
      m.accept_token(allowed[rng() % allowed.size()]);
    }
  }
  return out;
}

TEST(Compiler, DeferredStatesEqualEagerOnesAcrossThreads) {
  Grammar g = Grammar::from_json_schema(std::string(kSchema));
  clear_shared_mask_cache();
  auto eager = CompiledGrammar::compile(g, json_vocab(), CompileLimits{.defer_tokens = 0});
  EXPECT_EQ(eager->stats().num_deferred_states, 0);
  clear_shared_mask_cache();
  auto deferred = CompiledGrammar::compile(g, json_vocab());
  EXPECT_GT(deferred->stats().num_deferred_states, 0);
  // Four threads fill masks of the same grammar at once; each must see the
  // eager grammar's masks.
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      auto a = walk_masks(deferred, 100 + t), b = walk_masks(eager, 100 + t);
      mismatches[t] = a == b ? 0 : 1;
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
}

TEST(Compiler, SharedMasksEqualFreshOnes) {
  Grammar g = Grammar::from_json_schema(std::string(kSchema));
  clear_shared_mask_cache();
  auto fresh = CompiledGrammar::compile(g, json_vocab(), CompileLimits{.defer_tokens = 0});
  prewarm_shared_masks(json_vocab());
  auto shared = CompiledGrammar::compile(g, json_vocab(), CompileLimits{.defer_tokens = 0});
  EXPECT_GT(shared->stats().num_shared_states, 0);
  EXPECT_EQ(walk_masks(shared, 7), walk_masks(fresh, 7));
}

TEST(Compiler, PrewarmedCacheSharesTheJsonRules) {
  clear_shared_mask_cache();
  GrammarCache cache(json_vocab(), GrammarCacheOptions{.prewarm = true});
  auto g = cache.get(Grammar::from_json_schema(std::string(R"({"type":"array","items":{"type":"string"}})")));
  // The JSON string rule's states come from the prewarmed cache.
  EXPECT_GT(g->stats().num_shared_states, 0);
}

// Single bytes and every pair of regex characters: wide enough that the
// states of format: regex walk more tokens than CompileLimits::defer_tokens
// (they are computed at compile time, as with a real tokenizer).
std::shared_ptr<const Vocabulary> regex_pairs_vocab() {
  static auto v = [] {
    const std::string chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789()[]|*+?.^$\\/{},";
    std::vector<std::string> toks;
    for (int b = 0; b < 256; ++b) toks.push_back(std::string(1, static_cast<char>(b)));
    for (char x : chars)
      for (char y : chars) toks.push_back(std::string{x, y});
    toks.push_back("");  // EOS
    const int32_t eos = static_cast<int32_t>(toks.size() - 1);
    return std::make_shared<const Vocabulary>(std::move(toks), VocabularyOptions{.eos_ids = {eos}, .special_ids = {}});
  }();
  return v;
}

TEST(Compiler, PrewarmedCacheSharesTheRegexFormatLevels) {
  // format: regex nests its groups level by level; every level below the
  // top is the same rules in any schema, so after the prewarm a schema
  // whose `pattern` wraps the regex (GitLab's `^/.+/$`) walks few states of
  // its own, and its masks are those of a cold compile.
  Grammar g = Grammar::from_json_schema(std::string(R"({"type":"string","format":"regex","pattern":"^/.+/$"})"));
  auto walked = [](const CompiledGrammar& c) {
    const CompileStats& st = c.stats();
    return st.num_scannable_states - st.num_shared_states - st.num_deferred_states;
  };
  clear_shared_mask_cache();
  auto cold = CompiledGrammar::compile(g, regex_pairs_vocab());
  clear_shared_mask_cache();
  prewarm_shared_masks(regex_pairs_vocab());
  auto warm = CompiledGrammar::compile(g, regex_pairs_vocab());
  EXPECT_GT(walked(*cold), 20);
  EXPECT_LT(walked(*warm) * 4, walked(*cold))
      << walked(*warm) << " states walked after the prewarm, " << walked(*cold) << " cold";
  GrammarMatcher a(cold), b(warm);
  std::vector<uint32_t> mask_a(a.mask_words()), mask_b(b.mask_words());
  for (char c : std::string(R"("/(?:a|[b-d]+)*\\d{2,3}(x(y))?/")")) {
    a.fill_next_token_bitmask(mask_a.data());
    b.fill_next_token_bitmask(mask_b.data());
    EXPECT_EQ(mask_a, mask_b) << "before '" << c << "'";
    ASSERT_TRUE(a.accept_token(static_cast<uint8_t>(c)));
    ASSERT_TRUE(b.accept_token(static_cast<uint8_t>(c)));
  }
}

TEST(Compiler, StructureHashIgnoresRuleNumbering) {
  // The same recursive JSON value group, reached first through a different
  // rule (so numbered differently), hashes alike.
  Automaton a = Automaton::build(Grammar::from_json_schema(std::string("{}")));
  Automaton b = Automaton::build(Grammar::from_json_schema(
      std::string(R"({"type":"array","items":{"anyOf":[{"type":"object"},{"type":"array"}]}})")));
  auto ha = a.rule_structure_hashes(), hb = b.rule_structure_hashes();
  int matched = 0;
  for (const char* name : {"json_value", "json_array", "json_object", "json_string"}) {
    int ra = -1, rb = -1;
    for (size_t r = 0; r < a.rule_names.size(); ++r)
      if (a.rule_names[r] == name) ra = static_cast<int>(r);
    for (size_t r = 0; r < b.rule_names.size(); ++r)
      if (b.rule_names[r] == name) rb = static_cast<int>(r);
    ASSERT_GE(ra, 0);
    ASSERT_GE(rb, 0);
    EXPECT_TRUE(ha[ra] == hb[rb]) << name;
    matched += ha[ra] == hb[rb];
  }
  EXPECT_EQ(matched, 4);
  // Different rules hash differently.
  int value = -1, array = -1;
  for (size_t r = 0; r < a.rule_names.size(); ++r) {
    if (a.rule_names[r] == "json_value") value = static_cast<int>(r);
    if (a.rule_names[r] == "json_array") array = static_cast<int>(r);
  }
  EXPECT_FALSE(ha[value] == ha[array]);
}

}  // namespace
}  // namespace brioche::grammar

namespace brioche::grammar {
namespace {

// Tokens whose subtrees the compiler accepts whole (plain ASCII words,
// well-formed UTF-8, a character cut off by the token's end) next to ones it
// must read (quotes, escapes, control bytes, stray continuation bytes,
// overlong and out-of-range leads).
std::shared_ptr<const Vocabulary> text_vocab() {
  static auto v = [] {
    std::vector<std::string> toks;
    for (int b = 0; b < 256; ++b) toks.push_back(std::string(1, static_cast<char>(b)));
    for (const char* t : {"inter",
                          "international",
                          "internationalization",
                          "in",
                          "int",
                          "caf\xC3\xA9",
                          "caf\xC3",
                          "\xC3\xA9t\xC3\xA9",
                          "\xE2\x82\xAC",
                          "\xE2\x82",
                          "\xF0\x9F\x98\x80",
                          "\xF0\x9F",
                          "na\xC3\xAFve",
                          "a\"",
                          "a\\n",
                          "a\\",
                          "x\x01",
                          "x\xA9",
                          "\xC0\xAF",
                          "\xF5\x80",
                          "\xED\xA0\x80",
                          "\xE0\x80\x80",
                          "ok\", \"",
                          "z\xC3\xA9\"",
                          "tab\t",
                          " \xE4\xB8\xAD\xE6\x96\x87",
                          "\xE4\xB8\xAD\xE6"})
      toks.push_back(t);
    toks.push_back("");  // EOS
    const int32_t eos = static_cast<int32_t>(toks.size() - 1);
    return std::make_shared<const Vocabulary>(std::move(toks), VocabularyOptions{.eos_ids = {eos}, .special_ids = {}});
  }();
  return v;
}

TEST(Compiler, WholeSubtreeAcceptanceEqualsTokenByTokenChecks) {
  const Vocabulary& v = *text_vocab();
  for (const char* schema : {R"({"type":"string"})", R"({"type":"string","maxLength":6})",
                             R"({"type":"string","pattern":"^[a-z]+$"})", R"({"type":"string","format":"email"})"}) {
    clear_shared_mask_cache();
    GrammarMatcher m(CompiledGrammar::compile(Grammar::from_json_schema(std::string(schema)), text_vocab()));
    for (const char* prefix : {"\"", "\"in", "\"caf\xC3"}) {
      m.reset();
      if (!m.accept_bytes(prefix)) continue;  // e.g. pattern: no UTF-8
      std::vector<uint32_t> mask(size_t(m.mask_words()));
      m.fill_next_token_bitmask(mask.data());
      for (int32_t id = 0; id < v.num_tokens(); ++id) {
        const bool in_mask = mask[size_t(id) >> 5] >> (id & 31) & 1;
        const bool accepts = m.accept_token(id);
        if (accepts) m.rollback(1);
        EXPECT_EQ(in_mask, accepts) << schema << " after " << prefix << ": token " << id << " '" << v.token(id) << "'";
      }
    }
  }
}

// A bounded string unrolled (counted repetitions off) has one copy of the
// character states per position; states far from the bound walk every
// token alike and share one mask (Automaton::walk_class_offsets), so only
// the last positions cost a walk each. The masks must stay exact right up
// to the bound.
TEST(Compiler, LongBoundedStringsShareMasksAndStayExactAtTheBound) {
  const Vocabulary& v = *text_vocab();
  const std::string schema = R"({"type":"string","maxLength":300})";
  clear_shared_mask_cache();
  CompileLimits unrolled{.defer_tokens = 0};
  unrolled.automaton.counter_from = INT64_MAX;
  auto compiled = CompiledGrammar::compile(Grammar::from_json_schema(schema), text_vocab(), unrolled);
  EXPECT_GT(compiled->stats().num_states, 1500);
  // Most states take their mask from an equivalent one instead of walking.
  EXPECT_GT(compiled->stats().num_shared_states * 4, compiled->stats().num_scannable_states * 3);
  const std::vector<int32_t> classes = compiled->automaton().walk_class_offsets(v.max_token_length() + 1, 1);
  std::set<std::pair<int32_t, int32_t>> distinct;
  for (size_t s = 0; s < classes.size(); ++s) distinct.insert({compiled->automaton().states[s].rule, classes[s]});
  EXPECT_LT(distinct.size() * 4, classes.size());
  GrammarMatcher m(compiled);
  for (size_t written : {size_t(0), size_t(150), size_t(279), size_t(290), size_t(296), size_t(299), size_t(300)}) {
    m.reset();
    ASSERT_TRUE(m.accept_bytes("\"" + std::string(written, 'x'))) << written;
    std::vector<uint32_t> mask(size_t(m.mask_words()));
    m.fill_next_token_bitmask(mask.data());
    int32_t allowed = 0;
    for (int32_t id = 0; id < v.num_tokens(); ++id) {
      const bool in_mask = mask[size_t(id) >> 5] >> (id & 31) & 1;
      const bool accepts = m.accept_token(id);
      if (accepts) m.rollback(1);
      allowed += accepts;
      EXPECT_EQ(in_mask, accepts) << "after " << written << " characters: token " << id << " '" << v.token(id) << "'";
    }
    if (written == 300) {
      EXPECT_GE(allowed, 1);  // the closing quote
    }
  }
  // Three strings of ~1024 characters on Llama-3's 128k tokens: about 37k
  // states, well within the default work budget (it used to exceed it).
  // Their bounds differ, else the three rules would be merged into one.
  const std::string three = R"({"type":"object","properties":{"a":{"type":"string","maxLength":1024},)"
                            R"("b":{"type":"string","maxLength":1023},"c":{"type":"string","maxLength":1022}},)"
                            R"("required":["a","b","c"]})";
  clear_shared_mask_cache();
  CompileLimits llama_unrolled;
  llama_unrolled.automaton.counter_from = INT64_MAX;
  auto big =
      CompiledGrammar::compile(Grammar::from_json_schema(three), testing::fixture_vocabulary("llama3"), llama_unrolled);
  EXPECT_GT(big->stats().num_states, 30000);
  EXPECT_LT(big->stats().work, kDefaultCompileWork / 4);
  // Counted (the default): the 1024 copies become one counted body and the
  // copies within a token of the bound (where the masks' work is).
  clear_shared_mask_cache();
  auto counted = CompiledGrammar::compile(Grammar::from_json_schema(three), testing::fixture_vocabulary("llama3"));
  EXPECT_LT(counted->stats().num_states * 4, big->stats().num_states);
  EXPECT_LT(counted->stats().work, kDefaultCompileWork / 4);
}

// Masks are shared by what a walk of up to the longest token meets
// (Automaton::forward_hashes), not by rule: the copies near the bound of a
// string of maxLength 30 are those of one of maxLength 45, in another rule
// and another grammar. Every state's mask taken from the cache must equal
// the one a cold compile computes.
TEST(Compiler, NearBoundMasksAreSharedAcrossBounds) {
  auto same = [](const StateMask* a, const StateMask* b) {
    if ((a == nullptr) != (b == nullptr)) return false;
    return a == nullptr || (a->accepted_bits == b->accepted_bits && a->accepted_ids == b->accepted_ids &&
                            a->uncertain_ranks == b->uncertain_ranks);
  };
  const std::string first = R"({"type":"string","maxLength":30})";
  const std::string second =
      R"({"type":"object","properties":{"a":{"type":"string","maxLength":45},"b":{"type":"string","pattern":"^[a-z]{0,30}$"}}})";
  clear_shared_mask_cache();
  auto cold =
      CompiledGrammar::compile(Grammar::from_json_schema(second), text_vocab(), CompileLimits{.defer_tokens = 0});
  clear_shared_mask_cache();
  CompiledGrammar::compile(Grammar::from_json_schema(first), text_vocab(), CompileLimits{.defer_tokens = 0});
  CompiledGrammar::compile(Grammar::from_json_schema(std::string(R"({"type":"string","pattern":"^[a-z]{0,20}$"})")),
                           text_vocab(), CompileLimits{.defer_tokens = 0});
  auto warm =
      CompiledGrammar::compile(Grammar::from_json_schema(second), text_vocab(), CompileLimits{.defer_tokens = 0});
  EXPECT_GT(warm->stats().num_shared_states, 60);  // the last 30 positions of "a" and 20 of "b", and more
  ASSERT_EQ(warm->stats().num_states, cold->stats().num_states);
  int compared = 0;
  for (int32_t s = 0; s < warm->stats().num_states; ++s) {
    EXPECT_TRUE(same(warm->mask_of_state(s), cold->mask_of_state(s))) << "state " << s;
    compared += warm->mask_of_state(s) != nullptr;
  }
  EXPECT_GT(compared, 100);
  // And without trusting either compile: each token's bit at every length
  // against what the matcher accepts.
  const Vocabulary& v = *text_vocab();
  GrammarMatcher m(warm);
  std::vector<uint32_t> mask(size_t(m.mask_words()));
  for (const auto& [open, bound] : {std::pair<std::string, int>{"{\"a\":\"", 45}, {"{\"b\":\"", 30}})
    for (int written = 0; written <= bound; ++written) {
      m.reset();
      ASSERT_TRUE(m.accept_bytes(open + std::string(size_t(written), 'i')));
      m.fill_next_token_bitmask(mask.data());
      for (int32_t id = 0; id < v.num_tokens(); ++id) {
        const bool in_mask = mask[size_t(id) >> 5] >> (id & 31) & 1;
        const bool accepts = m.accept_token(id);
        if (accepts) m.rollback(1);
        ASSERT_EQ(in_mask, accepts) << open << " + " << written << " characters: token '" << v.token(id) << "'";
      }
    }
}

// States at least 32 bytes into a string (MaskBuilder::is_deep) are left to
// their first mask: the copies near the far bound of a counted string, the
// layers of a pattern's length count, and the rules of a pattern whose
// lengths are counted in its DFA (a length lookahead: one rule per state and
// length, called only where a string ends). Those masks, computed at first
// use, equal the eager compile's at every length up to the bounds, and each
// token's bit is what the matcher accepts. Strings of fewer than 32 bytes
// leave nothing for its depth: the count is a lower bound (a counter's exit
// counts its rounds, the calls of a DFA's rules count where they are made),
// and 31 bytes are not 32.
TEST(Compiler, DeepStringStatesWaitForTheirFirstMaskAndEqualEagerOnes) {
  const Vocabulary& v = *text_vocab();
  // Depth counts bytes, the opening quote included: an ASCII string of at
  // most 30 characters has no state 32 bytes in (one of 31 has: the state
  // after its last character, where the closing quote is read).
  const std::string shallow =
      R"({"type":"object","properties":{"a":{"type":"string","pattern":"^[a-z]*$","maxLength":30},)"
      R"("b":{"type":"string","pattern":"(?=^.{3,30}$)^[a-z0-9]+(-[a-z0-9]+)*$"},)"
      R"("c":{"type":"string","pattern":"^(?!aws:)[a-z:]*$","maxLength":30}}})";
  clear_shared_mask_cache();
  EXPECT_EQ(CompiledGrammar::compile(Grammar::from_json_schema(shallow), text_vocab())->stats().num_deep_states, 0);
  // The DFA's rules alone: their states past 32 characters wait too.
  const std::string chain = R"({"type":"string","pattern":"(?=^.{3,70}$)^[a-z0-9]+(-[a-z0-9]+)*$"})";
  EXPECT_GT(CompiledGrammar::compile(Grammar::from_json_schema(chain), text_vocab())->stats().num_deep_states, 20);
  const std::string deep = R"({"type":"object","properties":{"a":{"type":"string","maxLength":3000},)"
                           R"("b":{"type":"string","pattern":"(?=^.{3,70}$)^[a-z0-9]+(-[a-z0-9]+)*$"},)"
                           R"("c":{"type":"string","pattern":"^(?!aws:)[a-z:]*$","minLength":1,"maxLength":300}}})";
  clear_shared_mask_cache();
  auto eager =
      CompiledGrammar::compile(Grammar::from_json_schema(deep), text_vocab(), CompileLimits{.defer_tokens = 0});
  clear_shared_mask_cache();
  auto lazy = CompiledGrammar::compile(Grammar::from_json_schema(deep), text_vocab());
  EXPECT_EQ(eager->stats().num_deep_states, 0);
  EXPECT_GT(lazy->stats().num_deep_states, 100);
  GrammarMatcher m(lazy), reference(eager);
  std::vector<uint32_t> mask(size_t(m.mask_words())), expected(mask.size());
  for (const auto& [open, bound, fill] : {std::tuple<std::string, int, std::string>{"{\"a\":\"", 3000, "i"},
                                          {"{\"b\":\"", 70, "a-"},
                                          {"{\"c\":\"", 300, "a:"}})
    for (int written = 0; written <= bound; written += written < bound - 40 ? 37 : 1) {
      std::string text;
      while (static_cast<int>(text.size()) < written) text += fill;
      text.resize(size_t(written));
      if (!text.empty() && text.back() == '-') text.back() = 'a';  // a label ends in a letter or digit
      m.reset();
      reference.reset();
      ASSERT_TRUE(m.accept_bytes(open + text)) << open << written;
      ASSERT_TRUE(reference.accept_bytes(open + text));
      m.fill_next_token_bitmask(mask.data());
      reference.fill_next_token_bitmask(expected.data());
      ASSERT_EQ(mask, expected) << open << " + " << written << " characters";
      for (int32_t id = 0; id < v.num_tokens(); ++id) {
        const bool in_mask = mask[size_t(id) >> 5] >> (id & 31) & 1;
        const bool accepts = m.accept_token(id);
        if (accepts) m.rollback(1);
        ASSERT_EQ(in_mask, accepts) << open << " + " << written << " characters: token '" << v.token(id) << "'";
      }
    }
}

TEST(Vocabulary, BytesAndUtf8BelowEachTrieNode) {
  const Vocabulary& v = *text_vocab();
  auto node_of = [&](std::string_view prefix) {
    int32_t node = 0;
    for (unsigned char b : prefix) {
      const auto& n = v.trie_nodes()[size_t(node)];
      int32_t next = -1;
      for (int32_t e = n.kid_begin; e < n.kid_end; ++e)
        if (v.trie_edges()[size_t(e)].byte == b) next = v.trie_edges()[size_t(e)].node;
      if (next < 0) return -1;
      node = next;
    }
    return node;
  };
  auto has = [&](int32_t node, uint8_t b) { return (v.trie_bytes_below()[size_t(node)][b >> 6] >> (b & 63) & 1) != 0; };
  const int32_t inter = node_of("inter");
  ASSERT_GE(inter, 0);
  EXPECT_TRUE(has(inter, 'z'));  // internationalization
  EXPECT_TRUE(has(inter, 'n'));  // international
  EXPECT_FALSE(has(inter, 'q'));
  EXPECT_FALSE(has(inter, '"'));
  EXPECT_TRUE(v.trie_utf8_below()[size_t(inter)]);
  EXPECT_TRUE(v.trie_utf8_below()[size_t(node_of("caf"))]);        // "é" and a cut-off "\xC3"
  EXPECT_FALSE(v.trie_utf8_below()[size_t(node_of("x"))]);         // "x\xA9": a stray continuation byte
  EXPECT_FALSE(v.trie_utf8_below()[size_t(node_of("\xC3"))]);      // continues mid-character
  EXPECT_FALSE(v.trie_utf8_below()[size_t(node_of("\xE2\x82"))]);  // "\xAC" below: continues mid-character
  EXPECT_FALSE(v.trie_utf8_below()[0]);                            // single bytes 0x80.. are tokens
}

}  // namespace
}  // namespace brioche::grammar
