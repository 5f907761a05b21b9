// `brioche eval preference` and `brioche eval perplexity` end to end on the
// default model: the numbers against tools/oracle/eval_goldens.py's rows
// (tests/train/sequence_scoring_test.cpp checks the log-probs themselves),
// an adapter compared with the base, and usage errors.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/common.h"

namespace brioche::cli {
namespace {

namespace fs = std::filesystem;

struct Outcome {
  int exit_code = -1;
  std::string output;
};

Outcome brioche(const std::string& args) {
  const std::string command = std::string(BRIOCHE_BINARY_DIR) + "/brioche " + args + " 2>&1";
  Outcome o;
  FILE* pipe = popen(command.c_str(), "r");
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) o.output.append(buffer.data(), n);
  const int status = pclose(pipe);
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return o;
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return nlohmann::json::parse(s.str());
}

class EvalScoringCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(default_model_path())) GTEST_SKIP() << "skipped: default model not installed";
    dir_ =
        fs::temp_directory_path() /
        ("brioche_eval_scoring_cli_" +
         std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));  // ctest runs tests in parallel
    fs::create_directories(dir_);
    const nlohmann::json g =
        read_json(std::string(BRIOCHE_SOURCE_DIR) + "/tests/train/golden/sequence_scores_smollm2.json");
    std::ofstream pairs(dir_ / "pairs.jsonl"), rows(dir_ / "rows.jsonl");
    for (const auto& p : g["pairs_data"]) pairs << p.dump() << "\n";
    for (const auto& r : g["rows_data"]) rows << r.dump() << "\n";
  }
  fs::path dir_;
};

TEST_F(EvalScoringCli, PreferenceAccuracyAndAdapterComparison) {
  // A one-step SFT adapter, to have something to compare with the base.
  const fs::path train_dir = dir_ / "sft";
  fs::create_directories(train_dir);
  std::ofstream(train_dir / "train.jsonl") << R"({"prompt": "What is the capital of France?", "completion": "Paris."})"
                                           << "\n";
  Outcome o = brioche("train -q --overwrite --data " + train_dir.string() + " --iters 1 --learning-rate 1e-3 -o " +
                      (dir_ / "adapter").string());
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const fs::path out = dir_ / "preference.json";
  o = brioche("eval preference -q -d " + (dir_ / "pairs.jsonl").string() +
              " --adapter sft=" + (dir_ / "adapter").string() + " -o " + out.string());
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("preference: 5 pairs"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("sft - base: accuracy"), std::string::npos) << o.output;
  const nlohmann::json r = read_json(out);
  ASSERT_EQ(r["models"].size(), 2u);
  EXPECT_EQ(r["models"][0]["name"], "base");
  EXPECT_EQ(r["models"][1]["name"], "sft");
  // The oracle's chosen reply wins every pair by at least 1.1 nats: so does ours.
  EXPECT_EQ(r["models"][0]["summary"]["accuracy"]["mean"], 1.0);
  EXPECT_EQ(r["models"][0]["summary"]["pairs"], 5);
  EXPECT_EQ(r["models"][0]["pairs"][0][1], 9);  // chosen tokens of pair 0, as the oracle counts them
  ASSERT_EQ(r["comparisons"].size(), 1u);
  EXPECT_TRUE(r["comparisons"][0]["difference"].contains("accuracy_difference"));
}

TEST_F(EvalScoringCli, PerplexityScopes) {
  const fs::path out = dir_ / "ppl.json";
  Outcome o = brioche("eval perplexity -q -d " + (dir_ / "rows.jsonl").string() + " -o " + out.string());
  ASSERT_EQ(o.exit_code, 0) << o.output;
  nlohmann::json r = read_json(out);
  // Oracle token counts: text rows 18 and 25 (every token after the first), replies 5 and 12.
  EXPECT_EQ(r["models"][0]["summary"]["tokens"], 60);
  const double nll = r["models"][0]["summary"]["nll"]["mean"];
  EXPECT_GT(nll, 1.0);
  EXPECT_LT(nll, 4.0);
  EXPECT_NEAR(r["models"][0]["summary"]["perplexity"]["mean"].get<double>(), std::exp(nll), 1e-9);
  o = brioche("eval perplexity -q --scope full -d " + (dir_ / "rows.jsonl").string() + " -o " + out.string());
  ASSERT_EQ(o.exit_code, 0) << o.output;
  r = read_json(out);
  EXPECT_EQ(r["models"][0]["summary"]["tokens"], 129);  // + the prompts' tokens after their first
}

TEST_F(EvalScoringCli, UsageErrors) {
  Outcome o = brioche("eval preference");
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("--data"), std::string::npos) << o.output;
  o = brioche("eval perplexity -d " + (dir_ / "pairs.jsonl").string());
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("pairs.jsonl:1: a preference row; perplexity reads"), std::string::npos) << o.output;
  o = brioche("eval preference -d " + (dir_ / "pairs.jsonl").string() + " --adapter /nonexistent/adapter");
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("--adapter /nonexistent/adapter: /nonexistent/adapter not found"), std::string::npos)
      << o.output;
}

}  // namespace
}  // namespace brioche::cli
