// Patterns with assertions — lookahead (?=X) (?!X), word boundaries \b \B,
// anchors ^ $ \A \Z anywhere — as a DFA over code points: the strings in
// which the pattern finds a match (a search, as JSON Schema reads
// `pattern`). The plain converter (regex_converter.cpp) writes a regex as
// one EBNF expression; an assertion constrains what comes before or after
// it, which an expression cannot say, so such patterns are decided here.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace brioche::grammar {

using CodepointRanges = std::vector<std::pair<uint32_t, uint32_t>>;

// regex_converter.cpp: the pieces of the plain converter this one shares.
// One atom that reads one character at `pos` (class, '.', escape, literal).
CodepointRanges regex_character_at(const std::string& pattern, size_t& pos, bool inside_json_string);
// A class as an EBNF expression (inside a JSON string: characters JSON
// escapes offered as their escapes, one literal each).
std::string regex_class_ebnf(const CodepointRanges& ranges, bool inside_json_string);
// What \w (and so \b) counts as a word character.
CodepointRanges regex_word_characters(bool inside_json_string);

struct RegexDfaOptions {
  bool inside_json_string = true;
  // Only strings of min_length..max_length characters (max_length < 0: no
  // upper bound), counted in the DFA: a schema's minLength/maxLength.
  int64_t min_length = 0, max_length = -1;
  int32_t max_states = 4096;  // DFA states, before minimisation; past it an error
};

struct RegexDfa {
  struct Edge {
    CodepointRanges chars;
    int32_t target = 0;
  };
  struct State {
    std::vector<Edge> edges;
    bool accepting = false;
  };
  // states[0] is the start; every state can reach an accepting one (but
  // regex_dfa_of_strings' tries need not be minimal). No states: no string.
  std::vector<State> states;
};

// Whether the pattern has an assertion the plain converter does not read:
// a lookaround group or \b \B \A \Z (anchors ^ $ inside groups are found by
// the plain converter refusing them).
bool regex_has_assertions(const std::string& pattern);

// The minimal DFA of the strings in which `pattern` finds a match (ECMA-262
// and Python's re agree on what is read here: ^ and \A at the start, $ and
// \Z at the very end, \b between a word and a non-word character or an
// end), within the length bounds. Lookbehind, lookarounds inside
// lookarounds, backreferences and inline flags are errors, as is a DFA past
// max_states.
RegexDfa regex_search_dfa(const std::string& pattern, const RegexDfaOptions& options);

// The strings that every DFA of `all` accepts and no DFA of `none` accepts
// (the intersection of the one and the complements of the other), as a
// minimal DFA; no states when there is none. Past max_states product
// states, an error.
RegexDfa regex_dfa_product(const std::vector<const RegexDfa*>& all, const std::vector<const RegexDfa*>& none,
                           int32_t max_states = 4096);
// Exactly these strings (UTF-8, read as code points).
RegexDfa regex_dfa_of_strings(const std::vector<std::string>& texts);
// Whether the DFA accepts the string (UTF-8, read as code points).
bool regex_dfa_accepts(const RegexDfa& dfa, const std::string& text);

// How large an expression regex_dfa_expression may write. Shared
// sub-expressions are written out again per path, so the size is counted in
// character classes: each is one item of a length bound and one set of
// UTF-8 states in the automaton, whatever its text (a \p{L} class is ~17 KB
// of ranges, `[a-z]` 5 bytes). The bytes only guard the grammar's text.
struct DfaExpressionBudget {
  size_t max_classes = 2048;
  size_t max_bytes = 1 << 20;
};

// The DFA as one EBNF expression, when it stays within the budget; else "".
// A DFA whose only cycles are loops of a state on itself (a tree of
// repetitions, as a lookahead near the start makes: `^(?!aws:)[a-z:]+$`)
// is written state by state; any other by state elimination. As an
// expression it composes like any pattern (a length bound `%{m,n}` counts
// its classes); as rules (one per state) it would not.
std::string regex_dfa_expression(const RegexDfa& dfa, bool inside_json_string, const DfaExpressionBudget& budget);

}  // namespace brioche::grammar
