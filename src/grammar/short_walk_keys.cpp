#include "grammar/short_walk_keys.h"

#include "grammar/hash128.h"

namespace brioche::grammar {

ShortWalkKeys::ShortWalkKeys(const Automaton& a, const std::vector<Key>& rule_hashes, const std::vector<char>& reading,
                             std::function<Key(int32_t)> fallback)
    : a_(a), rule_hashes_(rule_hashes), reading_(reading), fallback_(std::move(fallback)) {
  for (int level = 0; level < 2; ++level) {
    keys_[level].assign(a.states.size(), Key{});
    progress_[level].assign(a.states.size(), 0);
  }
}

void ShortWalkKeys::release() {
  for (int level = 0; level < 2; ++level) {
    std::vector<Key>().swap(keys_[level]);
    std::vector<uint8_t>().swap(progress_[level]);
  }
  std::vector<std::pair<int, int32_t>>().swap(stack_);
}

// What the key of (level, state) is made of besides the state itself (the
// PdaWalker closure with counts ignored): at the same level, the return
// target of a call of a rule that may return without reading (the closure
// goes on there) and a counter edge's loop target; one level down, the
// target of each byte edge and the return target of a call of a rule that
// reads (one byte read, at least). A uniqueItems item's call stops the
// closure at the item's end (the mask compiler leaves that to the matcher).
template <class Visit>
void ShortWalkKeys::for_each_dependency(int level, int32_t state, const Visit& visit) const {
  const AutomatonState& st = a_.states[state];
  for (uint32_t e = st.rule_begin; e < st.rule_end; ++e) {
    const RuleEdge& call = a_.rule_edges[e];
    if (a_.rule_unique_item[call.rule]) continue;
    if (!reading_[call.rule])
      visit(level, call.target);
    else if (level > 0)
      visit(level - 1, call.target);
  }
  if (st.counter >= 0) visit(level, a_.counters[st.counter].loop_target);
  if (level > 0)
    for (uint32_t e = st.byte_begin; e < st.byte_end; ++e) visit(level - 1, a_.byte_edges[e].target);
}

ShortWalkKeys::Key ShortWalkKeys::local_hash(int level, int32_t state, bool* cycle) {
  const AutomatonState& st = a_.states[state];
  Hasher128 h;
  h.add(0x5157000ull | static_cast<uint64_t>(level) << 1 | (st.accepting ? 1 : 0));
  auto dependency = [&](int l, int32_t t) {
    if (progress_[l][t] != 2) {  // still on the path: an epsilon cycle
      *cycle = true;
      return Key{};
    }
    return keys_[l][t];
  };
  for (uint32_t e = st.byte_begin; e < st.byte_end; ++e) {
    const ByteEdge& b = a_.byte_edges[e];
    h.add(uint64_t(b.lo) << 8 | b.hi);
    if (level > 0) {
      const Key k = dependency(level - 1, b.target);
      h.add(k.a);
      h.add(k.b);
    }
  }
  for (uint32_t e = st.rule_begin; e < st.rule_end; ++e) {
    const RuleEdge& call = a_.rule_edges[e];
    const bool unique = a_.rule_unique_item[call.rule] != 0, reads = reading_[call.rule] != 0;
    h.add(0xCA11000ull | (unique ? 2 : 0) | (reads ? 1 : 0));
    h.add(rule_hashes_[call.rule].a);
    h.add(rule_hashes_[call.rule].b);
    if (unique || (reads && level == 0)) continue;
    const Key k = dependency(reads ? level - 1 : level, call.target);
    h.add(k.a);
    h.add(k.b);
  }
  if (st.counter >= 0) {
    const Key k = dependency(level, a_.counters[st.counter].loop_target);
    h.add(0xC0C0ull);
    h.add(k.a);
    h.add(k.b);
  }
  return Key{h.a, h.b | 1};  // never {0, 0}
}

ShortWalkKeys::Key ShortWalkKeys::key(int level, int32_t state) {
  if (progress_[level][state] == 2) return keys_[level][state];
  // Depth-first, callees' keys first, without recursion (chains of optional
  // members are thousands of states long). A state is finished on its
  // second visit, once every dependency not on the path is.
  stack_.assign(1, {level, state});
  while (!stack_.empty()) {
    const auto [l, s] = stack_.back();
    if (progress_[l][s] == 2) {
      stack_.pop_back();
      continue;
    }
    if (progress_[l][s] == 0) {
      progress_[l][s] = 1;
      for_each_dependency(l, s, [&](int dl, int32_t t) {
        if (progress_[dl][t] == 0) stack_.push_back({dl, t});
      });
      continue;
    }
    stack_.pop_back();
    bool cycle = false;
    Key k = local_hash(l, s, &cycle);
    if (cycle) {  // the compiler's own key: alike states have alike walks of any length
      const Key f = fallback_(s);
      Hasher128 h;
      h.add(0xFA11BAC4ull | static_cast<uint64_t>(l) << 32);
      h.add(f.a);
      h.add(f.b);
      h.add(static_cast<uint64_t>(f.a == 0 && f.b == 0 ? s : -1));
      k = Key{h.a, h.b | 1};
    }
    keys_[l][s] = k;
    progress_[l][s] = 2;
  }
  return keys_[level][state];
}

}  // namespace brioche::grammar
