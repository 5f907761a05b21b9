// nltk.word_tokenize: Punkt sentences, then NLTK's improved Treebank word
// tokenizer on each, a fixed sequence of regex substitutions that put
// spaces around punctuation, quotes and contractions, then a whitespace split.
#include <utility>

#include "eval/punkt.h"
#include "eval/python_regex.h"
#include "eval/python_text.h"

namespace brioche::eval {

namespace {

struct Rule {
  PyRegex regex;
  std::string replacement;
};

std::vector<Rule> rules(std::initializer_list<std::pair<const char*, const char*>> list) {
  std::vector<Rule> out;
  for (auto [pattern, replacement] : list) out.push_back({PyRegex(pattern), replacement});
  return out;
}

const std::vector<Rule>& starting_quotes() {
  static const std::vector<Rule> r = rules({
      {R"(([\x{ab}\x{201c}\x{2018}\x{201e}]|[`]+))", R"( \1 )"},
      {R"(^\")", "``"},
      {R"((``))", R"( \1 )"},
      {R"(([ \(\[{<])(\"|\'{2}))", R"(\1 `` )"},
      {R"((?i)(?<!\w)(\')(?!(?:re|ve|ll|m|t|s|d|n)\b)(?=\w))", R"(\1 )"},
  });
  return r;
}

const std::vector<Rule>& punctuation() {
  static const std::vector<Rule> r = rules({
      {R"(([^\.])(\.)([\]\)}>"\'\x{bb}\x{201d}\x{2019} ]*+)\s*$)", R"(\1 \2 \3 )"},
      {R"(([:,])([^\d]))", R"( \1 \2)"},
      {R"(([:,])$)", R"( \1 )"},
      {R"(\.{2,})", R"( \g<0> )"},
      {R"([;@#$%&])", R"( \g<0> )"},
      {R"([\x{2012}-\x{2015}])", R"( \g<0> )"},
      {R"(([^\.])(\.)([\]\)}>"\']*)\s*$)", R"(\1 \2\3 )"},
      {R"([?!])", R"( \g<0> )"},
      {R"(([^'])' )", R"(\1 ' )"},
      {R"([*])", R"( \g<0> )"},
      {R"([\]\[\(\)\{\}\<\>])", R"( \g<0> )"},  // parentheses and brackets
      {R"(--)", R"( -- )"},                     // double dashes
  });
  return r;
}

const std::vector<Rule>& ending_quotes() {
  static const std::vector<Rule> r = rules({
      {R"(([\x{bb}\x{201d}\x{2019}]))", R"( \1 )"},
      {R"('')", R"( '' )"},
      {R"(")", R"( '' )"},
      {R"(\s+)", R"( )"},
      {R"(([^' ])('[sS]|'[mM]|'[dD]|') )", R"(\1 \2 )"},
      {R"(([^' ])('ll|'LL|'re|'RE|'ve|'VE|n't|N'T) )", R"(\1 \2 )"},
  });
  return r;
}

// MacIntyre's contractions: "cannot" -> "can not", "gonna" -> "gon na", ...
const std::vector<Rule>& contractions() {
  static const std::vector<Rule> r = rules({
      {R"((?i)\b(can)(?#X)(not)\b)", R"( \1 \2 )"},
      {R"((?i)\b(d)(?#X)('ye)\b)", R"( \1 \2 )"},
      {R"((?i)\b(gim)(?#X)(me)\b)", R"( \1 \2 )"},
      {R"((?i)\b(gon)(?#X)(na)\b)", R"( \1 \2 )"},
      {R"((?i)\b(got)(?#X)(ta)\b)", R"( \1 \2 )"},
      {R"((?i)\b(lem)(?#X)(me)\b)", R"( \1 \2 )"},
      {R"((?i)\b(more)(?#X)('n)\b)", R"( \1 \2 )"},
      {R"((?i)\b(wan)(?#X)(na)(?=\s))", R"( \1 \2 )"},
      {R"((?i) ('t)(?#X)(is)\b)", R"( \1 \2 )"},
      {R"((?i) ('t)(?#X)(was)\b)", R"( \1 \2 )"},
  });
  return r;
}

std::string apply(const std::vector<Rule>& list, std::string text) {
  for (const Rule& rule : list) text = rule.regex.sub(text, rule.replacement);
  return text;
}

}  // namespace

std::vector<std::string> nltk_word_tokenize(std::string_view text) {
  std::vector<std::string> words;
  for (std::string_view sentence : PunktSentenceTokenizer::english().tokenize(text)) {
    std::string s = apply(starting_quotes(), std::string(sentence));
    s = apply(punctuation(), std::move(s));
    s = apply(ending_quotes(), " " + s + " ");
    s = apply(contractions(), std::move(s));
    for (std::string_view w : py_split(s)) words.emplace_back(w);
  }
  return words;
}

}  // namespace brioche::eval
