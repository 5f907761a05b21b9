#include "grammar/frontier_dfa.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace brioche::grammar {
namespace {

// bits |= the bytes lo..hi (a 256-bit set in four words), a word at a time.
void set_range(uint64_t* bits, int lo, int hi) {
  for (int w = lo >> 6; w <= hi >> 6; ++w) {
    const int from = std::max(lo, w * 64) - w * 64, to = std::min(hi, w * 64 + 63) - w * 64;
    const uint64_t upper = to == 63 ? ~0ull : (1ull << (to + 1)) - 1;
    bits[w] |= upper & ~((1ull << from) - 1);
  }
}

}  // namespace

FrontierDfa::FrontierDfa(const Automaton& automaton, size_t max_configs, size_t max_table_bytes)
    : a_(automaton), max_configs_(max_configs), walker_(automaton, arena_, PdaWalker::Counts::kIgnore) {
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
  max_configs_ = std::min(max_configs_, max_table_bytes / (sizeof(int32_t) * num_classes_));
  node_begin_.push_back(0);
}

size_t FrontierDfa::memory_bytes() const {
  const size_t rows = row_blocks_.empty() ? 0 : (row_blocks_.size() - 1) * kRowsPerBlock + rows_in_last_block_;
  return rows * num_classes_ * sizeof(int32_t) + rows_.capacity() * sizeof(int32_t*) +
         nodes_.capacity() * sizeof(int32_t) + node_begin_.capacity() * sizeof(int32_t) + flags_.capacity() +
         num_readable_.capacity() * sizeof(int32_t) +
         (readable_begin_.capacity() + readable_size_.capacity()) * sizeof(int32_t) + readable_pool_.capacity() +
         (self_loop_.capacity() + not_self_loop_.capacity()) * sizeof(self_loop_[0]) + utf8_loop_.capacity() +
         slots_.capacity() * sizeof(int32_t) + config_hash_.capacity() * sizeof(uint64_t) + arena_.memory_bytes();
}

int32_t FrontierDfa::intern(Frontier& f) {
  std::sort(f.nodes.begin(), f.nodes.end());
  uint64_t h = (f.escaped ? 0x9e3779b97f4a7c15ull : 0xc2b2ae3d27d4eb4full) ^ (f.item_end ? 0x5bd1e995ull : 0);
  for (int32_t node : f.nodes) h = (h ^ static_cast<uint32_t>(node)) * 0x100000001b3ull;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  const uint8_t escaped_flag = (f.escaped ? kEscaped : 0) | (f.item_end ? kItemEnd : 0);
  if (slots_.empty()) slots_.assign(1024, -1);
  const size_t mask = slots_.size() - 1;
  size_t slot = h & mask;
  for (int32_t id; (id = slots_[slot]) >= 0; slot = (slot + 1) & mask) {
    if (config_hash_[id] != h || (flags_[id] & (kEscaped | kItemEnd)) != escaped_flag) continue;
    const int32_t n = node_begin_[id + 1] - node_begin_[id];
    if (n == static_cast<int32_t>(f.nodes.size()) &&
        std::equal(f.nodes.begin(), f.nodes.end(), nodes_.begin() + node_begin_[id]))
      return id;
  }
  const int32_t id = static_cast<int32_t>(flags_.size());
  BRIOCHE_CHECK(flags_.size() < max_configs_, "grammar compile: more than ", max_configs_,
                " distinct stack configurations (size budget: ", num_classes_,
                " byte classes per table row); simplify the grammar");
  nodes_.insert(nodes_.end(), f.nodes.begin(), f.nodes.end());
  node_begin_.push_back(static_cast<int32_t>(nodes_.size()));
  flags_.push_back(static_cast<uint8_t>((f.nodes.empty() ? kDead : 0) | escaped_flag));
  uint64_t bits[4] = {0, 0, 0, 0};
  for (int32_t node : f.nodes) {
    const AutomatonState& st = a_.states[arena_.node(node).state];
    for (uint32_t e = st.byte_begin; e < st.byte_end; ++e) set_range(bits, a_.byte_edges[e].lo, a_.byte_edges[e].hi);
  }
  num_readable_.push_back(__builtin_popcountll(bits[0]) + __builtin_popcountll(bits[1]) +
                          __builtin_popcountll(bits[2]) + __builtin_popcountll(bits[3]));
  readable_begin_.push_back(-1);
  readable_size_.push_back(0);
  self_loop_.push_back({0, 0, 0, 0});
  not_self_loop_.push_back({0, 0, 0, 0});
  utf8_loop_.push_back(-1);
  rows_.push_back(nullptr);
  config_hash_.push_back(h);
  slots_[slot] = id;
  if (flags_.size() * 2 > slots_.size()) {  // keep the load at most 1/2
    slots_.assign(slots_.size() * 2, -1);
    const size_t grown = slots_.size() - 1;
    for (int32_t c = 0; c <= id; ++c) {
      size_t s = config_hash_[c] & grown;
      while (slots_[s] >= 0) s = (s + 1) & grown;
      slots_[s] = c;
    }
  }
  return id;
}

int32_t* FrontierDfa::add_row(int32_t c) {
  if (row_blocks_.empty() || rows_in_last_block_ == kRowsPerBlock) {
    // uninitialised: each row is filled when handed out, so untouched pages stay unmapped
    row_blocks_.emplace_back(new int32_t[static_cast<size_t>(kRowsPerBlock) * num_classes_]);
    rows_in_last_block_ = 0;
  }
  int32_t* row = row_blocks_.back().get() + static_cast<size_t>(rows_in_last_block_++) * num_classes_;
  std::fill_n(row, num_classes_, -1);
  rows_[c] = row;
  return row;
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
    for (uint32_t e = st.byte_begin; e < st.byte_end; ++e) set_range(bits, a_.byte_edges[e].lo, a_.byte_edges[e].hi);
  }
  readable_begin_[c] = static_cast<int32_t>(readable_pool_.size());
  for (int b = 0; b < 256; ++b)
    if (bits[b >> 6] >> (b & 63) & 1) readable_pool_ += static_cast<char>(b);
  readable_size_[c] = static_cast<int32_t>(readable_pool_.size()) - readable_begin_[c];
}

bool FrontierDfa::decide_loops(int32_t c, const uint64_t* bytes, int word_begin, int word_end) {
  for (int w = word_begin; w < word_end; ++w)
    if ((bytes[w] & not_self_loop_[c][w]) != 0) return false;
  for (int w = word_begin; w < word_end; ++w) {
    for (uint64_t todo = bytes[w] & ~self_loop_[c][w]; todo != 0; todo &= todo - 1) {
      const int b = w * 64 + __builtin_ctzll(todo);
      const uint64_t bit = 1ull << (b & 63);
      // next() may grow the per-configuration tables: index them afterwards.
      const bool loops = !dead(c) && next(c, static_cast<uint8_t>(b)) == c;
      (loops ? self_loop_ : not_self_loop_)[c][w] |= bit;
      if (!loops) return false;
    }
  }
  return true;
}

namespace {

// Multi-byte UTF-8 characters as byte ranges per position (lead first).
struct Utf8Form {
  int len;
  uint8_t lo[4], hi[4];
};
constexpr Utf8Form kUtf8Forms[] = {
    {2, {0xC2, 0x80}, {0xDF, 0xBF}},
    {3, {0xE0, 0xA0, 0x80}, {0xE0, 0xBF, 0xBF}},
    {3, {0xE1, 0x80, 0x80}, {0xEF, 0xBF, 0xBF}},
    {4, {0xF0, 0x90, 0x80, 0x80}, {0xF0, 0xBF, 0xBF, 0xBF}},
    {4, {0xF1, 0x80, 0x80, 0x80}, {0xF3, 0xBF, 0xBF, 0xBF}},
    {4, {0xF4, 0x80, 0x80, 0x80}, {0xF4, 0x8F, 0xBF, 0xBF}},
};

}  // namespace

// From configuration c, `pos` bytes into a character of form `seq`: every
// completion stays alive and ends in `home`. `seen` holds the (c, seq*4+pos)
// already shown to do so.
bool FrontierDfa::utf8_returns(int32_t home, int32_t c, int seq, int pos, std::vector<std::pair<int32_t, int>>& seen) {
  const std::pair<int32_t, int> key{c, seq * 4 + pos};
  if (std::find(seen.begin(), seen.end(), key) != seen.end()) return true;
  const Utf8Form& f = kUtf8Forms[seq];
  for (int b = f.lo[pos]; b <= f.hi[pos]; ++b) {
    const int32_t n = next(c, static_cast<uint8_t>(b));
    if (dead(n)) return false;
    if (pos + 1 == f.len) {
      if (n != home) return false;
    } else if (!utf8_returns(home, n, seq, pos + 1, seen)) {
      return false;
    }
  }
  seen.push_back(key);
  return true;
}

bool FrontierDfa::loops_on_utf8(int32_t c) {
  if (utf8_loop_[c] < 0) {
    bool ok = !dead(c);
    std::vector<std::pair<int32_t, int>> seen;
    for (int seq = 0; ok && seq < static_cast<int>(std::size(kUtf8Forms)); ++seq) ok = utf8_returns(c, c, seq, 0, seen);
    utf8_loop_[c] = ok ? 1 : 0;
  }
  return utf8_loop_[c] == 1;
}

}  // namespace brioche::grammar
