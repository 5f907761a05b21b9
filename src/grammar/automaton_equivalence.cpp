// Which rules and states of an automaton have equal token masks: rule
// structure hashes (masks shared across grammars), forward hashes (states
// that read every short byte string alike, across rules and bounds) and
// walk classes (states of one rule that share a mask, with prefix twins).
#include <algorithm>
#include <array>
#include <tuple>
#include <unordered_map>

#include "core/error.h"
#include "grammar/automaton.h"
#include "grammar/hash128.h"
#include "grammar/rule_plan.h"

namespace brioche::grammar {

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
      if (has_unique_items && rule_unique_item[r]) h.add(0xF3);  // its callers' walks stop at its end (pda.h)
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
  for (int32_t r = 0; r < static_cast<int32_t>(rule_start.size()); ++r) {
    const int32_t begin = rule_start[r], size = begin < 0 || !wanted[r] || is_lookahead_rule(r) ? 0 : rule_size(r);
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

namespace {

// The rounds of walk_class_offsets over one rule's states [begin, begin +
// size), from the classes `cls` (ids 0..num_classes-1). Classes keep their
// ids across rounds, and a round visits only the states with a byte edge
// into a state whose class changed in the round before: the others keep
// their round signature (class, class of each byte edge's target), so they
// stay together. A long unrolled repetition (`c{0,4096}`) splits off a few
// states per round near its bound; a round costs those few instead of the
// whole rule. The partitions are Moore's, round by round, so the results
// equal a full pass per round: `out` is the least state of each final
// class; a state that becomes the least of its class in round r >= 1 has,
// as prefix twin, the least of its class before that round, for r bytes;
// one that never does, the least of its final class, for the number of
// rounds that split.
void refine_walk_classes(const Automaton& a, const std::vector<char>& reading_call, int32_t begin, int32_t size,
                         int32_t max_bytes, std::vector<int32_t>& cls, int32_t num_classes, std::vector<int32_t>& out,
                         std::vector<int32_t>* prefix_twin, std::vector<int32_t>* prefix_twin_bytes) {
  // A call of a rule that reads at least one byte before it returns (an
  // item rule, an object, a quoted string) counts like a byte edge: its
  // return target by round k - 1's class; other calls (reading_call 0) are
  // compared by their exact target (round 0). Calls the same way in every
  // state of a class (equal first signatures), in the same order.
  auto reads = [&](uint32_t e) { return reading_call[a.rule_edges[e].rule] != 0; };
  // Byte-edge (and reading-call) predecessors inside the rule (CSR).
  std::vector<int32_t> pred_begin(size + 1, 0), preds;
  for (int32_t i = 0; i < size; ++i) {
    const AutomatonState& st = a.states[begin + i];
    for (uint32_t e = st.byte_begin; e < st.byte_end; ++e) ++pred_begin[a.byte_edges[e].target - begin + 1];
    for (uint32_t e = st.rule_begin; e < st.rule_end; ++e)
      if (reads(e)) ++pred_begin[a.rule_edges[e].target - begin + 1];
  }
  for (int32_t i = 0; i < size; ++i) pred_begin[i + 1] += pred_begin[i];
  preds.resize(pred_begin[size]);
  {
    std::vector<int32_t> fill(pred_begin.begin(), pred_begin.end() - 1);
    for (int32_t i = 0; i < size; ++i) {
      const AutomatonState& st = a.states[begin + i];
      for (uint32_t e = st.byte_begin; e < st.byte_end; ++e) preds[fill[a.byte_edges[e].target - begin]++] = i;
      for (uint32_t e = st.rule_begin; e < st.rule_end; ++e)
        if (reads(e)) preds[fill[a.rule_edges[e].target - begin]++] = i;
    }
  }
  // Members of each class, ascending; entries of states that moved out are
  // skipped (head past the leading ones, so the least is found fast).
  std::vector<std::vector<int32_t>> members(num_classes);
  std::vector<int32_t> head(num_classes, 0), count(num_classes, 0);
  for (int32_t i = 0; i < size; ++i) {
    members[cls[i]].push_back(i);
    ++count[cls[i]];
  }
  auto least = [&](int32_t c) {
    int32_t& h = head[c];
    while (cls[members[c][h]] != c) ++h;
    return members[c][h];
  };
  auto round_hash = [&](int32_t i) {
    const AutomatonState& st = a.states[begin + i];
    uint64_t h = 0x9e3779b97f4a7c15ull ^ static_cast<uint32_t>(cls[i]);
    for (uint32_t e = st.byte_begin; e < st.byte_end; ++e)
      h = (h ^ static_cast<uint32_t>(cls[a.byte_edges[e].target - begin])) * 0x100000001b3ull;
    for (uint32_t e = st.rule_begin; e < st.rule_end; ++e)
      if (reads(e)) h = (h ^ static_cast<uint32_t>(cls[a.rule_edges[e].target - begin])) * 0x100000001b3ull;
    return h ^ (h >> 29);
  };
  // Same class and the same classes of targets (equal classes have equal edges).
  auto same_round_signature = [&](int32_t i, int32_t j) {
    if (cls[i] != cls[j]) return false;
    const AutomatonState &x = a.states[begin + i], &y = a.states[begin + j];
    for (uint32_t e = 0; e < x.byte_end - x.byte_begin; ++e)
      if (cls[a.byte_edges[x.byte_begin + e].target - begin] != cls[a.byte_edges[y.byte_begin + e].target - begin])
        return false;
    // (equal classes call the same rules, in the same order)
    for (uint32_t e = x.rule_begin, f = y.rule_begin; e < x.rule_end; ++e, ++f)
      if (reads(e) && cls[a.rule_edges[e].target - begin] != cls[a.rule_edges[f].target - begin]) return false;
    return true;
  };
  const bool twins = prefix_twin != nullptr && prefix_twin_bytes != nullptr;
  std::vector<uint32_t> stamp(size, 0);
  std::vector<int32_t> touched, changed, reps, rep_class, split;  // split: classes that lost members this round
  std::vector<std::pair<uint64_t, int32_t>> keyed;                // (round hash, state) of one class's touched
  std::vector<uint64_t> rep_hash;                                 // round hash of each of reps
  struct Move {
    int32_t state, from, to;
  };
  std::vector<Move> moves;                         // applied after the round
  std::vector<int32_t> least_before(num_classes);  // per class that lost members this round: its least before
  int32_t rounds_split = 0;
  for (int32_t r = 0; r < max_bytes && num_classes < size; ++r) {
    const uint32_t generation = static_cast<uint32_t>(r) + 1;
    touched.clear();
    if (r == 0) {
      for (int32_t i = 0; i < size; ++i) touched.push_back(i);
    } else {
      for (int32_t t : changed)
        for (int32_t k = pred_begin[t]; k < pred_begin[t + 1]; ++k) touched.push_back(preds[k]);
      std::sort(touched.begin(), touched.end());
      touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    }
    for (int32_t i : touched) stamp[i] = generation;
    std::stable_sort(touched.begin(), touched.end(), [&](int32_t x, int32_t y) { return cls[x] < cls[y]; });
    moves.clear();
    split.clear();
    int32_t next_class = num_classes;
    for (size_t lo = 0; lo < touched.size();) {
      const int32_t c = cls[touched[lo]];
      size_t hi = lo;
      while (hi < touched.size() && cls[touched[hi]] == c) ++hi;
      // The class keeps the signature of its untouched members (all alike),
      // or, when every member is touched, that of its least member.
      int32_t own = touched[lo];
      if (static_cast<int32_t>(hi - lo) < count[c])
        for (size_t k = head[c];; ++k)
          if (const int32_t m = members[c][k]; cls[m] == c && stamp[m] != generation) {
            own = m;
            break;
          }
      keyed.clear();
      for (size_t k = lo; k < hi; ++k) keyed.emplace_back(round_hash(touched[k]), touched[k]);
      std::sort(keyed.begin(), keyed.end());  // by hash, then ascending state within a hash
      reps.assign(1, own);
      rep_class.assign(1, c);
      rep_hash.assign(1, round_hash(own));
      const size_t moves_before = moves.size();
      for (const auto& [h, i] : keyed) {
        // Equal signatures have equal round hashes, and at most one rep has
        // i's signature (reps differ pairwise). Reps after the first are
        // made in ascending hash order (keyed is sorted), so the ones with
        // hash h are the last few: a class that splits into thousands costs
        // a comparison or two per state, not one per rep.
        int32_t target = -1;
        if (rep_hash[0] == h && (reps[0] == i || same_round_signature(reps[0], i))) target = rep_class[0];
        for (size_t g = reps.size(); target < 0 && g-- > 1 && rep_hash[g] == h;)
          if (same_round_signature(reps[g], i)) target = rep_class[g];
        if (target < 0) {
          reps.push_back(i);
          rep_class.push_back(next_class++);
          rep_hash.push_back(h);
          target = rep_class.back();
        }
        if (target != c) moves.push_back({i, c, target});
      }
      if (moves.size() != moves_before) {
        split.push_back(c);
        least_before[c] = least(c);
      }
      lo = hi;
    }
    if (moves.empty()) break;  // a round that splits nothing: no later one does
    ++rounds_split;
    // New classes get their members in ascending order.
    std::sort(moves.begin(), moves.end(),
              [](const Move& x, const Move& y) { return x.to != y.to ? x.to < y.to : x.state < y.state; });
    members.resize(next_class);
    head.resize(next_class, 0);
    count.resize(next_class, 0);
    least_before.resize(next_class);
    changed.clear();
    for (const Move& m : moves) {
      --count[m.from];
      ++count[m.to];
      cls[m.state] = m.to;
      members[m.to].push_back(m.state);
      changed.push_back(m.state);
    }
    // Who became the least of a class: the least of each class that lost
    // members (if it changed) and of each new class.
    auto record = [&](int32_t state, int32_t twin) {
      if (twins && state != twin && r >= 1) {
        (*prefix_twin)[begin + state] = twin;
        (*prefix_twin_bytes)[begin + state] = r;
      }
    };
    for (int32_t c : split)
      if (count[c] > 0) record(least(c), least_before[c]);
    for (size_t k = 0; k < moves.size(); ++k)  // the first of each new class is its least
      if (k == 0 || moves[k - 1].to != moves[k].to) record(moves[k].state, least_before[moves[k].from]);
    num_classes = next_class;
  }
  for (int32_t i = 0; i < size; ++i) {
    const int32_t first = least(cls[i]);
    out[begin + i] = first;
    if (twins && first != i && rounds_split > 0) {
      (*prefix_twin)[begin + i] = first;
      (*prefix_twin_bytes)[begin + i] = rounds_split;
    }
  }
}

}  // namespace

// Moore's partition refinement, one round per byte of walk: round 0 splits
// states by what they are (accepting, byte ranges read, calls with their
// return offsets); round k splits them by round k-1's class of each byte
// edge's target. After k rounds two states in one class agree on every walk
// of up to k bytes. It stops early once a round splits nothing (then no
// later round does either).
std::vector<char> Automaton::rules_reading_before_return() const {
  // Least fixed point of "can return without reading": a rule can when an
  // accepting state is reachable from its start by calls of rules that
  // can and by counter edges (which read nothing). Every rule starts as
  // reading; a pass marks the rules that can return at once, and a later
  // pass those whose epsilon paths go through them.
  const int32_t n = static_cast<int32_t>(rule_start.size());
  std::vector<char> reads(n, 0);
  for (int32_t r = 0; r < n; ++r) reads[r] = rule_start[r] >= 0;
  std::vector<int32_t> stack;
  std::vector<uint32_t> seen(states.size(), 0);
  uint32_t stamp = 0;
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t r = 0; r < n; ++r) {
      if (!reads[r]) continue;
      ++stamp;
      stack.assign(1, rule_start[r]);
      seen[rule_start[r]] = stamp;
      bool returns = false;
      auto push = [&](int32_t t) {
        if (seen[t] != stamp) seen[t] = stamp, stack.push_back(t);
      };
      while (!stack.empty() && !returns) {
        const AutomatonState& st = states[stack.back()];
        stack.pop_back();
        returns = st.accepting;
        for (uint32_t e = st.rule_begin; e < st.rule_end; ++e)
          if (!reads[rule_edges[e].rule]) push(rule_edges[e].target);
        if (st.counter >= 0) {
          push(counters[st.counter].loop_target);
          push(counters[st.counter].exit_target);
        }
      }
      if (returns) reads[r] = 0, changed = true;
    }
  }
  return reads;
}

std::vector<int32_t> Automaton::walk_class_offsets(int32_t max_bytes, int32_t min_states,
                                                   std::vector<int32_t>* prefix_twin,
                                                   std::vector<int32_t>* prefix_twin_bytes) const {
  // Calls compared by their return target's class in the rounds: those of
  // rules that read a byte before they return, except uniqueItems items
  // (whose return node records where the item began).
  std::vector<char> reading_call = rules_reading_before_return();
  for (size_t r = 0; r < reading_call.size(); ++r)
    if (r < rule_unique_item.size() && rule_unique_item[r]) reading_call[r] = 0;
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
    std::vector<int32_t> cls(size);
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
        // The same continuation, exactly; a reading call's by its class in
        // the rounds (refine_walk_classes).
        if (!reading_call[rule_edges[e].rule]) sig.push_back(rule_edges[e].target - begin);
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
    refine_walk_classes(*this, reading_call, begin, size, max_bytes, cls, static_cast<int32_t>(ids.size()), out,
                        prefix_twin, prefix_twin_bytes);
  }
  return out;
}

}  // namespace brioche::grammar
