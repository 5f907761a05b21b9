#include "tokenizer/added_tokens.h"

namespace brioche::tokenizer {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
bool is_word_byte(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         (static_cast<uint8_t>(c) & 0x80);
}

}  // namespace

void AddedTokenMatcher::build(const std::vector<AddedToken>& tokens) {
  tokens_.clear();
  nodes_.assign(1, Node{});
  edges_.clear();
  first_byte_.fill(false);
  for (const AddedToken& token : tokens) {
    if (token.content.empty()) continue;
    int32_t node = 0;
    for (char c : token.content) {
      const uint64_t key = static_cast<uint64_t>(node) << 8 | static_cast<uint8_t>(c);
      auto it = edges_.find(key);
      if (it == edges_.end()) {
        nodes_.push_back(Node{});
        it = edges_.emplace(key, static_cast<int32_t>(nodes_.size() - 1)).first;
      }
      node = it->second;
    }
    if (nodes_[node].token >= 0) continue;  // duplicate content: first wins
    nodes_[node].token = static_cast<int32_t>(tokens_.size());
    tokens_.push_back(token);
    first_byte_[static_cast<uint8_t>(token.content[0])] = true;
  }
}

int32_t AddedTokenMatcher::longest_at(std::string_view text, size_t pos, bool include_special, size_t& length) const {
  int32_t best = -1;
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    node = child(node, static_cast<uint8_t>(text[i]));
    if (node < 0) break;
    const int32_t t = nodes_[node].token;
    if (t < 0 || (!include_special && tokens_[t].special)) continue;
    const AddedToken& token = tokens_[t];
    if (token.single_word) {
      const bool word_before = pos > 0 && is_word_byte(text[pos - 1]);
      const bool word_after = i + 1 < text.size() && is_word_byte(text[i + 1]);
      if (word_before || word_after) continue;
    }
    best = t;
    length = i + 1 - pos;
  }
  return best;
}

bool AddedTokenMatcher::find(std::string_view text, size_t from, bool include_special, AddedTokenMatch& match) const {
  if (tokens_.empty()) return false;
  for (size_t pos = from; pos < text.size(); ++pos) {
    if (!first_byte_[static_cast<uint8_t>(text[pos])]) continue;
    size_t length = 0;
    const int32_t t = longest_at(text, pos, include_special, length);
    if (t < 0) continue;
    const AddedToken& token = tokens_[t];
    match.id = token.id;
    match.begin = pos;
    match.end = pos + length;
    if (token.lstrip)
      while (match.begin > from && is_space(text[match.begin - 1])) --match.begin;
    if (token.rstrip)
      while (match.end < text.size() && is_space(text[match.end])) ++match.end;
    return true;
  }
  return false;
}

}  // namespace brioche::tokenizer
