// Replays xgrammar's random walks (tools/oracle/grammar_goldens.py) and
// compares our token mask with xgrammar's at every step.
#include <gtest/gtest.h>

#include <map>

#include "fixture_vocab.h"
#include "grammar/compiler.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"

namespace brioche::grammar {
namespace {

using testing::read_zstd;
using testing::source_path;

Grammar grammar_of(const nlohmann::ordered_json& walk, int max_whitespace) {
  const std::string kind = walk["kind"].get<std::string>();
  if (kind == "json_schema") {
    SchemaOptions opt;
    const auto& o = walk["options"];
    opt.any_whitespace = o.value("any_whitespace", true);
    opt.max_whitespace = o.value("max_whitespace", max_whitespace);
    return Grammar::from_json_schema(walk["source"], opt);
  }
  if (kind == "ebnf") return Grammar::from_ebnf(walk["source"].get<std::string>());
  if (kind == "regex") return Grammar::from_regex(walk["source"].get<std::string>());
  if (kind == "builtin_json") return Grammar::builtin_json();
  ADD_FAILURE() << "unknown kind " << kind;
  return Grammar::builtin_json();
}

std::string show(std::string_view bytes) {
  std::string out;
  for (unsigned char c : bytes) {
    if (c >= 0x20 && c < 0x7f && c != '\\')
      out += static_cast<char>(c);
    else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

void replay(const std::string& family) {
  auto golden =
      nlohmann::ordered_json::parse(read_zstd(source_path("tests/grammar/golden/walks_" + family + ".json.zst")));
  auto vocab = testing::fixture_vocabulary(family);
  ASSERT_EQ(vocab->size(), golden["vocab_size"].get<int32_t>());
  const int words = vocab->num_words();
  std::vector<uint64_t> mult(words);
  for (int i = 0; i < words; ++i) mult[i] = testing::splitmix64(i);
  GrammarCache cache(vocab);
  std::vector<uint32_t> mask(words);
  int walks = 0, steps = 0, mismatched_steps = 0;
  std::map<std::string, int> mismatch_by_case;
  for (const auto& walk : golden["walks"]) {
    const std::string name = walk["case"].get<std::string>();
    SCOPED_TRACE(family + " " + name + " seed " + std::to_string(walk["seed"].get<int>()));
    auto compiled = cache.get(grammar_of(walk, golden["max_whitespace"].get<int>()));
    GrammarMatcher m(compiled);
    const auto& tokens = walk["tokens"];
    const auto& expected = walk["steps"];
    std::string text;
    bool reported = false;
    for (size_t step = 0; step < expected.size(); ++step) {
      m.fill_next_token_bitmask(mask.data());
      uint64_t h = 0;
      int count = 0;
      for (int w = 0; w < words; ++w) {
        h += static_cast<uint64_t>(mask[w]) * mult[w];
        count += __builtin_popcount(mask[w]);
      }
      char hex[17];
      std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
      ++steps;
      if (count != expected[step][0].get<int>() || hex != expected[step][1].get<std::string>()) {
        ++mismatched_steps;
        ++mismatch_by_case[name];
        if (!reported) {
          reported = true;
          std::string detail;
          std::string key = std::to_string(step);
          if (walk["full"].contains(key)) {
            const auto& full = walk["full"][key];
            bool plus = full[0] == "+";
            std::vector<char> theirs(vocab->size(), plus ? 0 : 1);
            for (size_t i = 1; i < full.size(); ++i) theirs[full[i].get<int>()] = plus ? 1 : 0;
            int shown = 0;
            for (int id = 0; id < vocab->size() && shown < 12; ++id) {
              bool ours = mask[id >> 5] >> (id & 31) & 1;
              if (ours != static_cast<bool>(theirs[id])) {
                detail += (ours ? " +ours:" : " +xgr:") + std::to_string(id) + "'" +
                          (id < vocab->num_tokens() ? show(vocab->token(id)) : "") + "'";
                ++shown;
              }
            }
          }
          ADD_FAILURE() << "step " << step << " after '" << show(text) << "': count ours " << count << " xgrammar "
                        << expected[step][0] << detail;
        }
      }
      if (step < tokens.size()) {
        int32_t tok = tokens[step].get<int32_t>();
        ASSERT_TRUE(m.accept_token(tok)) << "token " << tok << " '" << show(vocab->token(tok)) << "' rejected at step "
                                         << step << " after '" << show(text) << "'";
        if (tok < vocab->num_tokens()) text += vocab->token(tok);
      }
    }
    EXPECT_EQ(m.is_terminated(), walk["terminated"].get<bool>());
    ++walks;
  }
  std::string summary;
  for (auto& [k, v] : mismatch_by_case) summary += " " + k + ":" + std::to_string(v);
  std::printf("[golden %s] %d walks, %d steps compared, %d mismatched%s\n", family.c_str(), walks, steps,
              mismatched_steps, summary.c_str());
  EXPECT_EQ(mismatched_steps, 0);
}

TEST(GoldenWalks, Llama3MasksEqualXgrammar) { replay("llama3"); }
TEST(GoldenWalks, Qwen3MasksEqualXgrammar) { replay("qwen3"); }

}  // namespace
}  // namespace brioche::grammar
