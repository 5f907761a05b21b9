// The rule call graph: strongly connected components (recursion groups)
// and which rules the automaton inlines into their callers.
#pragma once

#include <cstdint>
#include <vector>

#include "grammar/automaton.h"
#include "grammar/grammar.h"

namespace brioche::grammar {

// Strongly connected components of a graph (Tarjan's algorithm with an
// explicit stack: a grammar may chain thousands of rules, one recursion
// level each). Components come out callees first; members sorted. Only
// nodes with roots[v] start a search; their successors are always followed.
struct Components {
  std::vector<std::vector<int32_t>> members;  // in callees-first order
  std::vector<int32_t> of;                    // per node: its component, -1 if unvisited
};
Components strongly_connected(const std::vector<std::vector<int32_t>>& succ, const std::vector<char>& roots);

// Which rules to inline, and which remain (reachable from the root).
struct RulePlan {
  std::vector<char> inlined, needed;
};

// Small non-recursive rules without a lookahead (up to
// AutomatonLimits::inline_limit expression nodes, kMaxInlineDepth deep) are
// inlined; the rest, and the lookahead rules (numbered from the grammar's
// rule count on, `num_rules` in all), are needed when the root reaches them.
RulePlan plan_rules(const Grammar& g, const AutomatonLimits& limits, int32_t num_rules);

}  // namespace brioche::grammar
