// Hardening of the grammar engine against hostile input: nesting bounds in
// every front end (regex, EBNF, JSON Schema incl. $ref chains) with the
// deepest accepted input run on a 1 MiB thread stack, long chains built
// without recursion, the deterministic work budget, the compiled-grammar
// cache bounded by bytes, failed compiles that keep nothing, and the
// json_object grammar.
#include <gtest/gtest.h>

#include "sanitizer_stack.h"
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <exception>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "grammar/compiler.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"

namespace brioche::grammar {
namespace {

using Json = nlohmann::ordered_json;

std::shared_ptr<const Vocabulary> byte_vocab() {
  static auto v = [] {
    std::vector<std::string> toks;
    for (int b = 0; b < 256; ++b) toks.push_back(std::string(1, static_cast<char>(b)));
    for (const char* t : {"\"", "true", "null", "{\"", "\":", "\",", "\"}", "ab", "12", "[1", "{}"}) toks.push_back(t);
    toks.push_back("");  // EOS
    int32_t eos = static_cast<int32_t>(toks.size() - 1);
    return std::make_shared<const Vocabulary>(std::move(toks), VocabularyOptions{.eos_ids = {eos}});
  }();
  return v;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Runs fn on a thread with a 1 MiB stack (smaller than the 8 MiB main
// thread's; servers run compiles on pool threads) and rethrows its exception.
void on_small_stack(const std::function<void()>& fn) {
  struct Job {
    const std::function<void()>* fn;
    std::exception_ptr error;
  } job{&fn, nullptr};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, brioche::testing::test_stack_bytes(size_t{1} << 20)), 0);
  pthread_t thread;
  auto body = [](void* p) -> void* {
    auto* j = static_cast<Job*>(p);
    try {
      (*j->fn)();
    } catch (...) {
      j->error = std::current_exception();
    }
    return nullptr;
  };
  ASSERT_EQ(pthread_create(&thread, &attr, body, &job), 0);
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
  if (job.error) std::rethrow_exception(job.error);
}

bool accepts(const Grammar& g, const std::string& text) {
  GrammarMatcher m(CompiledGrammar::compile(g, byte_vocab()));
  return m.accept_bytes(text) && m.can_terminate();
}

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

long resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  long total = 0, resident = 0;
  statm >> total >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

// ---- nesting ---------------------------------------------------------------

TEST(Limits, DeepRegexGroupsFailWithTheDepthAndTheLimit) {
  const std::string deep = repeat("(", 5000) + "a" + repeat(")", 5000);
  std::string e = error_of([&] { Grammar::from_regex(deep); });
  EXPECT_NE(e.find("nests groups 5000 deep; the limit is 256"), std::string::npos) << e;
  e = error_of([&] { regex_to_ebnf_expr(deep, /*inside_json_string=*/true); });  // a schema `pattern`
  EXPECT_NE(e.find("the limit is 256"), std::string::npos) << e;
  // Quantifiers stacked on one atom nest like groups.
  e = error_of([&] { Grammar::from_regex("a" + repeat("{1}", 5000)); });
  EXPECT_NE(e.find("the limit is 256"), std::string::npos) << e;
  // The message quotes the start of the pattern, not megabytes of it.
  EXPECT_LT(e.size(), 400u) << e;
}

TEST(Limits, DeepestAllowedRegexCompilesOnASmallStack) {
  // 256 groups, each an alternation inside a quantified group: every level
  // becomes three levels of EBNF parentheses and IR nodes.
  std::string pattern = "a";
  for (int i = 1; i < kMaxRegexNesting; ++i) pattern = "(b" + pattern + "|c)*";
  pattern = "(x" + pattern + ")";
  on_small_stack([&] {
    Grammar g = Grammar::from_regex(pattern);
    EXPECT_TRUE(accepts(g, "xcbcc"));
    EXPECT_TRUE(accepts(g, "x" + repeat("b", kMaxRegexNesting - 1) + "a"));  // down to the innermost group
    EXPECT_FALSE(accepts(g, "xba"));
  });
}

TEST(Limits, DeepEbnfFailsWithTheDepthAndTheLimit) {
  std::string e = error_of([&] { Grammar::from_ebnf("root ::= " + repeat("(", 5000) + "\"a\"" + repeat(")", 5000)); });
  EXPECT_NE(e.find("parentheses nest 5000 deep"), std::string::npos) << e;
  EXPECT_NE(e.find("the limit is 1024"), std::string::npos) << e;
  // Quantifiers stacked without parentheses deepen the expression tree.
  e = error_of([&] { Grammar::from_ebnf("root ::= \"a\"" + repeat("*", 5000)); });
  EXPECT_NE(e.find("the limit is 2048"), std::string::npos) << e;
  // A lookahead's parentheses count too.
  e = error_of(
      [&] { Grammar::from_ebnf("root ::= \"a\" (= " + repeat("(", 2000) + "\"b\"" + repeat(")", 2000) + ")"); });
  EXPECT_NE(e.find("the limit is 1024"), std::string::npos) << e;
}

TEST(Limits, DeepestAllowedEbnfCompilesOnASmallStack) {
  // 1024 parentheses (the parser's bound) ...
  const std::string parens = "root ::= " + repeat("(\"a\" ", kMaxEbnfNesting) + repeat(")", kMaxEbnfNesting);
  // ... and an expression tree 2001 levels deep (the IR bound is 2048):
  // each level is a repetition of a sequence.
  std::string tree = "\"z\"";
  for (int i = 0; i < 1000; ++i) tree = "(\"a\" " + tree + ")?";
  on_small_stack([&] {
    EXPECT_TRUE(accepts(Grammar::from_ebnf(parens), repeat("a", kMaxEbnfNesting)));
    Grammar g = Grammar::from_ebnf("root ::= " + tree);
    EXPECT_EQ(g.to_ebnf().empty(), false);
    EXPECT_NE(g.content_hash(), 0u);
    EXPECT_TRUE(accepts(g, repeat("a", 1000) + "z"));
    EXPECT_FALSE(accepts(g, "aaaz"));
    EXPECT_TRUE(accepts(g, ""));
  });
}

TEST(Limits, LongRuleChainsCompileOnASmallStack) {
  // 20,000 rules calling each other in a chain: every walker over rules
  // (inlining plan, components, nullability, left recursion) is a loop.
  std::string chain = "root ::= r0\n", aliases = "root ::= a0\n", left = "root ::= l0\n";
  for (int i = 0; i < 20000; ++i) {
    chain += "r" + std::to_string(i) + " ::= \"a\" r" + std::to_string(i + 1) + "?\n";
    aliases += "a" + std::to_string(i) + " ::= a" + std::to_string(i + 1) + "\n";
    left += "l" + std::to_string(i) + " ::= l" + std::to_string(i + 1) + " \"a\" | \"b\"\n";
  }
  chain += "r20000 ::= \"z\"\n";
  aliases += "a20000 ::= \"q\"\n";
  left += "l20000 ::= l0 \"c\"\n";
  on_small_stack([&] {
    EXPECT_TRUE(accepts(Grammar::from_ebnf(chain), "aaa"));
    EXPECT_TRUE(accepts(Grammar::from_ebnf(aliases), "q"));  // inlined only kMaxInlineDepth deep
    std::string e = error_of([&] { CompiledGrammar::compile(Grammar::from_ebnf(left), byte_vocab()); });
    EXPECT_NE(e.find("left recursion"), std::string::npos) << e.substr(0, 200);
    EXPECT_LT(e.size(), 3000u);  // the cycle is named, not all 20,000 rules of it
  });
}

Json nested_items(int depth) {
  Json schema = {{"type", "integer"}};
  for (int i = 0; i < depth; ++i) schema = Json{{"type", "array"}, {"items", std::move(schema)}};
  return schema;
}

TEST(Limits, DeepSchemaFailsWithTheDepthAndTheLimit) {
  // As text: refused by the JSON nesting bound before parsing.
  const std::string text = repeat("{\"items\":", 4999) + "{}" + repeat("}", 4999);
  std::string e = error_of([&] { Grammar::from_json_schema(text); });
  EXPECT_NE(e.find("5000 levels deep; the limit is 128"), std::string::npos) << e;
  // As a document built in memory: refused by the converter's own bound.
  Json deep = nested_items(1000);
  e = error_of([&] { Grammar::from_json_schema(deep); });
  EXPECT_NE(e.find("sub-schemas nest more than 128 deep"), std::string::npos) << e;
  EXPECT_NE(e.find("the limit is 128"), std::string::npos) << e;
}

Json ref_chain(int hops) {
  Json defs = Json::object();
  for (int i = 0; i < hops; ++i) defs["d" + std::to_string(i)] = {{"$ref", "#/$defs/d" + std::to_string(i + 1)}};
  defs["d" + std::to_string(hops)] = {{"type", "string"}, {"maxLength", 3}};
  return {{"$defs", defs}, {"$ref", "#/$defs/d0"}};
}

TEST(Limits, LongRefChainsFailAndRefCyclesAreCaught) {
  std::string e = error_of([&] { Grammar::from_json_schema(ref_chain(5000)); });
  EXPECT_NE(e.find("the limit is 128"), std::string::npos) << e;
  EXPECT_NE(e.find("$ref hops"), std::string::npos) << e;
  // A cycle of plain $refs is a grammar with left recursion; inside allOf
  // the chain is followed a bounded number of hops.
  Json cycle = {{"$defs", {{"a", {{"$ref", "#/$defs/b"}}}, {"b", {{"$ref", "#/$defs/a"}}}}}, {"$ref", "#/$defs/a"}};
  e = error_of([&] { CompiledGrammar::compile(Grammar::from_json_schema(cycle), byte_vocab()); });
  EXPECT_NE(e.find("left recursion"), std::string::npos) << e;
  // allOf of the cycle alone is the cycle: the same left recursion.
  Json all_of_cycle = {{"$defs", {{"a", {{"$ref", "#/$defs/b"}}}, {"b", {{"$ref", "#/$defs/a"}}}}},
                       {"allOf", {{{"$ref", "#/$defs/a"}}}}};
  e = error_of([&] { CompiledGrammar::compile(Grammar::from_json_schema(all_of_cycle), byte_vocab()); });
  EXPECT_NE(e.find("left recursion"), std::string::npos) << e;
  // Merged with another branch, the chain is followed a bounded number of hops.
  Json merged_cycle = {{"$defs", {{"a", {{"$ref", "#/$defs/b"}}}, {"b", {{"$ref", "#/$defs/a"}}}}},
                       {"allOf", {{{"$ref", "#/$defs/a"}}, {{"type", "object"}}}}};
  e = error_of([&] { Grammar::from_json_schema(merged_cycle); });
  EXPECT_NE(e.find("a chain of more than 128 $refs"), std::string::npos) << e;
}

TEST(Limits, DeepestAllowedSchemaCompilesOnASmallStack) {
  // Nested objects reached through $refs: each hop is an object with one
  // property, two converter levels per hop, 126 in all.
  Json defs = Json::object();
  for (int i = 0; i < 63; ++i)
    defs["n" + std::to_string(i)] = {{"type", "object"},
                                     {"properties", {{"x", {{"$ref", "#/$defs/n" + std::to_string(i + 1)}}}}},
                                     {"required", {"x"}}};
  defs["n63"] = {{"type", "integer"}};
  const Json schema = {{"$defs", defs}, {"$ref", "#/$defs/n0"}};
  const Json items = nested_items(kMaxSchemaDepth - 1);
  on_small_stack([&] {
    Grammar g = Grammar::from_json_schema(schema, {.any_whitespace = false});
    EXPECT_TRUE(accepts(g, repeat("{\"x\": ", 63) + "7" + repeat("}", 63)));
    EXPECT_TRUE(accepts(Grammar::from_json_schema(items), repeat("[", 127) + "1" + repeat("]", 127)));
    // 100 hops of plain $refs work too.
    EXPECT_TRUE(accepts(Grammar::from_json_schema(ref_chain(100)), "\"abc\""));
  });
}

TEST(Limits, LongSchemaChainsAreBuiltWithoutRecursion) {
  // Thousands of prefix items, properties, and a key of 5,000 characters:
  // each was once a recursion as deep as its length.
  Json prefix = Json::array();
  for (int i = 0; i < 3000; ++i) prefix.push_back({{"const", i % 10}});
  const Json array = {{"type", "array"}, {"prefixItems", prefix}, {"minItems", 3000}};
  Json props = Json::object();
  for (int i = 0; i < 1000; ++i) props["p" + std::to_string(i)] = {{"type", "integer"}};
  const Json object = {{"type", "object"}, {"properties", props}, {"maxProperties", 2}};
  const std::string long_key(5000, 'k');
  const Json keyed = {
      {"type", "object"}, {"properties", {{long_key, {{"type", "null"}}}}}, {"additionalProperties", true}};
  on_small_stack([&] {
    std::string digits;
    for (int i = 0; i < 3000; ++i) digits += (i ? ", " : "") + std::to_string(i % 10);
    EXPECT_TRUE(accepts(Grammar::from_json_schema(array, {.any_whitespace = false}), "[" + digits + "]"));
    EXPECT_TRUE(accepts(Grammar::from_json_schema(object, {.any_whitespace = false}), "{\"p7\": 1, \"p999\": 2}"));
    EXPECT_FALSE(
        accepts(Grammar::from_json_schema(object, {.any_whitespace = false}), "{\"p7\": 1, \"p8\": 1, \"p9\": 1}"));
    Grammar g = Grammar::from_json_schema(keyed, {.any_whitespace = false});
    EXPECT_TRUE(accepts(g, "{\"" + long_key + "\": null}"));
    EXPECT_FALSE(accepts(g, "{\"" + long_key + "\": 1}"));  // the declared key is not an additional one
    EXPECT_TRUE(accepts(g, "{\"" + long_key.substr(1) + "\": 1}"));
  });
}

TEST(Limits, WrongKeywordTypesAreErrorsWithThePointer) {
  // get<>() on a keyword of the wrong JSON type: a brioche::Error, not nlohmann's.
  for (const char* text : {R"({"$ref": 5})", R"({"properties": {"a": {"format": 3}}})", R"({"minItems": "x"})",
                           R"({"required": [1]})", R"({"$ref": "#/items/99999999999999999999"})",
                           R"({"minimum": 1e400})", R"({"maxItems": 31e300})", R"({"minLength": -1})"}) {
    std::string e = error_of([&] { Grammar::from_json_schema(std::string(text)); });
    EXPECT_NE(e.find("JSON schema"), std::string::npos) << text << ": " << e;
  }
  std::string e = error_of([&] { Grammar::from_json_schema(std::string(R"({"properties": {"a": {"format": 3}}})")); });
  EXPECT_NE(e.find("#/properties/a"), std::string::npos) << e;
}

// ---- work budget -----------------------------------------------------------

const Json kBudgetSchema = {{"type", "object"},
                            {"properties",
                             {{"name", {{"type", "string"}, {"pattern", "^[a-z]{2,8}$"}}},
                              {"when", {{"type", "string"}, {"format", "date-time"}}},
                              {"tags", {{"type", "array"}, {"items", {{"enum", {"a", "bb", "ccc"}}}}}},
                              {"n", {{"type", "number"}, {"minimum", 0.5}, {"maximum", 99}}}}},
                            {"required", {"name", "n"}}};

TEST(Limits, WorkBudgetIsTheSameWhateverTheCacheAndTheLoad) {
  const Grammar g = Grammar::from_json_schema(kBudgetSchema);
  // With deferred states (the default) and without (every mask computed,
  // so a warm compile takes them all from the process-wide cache).
  for (const CompileLimits& limits : {CompileLimits{}, CompileLimits{.defer_tokens = 0}}) {
    clear_shared_mask_cache();
    const uint64_t cold = CompiledGrammar::compile(g, byte_vocab(), limits)->stats().work;
    ASSERT_GT(cold, 0u);
    clear_shared_mask_cache();
    EXPECT_EQ(CompiledGrammar::compile(g, byte_vocab(), limits)->stats().work, cold);
    auto warm = CompiledGrammar::compile(g, byte_vocab(), limits);
    if (limits.defer_tokens == 0) {
      EXPECT_GT(warm->stats().num_shared_states, 0);
    }
    EXPECT_EQ(warm->stats().work, cold);  // cache hits are charged their walks
    prewarm_shared_masks(byte_vocab());
    EXPECT_EQ(CompiledGrammar::compile(g, byte_vocab(), limits)->stats().work, cold);

    // Under load (every core busy), a budget of exactly the work passes and
    // one unit less fails, cold and warm.
    std::atomic<bool> stop{false};
    std::vector<std::thread> burners;
    for (unsigned i = 0; i < std::max(2u, std::thread::hardware_concurrency()); ++i)
      burners.emplace_back([&] {
        volatile uint64_t x = 1;
        while (!stop.load(std::memory_order_relaxed)) x = x * 6364136223846793005ull + 1;
      });
    for (int round = 0; round < 2; ++round) {
      if (round == 0) clear_shared_mask_cache();
      CompileLimits exact = limits;
      exact.max_work = cold;
      EXPECT_EQ(CompiledGrammar::compile(g, byte_vocab(), exact)->stats().work, cold);
      CompileLimits short_by_one = limits;
      short_by_one.max_work = cold - 1;
      std::string e = error_of([&] { CompiledGrammar::compile(g, byte_vocab(), short_by_one); });
      EXPECT_NE(e.find("work budget"), std::string::npos) << e;
    }
    stop = true;
    for (auto& t : burners) t.join();
  }
}

TEST(Limits, FailedCompilesKeepNothing) {
  // Masks computed by a compile that then fails never reach the process-wide
  // cache: the same grammar compiled afterwards computes them itself.
  const Grammar g = Grammar::from_json_schema(kBudgetSchema);
  // (num_shared_states cold counts the states that share a mask with an
  // earlier state of the same grammar.)
  const CompileLimits every_state{.defer_tokens = 0};
  clear_shared_mask_cache();
  auto cold = CompiledGrammar::compile(g, byte_vocab(), every_state);
  clear_shared_mask_cache();
  CompileLimits most = every_state;
  most.max_work = cold->stats().work * 9 / 10;
  EXPECT_NE(error_of([&] { CompiledGrammar::compile(g, byte_vocab(), most); }), "");
  EXPECT_EQ(CompiledGrammar::compile(g, byte_vocab(), every_state)->stats().num_shared_states,
            cold->stats().num_shared_states);
  EXPECT_EQ(CompiledGrammar::compile(g, byte_vocab(), every_state)->stats().num_shared_states,
            cold->stats().num_scannable_states);  // published once that compile succeeded

  // Resident memory does not grow with repeated failures. Each attempt
  // builds 300,000 automaton states (tens of MB) before its size budget
  // stops it; 20 leaked attempts would add more than a GB.
  const Grammar big = Grammar::from_ebnf("root ::= ([a-z] [0-9]){100000} ([A-Z] [0-9]){100000}");
  CompileLimits tiny;
  tiny.automaton.max_states = 300'000;
  tiny.automaton.counter_from = INT64_MAX;  // unrolled (counted, it takes a few states)
  EXPECT_NE(error_of([&] { CompiledGrammar::compile(big, byte_vocab(), tiny); }).find("size budget"),
            std::string::npos);
  const long after_first = resident_bytes();
  for (int i = 0; i < 20; ++i) error_of([&] { CompiledGrammar::compile(big, byte_vocab(), tiny); });
  EXPECT_LT(resident_bytes() - after_first, 200l << 20);
}

// ---- cache by bytes ---------------------------------------------------------

TEST(Limits, CacheIsBoundedByBytes) {
  auto grammar_of = [](int i) { return Grammar::from_ebnf("root ::= \"" + std::to_string(i) + "\" [a-z]{300}"); };
  CompileLimits unrolled;  // sizes that grow with the repetition counts
  unrolled.automaton.counter_from = INT64_MAX;
  const size_t one = CompiledGrammar::compile(grammar_of(0), byte_vocab(), unrolled)->memory_bytes();
  ASSERT_GT(one, 1000u);
  GrammarCache cache(byte_vocab(),
                     GrammarCacheOptions{.max_entries = 1000, .max_bytes = one * 3 + one / 2, .limits = unrolled});
  std::vector<const CompiledGrammar*> first;
  for (int i = 0; i < 10; ++i) {
    auto compiled = cache.get(grammar_of(i));
    if (i < 3) first.push_back(compiled.get());
    EXPECT_LE(cache.bytes(), one * 3 + one / 2) << i;
  }
  EXPECT_EQ(cache.size(), 3u);
  // The most recent three are kept; the first was evicted (compiled again).
  EXPECT_EQ(cache.hits(), 0u);
  cache.get(grammar_of(9));
  EXPECT_EQ(cache.hits(), 1u);
  EXPECT_NE(cache.get(grammar_of(0)).get(), first[0]);
  // A grammar larger than the whole budget serves its caller, uncached.
  const size_t before = cache.size();
  auto huge = cache.get(Grammar::from_ebnf("root ::= [a-z]{5000}"));
  ASSERT_NE(huge, nullptr);
  EXPECT_GT(huge->memory_bytes(), one * 3 + one / 2);
  EXPECT_EQ(cache.size(), before);
  GrammarMatcher m(huge);
  EXPECT_TRUE(m.accept_bytes("abc"));
}

// ---- json_object -------------------------------------------------------------

TEST(Limits, JsonObjectGrammarIsAnObjectAtTheTop) {
  const Grammar object = Grammar::builtin_json_object();
  EXPECT_TRUE(accepts(object, "{}"));
  EXPECT_TRUE(accepts(object, "{\"a\": [1, {\"b\": null}]}"));
  EXPECT_FALSE(accepts(object, "[1]"));
  EXPECT_FALSE(accepts(object, "[]"));
  EXPECT_FALSE(accepts(object, "\"text\""));
  EXPECT_TRUE(accepts(Grammar::builtin_json(), "[1]"));  // the builtin grammar still allows arrays
}

}  // namespace
}  // namespace brioche::grammar
