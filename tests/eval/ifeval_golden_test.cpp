// brioche's IFEval checkers against the reference scorer (lm-eval's
// ifeval task, langdetect seed 0): every response of the golden set, every
// instruction, all eight loose variants. The golden comes from
// tools/oracle/ifeval_reference.py goldens.
#include <gtest/gtest.h>

#include <map>

#include "eval/ifeval_scoring.h"
#include "eval_test_util.h"

namespace brioche::eval {
namespace {

struct GoldenRow {
  nlohmann::json row;
  IfevalPrompt prompt;
};

std::vector<GoldenRow> golden_rows() {
  std::vector<GoldenRow> rows;
  const std::string text = testing::read_zstd(testing::source_path("tests/eval/golden/ifeval_verdicts.jsonl.zst"));
  bool header = true;
  for (std::string_view line : split_lines(text)) {
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line);
    if (header) {
      header = false;
      continue;
    }
    IfevalPrompt p;
    p.key = j["key"].get<int64_t>();
    p.prompt = j["prompt"].get<std::string>();
    p.instruction_ids = j["instruction_id_list"].get<std::vector<std::string>>();
    for (const auto& kw : j["kwargs"]) p.kwargs.push_back(kw);
    rows.push_back({std::move(j), std::move(p)});
  }
  return rows;
}

TEST(IfevalGolden, EveryVerdictEqualsTheReference) {
  const std::vector<GoldenRow> rows = golden_rows();
  EXPECT_GE(rows.size(), 1000u) << "the golden set should hold at least 1,000 responses";
  std::map<std::string, int> checked, differing;
  std::map<std::string, int> per_source;
  int shown = 0, undefined = 0;
  for (const GoldenRow& g : rows) {
    const std::string response = g.row["response"].get<std::string>();
    const PromptScorer scorer(g.prompt);
    const auto got = scorer.variant_verdicts(response);
    const auto& want = g.row["variants"];
    ASSERT_EQ(got.size(), want.size());
    ++per_source[g.row["source"].get<std::string>()];
    for (size_t i = 0; i < got.size(); ++i) {
      const std::string& id = g.prompt.instruction_ids[i];
      ++checked[id];
      if (want[i].is_null()) {  // the reference draws a random letter here (docs/eval.md)
        ++undefined;
        continue;
      }
      bool same = true;
      for (int v = 0; v < kLooseVariants; ++v) same = same && got[i][v] == want[i][v].get<bool>();
      if (same) continue;
      ++differing[id];
      if (shown++ < 25) {
        std::string gs, ws;
        for (int v = 0; v < kLooseVariants; ++v) {
          gs += got[i][v] ? '1' : '0';
          ws += want[i][v].get<bool>() ? '1' : '0';
        }
        ADD_FAILURE() << g.row["source"].get<std::string>() << " key " << g.prompt.key << " " << id << " "
                      << g.prompt.kwargs[i].dump() << ": brioche " << gs << ", reference " << ws
                      << "\nresponse: " << response.substr(0, 400);
      }
    }
  }
  for (const auto& [id, n] : differing) ADD_FAILURE() << id << ": " << n << " of " << checked[id] << " differ";
  EXPECT_EQ(checked.size(), 25u) << "every instruction id should be covered";
  std::printf("verdicts the reference leaves to chance (skipped): %d\n", undefined);
  for (const auto& [source, n] : per_source) std::printf("golden %s: %d responses\n", source.c_str(), n);
}

}  // namespace
}  // namespace brioche::eval
