// Lowering: IR expression -> Thompson NFA (with epsilons) per rule ->
// epsilon removal -> merge of states with identical futures -> global tables.
#include "grammar/automaton.h"

#include <algorithm>
#include <array>
#include <functional>
#include <map>
#include <tuple>
#include <unordered_map>

#include "core/error.h"

namespace brioche::grammar {
namespace {

constexpr uint32_t kMaxCodepoint = 0x10FFFF;

// The end of a round of a counted repetition (local state ids).
struct LocalCounter {
  int32_t loop_target = -1, exit_target = -1;
  int32_t rounds = 0;
  bool operator==(const LocalCounter&) const = default;
};

struct LocalState {
  std::vector<int32_t> eps;
  std::vector<ByteEdge> bytes;
  std::vector<RuleEdge> rules;
  int32_t loop = -1;     // the counted repetition whose body holds it (index in its rule)
  LocalCounter counter;  // loop_target >= 0: a round ends here
};

struct Fragment {
  int32_t start, end;
};

// Sorted, merged codepoint ranges of a class (complemented when negated).
std::vector<std::pair<uint32_t, uint32_t>> normalize_class(const Expr& e) {
  auto r = e.ranges;
  std::sort(r.begin(), r.end());
  std::vector<std::pair<uint32_t, uint32_t>> merged;
  for (auto [lo, hi] : r) {
    hi = std::min(hi, kMaxCodepoint);
    if (lo > hi) continue;
    if (!merged.empty() && lo <= merged.back().second + 1)
      merged.back().second = std::max(merged.back().second, hi);
    else
      merged.emplace_back(lo, hi);
  }
  if (!e.negated) return merged;
  std::vector<std::pair<uint32_t, uint32_t>> out;
  uint32_t next = 0;
  for (auto [lo, hi] : merged) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodepoint) out.emplace_back(next, kMaxCodepoint);
  return out;
}

using ByteSeq = std::vector<std::pair<uint8_t, uint8_t>>;

void encode(uint32_t cp, int len, uint8_t* out) {
  if (len == 1) {
    out[0] = static_cast<uint8_t>(cp);
  } else if (len == 2) {
    out[0] = static_cast<uint8_t>(0xC0 | (cp >> 6));
    out[1] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  } else if (len == 3) {
    out[0] = static_cast<uint8_t>(0xE0 | (cp >> 12));
    out[1] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
    out[2] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  } else {
    out[0] = static_cast<uint8_t>(0xF0 | (cp >> 18));
    out[1] = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
    out[2] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
    out[3] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  }
}

// Splits [lo, hi] (same UTF-8 length) into byte-range sequences: the classic
// recursion on the first position whose bytes are not both at their
// extremes. Each sequence is a product of per-position byte ranges.
void split_same_length(uint32_t lo, uint32_t hi, int len, std::vector<ByteSeq>& out) {
  // Find the largest suffix of continuation positions that spans fully.
  for (int i = 1; i < len; ++i) {
    uint32_t mask = (1u << (6 * i)) - 1;
    if ((lo & ~mask) != (hi & ~mask)) {
      if ((lo & mask) != 0) {
        split_same_length(lo, lo | mask, len, out);
        split_same_length((lo | mask) + 1, hi, len, out);
        return;
      }
      if ((hi & mask) != mask) {
        split_same_length(lo, (hi & ~mask) - 1, len, out);
        split_same_length(hi & ~mask, hi, len, out);
        return;
      }
    }
  }
  uint8_t a[4], b[4];
  encode(lo, len, a);
  encode(hi, len, b);
  ByteSeq seq;
  for (int i = 0; i < len; ++i) seq.emplace_back(a[i], b[i]);
  out.push_back(std::move(seq));
}

std::vector<ByteSeq> utf8_sequences(uint32_t lo, uint32_t hi) {
  static const uint32_t kLenMax[4] = {0x7F, 0x7FF, 0xFFFF, kMaxCodepoint};
  std::vector<ByteSeq> out;
  uint32_t start = lo;
  for (int len = 1; len <= 4 && start <= hi; ++len) {
    if (start > kLenMax[len - 1]) continue;
    uint32_t end = std::min(hi, kLenMax[len - 1]);
    split_same_length(start, end, len, out);
    start = end + 1;
  }
  return out;
}

// The build's work counter: every unit is added here and the budget is
// checked at once, so a grammar whose lowering is superlinear (long chains
// of optional items, wide alternatives merging) stops at the same point on
// any machine.
// Units are weighted to cost about what a mask-walk unit costs (measured:
// making an NFA state allocates; a closure step or comparison reads a few
// edges), so one budget covers both phases.
struct BuildWork {
  static constexpr uint64_t kPerState = 64, kPerStep = 4;
  uint64_t used = 0;
  uint64_t limit = UINT64_MAX;
  void add_state() { add(kPerState); }
  void add_steps(uint64_t steps) { add(kPerStep * steps); }
  void add(uint64_t units) {
    used += units;
    if (used > limit) [[unlikely]]
      fail("grammar compile exceeded its work budget of ", limit, " units while building the automaton (", used,
           " spent); simplify the grammar or raise CompileLimits::max_work");
  }
};

class RuleBuilder {
 public:
  RuleBuilder(const Grammar& g, const AutomatonLimits& limits, const std::vector<char>& inlined, BuildWork& work)
      : g_(g), limits_(limits), inlined_(inlined), work_(work) {}

  // [num_states()] in use; entries past it are kept for their buffers, so
  // one builder reused for every rule allocates little.
  std::vector<LocalState> states;
  int32_t num_states() const { return used_; }
  void reset() {
    used_ = 0;
    num_loops_ = 0;
    current_loop_ = -1;
  }

  int32_t new_state() {
    work_.add_state();
    BRIOCHE_CHECK(static_cast<size_t>(used_) < limits_.max_states, "grammar too large: more than ", limits_.max_states,
                  " automaton states (size budget); reduce repetition counts or schema size");
    if (static_cast<size_t>(used_) == states.size()) {
      states.emplace_back();
    } else {
      LocalState& st = states[used_];
      st.eps.clear();
      st.bytes.clear();
      st.rules.clear();
      st.counter = LocalCounter{};
    }
    states[used_].loop = current_loop_;
    return used_++;
  }

  Fragment build(int32_t id) {
    const Expr& e = g_.exprs[id];
    switch (e.kind) {
      case Expr::Kind::kEmpty: {
        int32_t s = new_state();
        return {s, s};
      }
      case Expr::Kind::kBytes: {
        int32_t s = new_state(), cur = s;
        for (unsigned char c : e.bytes) {
          int32_t n = new_state();
          states[cur].bytes.push_back({c, c, n});
          cur = n;
        }
        return {s, cur};
      }
      case Expr::Kind::kCharClass: {
        int32_t s = new_state(), t = new_state();
        // Share prefixes of the byte sequences (a small trie keyed by range).
        std::map<std::pair<int32_t, std::pair<uint8_t, uint8_t>>, int32_t> trie;
        for (auto [lo, hi] : normalize_class(e)) {
          for (const ByteSeq& seq : utf8_sequences(lo, hi)) {
            int32_t cur = s;
            for (size_t i = 0; i < seq.size(); ++i) {
              if (i + 1 == seq.size()) {
                states[cur].bytes.push_back({seq[i].first, seq[i].second, t});
              } else {
                auto key = std::make_pair(cur, seq[i]);
                auto it = trie.find(key);
                if (it == trie.end()) {
                  int32_t n = new_state();
                  states[cur].bytes.push_back({seq[i].first, seq[i].second, n});
                  it = trie.emplace(key, n).first;
                }
                cur = it->second;
              }
            }
          }
        }
        return {s, t};
      }
      case Expr::Kind::kRuleRef: {
        if (inlined_[e.rule]) return build(g_.rules[e.rule].body);
        int32_t s = new_state(), t = new_state();
        states[s].rules.push_back({e.rule, t});
        return {s, t};
      }
      case Expr::Kind::kSequence: {
        Fragment f = build(e.children[0]);
        for (size_t i = 1; i < e.children.size(); ++i) {
          Fragment n = build(e.children[i]);
          states[f.end].eps.push_back(n.start);
          f.end = n.end;
        }
        return f;
      }
      case Expr::Kind::kChoice: {
        int32_t s = new_state(), t = new_state();
        for (int32_t c : e.children) {
          Fragment f = build(c);
          states[s].eps.push_back(f.start);
          states[f.end].eps.push_back(t);
        }
        return {s, t};
      }
      case Expr::Kind::kRepeat: {
        int32_t child = e.children[0];
        // A part of more than `from` copies is counted (CounterEdge), all
        // but its last `window` copies; those are written out, so that
        // tokens near the bound see the states they will meet.
        const int64_t window = limits_.counter_window;
        const int64_t from = std::max<int64_t>(2 * window, limits_.counter_from);
        const bool can_count = window > 0 && current_loop_ < 0 && !can_be_empty(child, 0);
        int32_t s = new_state(), cur = s;
        int64_t required = e.min_repeat;
        if (can_count && required > from) {
          cur = counted(child, cur, required - window, -1);
          required = window;
        }
        for (int64_t i = 0; i < required; ++i) {
          Fragment f = build(child);
          states[cur].eps.push_back(f.start);
          cur = f.end;
        }
        if (e.max_repeat < 0) {
          Fragment f = build(child);
          states[cur].eps.push_back(f.start);
          states[f.end].eps.push_back(cur);
          return {s, cur};
        }
        int32_t t = new_state();
        int64_t optional = static_cast<int64_t>(e.max_repeat) - e.min_repeat;
        if (can_count && optional > from) {
          cur = counted(child, cur, optional - window, t);
          optional = window;
        }
        for (int64_t i = 0; i < optional; ++i) {
          Fragment f = build(child);
          states[cur].eps.push_back(f.start);
          states[cur].eps.push_back(t);
          cur = f.end;
        }
        states[cur].eps.push_back(t);
        return {s, t};
      }
    }
    fail("grammar: unknown expression kind");
  }

 private:
  // `rounds` rounds of `child` after `before`, counted: a head state that
  // starts a round (and may leave to `leave` when >= 0: an optional part),
  // the body once, and a counter edge at the body's end. Returns the state
  // the bound leads to (where the written-out copies start).
  int32_t counted(int32_t child, int32_t before, int64_t rounds, int32_t leave) {
    const int32_t outer = current_loop_;
    BRIOCHE_CHECK(num_loops_ < 32767, "grammar: more than 32767 counted repetitions in one rule");
    current_loop_ = num_loops_++;
    const int32_t head = new_state();
    const Fragment body = build(child);
    current_loop_ = outer;
    const int32_t after = new_state();
    states[before].eps.push_back(head);
    states[head].eps.push_back(body.start);
    if (leave >= 0) states[head].eps.push_back(leave);
    states[body.end].counter = LocalCounter{head, after, static_cast<int32_t>(rounds)};
    return after;
  }

  // Whether `id` may match the empty string (conservative: any rule call
  // that stays a call counts as maybe empty). A counted body must read a
  // byte per round, else its counter could go round without input.
  bool can_be_empty(int32_t id, int depth) const {
    const Expr& e = g_.exprs[id];
    if (depth > 64) return true;
    switch (e.kind) {
      case Expr::Kind::kEmpty: return true;
      case Expr::Kind::kBytes: return e.bytes.empty();
      case Expr::Kind::kCharClass: return false;
      case Expr::Kind::kRuleRef: return !inlined_[e.rule] || can_be_empty(g_.rules[e.rule].body, depth + 1);
      case Expr::Kind::kRepeat: return e.min_repeat == 0 || can_be_empty(e.children[0], depth + 1);
      case Expr::Kind::kSequence:
        for (int32_t c : e.children)
          if (!can_be_empty(c, depth + 1)) return false;
        return true;
      case Expr::Kind::kChoice:
        for (int32_t c : e.children)
          if (can_be_empty(c, depth + 1)) return true;
        return false;
    }
    return true;
  }

  int32_t current_loop_ = -1;  // the counted repetition being built, or -1
  int32_t num_loops_ = 0;      // in this rule
  const Grammar& g_;
  const AutomatonLimits& limits_;
  const std::vector<char>& inlined_;
  BuildWork& work_;
  int32_t used_ = 0;
};

// Strongly connected components of a graph (Tarjan's algorithm with an
// explicit stack: a grammar may chain thousands of rules, one recursion
// level each). Components come out callees first; members sorted. Only
// nodes with roots[v] start a search; their successors are always followed.
struct Components {
  std::vector<std::vector<int32_t>> members;  // in callees-first order
  std::vector<int32_t> of;                    // per node: its component, -1 if unvisited
};

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

// Which rules to inline, and which remain (reachable from the root).
struct RulePlan {
  std::vector<char> inlined, needed;
};

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
      case Expr::Kind::kRepeat: {
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
  for (const std::vector<int32_t>& members : components.members)
    for (int32_t r : members) {
      size[r] = expr_size(g.rules[r].body);
      depth[r] = expr_depth(g.rules[r].body);
      plan.inlined[r] = !recursive[r] && r != g.root && g.rules[r].lookahead < 0 && size[r] <= limits.inline_limit &&
                        depth[r] <= kMaxInlineDepth;
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

struct FinalState {
  bool accepting = false;
  std::vector<ByteEdge> bytes;
  std::vector<RuleEdge> rules;
  int32_t loop = -1;
  LocalCounter counter;
  bool operator==(const FinalState& o) const {
    if (accepting != o.accepting || bytes.size() != o.bytes.size() || rules.size() != o.rules.size() ||
        loop != o.loop || !(counter == o.counter))
      return false;
    for (size_t i = 0; i < bytes.size(); ++i)
      if (bytes[i].lo != o.bytes[i].lo || bytes[i].hi != o.bytes[i].hi || bytes[i].target != o.bytes[i].target)
        return false;
    for (size_t i = 0; i < rules.size(); ++i)
      if (rules[i].rule != o.rules[i].rule || rules[i].target != o.rules[i].target) return false;
    return true;
  }
};

void canonicalize(FinalState& st) {
  std::sort(st.bytes.begin(), st.bytes.end(), [](const ByteEdge& a, const ByteEdge& b) {
    return a.target != b.target ? a.target < b.target : a.lo < b.lo;
  });
  // Merge overlapping/adjacent ranges that go to the same target (in place).
  size_t kept = 0;
  for (size_t i = 0; i < st.bytes.size(); ++i) {
    const ByteEdge e = st.bytes[i];
    if (kept > 0 && st.bytes[kept - 1].target == e.target && e.lo <= st.bytes[kept - 1].hi + 1)
      st.bytes[kept - 1].hi = std::max(st.bytes[kept - 1].hi, e.hi);
    else
      st.bytes[kept++] = e;
  }
  st.bytes.resize(kept);
  std::sort(st.bytes.begin(), st.bytes.end(),
            [](const ByteEdge& a, const ByteEdge& b) { return a.lo != b.lo ? a.lo < b.lo : a.target < b.target; });
  std::sort(st.rules.begin(), st.rules.end(), [](const RuleEdge& a, const RuleEdge& b) {
    return a.rule != b.rule ? a.rule < b.rule : a.target < b.target;
  });
  st.rules.erase(
      std::unique(st.rules.begin(), st.rules.end(),
                  [](const RuleEdge& a, const RuleEdge& b) { return a.rule == b.rule && a.target == b.target; }),
      st.rules.end());
}

uint64_t hash_state(const FinalState& st) {
  uint64_t h = st.accepting ? 0x9e3779b97f4a7c15ull : 0x12345ull;
  auto mix = [&](uint64_t v) {
    h = (h ^ v) * 0x100000001b3ull;
    h ^= h >> 29;
  };
  for (auto& e : st.bytes) mix((uint64_t(e.lo) << 40) | (uint64_t(e.hi) << 32) | uint32_t(e.target));
  for (auto& e : st.rules) mix((uint64_t(uint32_t(e.rule)) << 32) | uint32_t(e.target) | (1ull << 63));
  mix((uint64_t(uint32_t(st.loop)) << 32) | uint32_t(st.counter.loop_target));
  mix((uint64_t(uint32_t(st.counter.exit_target)) << 32) | uint32_t(st.counter.rounds));
  return h;
}

// Epsilon removal + merging of equivalent states; returns the rule's
// states (local ids 0..n-1, start = 0) with targets in local ids.
std::vector<FinalState> finish_rule(const RuleBuilder& b, Fragment f, BuildWork& budget) {
  const auto& ls = b.states;
  size_t n = static_cast<size_t>(b.num_states());
  // Epsilon closures, computed on demand for reachable states only.
  std::vector<int32_t> remap(n, -1);
  std::vector<int32_t> order;  // local ids in discovery order
  std::vector<FinalState> out;
  std::vector<int32_t> work{f.start};
  remap[f.start] = 0;
  order.push_back(f.start);
  out.emplace_back();
  std::vector<uint32_t> seen(n, 0);
  uint32_t stamp = 0;
  std::vector<int32_t> stack;
  for (size_t k = 0; k < order.size(); ++k) {
    int32_t src = order[k];
    ++stamp;
    stack.assign(1, src);
    seen[src] = stamp;
    FinalState st;
    while (!stack.empty()) {
      int32_t s = stack.back();
      stack.pop_back();
      budget.add_steps(1 + ls[s].bytes.size() + ls[s].rules.size());
      if (s == f.end) st.accepting = true;
      if (ls[s].counter.loop_target >= 0) {
        // One counter per closure: a round's end has no epsilon out, and
        // counted repetitions do not nest in one rule.
        BRIOCHE_CHECK(st.counter.loop_target < 0 || st.counter == ls[s].counter,
                      "grammar: two counted repetitions end at one state");
        st.counter = ls[s].counter;
      }
      for (auto& e : ls[s].bytes) st.bytes.push_back(e);
      for (auto& e : ls[s].rules) st.rules.push_back(e);
      for (int32_t t : ls[s].eps)
        if (seen[t] != stamp) {
          seen[t] = stamp;
          stack.push_back(t);
        }
    }
    auto target_of = [&](int32_t t) {
      if (remap[t] < 0) {
        remap[t] = static_cast<int32_t>(order.size());
        order.push_back(t);
        out.emplace_back();
      }
      return remap[t];
    };
    for (auto& e : st.bytes) e.target = target_of(e.target);
    for (auto& e : st.rules) e.target = target_of(e.target);
    if (st.counter.loop_target >= 0) {
      st.counter.loop_target = target_of(st.counter.loop_target);
      st.counter.exit_target = target_of(st.counter.exit_target);
    }
    st.loop = ls[src].loop;
    out[k] = std::move(st);
  }
  // Merge states with identical (accepting, edges) until nothing changes:
  // they have the same future, so sharing them shrinks the mask tables.
  // Worklist form: when a state merges away, only its predecessors' edges
  // change, so only they are looked at again (a chain of n mergeable states
  // costs O(n), not n rounds over the whole rule).
  const int32_t count = static_cast<int32_t>(out.size());
  std::vector<int32_t> rep(count);
  for (int32_t i = 0; i < count; ++i) rep[i] = i;
  auto find = [&](int32_t x) {
    while (rep[x] != x) x = rep[x] = rep[rep[x]];
    return x;
  };
  std::vector<std::vector<int32_t>> preds(count);
  for (int32_t i = 0; i < count; ++i) {
    for (auto& e : out[i].bytes) preds[e.target].push_back(i);
    for (auto& e : out[i].rules) preds[e.target].push_back(i);
    if (out[i].counter.loop_target >= 0) {
      preds[out[i].counter.loop_target].push_back(i);
      preds[out[i].counter.exit_target].push_back(i);
    }
  }
  // Current content of a state: targets through `find`, canonical order.
  // Written into `st` (reused buffers: this runs for every comparison).
  auto content_into = [&](int32_t i, FinalState& st) {
    st.accepting = out[i].accepting;
    st.bytes.assign(out[i].bytes.begin(), out[i].bytes.end());
    st.rules.assign(out[i].rules.begin(), out[i].rules.end());
    for (auto& e : st.bytes) e.target = find(e.target);
    for (auto& e : st.rules) e.target = find(e.target);
    st.loop = out[i].loop;
    st.counter = out[i].counter;
    if (st.counter.loop_target >= 0) {
      st.counter.loop_target = find(st.counter.loop_target);
      st.counter.exit_target = find(st.counter.exit_target);
    }
    canonicalize(st);
  };
  auto content = [&](int32_t i) {
    FinalState st;
    content_into(i, st);
    return st;
  };
  FinalState ci, cj;
  std::unordered_map<uint64_t, std::vector<int32_t>> table;
  // First in, first out, each state queued once at a time: a state with
  // many successors (the start of a wide alternative) is looked at again
  // once per round of merges below it, not once per merge.
  std::vector<int32_t> pending(count);
  std::vector<char> queued(count, 1);
  for (int32_t i = 0; i < count; ++i) pending[i] = i;
  for (size_t head = 0; head < pending.size(); ++head) {
    const int32_t i = pending[head];
    queued[i] = 0;
    if (find(i) != i) continue;
    content_into(i, ci);
    budget.add_steps(1 + ci.bytes.size() + ci.rules.size());
    auto& bucket = table[hash_state(ci)];
    int32_t twin = -1;
    for (int32_t j : bucket) {
      if (j == i || find(j) != j) continue;
      content_into(j, cj);
      budget.add_steps(1 + cj.bytes.size() + cj.rules.size());
      if (cj == ci) {
        twin = j;
        break;
      }
    }
    if (twin < 0) {
      if (std::find(bucket.begin(), bucket.end(), i) == bucket.end()) bucket.push_back(i);
      continue;
    }
    // The lower index survives (the start state stays 0).
    const int32_t keep = std::min(i, twin), gone = std::max(i, twin);
    rep[gone] = keep;
    if (std::find(bucket.begin(), bucket.end(), keep) == bucket.end()) bucket.push_back(keep);
    for (int32_t p : preds[gone])
      if (!queued[p]) {
        queued[p] = 1;
        pending.push_back(p);
      }
    budget.add_steps(1 + preds[gone].size());
    for (int32_t p : preds[gone]) preds[keep].push_back(p);
    std::vector<int32_t>().swap(preds[gone]);  // gone is never a representative again
  }
  // Compact: keep representatives in order, renumber.
  std::vector<int32_t> id(count, -1);
  std::vector<FinalState> next;
  for (int32_t i = 0; i < count; ++i)
    if (find(i) == i) {
      id[i] = static_cast<int32_t>(next.size());
      next.push_back(content(i));
    }
  for (auto& st : next) {
    for (auto& e : st.bytes) e.target = id[e.target];
    for (auto& e : st.rules) e.target = id[e.target];
    if (st.counter.loop_target >= 0) {
      st.counter.loop_target = id[st.counter.loop_target];
      st.counter.exit_target = id[st.counter.exit_target];
    }
    canonicalize(st);
  }
  out = std::move(next);
  return out;
}

// Left recursion makes the pushdown closure non-terminating: a rule that
// can call itself (through other rules) before reading a byte is an error
// naming the cycle. Linear in the automaton: every walk below is a loop.
void reject_left_recursion(const Automaton& a) {
  const int32_t num_rules = static_cast<int32_t>(a.rule_start.size());
  const int32_t num_states = static_cast<int32_t>(a.states.size());
  // reached[s]: s is reachable from its rule's start through calls of
  // nullable rules only (rules that can complete without reading a byte).
  // Grown incrementally: when a rule turns out nullable, the walks waiting
  // at calls of it go on; each state is walked once.
  std::vector<char> nullable(num_rules, 0), reached(num_states, 0);
  std::vector<std::vector<std::pair<int32_t, int32_t>>> calls_of(num_rules);  // callee -> (state, return target)
  for (int32_t s = 0; s < num_states; ++s)
    for (uint32_t i = a.states[s].rule_begin; i < a.states[s].rule_end; ++i)
      calls_of[a.rule_edges[i].rule].emplace_back(s, a.rule_edges[i].target);
  std::vector<int32_t> newly_nullable, stack;
  auto walk_from = [&](int32_t from) {
    stack.assign(1, from);
    while (!stack.empty()) {
      const int32_t s = stack.back();
      stack.pop_back();
      if (reached[s]) continue;
      reached[s] = 1;
      const AutomatonState& st = a.states[s];
      if (st.accepting && !nullable[st.rule]) {
        nullable[st.rule] = 1;
        newly_nullable.push_back(st.rule);
      }
      for (uint32_t i = st.rule_begin; i < st.rule_end; ++i)
        if (nullable[a.rule_edges[i].rule]) stack.push_back(a.rule_edges[i].target);
      if (st.counter >= 0) {  // an epsilon move either way
        stack.push_back(a.counters[st.counter].loop_target);
        stack.push_back(a.counters[st.counter].exit_target);
      }
    }
  };
  for (int32_t r = 0; r < num_rules; ++r)
    if (a.rule_start[r] >= 0) walk_from(a.rule_start[r]);
  while (!newly_nullable.empty()) {
    const int32_t callee = newly_nullable.back();
    newly_nullable.pop_back();
    for (auto [s, target] : calls_of[callee])
      if (reached[s]) walk_from(target);
  }
  // first[r]: the rules r may call before reading a byte.
  std::vector<std::vector<int32_t>> first(num_rules);
  for (int32_t s = 0; s < num_states; ++s)
    if (reached[s])
      for (uint32_t i = a.states[s].rule_begin; i < a.states[s].rule_end; ++i)
        first[a.states[s].rule].push_back(a.rule_edges[i].rule);
  // A cycle in the "may call first" graph: depth-first with an explicit
  // stack, which is also the path for the message.
  std::vector<int> color(num_rules, 0);  // 0 new, 1 on the path, 2 done
  struct Frame {
    int32_t rule;
    size_t next;
  };
  std::vector<Frame> path;
  for (int32_t root = 0; root < num_rules; ++root) {
    if (color[root] != 0) continue;
    color[root] = 1;
    path.push_back({root, 0});
    while (!path.empty()) {
      Frame& f = path.back();
      if (f.next == first[f.rule].size()) {
        color[f.rule] = 2;
        path.pop_back();
        continue;
      }
      const int32_t c = first[f.rule][f.next++];
      if (color[c] == 1) {
        std::string cycle;
        bool on = false;
        for (const Frame& p : path) {
          if (p.rule == c) on = true;
          if (on) cycle += (cycle.size() < 2000 ? a.rule_names[p.rule] + " -> " : std::string());
        }
        fail("grammar: left recursion is not supported (", cycle, a.rule_names[c],
             "); rewrite it with repetition, e.g. expr ::= term (\"+\" term)*");
      }
      if (color[c] == 0) {
        color[c] = 1;
        path.push_back({c, 0});
      }
    }
  }
}

}  // namespace

Automaton Automaton::build(const Grammar& grammar, const AutomatonLimits& limits) {
  Automaton a;
  a.root_rule = grammar.root;
  const int32_t num_grammar_rules = static_cast<int32_t>(grammar.rules.size());
  // Lookahead assertions become extra rules after the grammar's own.
  std::vector<int32_t> la_body;
  a.rule_lookahead.assign(num_grammar_rules, -1);
  for (int32_t r = 0; r < num_grammar_rules; ++r)
    if (grammar.rules[r].lookahead >= 0) {
      a.rule_lookahead[r] = num_grammar_rules + static_cast<int32_t>(la_body.size());
      la_body.push_back(grammar.rules[r].lookahead);
    }
  const size_t num_rules = num_grammar_rules + la_body.size();
  a.rule_lookahead.resize(num_rules, -1);
  a.first_lookahead_rule = num_grammar_rules;
  RulePlan plan = plan_rules(grammar, limits, static_cast<int32_t>(num_rules));
  a.rule_start.assign(num_rules, -1);
  std::vector<std::vector<FinalState>> per_rule(num_rules);
  BuildWork work{.limit = limits.max_work};
  RuleBuilder b(grammar, limits, plan.inlined, work);
  size_t total = 0;
  std::vector<int32_t> lookahead_owner(num_rules, -1);
  for (int32_t owner = 0; owner < num_grammar_rules; ++owner)
    if (a.rule_lookahead[owner] >= 0) lookahead_owner[a.rule_lookahead[owner]] = owner;
  for (size_t r = 0; r < num_rules; ++r) {
    bool is_la = r >= static_cast<size_t>(num_grammar_rules);
    std::string name = is_la ? grammar.rules[lookahead_owner[r]].name + "#lookahead" : grammar.rules[r].name;
    a.rule_names.push_back(name);
    if (!is_la) BRIOCHE_CHECK(grammar.rules[r].body >= 0, "grammar: rule '", grammar.rules[r].name, "' has no body");
    if (!plan.needed[r]) continue;
    b.reset();
    Fragment f = b.build(is_la ? la_body[r - num_grammar_rules] : grammar.rules[r].body);
    per_rule[r] = finish_rule(b, f, work);
    a.rule_start[r] = static_cast<int32_t>(total);
    total += per_rule[r].size();
    BRIOCHE_CHECK(total <= limits.max_states, "grammar too large: more than ", limits.max_states,
                  " automaton states (size budget)");
  }
  a.states.reserve(total);
  for (size_t r = 0; r < num_rules; ++r) {
    int32_t base = a.rule_start[r];
    if (base < 0) continue;
    for (auto& st : per_rule[r]) {
      AutomatonState s;
      s.rule = static_cast<int32_t>(r);
      s.accepting = st.accepting;
      s.loop = static_cast<int16_t>(st.loop);
      if (st.counter.loop_target >= 0) {
        s.counter = static_cast<int32_t>(a.counters.size());
        a.counters.push_back({st.counter.loop_target + base, st.counter.exit_target + base, st.counter.rounds});
      }
      s.byte_begin = static_cast<uint32_t>(a.byte_edges.size());
      for (auto e : st.bytes) {
        e.target += base;
        s.first_byte_lo = std::min(s.first_byte_lo, e.lo);
        s.first_byte_hi = std::max(s.first_byte_hi, e.hi);
        a.byte_edges.push_back(e);
      }
      s.byte_end = static_cast<uint32_t>(a.byte_edges.size());
      s.rule_begin = static_cast<uint32_t>(a.rule_edges.size());
      for (auto e : st.rules) {
        e.target += base;
        a.rule_edges.push_back(e);
      }
      s.rule_end = static_cast<uint32_t>(a.rule_edges.size());
      a.states.push_back(s);
    }
  }

  // Left recursion makes the pushdown closure non-terminating; reject it.
  reject_left_recursion(a);
  a.build_work = work.used;
  return a;
}

int32_t Automaton::rule_size(int32_t r) const {
  const int32_t begin = rule_start[r];
  if (begin < 0) return 0;
  int32_t end = begin;
  while (end < static_cast<int32_t>(states.size()) && states[end].rule == r) ++end;
  return end - begin;
}

namespace {

// Two independent 64-bit streams: together a 128-bit content key.
struct Hasher128 {
  uint64_t a = 0x6a09e667f3bcc908ull, b = 0xbb67ae8584caa73bull;
  void add(uint64_t v) {
    a = (a ^ v) * 0x100000001b3ull;
    a ^= a >> 31;
    b += v * 0x9e3779b97f4a7c15ull;
    b = (b ^ (b >> 29)) * 0xbf58476d1ce4e5b9ull;
  }
};

}  // namespace

std::vector<Automaton::StructureHash> Automaton::rule_structure_hashes() const {
  const int32_t n = static_cast<int32_t>(rule_start.size());
  // Dependencies: callees and the lookahead rule.
  std::vector<std::vector<int32_t>> deps(n);
  for (int32_t r = 0; r < n; ++r) {
    if (rule_start[r] < 0) continue;
    const int32_t begin = rule_start[r], size = rule_size(r);
    for (int32_t s = begin; s < begin + size; ++s)
      for (uint32_t i = states[s].rule_begin; i < states[s].rule_end; ++i) deps[r].push_back(rule_edges[i].rule);
    if (rule_lookahead[r] >= 0) deps[r].push_back(rule_lookahead[r]);
    std::sort(deps[r].begin(), deps[r].end());
    deps[r].erase(std::unique(deps[r].begin(), deps[r].end()), deps[r].end());
  }
  // A counter edge by its targets, not its bound: masks never depend on the
  // bound (PdaWalker::Counts), so a string of maxLength 20000 shares the
  // masks of one of 30000.
  auto add_counter = [&](Hasher128& h, const AutomatonState& st, int32_t begin) {
    if (st.counter < 0) return;
    const CounterEdge& c = counters[st.counter];
    h.add(0xCC00000000ull | static_cast<uint32_t>(st.loop));
    h.add((uint64_t(uint32_t(c.loop_target - begin)) << 32) | uint32_t(c.exit_target - begin));
  };
  // Strongly connected components, callees first.
  std::vector<char> live(n, 0);
  for (int32_t r = 0; r < n; ++r) live[r] = rule_start[r] >= 0;
  Components scc = strongly_connected(deps, live);
  std::vector<std::vector<int32_t>>& components = scc.members;
  const std::vector<int32_t>& component = scc.of;

  // Within a recursive group, members are ordered by their own structure
  // with group-internal calls left anonymous (then by index), so the same
  // group hashes alike whatever rule numbering a grammar gave it.
  auto anonymous_hash = [&](int32_t r, int32_t c) {
    Hasher128 h;
    const int32_t begin = rule_start[r], size = rule_size(r);
    for (int32_t s = begin; s < begin + size; ++s) {
      const AutomatonState& st = states[s];
      h.add(st.accepting ? 0xC1 : 0xC0);
      for (uint32_t i = st.byte_begin; i < st.byte_end; ++i)
        h.add((uint64_t(byte_edges[i].lo) << 40) | (uint64_t(byte_edges[i].hi) << 32) |
              static_cast<uint32_t>(byte_edges[i].target - begin));
      // Call edges are stored by callee index, which differs between
      // grammars: hash them as a sorted set.
      std::vector<uint64_t> calls;
      for (uint32_t i = st.rule_begin; i < st.rule_end; ++i)
        calls.push_back((component[rule_edges[i].rule] == c ? 0xB0ull << 32 : 0xB1ull << 32) |
                        static_cast<uint32_t>(rule_edges[i].target - begin));
      std::sort(calls.begin(), calls.end());
      for (uint64_t x : calls) h.add(x);
      add_counter(h, st, begin);
    }
    return h.a;
  };
  for (size_t c = 0; c < components.size(); ++c) {
    auto& group = components[c];
    if (group.size() < 2) continue;
    std::vector<std::pair<uint64_t, int32_t>> keyed;
    for (int32_t r : group) keyed.emplace_back(anonymous_hash(r, static_cast<int32_t>(c)), r);
    std::sort(keyed.begin(), keyed.end());
    for (size_t i = 0; i < group.size(); ++i) group[i] = keyed[i].second;
  }
  std::vector<StructureHash> out(n);
  for (size_t c = 0; c < components.size(); ++c) {
    const auto& members = components[c];
    Hasher128 h;
    h.add(members.size());
    for (int32_t r : members) {
      const int32_t begin = rule_start[r], size = rule_size(r);
      h.add(0xA0000000ull | static_cast<uint32_t>(size));
      // A callee as two words: its position inside the group, or its hash.
      auto ref = [&](int32_t callee) -> std::pair<uint64_t, uint64_t> {
        if (component[callee] == static_cast<int32_t>(c))
          return {0xB0000000ull |
                      static_cast<uint64_t>(std::find(members.begin(), members.end(), callee) - members.begin()),
                  0};
        return {out[callee].a, out[callee].b};
      };
      for (int32_t s = begin; s < begin + size; ++s) {
        const AutomatonState& st = states[s];
        h.add(st.accepting ? 0xC1 : 0xC0);
        for (uint32_t i = st.byte_begin; i < st.byte_end; ++i)
          h.add((uint64_t(byte_edges[i].lo) << 40) | (uint64_t(byte_edges[i].hi) << 32) |
                static_cast<uint32_t>(byte_edges[i].target - begin));
        h.add(0xD0);
        std::vector<std::tuple<uint64_t, uint64_t, uint32_t>> calls;  // sorted: edge order follows rule indices
        for (uint32_t i = st.rule_begin; i < st.rule_end; ++i) {
          auto [x, y] = ref(rule_edges[i].rule);
          calls.emplace_back(x, y, static_cast<uint32_t>(rule_edges[i].target - begin));
        }
        std::sort(calls.begin(), calls.end());
        for (auto [x, y, t] : calls) {
          h.add(x);
          h.add(y);
          h.add(t);
        }
        add_counter(h, st, begin);
        h.add(0xE0);
      }
      if (rule_lookahead[r] >= 0) {
        auto [x, y] = ref(rule_lookahead[r]);
        h.add(0xF1);
        h.add(x);
        h.add(y);
      }
    }
    for (size_t i = 0; i < members.size(); ++i) {
      Hasher128 m = h;
      m.add(0xF2000000ull | i);
      out[members[i]] = StructureHash{m.a, m.b};
    }
  }
  return out;
}

// Round k's hash of a state covers walks of up to k bytes: its own edges
// (round 0) and round k - 1's hash of each byte edge's target. Calls and
// counter edges read no byte, so their targets' hashes of the same round
// are used: states are visited with those targets first (a cycle of them
// leaves the rule uncomputed). The partition by hash can only refine from
// round to round; once a round splits nothing, the hash of a state depends
// only on its class, so the remaining rounds run over one state per class
// (the first of its class in visiting order, which comes after the first
// of each class it depends on).
std::vector<Automaton::StructureHash> Automaton::forward_hashes(int32_t bytes,
                                                                const std::vector<StructureHash>& rule_hashes,
                                                                const std::vector<char>& wanted) const {
  std::vector<StructureHash> out(states.size());
  std::vector<int32_t> order, color, rep_of;
  std::vector<StructureHash> base, prev, next;
  std::vector<std::array<uint64_t, 4>> calls;
  for (int32_t r = 0; r < first_lookahead_rule; ++r) {
    const int32_t begin = rule_start[r], size = begin < 0 || !wanted[r] ? 0 : rule_size(r);
    if (size == 0) continue;
    // Visiting order: depth-first post-order over calls and counter edges.
    auto same_round_targets = [&](int32_t i, std::vector<int32_t>& targets) {
      targets.clear();
      const AutomatonState& st = states[begin + i];
      for (uint32_t e = st.rule_begin; e < st.rule_end; ++e) targets.push_back(rule_edges[e].target - begin);
      if (st.counter >= 0) targets.push_back(counters[st.counter].loop_target - begin);
    };
    order.clear();
    color.assign(size, 0);
    bool cyclic = false;
    std::vector<std::pair<int32_t, size_t>> stack;
    std::vector<int32_t> targets;
    for (int32_t root = 0; root < size && !cyclic; ++root) {
      if (color[root]) continue;
      color[root] = 1;
      stack.assign(1, {root, 0});
      while (!stack.empty() && !cyclic) {
        auto& [v, next_edge] = stack.back();
        same_round_targets(v, targets);
        if (next_edge < targets.size()) {
          const int32_t w = targets[next_edge++];
          if (color[w] == 1) cyclic = true;
          if (color[w] == 0) {
            color[w] = 1;
            stack.push_back({w, 0});
          }
          continue;
        }
        color[v] = 2;
        order.push_back(v);
        stack.pop_back();
      }
    }
    if (cyclic) continue;
    // Round 0: what the state is.
    base.assign(size, {});
    for (int32_t i = 0; i < size; ++i) {
      const AutomatonState& st = states[begin + i];
      Hasher128 h;
      h.add(st.accepting ? 0xF0A1 : 0xF0A0);
      if (st.accepting && rule_lookahead[r] >= 0) {
        h.add(rule_hashes[rule_lookahead[r]].a);
        h.add(rule_hashes[rule_lookahead[r]].b);
      }
      for (uint32_t e = st.byte_begin; e < st.byte_end; ++e)
        h.add((uint64_t(byte_edges[e].lo) << 8) | byte_edges[e].hi);
      h.add(0xF0B0 + (st.counter >= 0 ? 1 : 0));
      base[i] = {h.a, h.b};
    }
    prev = base;
    next.assign(size, {});
    rep_of.assign(size, -1);
    auto round = [&](int32_t i, auto&& value_of) {
      const AutomatonState& st = states[begin + i];
      Hasher128 h;
      h.add(base[i].a);
      h.add(base[i].b);
      for (uint32_t e = st.byte_begin; e < st.byte_end; ++e) {
        const StructureHash& t = value_of(prev, byte_edges[e].target - begin);
        h.add(t.a);
        h.add(t.b);
      }
      // Calls by callee and continuation, sorted: edge order follows rule indices.
      calls.clear();
      for (uint32_t e = st.rule_begin; e < st.rule_end; ++e) {
        const StructureHash& callee = rule_hashes[rule_edges[e].rule];
        const StructureHash& t = value_of(next, rule_edges[e].target - begin);
        calls.push_back({callee.a, callee.b, t.a, t.b});
      }
      std::sort(calls.begin(), calls.end());
      for (const auto& c : calls)
        for (uint64_t x : c) h.add(x);
      if (st.counter >= 0) {
        const StructureHash& t = value_of(next, counters[st.counter].loop_target - begin);
        h.add(t.a);
        h.add(t.b);
      }
      next[i] = {h.a, h.b};
    };
    auto own = [](const std::vector<StructureHash>& v, int32_t i) -> const StructureHash& { return v[i]; };
    auto by_class = [&](const std::vector<StructureHash>& v, int32_t i) -> const StructureHash& {
      return v[rep_of[i]];
    };
    size_t slots = 16;
    while (slots < static_cast<size_t>(size) * 2) slots *= 2;
    std::vector<int32_t> table;
    auto count_classes = [&](const std::vector<StructureHash>& v) {  // distinct hashes (open addressing)
      table.assign(slots, -1);
      size_t distinct = 0;
      for (int32_t i = 0; i < size; ++i)
        for (size_t slot = (v[i].a ^ (v[i].b >> 7)) & (slots - 1);; slot = (slot + 1) & (slots - 1)) {
          if (table[slot] < 0) {
            table[slot] = i;
            ++distinct;
            break;
          }
          if (v[table[slot]] == v[i]) break;
        }
      return distinct;
    };
    auto classes = count_classes(prev);
    int32_t k = 1;
    for (; k <= bytes; ++k) {
      for (int32_t i : order) round(i, own);
      prev.swap(next);
      const auto now = count_classes(prev);
      const bool stable = now == classes;
      classes = now;
      if (stable) break;
    }
    if (k < bytes) {
      // Stable: one state per class (the first in visiting order) for the
      // remaining rounds.
      std::unordered_map<uint64_t, int32_t> first;  // by hash (a; b checked)
      std::vector<int32_t> reps;
      for (int32_t i : order) {
        auto [it, inserted] = first.emplace(prev[i].a ^ (prev[i].b * 0x9e3779b97f4a7c15ull), i);
        BRIOCHE_CHECK(inserted || prev[it->second] == prev[i], "grammar: forward hash collision");
        rep_of[i] = it->second;
        if (inserted) reps.push_back(i);
      }
      for (++k; k <= bytes; ++k) {
        for (int32_t i : reps) round(i, by_class);
        prev.swap(next);
      }
      for (int32_t i = 0; i < size; ++i) out[begin + i] = prev[rep_of[i]];
    } else {
      for (int32_t i = 0; i < size; ++i) out[begin + i] = prev[i];
    }
  }
  return out;
}

// Moore's partition refinement, one round per byte of walk: round 0 splits
// states by what they are (accepting, byte ranges read, calls with their
// return offsets); round k splits them by round k-1's class of each byte
// edge's target. After k rounds two states in one class agree on every walk
// of up to k bytes. It stops early once a round splits nothing (then no
// later round does either).
std::vector<int32_t> Automaton::walk_class_offsets(int32_t max_bytes, int32_t min_states,
                                                   std::vector<int32_t>* prefix_twin,
                                                   std::vector<int32_t>* prefix_twin_bytes) const {
  std::vector<int32_t> out(states.size());
  if (prefix_twin) prefix_twin->assign(states.size(), -1);
  if (prefix_twin_bytes) prefix_twin_bytes->assign(states.size(), 0);
  for (int32_t s = 0; s < static_cast<int32_t>(states.size()); ++s)
    out[s] = states[s].rule >= 0 && rule_start[states[s].rule] >= 0 ? s - rule_start[states[s].rule] : 0;
  struct VectorHash {
    size_t operator()(const std::vector<int64_t>& v) const {
      uint64_t h = 0xcbf29ce484222325ull;
      for (int64_t x : v) h = (h ^ static_cast<uint64_t>(x)) * 0x100000001b3ull;
      return static_cast<size_t>(h ^ (h >> 29));
    }
  };
  for (int32_t r = 0; r < static_cast<int32_t>(rule_start.size()); ++r) {
    const int32_t begin = rule_start[r], size = begin < 0 ? 0 : rule_size(r);
    if (size < min_states) continue;
    auto inside = [&](int32_t t) { return t >= begin && t < begin + size; };
    std::vector<int32_t> cls(size), next(size);
    std::unordered_map<std::vector<int64_t>, int32_t, VectorHash> ids;
    auto classify = [&](const std::vector<int64_t>& sig) {
      return ids.emplace(sig, static_cast<int32_t>(ids.size())).first->second;
    };
    std::vector<int64_t> sig;
    bool closed = true;  // every edge stays in the rule (otherwise: keep the offsets)
    for (int32_t i = 0; i < size && closed; ++i) {
      const AutomatonState& st = states[begin + i];
      sig.assign({st.accepting ? 1 : 0});
      for (uint32_t e = st.byte_begin; e < st.byte_end; ++e) {
        closed &= inside(byte_edges[e].target);
        sig.push_back((int64_t(byte_edges[e].lo) << 8) | byte_edges[e].hi);
      }
      sig.push_back(-1);
      for (uint32_t e = st.rule_begin; e < st.rule_end; ++e) {
        closed &= inside(rule_edges[e].target);
        sig.push_back(rule_edges[e].rule);
        sig.push_back(rule_edges[e].target - begin);  // the same continuation, exactly
      }
      if (st.counter >= 0) {  // masks take a round's end back to the loop's start
        const int32_t to = counters[st.counter].loop_target;
        closed &= inside(to);
        sig.push_back(-2);
        sig.push_back(to - begin);
      }
      cls[i] = classify(sig);
    }
    if (!closed) continue;
    size_t num_classes = ids.size();
    std::vector<int32_t> first_of_class;
    // A round's signature of i is (cls[i], cls of each byte edge's target);
    // states with equal cls have the same edges, so two signatures are
    // compared in place. Open addressing on the signature's hash, each slot
    // a representative state: no signature is copied (a long unrolled
    // repetition runs max_bytes rounds over all its states).
    auto round_hash = [&](int32_t i) {
      const AutomatonState& st = states[begin + i];
      uint64_t h = 0x9e3779b97f4a7c15ull ^ static_cast<uint32_t>(cls[i]);
      for (uint32_t e = st.byte_begin; e < st.byte_end; ++e)
        h = (h ^ static_cast<uint32_t>(cls[byte_edges[e].target - begin])) * 0x100000001b3ull;
      return h ^ (h >> 29);
    };
    auto same_round_signature = [&](int32_t i, int32_t j) {
      if (cls[i] != cls[j]) return false;
      const AutomatonState &a = states[begin + i], &b = states[begin + j];
      for (uint32_t e = 0; e < a.byte_end - a.byte_begin; ++e)
        if (cls[byte_edges[a.byte_begin + e].target - begin] != cls[byte_edges[b.byte_begin + e].target - begin])
          return false;
      return true;
    };
    size_t slots = 16;
    while (slots < static_cast<size_t>(size) * 2) slots *= 2;
    std::vector<std::pair<uint64_t, int32_t>> table(slots);
    for (int32_t round = 0; round < max_bytes && num_classes < static_cast<size_t>(size); ++round) {
      std::fill(table.begin(), table.end(), std::make_pair(uint64_t{0}, int32_t{-1}));
      size_t made = 0;
      for (int32_t i = 0; i < size; ++i) {
        const uint64_t h = round_hash(i);
        for (size_t slot = h & (slots - 1);; slot = (slot + 1) & (slots - 1)) {
          auto& [slot_hash, rep] = table[slot];
          if (rep < 0) {
            slot_hash = h;
            rep = i;
            next[i] = static_cast<int32_t>(made++);
            break;
          }
          if (slot_hash == h && same_round_signature(rep, i)) {
            next[i] = next[rep];
            break;
          }
        }
      }
      cls.swap(next);
      if (made == num_classes) break;
      num_classes = made;
      // After round + 1 rounds, states of one class read every string of
      // up to round + 1 bytes alike: remember the earliest such twin.
      if (prefix_twin && prefix_twin_bytes) {
        first_of_class.assign(num_classes, -1);
        for (int32_t i = 0; i < size; ++i) {
          int32_t& f = first_of_class[cls[i]];
          if (f < 0) {
            f = i;
          } else {
            (*prefix_twin)[begin + i] = f;
            (*prefix_twin_bytes)[begin + i] = round + 1;
          }
        }
      }
    }
    std::vector<int32_t> first(num_classes, -1);
    for (int32_t i = 0; i < size; ++i) {
      if (first[cls[i]] < 0) first[cls[i]] = i;
      out[begin + i] = first[cls[i]];
    }
  }
  return out;
}

}  // namespace brioche::grammar
