// The rule call graph (see rule_plan.h).
#include "grammar/rule_plan.h"

#include <algorithm>
#include <functional>

namespace brioche::grammar {

Components strongly_connected(const std::vector<std::vector<int32_t>>& succ, const std::vector<char>& roots) {
  const int32_t n = static_cast<int32_t>(succ.size());
  Components out;
  out.of.assign(n, -1);
  std::vector<int32_t> index(n, -1), low(n, 0), stack;
  std::vector<char> on_stack(n, 0);
  struct Frame {
    int32_t v;
    size_t next;  // next successor to look at
  };
  std::vector<Frame> frames;
  int32_t counter = 0;
  auto open = [&](int32_t v) {
    index[v] = low[v] = counter++;
    stack.push_back(v);
    on_stack[v] = 1;
    frames.push_back({v, 0});
  };
  for (int32_t root = 0; root < n; ++root) {
    if (!roots[root] || index[root] >= 0) continue;
    open(root);
    while (!frames.empty()) {
      const int32_t v = frames.back().v;
      if (frames.back().next < succ[v].size()) {
        const int32_t w = succ[v][frames.back().next++];
        if (index[w] < 0)
          open(w);
        else if (on_stack[w])
          low[v] = std::min(low[v], index[w]);
        continue;
      }
      frames.pop_back();
      if (!frames.empty()) low[frames.back().v] = std::min(low[frames.back().v], low[v]);
      if (low[v] != index[v]) continue;
      std::vector<int32_t> members;
      int32_t w;
      do {
        w = stack.back();
        stack.pop_back();
        on_stack[w] = 0;
        out.of[w] = static_cast<int32_t>(out.members.size());
        members.push_back(w);
      } while (w != v);
      std::sort(members.begin(), members.end());
      out.members.push_back(std::move(members));
    }
  }
  return out;
}

RulePlan plan_rules(const Grammar& g, const AutomatonLimits& limits, int32_t num_rules) {
  const int32_t n = static_cast<int32_t>(g.rules.size());
  // Walkers below recurse over one expression tree (depth <= kMaxExpressionDepth)
  // and, through inlined rules, at most kMaxInlineDepth further; never once
  // per rule.
  std::vector<std::vector<int32_t>> refs(n);
  std::function<void(int32_t, std::vector<int32_t>&)> collect = [&](int32_t id, std::vector<int32_t>& out) {
    const Expr& e = g.exprs[id];
    if (e.kind == Expr::Kind::kRuleRef) out.push_back(e.rule);
    for (int32_t c : e.children) collect(c, out);
  };
  for (int32_t r = 0; r < n; ++r) collect(g.rules[r].body, refs[r]);
  // recursive[r]: r reaches itself (a component of several rules, or a self-reference).
  const Components components = strongly_connected(refs, std::vector<char>(n, 1));
  std::vector<char> recursive(n, 0);
  for (int32_t r = 0; r < n; ++r)
    recursive[r] = components.members[components.of[r]].size() > 1 ||
                   std::find(refs[r].begin(), refs[r].end(), r) != refs[r].end();
  RulePlan plan;
  plan.inlined.assign(num_rules, 0);
  // Sizes (expression nodes, repetitions expanded, inlined callees counted)
  // and depths (inlined callees nest inside the caller's walk), callees
  // first: components come out in that order.
  std::vector<int64_t> size(n, 1);
  std::vector<int32_t> depth(n, 1);
  std::function<int64_t(int32_t)> expr_size = [&](int32_t id) -> int64_t {
    const Expr& e = g.exprs[id];
    switch (e.kind) {
      case Expr::Kind::kBytes: return static_cast<int64_t>(e.bytes.size());
      case Expr::Kind::kCharClass: return 4;
      case Expr::Kind::kRuleRef: return plan.inlined[e.rule] ? size[e.rule] : 1;
      case Expr::Kind::kRepeat:
      case Expr::Kind::kLengthBound: {  // a layer per count (automaton.cpp)
        int64_t copies = e.max_repeat < 0 ? e.min_repeat + 1 : std::max(e.max_repeat, 1);
        return std::min<int64_t>(expr_size(e.children[0]) * copies + 1, int64_t(1) << 40);
      }
      default: {
        int64_t s = 1;
        for (int32_t c : e.children) s = std::min<int64_t>(s + expr_size(c), int64_t(1) << 40);
        return s;
      }
    }
  };
  std::function<int32_t(int32_t)> expr_depth = [&](int32_t id) -> int32_t {
    const Expr& e = g.exprs[id];
    if (e.kind == Expr::Kind::kRuleRef) return plan.inlined[e.rule] ? 1 + depth[e.rule] : 1;
    int32_t d = 1;
    for (int32_t c : e.children) d = std::max(d, 1 + expr_depth(c));
    return d;
  };
  // A uniqueItems item rule keeps its frame (its calls mark where an item
  // starts and ends), and so does its caller (the values seen so far live
  // on the caller's frame: inlined, two arrays in one rule would share them).
  auto keeps_frame = [&](int32_t r) {
    if (g.rules[r].unique_item) return true;
    for (int32_t callee : refs[r])
      if (g.rules[callee].unique_item) return true;
    return false;
  };
  for (const std::vector<int32_t>& members : components.members)
    for (int32_t r : members) {
      size[r] = expr_size(g.rules[r].body);
      depth[r] = expr_depth(g.rules[r].body);
      plan.inlined[r] = !recursive[r] && r != g.root && g.rules[r].lookahead < 0 && size[r] <= limits.inline_limit &&
                        depth[r] <= kMaxInlineDepth && !keeps_frame(r);
    }
  // Reachability through the rules that stay.
  plan.needed.assign(num_rules, 0);
  std::vector<int32_t> work{g.root};
  plan.needed[g.root] = 1;
  int32_t next_la = n;
  std::vector<int32_t> la_rule(n, -1);
  for (int32_t r = 0; r < n; ++r)
    if (g.rules[r].lookahead >= 0) la_rule[r] = next_la++;
  std::function<void(int32_t)> mark = [&](int32_t id) {
    const Expr& e = g.exprs[id];
    if (e.kind == Expr::Kind::kRuleRef) {
      if (plan.inlined[e.rule]) {
        mark(g.rules[e.rule].body);
      } else if (!plan.needed[e.rule]) {
        plan.needed[e.rule] = 1;
        work.push_back(e.rule);
      }
    }
    for (int32_t c : e.children) mark(c);
  };
  while (!work.empty()) {
    int32_t r = work.back();
    work.pop_back();
    if (r < n) {
      mark(g.rules[r].body);
      if (la_rule[r] >= 0 && !plan.needed[la_rule[r]]) {
        plan.needed[la_rule[r]] = 1;
        mark(g.rules[r].lookahead);
      }
    }
  }
  return plan;
}

}  // namespace brioche::grammar
