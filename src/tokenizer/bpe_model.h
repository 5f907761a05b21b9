// BPE merging of one pre-tokenized word into token ids.
//
// Symbols are the word's characters (bytes for byte-level vocabularies,
// UTF-8 characters otherwise). Repeatedly, the adjacent pair with the lowest
// merge rank is merged (leftmost on ties) until no pair has a merge; this is
// the order Hugging Face `tokenizers` and SentencePiece use.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace brioche::tokenizer {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringToId = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

struct BpeModelConfig {
  bool byte_level = false;     // symbols are raw bytes; vocabulary keys are byte-level decoded
  bool byte_fallback = false;  // unknown characters become <0xXX> tokens
  bool ignore_merges = false;  // a word that is itself in the vocabulary is taken whole
  bool fuse_unk = false;       // consecutive unknown characters become one unk
  int32_t unk_id = -1;
};

// A merge rule: (left, right) -> merged, applied in order of rank.
struct BpeMerge {
  int32_t left;
  int32_t right;
  int32_t merged;
  int32_t rank = -1;  // -1: the merge's index in the list; equal ranks tie-break leftmost
};

class BpeModel {
 public:
  // `keys[id]`: the string a word's characters are matched against (raw bytes
  // for byte-level vocabularies, the UTF-8 piece otherwise); empty for ids that
  // the model never produces. `merges` in rank order (index = rank).
  BpeModel(std::vector<std::string> keys, const std::vector<BpeMerge>& merges, BpeModelConfig config);

  // Appends the ids of `word` to `out`.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  const StringToId& key_to_id() const { return key_to_id_; }
  const BpeModelConfig& config() const { return config_; }

 private:
  struct MergeSlot {  // open-addressing table entry keyed by (left << 32 | right)
    uint64_t pair = ~uint64_t{0};
    int32_t rank = 0;
    int32_t merged = 0;
  };
  struct Symbol {
    int32_t id;
    int32_t prev;  // index of the previous live symbol, -1 at the start
    int32_t next;  // index of the next live symbol, -1 at the end
  };

  const MergeSlot* find_merge(int32_t left, int32_t right) const;
  void initial_symbols(std::string_view word, std::vector<Symbol>& symbols) const;
  void merge_small(std::vector<Symbol>& symbols) const;  // O(n^2) scan, fast for short words
  void merge_large(std::vector<Symbol>& symbols) const;  // priority queue, O(n log n)

  BpeModelConfig config_;
  std::vector<std::string> keys_;
  StringToId key_to_id_;
  std::unordered_map<uint32_t, int32_t> codepoint_to_id_;  // single-character pieces (non byte-level)
  std::array<int32_t, 256> byte_ids_;                      // byte-level: byte -> id; byte fallback: <0xXX> -> id
  std::vector<MergeSlot> merge_table_;                     // power-of-two size, load <= 0.5
  uint64_t merge_mask_ = 0;

  // The per-thread symbol buffer is kept between words up to this many
  // symbols; a multi-megabyte word (SentencePiece vocabularies see the whole
  // input as one word) does not pin its buffer to the thread.
  static constexpr size_t kKeepSymbolCapacity = size_t{1} << 16;

  // Word -> ids cache for short words (most text repeats a small set of words).
  static constexpr size_t kCacheMaxWordBytes = 48;
  static constexpr size_t kCacheMaxEntries = 1 << 16;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace brioche::tokenizer
