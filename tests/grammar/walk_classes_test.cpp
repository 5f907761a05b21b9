// Automaton::walk_class_offsets refines only the states whose successors
// changed class in the round before. Here it must give exactly what Moore's
// refinement with a full pass per round gives (written out below, the
// definition the compiler's walk classes and prefix twins rely on): the
// least state of each final class, and for each state the prefix twin and
// its byte count of the last round in which it was not the least of its
// class.
#include <gtest/gtest.h>

#include <map>

#include <nlohmann/json.hpp>

#include "grammar/automaton.h"
#include "grammar/grammar.h"

namespace brioche::grammar {
namespace {

struct WalkClasses {
  std::vector<int32_t> offsets, twin, twin_bytes;
};

// Full rounds: round r classes states by (class, class of each byte edge's
// target and of each reading call's return target) of round r - 1; the
// first classes by what a state reads and calls (a call of a rule that may
// return without reading a byte, or of a uniqueItems item, with its exact
// return target).
WalkClasses full_rounds(const Automaton& a, int32_t max_bytes, int32_t min_states) {
  std::vector<char> reading = a.rules_reading_before_return();
  for (size_t r = 0; r < reading.size(); ++r)
    if (a.rule_unique_item[r]) reading[r] = 0;
  const size_t n = a.states.size();
  WalkClasses w{std::vector<int32_t>(n), std::vector<int32_t>(n, -1), std::vector<int32_t>(n, 0)};
  for (size_t s = 0; s < n; ++s) {
    const int32_t rule = a.states[s].rule;
    w.offsets[s] = rule >= 0 && a.rule_start[rule] >= 0 ? static_cast<int32_t>(s) - a.rule_start[rule] : 0;
  }
  for (size_t r = 0; r < a.rule_start.size(); ++r) {
    const int32_t begin = a.rule_start[r], size = begin < 0 ? 0 : a.rule_size(static_cast<int32_t>(r));
    if (size < min_states) continue;
    auto inside = [&](int32_t t) { return t >= begin && t < begin + size; };
    bool closed = true;
    std::map<std::vector<int64_t>, int32_t> first_ids;
    std::vector<int32_t> cls(size);
    for (int32_t i = 0; i < size; ++i) {
      const AutomatonState& st = a.states[begin + i];
      std::vector<int64_t> sig{st.accepting ? 1 : 0};
      for (uint32_t e = st.byte_begin; e < st.byte_end; ++e) {
        closed &= inside(a.byte_edges[e].target);
        sig.push_back((int64_t(a.byte_edges[e].lo) << 8) | a.byte_edges[e].hi);
      }
      sig.push_back(-1);
      for (uint32_t e = st.rule_begin; e < st.rule_end; ++e) {
        closed &= inside(a.rule_edges[e].target);
        sig.push_back(a.rule_edges[e].rule);
        if (!reading[a.rule_edges[e].rule]) sig.push_back(a.rule_edges[e].target - begin);
      }
      if (st.counter >= 0) {
        closed &= inside(a.counters[st.counter].loop_target);
        sig.push_back(-2);
        sig.push_back(a.counters[st.counter].loop_target - begin);
      }
      cls[i] = first_ids.emplace(sig, static_cast<int32_t>(first_ids.size())).first->second;
    }
    if (!closed) continue;
    size_t classes = first_ids.size();
    for (int32_t round = 0; round < max_bytes && classes < static_cast<size_t>(size); ++round) {
      std::map<std::vector<int32_t>, int32_t> ids;
      std::vector<int32_t> next(size);
      for (int32_t i = 0; i < size; ++i) {
        const AutomatonState& st = a.states[begin + i];
        std::vector<int32_t> sig{cls[i]};
        for (uint32_t e = st.byte_begin; e < st.byte_end; ++e) sig.push_back(cls[a.byte_edges[e].target - begin]);
        for (uint32_t e = st.rule_begin; e < st.rule_end; ++e)
          if (reading[a.rule_edges[e].rule]) sig.push_back(cls[a.rule_edges[e].target - begin]);
        next[i] = ids.emplace(sig, static_cast<int32_t>(ids.size())).first->second;
      }
      cls = next;
      if (ids.size() == classes) break;
      classes = ids.size();
      std::vector<int32_t> first(classes, -1);
      for (int32_t i = 0; i < size; ++i) {
        if (first[cls[i]] < 0) {
          first[cls[i]] = i;
        } else {
          w.twin[begin + i] = first[cls[i]];
          w.twin_bytes[begin + i] = round + 1;
        }
      }
    }
    std::vector<int32_t> first(classes, -1);
    for (int32_t i = 0; i < size; ++i) {
      if (first[cls[i]] < 0) first[cls[i]] = i;
      w.offsets[begin + i] = first[cls[i]];
    }
  }
  return w;
}

// Returns the number of states that call a rule and share a class with an
// earlier state.
int expect_full_rounds(const Grammar& g, int32_t max_bytes) {
  AutomatonLimits limits;
  limits.counter_window = 16;
  const Automaton a = Automaton::build(g, limits);
  const WalkClasses want = full_rounds(a, max_bytes, 4);
  WalkClasses got;
  got.offsets = a.walk_class_offsets(max_bytes, 4, &got.twin, &got.twin_bytes);
  EXPECT_EQ(got.offsets.size(), want.offsets.size());
  if (got.offsets.size() != want.offsets.size()) return 0;
  int checked_twins = 0, calling_shared = 0;
  for (size_t s = 0; s < want.offsets.size(); ++s) {
    const int32_t rule = a.states[s].rule;
    calling_shared += a.states[s].rule_begin != a.states[s].rule_end && rule >= 0 && a.rule_start[rule] >= 0 &&
                      want.offsets[s] != static_cast<int32_t>(s) - a.rule_start[rule];
    EXPECT_EQ(got.offsets[s], want.offsets[s]) << "state " << s;
    EXPECT_EQ(got.twin[s], want.twin[s]) << "state " << s;
    EXPECT_EQ(got.twin_bytes[s], want.twin_bytes[s]) << "state " << s;
    checked_twins += want.twin[s] >= 0;
  }
  EXPECT_GT(checked_twins, 0) << "no prefix twin to compare: the grammar does not exercise the refinement";
  return calling_shared;
}

TEST(WalkClasses, EqualFullMooreRounds) {
  // Unrolled bounded repetitions (far copies alike, near ones split round
  // by round), a counted one, alternatives of different lengths, UTF-8
  // classes, and schemas with strings, patterns and excluded keys.
  expect_full_rounds(Grammar::from_regex("[a-z]{0,40}"), 17);
  expect_full_rounds(Grammar::from_regex("(ab|c){3,30}x"), 17);
  expect_full_rounds(Grammar::from_regex("[a-zé]{5,25}(-[0-9]{1,12})?"), 9);
  expect_full_rounds(Grammar::from_regex("a{0,500}"), 17);
  expect_full_rounds(Grammar::from_ebnf("root ::= (\"ab\" | \"abc\" | [x-z]){2,40} \"end\""), 33);
  const nlohmann::ordered_json schema = {
      {"type", "object"},
      {"properties",
       {{"name", {{"type", "string"}, {"maxLength", 48}}},
        {"id", {{"type", "string"}, {"pattern", "^[a-z][a-z0-9-]{0,30}$"}}},
        {"tags", {{"type", "array"}, {"items", {{"type", "string"}, {"minLength", 2}, {"maxLength", 20}}}}}}},
      {"required", {"name"}}};
  expect_full_rounds(Grammar::from_json_schema(schema, SchemaOptions{.strict = false}), 17);
  expect_full_rounds(Grammar::from_json_schema(schema, SchemaOptions{.any_whitespace = false}), 9);
}

TEST(WalkClasses, CallsOfRulesThatReadShareClassesAcrossCopies) {
  // The copies of a bounded array of objects (inlined) call the JSON string
  // rule, which reads at least `"` before it returns: the far copies are
  // alike for any walk of up to 9 bytes, though each call returns into its
  // own copy.
  const nlohmann::ordered_json objects = {
      {"type", "array"},
      {"items", {{"type", "object"}, {"properties", {{"k", {{"type", "string"}}}, {"j", {{"type", "string"}}}}}}},
      {"maxItems", 30}};
  EXPECT_GT(expect_full_rounds(Grammar::from_json_schema(objects, SchemaOptions{.any_whitespace = false}), 9), 0);
  // `other` reads (recursive: not inlined), `opt` may be empty.
  expect_full_rounds(Grammar::from_ebnf("root ::= (opt \",\" other \";\"){0,30} \"x\"\n"
                                        "opt ::= (\"z\" opt)?\nother ::= \"q\" | \"r\" other\n"),
                     9);
  const Automaton a = Automaton::build(Grammar::from_ebnf("root ::= e \"x\" f\ne ::= (\"a\" e)?\nf ::= \"b\" f?\n"));
  const std::vector<char> reading = a.rules_reading_before_return();
  int found = 0;
  for (size_t r = 0; r < a.rule_start.size(); ++r) {
    if (a.rule_start[r] < 0) continue;
    const std::string& name = a.rule_names[r];
    if (name == "e") EXPECT_EQ(reading[r], 0) << "e matches the empty string";
    if (name == "f" || name == "root") EXPECT_EQ(reading[r], 1) << name << " reads a byte before it returns";
    found += name == "e" || name == "f";
  }
  EXPECT_EQ(found, 2) << "e and f were inlined: the test checks nothing";
}

}  // namespace
}  // namespace brioche::grammar
