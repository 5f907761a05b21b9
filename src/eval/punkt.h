// NLTK's Punkt sentence tokenizer (Kiss & Strunk 2006) with the English
// model, as `nltk.sent_tokenize` runs it: the IFEval reference counts
// sentences with it (length_constraints:number_sentences) and word_tokenize
// splits sentences with it first (change_case:capital_word_frequency).
//
// Tokenizing only (no training): candidate breaks at . ? ! followed by
// punctuation or whitespace; a first pass marks sentence ends, abbreviations
// (known types) and ellipses; a second pass revises each period-final token
// with the next token (collocations, sentence starters, and the orthographic
// heuristic: how the next word's case was seen in training).
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace brioche::eval {

class PunktSentenceTokenizer {
 public:
  // Parses a model in the data/ifeval/punkt_english.txt layout.
  explicit PunktSentenceTokenizer(std::string_view model_text);
  static const PunktSentenceTokenizer& english();  // the embedded model

  // Byte spans [begin, end) of the sentences (realigned as NLTK does).
  std::vector<std::pair<size_t, size_t>> span_tokenize(std::string_view text) const;
  std::vector<std::string_view> tokenize(std::string_view text) const;

  struct Token;  // one word token of the text and its annotations

 private:
  std::vector<Token> tokenize_words(std::string_view text) const;
  void annotate(std::vector<Token>& tokens) const;
  void first_pass(Token& token) const;
  void second_pass(Token& token, const Token* next) const;
  int ortho_heuristic(const Token& token) const;  // 1 true, 0 false, -1 unknown
  bool contains_sentbreak(std::string_view context) const;
  int ortho_context(const std::string& type) const;

  std::unordered_set<std::string> abbrev_types_;
  std::unordered_set<std::string> collocations_;  // "a\tb"
  std::unordered_set<std::string> sent_starters_;
  std::unordered_map<std::string, int> ortho_context_;
};

// nltk.word_tokenize(text): Punkt sentences, each through NLTK's improved
// Treebank word tokenizer (quotes, punctuation, brackets, contractions).
std::vector<std::string> nltk_word_tokenize(std::string_view text);

}  // namespace brioche::eval
