#include "grammar/frontier_dfa.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace brioche::grammar {

FrontierDfa::FrontierDfa(const Automaton& automaton, size_t max_configs)
    : a_(automaton), max_configs_(max_configs), walker_(automaton, arena_) {
  // Class boundaries: every edge range starts a class at lo and at hi + 1.
  bool boundary[257] = {};
  boundary[0] = true;
  for (const ByteEdge& e : a_.byte_edges) {
    boundary[e.lo] = true;
    boundary[e.hi + 1] = true;
  }
  int32_t cls = -1;
  for (int b = 0; b < 256; ++b) {
    if (boundary[b]) ++cls;
    class_of_[b] = static_cast<uint8_t>(cls);
  }
  num_classes_ = cls + 1;
  node_begin_.push_back(0);
}

int32_t FrontierDfa::intern(Frontier& f) {
  std::sort(f.nodes.begin(), f.nodes.end());
  key_.assign(reinterpret_cast<const char*>(f.nodes.data()), f.nodes.size() * sizeof(int32_t));
  key_ += f.escaped ? '\1' : '\0';
  auto [it, inserted] = index_.emplace(key_, static_cast<int32_t>(flags_.size()));
  if (!inserted) return it->second;
  BRIOCHE_CHECK(flags_.size() < max_configs_, "grammar compile: more than ", max_configs_,
                " distinct stack configurations (size budget); simplify the grammar");
  nodes_.insert(nodes_.end(), f.nodes.begin(), f.nodes.end());
  node_begin_.push_back(static_cast<int32_t>(nodes_.size()));
  flags_.push_back(static_cast<uint8_t>((f.nodes.empty() ? kDead : 0) | (f.escaped ? kEscaped : 0)));
  uint64_t bits[4] = {0, 0, 0, 0};
  for (int32_t id : f.nodes) {
    const AutomatonState& st = a_.states[arena_.node(id).state];
    for (uint32_t e = st.byte_begin; e < st.byte_end; ++e)
      for (int b = a_.byte_edges[e].lo; b <= a_.byte_edges[e].hi; ++b) bits[b >> 6] |= 1ull << (b & 63);
  }
  num_readable_.push_back(__builtin_popcountll(bits[0]) + __builtin_popcountll(bits[1]) +
                          __builtin_popcountll(bits[2]) + __builtin_popcountll(bits[3]));
  readable_begin_.push_back(-1);
  readable_size_.push_back(0);
  self_loop_.push_back({0, 0, 0, 0});
  self_loop_done_.push_back(0);
  table_.resize(table_.size() + num_classes_, -1);
  return it->second;
}

int32_t FrontierDfa::start(int32_t state) {
  walker_.closure_of(arena_.intern(state, kContext), scratch_out_);
  return intern(scratch_out_);
}

int32_t FrontierDfa::compute(int32_t c, uint8_t byte) {
  scratch_in_.clear();
  scratch_in_.nodes.assign(nodes_.begin() + node_begin_[c], nodes_.begin() + node_begin_[c + 1]);
  walker_.advance(scratch_in_, byte, scratch_out_);
  return intern(scratch_out_);
}

}  // namespace brioche::grammar

namespace brioche::grammar {

void FrontierDfa::compute_readable(int32_t c) {
  uint64_t bits[4] = {0, 0, 0, 0};
  for (int32_t i = node_begin_[c]; i < node_begin_[c + 1]; ++i) {
    const AutomatonState& st = a_.states[arena_.node(nodes_[i]).state];
    for (uint32_t e = st.byte_begin; e < st.byte_end; ++e)
      for (int b = a_.byte_edges[e].lo; b <= a_.byte_edges[e].hi; ++b) bits[b >> 6] |= 1ull << (b & 63);
  }
  readable_begin_[c] = static_cast<int32_t>(readable_pool_.size());
  for (int b = 0; b < 256; ++b)
    if (bits[b >> 6] >> (b & 63) & 1) readable_pool_ += static_cast<char>(b);
  readable_size_[c] = static_cast<int32_t>(readable_pool_.size()) - readable_begin_[c];
}


void FrontierDfa::compute_self_loop(int32_t c) {
  std::array<uint64_t, 4> bits{0, 0, 0, 0};
  if (!dead(c)) {
    const std::string bytes(readable_bytes(c));  // a copy: next() may grow the pool
    for (char ch : bytes) {
      const uint8_t b = static_cast<uint8_t>(ch);
      if (next(c, b) == c) bits[b >> 6] |= 1ull << (b & 63);
    }
  }
  self_loop_[c] = bits;
  self_loop_done_[c] = 1;
}

}  // namespace brioche::grammar
