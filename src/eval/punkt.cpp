#include "eval/punkt.h"

#include "core/error.h"
#include "eval/embedded_data.h"
#include "eval/python_regex.h"
#include "eval/python_text.h"

namespace brioche::eval {

namespace {

// Orthographic context flags of a word type in the training corpus.
constexpr int kOrthoBegUpper = 1 << 1, kOrthoMidUpper = 1 << 2, kOrthoUnkUpper = 1 << 3;
constexpr int kOrthoBegLower = 1 << 4, kOrthoMidLower = 1 << 5, kOrthoUnkLower = 1 << 6;
constexpr int kOrthoUpper = kOrthoBegUpper + kOrthoMidUpper + kOrthoUnkUpper;
constexpr int kOrthoLower = kOrthoBegLower + kOrthoMidLower + kOrthoUnkLower;

// Characters that cannot appear inside a word (PunktLanguageVars._re_non_word_chars).
constexpr const char* kNonWord = R"re((?:[)";}\]\*:@'\({\[\x{2018}\x{2019}\x{201c}\x{201d}\xab\xbb?!]))re";
constexpr const char* kMultiChar = R"((?:\-{2,}|\.{2,}|(?:\.\s){2,}\.))";

const PyRegex& word_tokenizer_re() {
  static const PyRegex re(std::string(kMultiChar) + R"(|(?=[^\(\"\`{\[:;&\#\*@\)}\]\-,])\S+?(?=\s|$|)" + kNonWord +
                          "|" + kMultiChar + R"(|,(?=$|\s|)" + kNonWord + "|" + kMultiChar + R"())|\S)");
  return re;
}
// A sentence-end character followed by punctuation (group 1) or by
// whitespace and the next token (group 2).
const PyRegex& period_context_re() {
  static const PyRegex re(std::string(R"re([\.\?\!](?=()re") + kNonWord +
                          R"re(|\s+(\S+)))re"
                          ")");
  return re;
}
const PyRegex& boundary_realignment_re() {
  static const PyRegex re(R"(["')\]}\x{2018}\x{2019}\x{201c}\x{201d}\xab\xbb]+?(?:\s+|(?=--)|$))", {.multiline = true});
  return re;
}
const PyRegex& numeric_re() {
  static const PyRegex re(R"(^-?[\.,]?\d[\d,\.-]*\.?$)");
  return re;
}

bool ascii_whitespace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

}  // namespace

struct PunktSentenceTokenizer::Token {
  std::string tok;
  std::string type;  // lowercased, numbers as ##number##
  bool period_final = false;
  bool parastart = false, linestart = false;
  bool sentbreak = false, abbr = false, ellipsis = false;

  std::string type_no_period() const {
    if (type.size() > 1 && type.back() == '.') return type.substr(0, type.size() - 1);
    return type;
  }
  std::string type_no_sentperiod() const { return sentbreak ? type_no_period() : type; }
  uint32_t first_char() const {
    size_t pos = 0;
    return tok.empty() ? 0 : next_codepoint(tok, pos);
  }
  bool first_upper() const { return py_char_isupper(first_char()); }
  bool first_lower() const { return py_char_islower(first_char()); }
  bool is_ellipsis() const {  // \.\.+$
    return tok.size() >= 2 && tok.find_first_not_of('.') == std::string::npos;
  }
  bool is_initial() const {  // [^\W\d]\.$ : one letter and a period
    size_t pos = 0;
    if (tok.empty()) return false;
    const uint32_t cp = next_codepoint(tok, pos);
    return py_char_isword(cp) && !py_char_isdecimal(cp) && tok.substr(pos) == ".";
  }
  bool is_number() const { return type.rfind("##number##", 0) == 0; }
};

PunktSentenceTokenizer::PunktSentenceTokenizer(std::string_view model_text) {
  std::string section;
  for (std::string_view line : split_on(model_text, "\n")) {
    if (line.empty() || line[0] == '#') continue;
    if (line.front() == '[' && line.back() == ']') {
      section = std::string(line.substr(1, line.size() - 2));
      continue;
    }
    if (section == "abbrev_types") {
      abbrev_types_.emplace(line);
    } else if (section == "collocations") {
      collocations_.emplace(line);
    } else if (section == "sent_starters") {
      sent_starters_.emplace(line);
    } else if (section == "ortho_context") {
      const size_t tab = line.rfind('\t');
      BRIOCHE_CHECK(tab != std::string_view::npos, "punkt model: ortho_context line without a tab: '",
                    std::string(line), "'");
      ortho_context_[std::string(line.substr(0, tab))] = std::stoi(std::string(line.substr(tab + 1)));
    } else {
      throw Error("punkt model: line outside a known section ('" + section + "'): '" + std::string(line) + "'");
    }
  }
  BRIOCHE_CHECK(!abbrev_types_.empty() && !ortho_context_.empty(), "punkt model: no abbreviations or ortho contexts");
}

const PunktSentenceTokenizer& PunktSentenceTokenizer::english() {
  static const PunktSentenceTokenizer tokenizer(embedded_punkt_english());
  return tokenizer;
}

int PunktSentenceTokenizer::ortho_context(const std::string& type) const {
  auto it = ortho_context_.find(type);
  return it == ortho_context_.end() ? 0 : it->second;
}

std::vector<PunktSentenceTokenizer::Token> PunktSentenceTokenizer::tokenize_words(std::string_view text) const {
  std::vector<Token> tokens;
  bool parastart = false;
  for (std::string_view line : split_on(text, "\n")) {
    if (py_strip(line).empty()) {
      parastart = true;
      continue;
    }
    bool first = true;
    for (const RegexMatch& m : word_tokenizer_re().find_all(line)) {
      Token t;
      t.tok = std::string(line.substr(m.begin, m.end - m.begin));
      const std::string lower = py_lower(t.tok);
      t.type = numeric_re().match(lower) ? "##number##" : lower;
      t.period_final = !t.tok.empty() && t.tok.back() == '.';
      if (first) {
        t.parastart = parastart;
        t.linestart = true;
        parastart = false;
        first = false;
      }
      tokens.push_back(std::move(t));
    }
  }
  return tokens;
}

void PunktSentenceTokenizer::first_pass(Token& t) const {
  const std::string& tok = t.tok;
  if (tok == "." || tok == "?" || tok == "!") {
    t.sentbreak = true;
  } else if (t.is_ellipsis()) {
    t.ellipsis = true;
  } else if (t.period_final && !(tok.size() >= 2 && tok.compare(tok.size() - 2, 2, "..") == 0)) {
    const std::string stem = py_lower(std::string_view(tok).substr(0, tok.size() - 1));
    const size_t dash = stem.rfind('-');
    const std::string last_part = dash == std::string::npos ? stem : stem.substr(dash + 1);
    if (abbrev_types_.count(stem) || abbrev_types_.count(last_part)) {
      t.abbr = true;
    } else {
      t.sentbreak = true;
    }
  }
}

int PunktSentenceTokenizer::ortho_heuristic(const Token& t) const {
  static const std::unordered_set<std::string> punctuation = {";", ":", ",", ".", "!", "?"};
  if (punctuation.count(t.tok)) return 0;
  const int ortho = ortho_context(t.type_no_sentperiod());
  if (t.first_upper() && (ortho & kOrthoLower) && !(ortho & kOrthoMidUpper)) return 1;
  if (t.first_lower() && ((ortho & kOrthoUpper) || !(ortho & kOrthoBegLower))) return 0;
  return -1;
}

void PunktSentenceTokenizer::second_pass(Token& t1, const Token* t2) const {
  if (!t2 || !t1.period_final) return;
  const std::string typ = t1.type_no_period();
  const std::string next_typ = t2->type_no_sentperiod();
  const bool initial = t1.is_initial();
  if (collocations_.count(typ + "\t" + next_typ)) {
    t1.sentbreak = false;
    t1.abbr = true;
    return;
  }
  if ((t1.abbr || t1.ellipsis) && !initial) {
    if (ortho_heuristic(*t2) == 1) {
      t1.sentbreak = true;
      return;
    }
    if (t2->first_upper() && sent_starters_.count(next_typ)) {
      t1.sentbreak = true;
      return;
    }
  }
  if (initial || typ == "##number##") {
    const int starter = ortho_heuristic(*t2);
    if (starter == 0) {
      t1.sentbreak = false;
      t1.abbr = true;
      return;
    }
    if (starter == -1 && initial && t2->first_upper() && !(ortho_context(next_typ) & kOrthoLower)) {
      t1.sentbreak = false;
      t1.abbr = true;
    }
  }
}

// Both passes, as NLTK's chained generators run them: token i+1 has had its
// first pass when token i gets its second.
void PunktSentenceTokenizer::annotate(std::vector<Token>& tokens) const {
  for (Token& t : tokens) first_pass(t);
  for (size_t i = 0; i < tokens.size(); ++i) second_pass(tokens[i], i + 1 < tokens.size() ? &tokens[i + 1] : nullptr);
}

bool PunktSentenceTokenizer::contains_sentbreak(std::string_view context) const {
  std::vector<Token> tokens = tokenize_words(context);
  annotate(tokens);
  bool found = false;
  for (const Token& t : tokens) {
    if (found) return true;
    if (t.sentbreak) found = true;
  }
  return false;
}

std::vector<std::pair<size_t, size_t>> PunktSentenceTokenizer::span_tokenize(std::string_view text) const {
  // Candidate contexts: the word before each potential sentence end, the
  // end character and what follows it (_match_potential_end_contexts).
  struct Candidate {
    RegexMatch match;
    std::string context;
  };
  std::vector<Candidate> candidates;
  const std::vector<RegexMatch> matches = period_context_re().find_all(text);
  std::pair<size_t, size_t> previous_slice{0, 0};
  const RegexMatch* previous = nullptr;
  auto context_of = [&](const RegexMatch& m, std::pair<size_t, size_t> slice) {
    return std::string(text.substr(slice.first, slice.second - slice.first)) +
           std::string(text.substr(m.begin, m.end - m.begin)) + std::string(m.group(text, 1));
  };
  for (const RegexMatch& m : matches) {
    const std::string_view before = text.substr(previous_slice.second, m.begin - previous_slice.second);
    size_t last_space = 0;
    for (size_t i = before.size(); i-- > 0;)
      if (ascii_whitespace(before[i])) {
        last_space = i;
        break;
      }
    const size_t word_start = last_space ? last_space + previous_slice.second + 1 : previous_slice.first;
    const std::pair<size_t, size_t> word_slice{word_start, m.begin};
    if (previous && previous_slice.second <= word_slice.first)
      candidates.push_back({*previous, context_of(*previous, previous_slice)});
    previous = &m;
    previous_slice = word_slice;
  }
  if (previous) candidates.push_back({*previous, context_of(*previous, previous_slice)});

  std::vector<std::pair<size_t, size_t>> slices;
  size_t last_break = 0;
  for (const Candidate& c : candidates) {
    if (!contains_sentbreak(c.context)) continue;
    slices.emplace_back(last_break, c.match.end);
    const auto& next_tok =
        c.match.groups.size() > 2 ? c.match.groups[2] : std::pair{std::string::npos, std::string::npos};
    last_break =
        (next_tok.first != std::string::npos && next_tok.second > next_tok.first) ? next_tok.first : c.match.end;
  }
  slices.emplace_back(last_break, py_rstrip(text).size());

  // Closing quotes and brackets after a break belong to the sentence before.
  std::vector<std::pair<size_t, size_t>> out;
  size_t realign = 0;
  for (size_t i = 0; i < slices.size(); ++i) {
    const std::pair<size_t, size_t> s1{slices[i].first + realign, slices[i].second};
    if (i + 1 == slices.size()) {
      if (s1.first < s1.second) out.push_back(s1);
      continue;
    }
    const auto& s2 = slices[i + 1];
    const std::string_view s2_text =
        s2.first < s2.second ? text.substr(s2.first, s2.second - s2.first) : std::string_view{};
    RegexMatch m;
    if (boundary_realignment_re().match(s2_text, &m)) {
      out.emplace_back(s1.first, s2.first + py_rstrip(m.group(s2_text, 0)).size());
      realign = m.end;
    } else {
      realign = 0;
      if (s1.first < s1.second) out.push_back(s1);
    }
  }
  return out;
}

std::vector<std::string_view> PunktSentenceTokenizer::tokenize(std::string_view text) const {
  std::vector<std::string_view> out;
  for (auto [begin, end] : span_tokenize(text)) out.push_back(text.substr(begin, end - begin));
  return out;
}

}  // namespace brioche::eval
