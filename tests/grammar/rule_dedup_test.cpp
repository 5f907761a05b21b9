// merge_equal_rules: structurally equal rules (recursion included) become
// one before the automaton is built; rules that differ anywhere, and
// uniqueItems item rules, stay apart; the language is unchanged.
#include "grammar/rule_dedup.h"

#include <gtest/gtest.h>

#include "grammar/automaton.h"
#include "grammar/grammar.h"

namespace brioche::grammar {
namespace {

int32_t states_of(const Grammar& g) { return static_cast<int32_t>(Automaton::build(g).states.size()); }

// Recursive rules are never inlined, so each one keeps its own states.
TEST(RuleDedup, EqualRecursiveRulesBecomeOne) {
  const Grammar twins = Grammar::from_ebnf(R"(root ::= a "," b
a ::= "[" ([0-9] | a)* "]"
b ::= "[" ([0-9] | b)* "]")");
  const Grammar one = Grammar::from_ebnf(R"(root ::= a "," a
a ::= "[" ([0-9] | a)* "]")");
  EXPECT_GT(states_of(twins), states_of(one));
  EXPECT_EQ(states_of(merge_equal_rules(twins)), states_of(one));
}

TEST(RuleDedup, RulesThatDifferStayApart) {
  // b reads a different digit class; c the same as a but with a lookahead;
  // d calls b where a calls itself.
  const Grammar g = Grammar::from_ebnf(R"(root ::= a "," b "," c "," d
a ::= "[" ([0-9] | a)* "]"
b ::= "[" ([0-8] | b)* "]"
c ::= "[" ([0-9] | c)* "]" (= ",")
d ::= "[" ([0-9] | b)* "]")");
  EXPECT_EQ(states_of(merge_equal_rules(g)), states_of(g));
}

TEST(RuleDedup, ItemRulesStayApart) {
  const Grammar g = Grammar::from_ebnf(R"(root ::= "[" a ("," a)* "]" "[" b ("," b)* "]"
a ::= %unique_item [0-9]+
b ::= %unique_item [0-9]+)");
  EXPECT_EQ(states_of(merge_equal_rules(g)), states_of(g));
}

}  // namespace
}  // namespace brioche::grammar
