// Shared by the grammar's golden tests (length_counter, pattern_length,
// bounded_repetition, regex_assertions, keys_and_formats, formats_and_names,
// schema_combinators, unique_items_runtime): golden files, the
// whole-document check, candidate documents stored as repeated parts, small
// vocabularies, a check of every token's mask bit against the matcher (no
// mask trusted), and the two loops over a golden file's cases: jsonschema's
// verdicts and mask walks.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fixture_vocab.h"
#include "grammar/compiler.h"
#include "grammar/grammar.h"
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

// A golden candidate's document: its "text", or its "parts" (text_of).
inline std::string candidate_text(const nlohmann::ordered_json& candidate) {
  return candidate.contains("text") ? candidate["text"].get<std::string>() : text_of(candidate["parts"]);
}

struct Verdicts {
  int checked = 0, valid = 0;
  Verdicts& operator+=(const Verdicts& o) {
    checked += o.checked;
    valid += o.valid;
    return *this;
  }
};

// Every candidate of every golden case ({"name", "schema", "candidates":
// [{"text" or "parts", "valid"}]}, valid as `jsonschema` judged it) on
// `vocab`: accepted as a whole document exactly when it is valid. A schema
// that does not compile fails the test, naming the case. `each_grammar`,
// when given, checks a case's grammar and compiled grammar too. Returns the
// counts, for the caller's floor (a golden file that lost its cases fails).
inline Verdicts expect_jsonschema_verdicts(
    const nlohmann::ordered_json& cases, const SchemaOptions& options, const std::shared_ptr<const Vocabulary>& vocab,
    const std::function<void(const std::string& name, const Grammar&, const CompiledGrammar&)>& each_grammar = {}) {
  Verdicts n;
  for (const auto& c : cases) {
    const std::string name = c["name"].get<std::string>();
    std::shared_ptr<const CompiledGrammar> compiled;
    try {
      const Grammar g = Grammar::from_json_schema(c["schema"], options);
      compiled = CompiledGrammar::compile(g, vocab);
      if (each_grammar) each_grammar(name, g, *compiled);
    } catch (const std::exception& e) {
      ADD_FAILURE() << name << ": refused: " << e.what();
      continue;
    }
    for (const auto& candidate : c["candidates"]) {
      const std::string text = candidate_text(candidate);
      const bool valid = candidate["valid"].get<bool>();
      EXPECT_EQ(accepts_document(compiled, text), valid)
          << name << ": jsonschema says " << (valid ? "valid" : "invalid") << " for a document of " << text.size()
          << " bytes: " << text.substr(0, 80) << (text.size() > 80 ? "..." : "");
      ++n.checked;
      n.valid += valid;
    }
  }
  return n;
}

// Mask walks (mask_mismatches, `steps` steps) from the first half of each
// candidate that keep(its index in the case, candidate) picks, the seed
// counting up from `seed` in every case. Returns the number of walks.
inline int walk_from_candidates(const nlohmann::ordered_json& cases, const SchemaOptions& options,
                                const std::shared_ptr<const Vocabulary>& vocab, uint64_t seed,
                                const std::function<bool(size_t, const nlohmann::ordered_json&)>& keep, int steps = 6) {
  int walks = 0;
  for (const auto& c : cases) {
    const std::string name = c["name"].get<std::string>();
    auto compiled = CompiledGrammar::compile(Grammar::from_json_schema(c["schema"], options), vocab);
    uint64_t s = seed;
    size_t i = 0;
    for (const auto& candidate : c["candidates"]) {
      if (!keep(i++, candidate)) continue;
      const std::string text = candidate_text(candidate);
      EXPECT_EQ(mask_mismatches(compiled, text.substr(0, text.size() / 2), steps, s++, name), 0);
      ++walks;
    }
  }
  return walks;
}

}  // namespace brioche::grammar::testing_masks
