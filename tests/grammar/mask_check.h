// Shared by the grammar's golden tests (length_counter, pattern_length,
// bounded_repetition, regex_assertions, unique_items_runtime): golden files,
// the whole-document check, candidate documents stored as repeated parts,
// small vocabularies, and a check of every token's mask bit against the
// matcher (no mask trusted).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fixture_vocab.h"
#include "grammar/compiler.h"
#include "grammar/matcher.h"

namespace brioche::grammar::testing_masks {

// A golden file of tests/grammar/golden/ (written by a tools/oracle script).
inline nlohmann::ordered_json golden_file(const std::string& name) {
  return nlohmann::ordered_json::parse(testing::read_file(testing::source_path("tests/grammar/golden/" + name)));
}

// Whether the grammar accepts `text` as a whole document.
inline bool accepts_document(const std::shared_ptr<const CompiledGrammar>& compiled, const std::string& text) {
  GrammarMatcher m(compiled);
  return m.accept_bytes(text) && m.can_terminate();
}

// A candidate's text: each part's text repeated; an "indexed" part puts the
// repetition's index in place of "{i}" (distinct keys).
inline std::string text_of(const nlohmann::ordered_json& parts) {
  std::string out;
  for (const auto& p : parts) {
    const std::string text = p[0].get<std::string>();
    const size_t at = p.size() == 3 ? text.find("{i}") : std::string::npos;
    for (int64_t k = 0; k < p[1].get<int64_t>(); ++k)
      out += at == std::string::npos ? text : text.substr(0, at) + std::to_string(k) + text.substr(at + 3);
  }
  return out;
}

inline std::shared_ptr<const Vocabulary> single_bytes() {
  static auto v = [] {
    std::vector<std::string> toks;
    for (int b = 0; b < 256; ++b) toks.push_back(std::string(1, static_cast<char>(b)));
    toks.push_back("");  // EOS
    return std::make_shared<const Vocabulary>(std::move(toks), VocabularyOptions{.eos_ids = {256}, .special_ids = {}});
  }();
  return v;
}

// Every string of 1 to 4 bytes over `alphabet` (token 0 is EOS): with
// escapes (\n, \", \\) and a two-byte character in the alphabet, tokens of
// up to 4 characters write JSON strings, arrays and integers across the
// bounds.
inline std::shared_ptr<const Vocabulary> alphabet_vocabulary(const std::string& alphabet) {
  std::vector<std::string> tokens{""};
  std::vector<std::string> level{""};
  for (int len = 1; len <= 4; ++len) {
    std::vector<std::string> next;
    for (const std::string& p : level)
      for (char c : alphabet) next.push_back(p + c);
    tokens.insert(tokens.end(), next.begin(), next.end());
    level = std::move(next);
  }
  return std::make_shared<const Vocabulary>(std::move(tokens), VocabularyOptions{.eos_ids = {0}, .special_ids = {}});
}

inline std::shared_ptr<const Vocabulary> small_alphabet() {
  static auto v = alphabet_vocabulary("a7\"\\n[], \xC3\xA9");
  return v;
}

// From `prefix`, `steps` steps of a walk: at each, every token's mask bit
// must equal whether the matcher accepts it. Prefers long tokens that keep
// the document open, so the walk runs across the bound. Returns the number
// of bits that differed (the test wants 0).
inline int mask_mismatches(const std::shared_ptr<const CompiledGrammar>& compiled, const std::string& prefix, int steps,
                           uint64_t seed, const std::string& name, bool report = true) {
  const Vocabulary& v = compiled->vocabulary();
  GrammarMatcher m(compiled);
  if (!m.accept_bytes(prefix)) return 0;  // an invalid candidate can be dead before its end
  std::vector<uint32_t> mask(size_t(v.num_words()));
  uint64_t rng = seed;
  auto next = [&] {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(rng >> 33);
  };
  int mismatches = 0;
  for (int step = 0; step < steps && !m.is_terminated(); ++step) {
    m.fill_next_token_bitmask(mask.data());
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < v.size(); ++id) {
      const bool bit = (mask[size_t(id) >> 5] >> (id & 31) & 1) != 0;
      bool accepted;
      if (v.token(id).empty()) {
        accepted = m.can_terminate();
      } else {
        accepted = m.accept_token(id);
        if (accepted) m.rollback(1);
      }
      if (bit != accepted && ++mismatches <= 3 && report)
        ADD_FAILURE() << name << ": token '" << v.token(id) << "' mask " << bit << ", matcher " << accepted << " after "
                      << step << " steps past a prefix of " << prefix.size() << " bytes";
      if (accepted && !v.token(id).empty()) allowed.push_back(id);
    }
    if (allowed.empty()) break;
    int32_t pick = allowed[next() % allowed.size()];
    for (int tries = 0; tries < 8; ++tries) {
      const int32_t p = allowed[next() % allowed.size()];
      if (v.token(p).size() > v.token(pick).size()) pick = p;
    }
    EXPECT_TRUE(m.accept_token(pick));
  }
  return mismatches;
}

}  // namespace brioche::grammar::testing_masks
