#include "tokenizer/bpe_model.h"

#include <array>
#include <queue>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace brioche::tokenizer {
namespace {

inline uint64_t pair_key(int32_t left, int32_t right) {
  return uint64_t{static_cast<uint32_t>(left)} << 32 | static_cast<uint32_t>(right);
}

inline uint64_t mix(uint64_t x) {  // splitmix64 finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

BpeModel::BpeModel(std::vector<std::string> keys, const std::vector<BpeMerge>& merges, BpeModelConfig config)
    : config_(config), keys_(std::move(keys)) {
  key_to_id_.reserve(keys_.size());
  for (size_t id = 0; id < keys_.size(); ++id) {
    if (keys_[id].empty()) continue;
    key_to_id_.emplace(keys_[id], static_cast<int32_t>(id));  // first id wins on duplicates
  }
  byte_ids_.fill(-1);
  if (config_.byte_level) {
    for (int b = 0; b < 256; ++b) {
      auto it = key_to_id_.find(std::string(1, static_cast<char>(b)));
      if (it != key_to_id_.end()) byte_ids_[b] = it->second;
    }
  } else {
    for (const auto& [key, id] : key_to_id_) {
      size_t pos = 0;
      const uint32_t cp = next_codepoint(key, pos);
      if (pos == key.size()) codepoint_to_id_.emplace(cp, id);
    }
    if (config_.byte_fallback) {
      for (int b = 0; b < 256; ++b) {
        char name[8];
        std::snprintf(name, sizeof(name), "<0x%02X>", b);
        auto it = key_to_id_.find(std::string_view(name));
        if (it != key_to_id_.end()) byte_ids_[b] = it->second;
      }
    }
  }
  size_t capacity = 16;
  while (capacity < merges.size() * 2) capacity <<= 1;
  merge_table_.assign(capacity, MergeSlot{});
  merge_mask_ = capacity - 1;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const BpeMerge& m = merges[rank];
    const uint64_t key = pair_key(m.left, m.right);
    for (uint64_t slot = mix(key) & merge_mask_;; slot = (slot + 1) & merge_mask_) {
      MergeSlot& s = merge_table_[slot];
      if (s.pair == key) break;  // duplicate merge: the first (lowest rank) wins
      if (s.pair == ~uint64_t{0}) {
        s = MergeSlot{key, m.rank >= 0 ? m.rank : static_cast<int32_t>(rank), m.merged};
        break;
      }
    }
  }
}

const BpeModel::MergeSlot* BpeModel::find_merge(int32_t left, int32_t right) const {
  const uint64_t key = pair_key(left, right);
  for (uint64_t slot = mix(key) & merge_mask_;; slot = (slot + 1) & merge_mask_) {
    const MergeSlot& s = merge_table_[slot];
    if (s.pair == key) return &s;
    if (s.pair == ~uint64_t{0}) return nullptr;
  }
}

void BpeModel::initial_symbols(std::string_view word, std::vector<Symbol>& symbols) const {
  auto push = [&](int32_t id) {
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back(Symbol{id, index - 1, -1});
    if (index > 0) symbols[index - 1].next = index;
  };
  if (config_.byte_level) {
    for (char c : word) {
      const int32_t id = byte_ids_[static_cast<uint8_t>(c)];
      BRIOCHE_CHECK(id >= 0, "byte-level BPE: byte 0x", std::hex, int(static_cast<uint8_t>(c)),
                    " has no token in the vocabulary");
      push(id);
    }
    return;
  }
  size_t pos = 0;
  bool previous_unknown = false;
  while (pos < word.size()) {
    const size_t start = pos;
    const uint32_t cp = next_codepoint(word, pos);
    auto it = codepoint_to_id_.find(cp);
    if (it != codepoint_to_id_.end()) {
      push(it->second);
      previous_unknown = false;
      continue;
    }
    if (config_.byte_fallback) {
      bool all_bytes_known = true;
      for (size_t i = start; i < pos; ++i) all_bytes_known &= byte_ids_[static_cast<uint8_t>(word[i])] >= 0;
      if (all_bytes_known) {
        for (size_t i = start; i < pos; ++i) push(byte_ids_[static_cast<uint8_t>(word[i])]);
        previous_unknown = false;
        continue;
      }
    }
    BRIOCHE_CHECK(config_.unk_id >= 0, "BPE: character U+", std::hex, cp,
                  " is not in the vocabulary and there is no unk token or byte fallback");
    if (!(config_.fuse_unk && previous_unknown)) push(config_.unk_id);
    previous_unknown = true;
  }
}

void BpeModel::merge_small(std::vector<Symbol>& symbols) const {
  // Symbols stay contiguous here: merging erases the right symbol.
  std::vector<int32_t> ids(symbols.size());
  for (size_t i = 0; i < symbols.size(); ++i) ids[i] = symbols[i].id;
  while (ids.size() > 1) {
    int32_t best_rank = INT32_MAX, best_merged = -1;
    size_t best_pos = 0;
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      const MergeSlot* m = find_merge(ids[i], ids[i + 1]);
      if (m && m->rank < best_rank) {
        best_rank = m->rank;
        best_merged = m->merged;
        best_pos = i;
      }
    }
    if (best_merged < 0) break;
    ids[best_pos] = best_merged;
    ids.erase(ids.begin() + best_pos + 1);
  }
  symbols.resize(ids.size());
  for (size_t i = 0; i < ids.size(); ++i)
    symbols[i] = Symbol{ids[i], static_cast<int32_t>(i) - 1, i + 1 < ids.size() ? static_cast<int32_t>(i) + 1 : -1};
}

void BpeModel::merge_large(std::vector<Symbol>& symbols) const {
  struct Candidate {
    int32_t rank;
    int32_t left;   // symbol index of the left half
    int32_t right;  // symbol index of the right half
    int32_t left_id, right_id, merged;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto consider = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = symbols[left].next;
    if (right < 0) return;
    if (const MergeSlot* m = find_merge(symbols[left].id, symbols[right].id))
      queue.push(Candidate{m->rank, left, right, symbols[left].id, symbols[right].id, m->merged});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) consider(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[c.left];
    // Stale if either half changed since the candidate was queued.
    if (left.id != c.left_id || left.next != c.right || symbols[c.right].id != c.right_id) continue;
    Symbol& right = symbols[c.right];
    left.id = c.merged;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    right.id = -1;  // dead
    right.next = right.prev = -1;
    consider(left.prev);
    consider(c.left);
  }
  std::vector<Symbol> live;
  for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) live.push_back(symbols[i]);
  symbols.swap(live);
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (config_.ignore_merges) {
    auto it = key_to_id_.find(word);
    if (it != key_to_id_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() <= kCacheMaxWordBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(word);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  thread_local std::vector<Symbol> symbols;
  symbols.clear();
  initial_symbols(word, symbols);
  if (symbols.size() <= 24)
    merge_small(symbols);
  else
    merge_large(symbols);
  const size_t first = out.size();
  for (const Symbol& s : symbols) out.push_back(s.id);
  if (symbols.capacity() > kKeepSymbolCapacity)
    std::vector<Symbol>().swap(symbols);  // one huge word: give the memory back
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() >= kCacheMaxEntries) cache_.clear();
    cache_.emplace(std::string(word), std::vector<int32_t>(out.begin() + first, out.end()));
  }
}

}  // namespace brioche::tokenizer
