// Added tokens (special and user-defined) are matched in the raw text before
// normalization, leftmost first and longest at a position, like Hugging Face's
// AddedVocabulary (Aho-Corasick, LeftmostLongest).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace brioche::tokenizer {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;      // control token: skipped by DecodeOptions::skip_special
  bool lstrip = false;       // the match swallows whitespace on its left
  bool rstrip = false;       // ... and on its right
  bool single_word = false;  // only matches when not inside a word
  bool normalized = false;   // matched against normalized text in HF (see AddedTokenMatcher)
};

struct AddedTokenMatch {
  size_t begin = 0, end = 0;  // bytes consumed from the text, incl. stripped whitespace
  int32_t id = -1;
};

class AddedTokenMatcher {
 public:
  void build(const std::vector<AddedToken>& tokens);
  bool empty() const { return tokens_.empty(); }
  // First match at or after `from`; returns false if none. Special tokens are
  // skipped when `include_special` is false.
  bool find(std::string_view text, size_t from, bool include_special, AddedTokenMatch& match) const;

 private:
  struct Node {
    int32_t token = -1;  // index into tokens_ of the token ending here
  };
  // Longest token that starts exactly at `pos`; -1 if none.
  int32_t longest_at(std::string_view text, size_t pos, bool include_special, size_t& length) const;
  int32_t child(int32_t node, uint8_t byte) const {
    auto it = edges_.find(static_cast<uint64_t>(node) << 8 | byte);
    return it == edges_.end() ? -1 : it->second;
  }

  std::vector<AddedToken> tokens_;
  std::vector<Node> nodes_;                      // trie over token bytes; node 0 is the root
  std::unordered_map<uint64_t, int32_t> edges_;  // (node << 8 | byte) -> child node
  std::array<bool, 256> first_byte_{};           // bytes that can start a token
};

}  // namespace brioche::tokenizer
