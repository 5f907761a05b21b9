// A model vocabulary as the grammar engine sees it: the raw bytes of every
// token id, which ids are special (never produced by a grammar), and which
// ids end generation (allowed exactly when the grammar can terminate).
//
// Tokens are also kept sorted by their bytes: neighbours in that order share
// prefixes, so walking it is a depth-first walk of the vocabulary trie.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace brioche::grammar {

struct VocabularyOptions {
  std::vector<int32_t> eos_ids;      // end-of-generation tokens
  std::vector<int32_t> special_ids;  // control/added tokens; never allowed by a grammar
  // Width of the mask in tokens; a model may pad its logits beyond the
  // tokenizer's vocabulary. 0: token_bytes.size(). Padded ids are never allowed.
  int32_t mask_vocab_size = 0;
};

class Vocabulary {
 public:
  Vocabulary(std::vector<std::string> token_bytes, VocabularyOptions options);

  int32_t size() const { return mask_vocab_size_; }  // mask width in tokens
  int32_t num_tokens() const { return static_cast<int32_t>(tokens_.size()); }
  int32_t num_words() const { return (mask_vocab_size_ + 31) / 32; }  // uint32 words per mask
  std::string_view token(int32_t id) const { return tokens_[id]; }
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }
  bool is_special(int32_t id) const { return special_[id] != 0; }
  uint64_t content_hash() const { return hash_; }

  // Trie order over the tokens a grammar may produce (non-special, non-empty):
  // sorted_ids()[rank] is a token id; lcp_with_previous()[rank] is the number
  // of leading bytes shared with the token at rank-1 (0 for rank 0).
  const std::vector<int32_t>& sorted_ids() const { return sorted_ids_; }
  const std::vector<uint16_t>& lcp_with_previous() const { return lcp_prev_; }
  std::string_view ranked(int32_t rank) const { return tokens_[sorted_ids_[rank]]; }

  // The same trie as explicit nodes (one per distinct token prefix; node 0
  // is the empty prefix) with child lists, so a walk reads each shared
  // prefix byte once, a dead prefix drops its whole subtree, and the
  // children of a node are read from one contiguous array.
  struct TrieNode {
    int32_t rank_begin;          // first rank whose token starts with this prefix
    int32_t rank_end;            // one past the last such rank
    int32_t num_exact;           // ranks [rank_begin, rank_begin + num_exact) equal the prefix
    int32_t kid_begin, kid_end;  // children: trie_edges()[kid_begin, kid_end), by byte
  };
  struct TrieEdge {
    uint8_t byte;
    int32_t node;
  };
  const std::vector<TrieNode>& trie_nodes() const { return trie_nodes_; }
  const std::vector<TrieEdge>& trie_edges() const { return trie_edges_; }
  // Per node: the set of bytes on the edges below it (every byte that some
  // token of the subtree has after the node's prefix), 256 bits. A walk in
  // a state that loops on all of them accepts the whole subtree unread.
  using ByteSet = std::array<uint64_t, 4>;
  const std::vector<ByteSet>& trie_bytes_below() const { return trie_bytes_below_; }
  // Per node: 1 when every token of the subtree continues after the node's
  // prefix with well-formed UTF-8 (whole characters from U+0080 up, the
  // surrogate range included, the last one possibly cut off by the token's
  // end), so a state that loops on every such character and on the ASCII
  // bytes below accepts the whole subtree unread.
  const std::vector<uint8_t>& trie_utf8_below() const { return trie_utf8_below_; }
  // Per node: the length in bytes of the longest token of its subtree (its
  // own prefix included when that is a token), so a walk that only needs
  // tokens longer than some length skips the subtrees that have none.
  const std::vector<uint16_t>& trie_longest_below() const { return trie_longest_below_; }
  int32_t max_token_length() const { return max_token_length_; }
  // The ids (ascending) of the tokens a grammar may produce whose last byte
  // is b: the tokens that can end a JSON value of a kind (`"`, `}`, digits).
  std::span<const int32_t> ids_ending_with(uint8_t b) const {
    return {last_byte_ids_.data() + last_byte_begin_[b],
            static_cast<size_t>(last_byte_begin_[b + 1] - last_byte_begin_[b])};
  }

 private:
  std::vector<std::string> tokens_;
  std::vector<char> special_;
  std::vector<int32_t> eos_ids_;
  std::vector<int32_t> sorted_ids_;
  std::vector<uint16_t> lcp_prev_;
  std::vector<TrieNode> trie_nodes_;
  std::vector<TrieEdge> trie_edges_;
  std::vector<ByteSet> trie_bytes_below_;     // [trie nodes]
  std::vector<uint8_t> trie_utf8_below_;      // [trie nodes]
  std::vector<uint16_t> trie_longest_below_;  // [trie nodes]
  std::vector<int32_t> last_byte_begin_;      // [257] into last_byte_ids_
  std::vector<int32_t> last_byte_ids_;
  int32_t max_token_length_ = 0;
  int32_t mask_vocab_size_ = 0;
  uint64_t hash_ = 0;
};

}  // namespace brioche::grammar
