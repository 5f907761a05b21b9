// ShortWalkKeys: states with equal two-byte keys must agree on everything
// the mask compiler's deferral estimate (MaskBuilder::walk_is_small) reads
// from the DFA: the bytes the state's closure reads, and after each of
// them whether the closure returned into the caller, died, and which bytes
// it reads next. Checked against the DFA itself on every state of grammars
// with copies that call rules (arrays of objects, members), calls of rules
// that may return without reading, counted repetitions and uniqueItems.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "grammar/automaton.h"
#include "grammar/frontier_dfa.h"
#include "grammar/grammar.h"
#include "grammar/short_walk_keys.h"

namespace brioche::grammar {
namespace {

// What walk_is_small reads about state s, written out.
std::string two_byte_walk(FrontierDfa& dfa, int32_t s) {
  const int32_t c0 = dfa.start(s);
  const std::string first(dfa.readable_bytes(c0));
  std::string out = first + "|";
  for (char b : first) {
    const int32_t c1 = dfa.next(c0, static_cast<uint8_t>(b));
    out += std::string(1, b) + (dfa.escaped(c1) ? "E" : "-") + (dfa.dead(c1) ? "D" : "-");
    if (!dfa.dead(c1)) out += std::string(dfa.readable_bytes(c1));
    out += ";";
  }
  return out;
}

// Returns how many states share a key with an earlier state (the keys must
// merge something for the check to mean anything).
int expect_keys_imply_equal_walks(const Grammar& g) {
  AutomatonLimits limits;
  limits.counter_window = 8;
  const Automaton a = Automaton::build(g, limits);
  const std::vector<Automaton::StructureHash> rule_hashes = a.rule_structure_hashes();
  const std::vector<char> reading = a.rules_reading_before_return();
  // The fallback (epsilon cycles) may only merge states that are alike in
  // every way: none here.
  ShortWalkKeys keys(a, rule_hashes, reading, [](int32_t s) {
    return Automaton::StructureHash{0x1234ull + static_cast<uint64_t>(s), 1};
  });
  FrontierDfa dfa(a);
  std::map<std::pair<uint64_t, uint64_t>, std::pair<int32_t, std::string>> seen;
  int merged = 0;
  for (int32_t s = 0; s < static_cast<int32_t>(a.states.size()); ++s) {
    if (!a.has_byte_edges(s) && a.states[s].rule_begin == a.states[s].rule_end) continue;
    const Automaton::StructureHash k = keys.two_bytes(s);
    const std::string walk = two_byte_walk(dfa, s);
    auto [it, inserted] = seen.emplace(std::make_pair(k.a, k.b), std::make_pair(s, walk));
    if (inserted) continue;
    ++merged;
    EXPECT_EQ(walk, it->second.second) << "states " << it->second.first << " and " << s << " ("
                                       << a.rule_names[a.states[s].rule] << ") share a key";
  }
  return merged;
}

TEST(ShortWalkKeys, EqualKeysReadTheSameTwoBytes) {
  const nlohmann::ordered_json objects = {
      {"type", "array"},
      {"items",
       {{"type", "object"},
        {"properties", {{"k", {{"type", "string"}}}, {"j", {{"type", "integer"}}}, {"m", {{"type", "boolean"}}}}},
        {"required", {"k"}}}},
      {"maxItems", 30}};
  EXPECT_GT(expect_keys_imply_equal_walks(Grammar::from_json_schema(objects, SchemaOptions{.any_whitespace = false})),
            100);
  EXPECT_GT(expect_keys_imply_equal_walks(Grammar::from_json_schema(objects, SchemaOptions{.max_whitespace = 3})), 100);
  const nlohmann::ordered_json unique = {
      {"type", "array"}, {"items", {{"type", "string"}, {"maxLength", 5}}}, {"uniqueItems", true}, {"maxItems", 12}};
  expect_keys_imply_equal_walks(Grammar::from_json_schema(unique, SchemaOptions{.any_whitespace = false}));
  // Calls of rules that may be empty (opt), that read (other), a counted
  // repetition (more than 2 x 8 copies) and right recursion.
  EXPECT_GT(expect_keys_imply_equal_walks(Grammar::from_ebnf("root ::= (opt \",\" other \";\"){0,40} \"x\"\n"
                                                             "opt ::= (\"z\" opt)?\nother ::= \"q\" | \"r\" other\n")),
            10);
  expect_keys_imply_equal_walks(
      Grammar::from_ebnf("root ::= (e f){2,60} \"!\"\ne ::= (\"a\" e)? [b-d]?\n"
                         "f ::= \"b\" f? | \"\"\n"));
}

}  // namespace
}  // namespace brioche::grammar
