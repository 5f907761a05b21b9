// `brioche eval ifeval` end to end on the default model with a few prompts:
// the tables, the saved responses and verdicts, --rescore, a random adapter
// compared with the base (paired statistics, flips, HTML report), bad input.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "eval/ifeval_scoring.h"
#include "model/weights.h"
#include "train/adapter_io.h"
#include "train/lora.h"

namespace brioche::cli {
namespace {

namespace fs = std::filesystem;

struct Outcome {
  int code = -1;
  std::string out, err;
};

Outcome brioche(const std::string& args, const fs::path& err_file) {
  const std::string command = std::string(BRIOCHE_BINARY_DIR) + "/brioche " + args + " 2>" + err_file.string();
  FILE* pipe = popen(command.c_str(), "r");
  Outcome o;
  std::array<char, 4096> buffer;
  for (size_t n; (n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0;) o.out.append(buffer.data(), n);
  const int status = pclose(pipe);
  o.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(err_file);
  std::stringstream ss;
  ss << in.rdbuf();
  o.err = ss.str();
  return o;
}

std::vector<nlohmann::json> read_rows(const fs::path& path) {
  std::vector<nlohmann::json> rows;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

class EvalIfevalCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(default_model_path())) GTEST_SKIP() << "skipped: default model not installed";
    root_ =
        fs::temp_directory_path() /
        ("brioche_cli_eval_ifeval_" +
         std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));  // ctest runs tests in parallel
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

TEST_F(EvalIfevalCli, GeneratesSavesAndRescores) {
  const fs::path out = root_ / "run";
  const Outcome o = brioche("eval ifeval --limit 3 --max-tokens 24 --out " + out.string(), root_ / "err");
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.out.find("IFEval: 3 prompts, 5 instructions"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("prompt strict"), std::string::npos);
  EXPECT_NE(o.out.find("punctuation:no_comma"), std::string::npos);  // the per-instruction table
  EXPECT_NE(o.err.find("[base] 3/3 prompts done"), std::string::npos) << o.err;

  const auto rows = read_rows(out / "base.responses.jsonl");
  ASSERT_EQ(rows.size(), 3u);
  const auto& builtin = eval::builtin_ifeval_prompts();
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i]["key"].get<int64_t>(), builtin[i].key);
    EXPECT_LE(rows[i]["completion_tokens"].get<int>(), 24);
    EXPECT_FALSE(rows[i]["response"].get<std::string>().empty());
    // The saved verdicts are the checkers' on the saved response.
    const eval::ResponseVerdicts v = eval::PromptScorer(builtin[i]).score(rows[i]["response"].get<std::string>());
    EXPECT_EQ(rows[i]["strict"].get<std::vector<bool>>(), v.strict);
    EXPECT_EQ(rows[i]["loose"].get<std::vector<bool>>(), v.loose);
  }
  const auto summary = nlohmann::json::parse(std::ifstream(out / "summary.json"));
  EXPECT_EQ(summary["runs"][0]["prompts"].get<int>(), 3);

  // Re-scoring the saved run prints the same tables without a model.
  const Outcome again = brioche("eval ifeval -m /nonexistent.gguf --rescore " + out.string(), root_ / "err2");
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(again.out, o.out);
}

TEST_F(EvalIfevalCli, ComparesAnAdapterWithTheBase) {
  model::Checkpoint ck = model::load_gguf_checkpoint(default_model_path());
  train::LoraAdapter adapter(ck.config, {.rank = 8, .alpha = 32, .num_layers = 8}, 7);
  std::mt19937 rng{7};
  std::normal_distribution<float> normal(0.0f, 0.1f);
  for (auto& e : adapter.entries())
    for (int64_t i = 0; i < e.factors->b.numel(); ++i) e.factors->b.data_as<float>()[i] = normal(rng);
  train::save_adapter((root_ / "noisy").string(), adapter, ck);

  const fs::path out = root_ / "cmp";
  const fs::path report = root_ / "report.html";
  const Outcome o = brioche("eval ifeval --limit 4 --max-tokens 16 --adapter " + (root_ / "noisy").string() +
                                " --out " + out.string() + " --report " + report.string(),
                            root_ / "err");
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.out.find("noisy vs base"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("McNemar exact p"), std::string::npos);
  const auto base = read_rows(out / "base.responses.jsonl");
  const auto tuned = read_rows(out / "noisy.responses.jsonl");
  ASSERT_EQ(base.size(), 4u);
  ASSERT_EQ(tuned.size(), 4u);
  int differing = 0;
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(base[i]["key"], tuned[i]["key"]);
    differing += base[i]["response"] != tuned[i]["response"];
  }
  EXPECT_GT(differing, 0) << "the adapter should change the responses";

  // The comparison in summary.json agrees with the saved verdicts.
  const auto summary = nlohmann::json::parse(std::ifstream(out / "summary.json"));
  ASSERT_EQ(summary["comparisons"].size(), 1u);
  const auto& metric = summary["comparisons"][0]["metrics"][0];
  EXPECT_EQ(metric["metric"], "prompt strict");
  int gained = 0, lost = 0;
  for (size_t i = 0; i < 4; ++i) {
    const auto all = [](const nlohmann::json& v) {
      for (const auto& b : v)
        if (!b.get<bool>()) return false;
      return true;
    };
    gained += !all(base[i]["strict"]) && all(tuned[i]["strict"]);
    lost += all(base[i]["strict"]) && !all(tuned[i]["strict"]);
  }
  EXPECT_EQ(metric["mcnemar"]["gained"].get<int>(), gained);
  EXPECT_EQ(metric["mcnemar"]["lost"].get<int>(), lost);
  EXPECT_NEAR(metric["difference"].get<double>(), (gained - lost) / 4.0, 1e-12);

  std::ifstream html(report);
  std::stringstream page;
  page << html.rdbuf();
  EXPECT_NE(page.str().find("<svg"), std::string::npos);
  EXPECT_NE(page.str().find("noisy vs base"), std::string::npos);
  for (const char* external : {"src=", "href=", "<script", "<link", "url("})  // self-contained: nothing to fetch
    EXPECT_EQ(page.str().find(external), std::string::npos) << external;
}

TEST_F(EvalIfevalCli, BadInputIsAUsageError) {
  const fs::path prompts = root_ / "prompts.jsonl";
  std::ofstream(prompts)
      << "{\"prompt\": \"hi\", \"instruction_id_list\": [\"punctuation:no_comma\"], \"kwargs\": [{}]}\n"
      << "{\"prompt\": \"hi\", \"instruction_id_list\": [\"no:such\"], \"kwargs\": [{}]}\n";
  Outcome o = brioche("eval ifeval --prompts " + prompts.string(), root_ / "err");
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.err.find(prompts.string() + ":2: unknown IFEval instruction id 'no:such'"), std::string::npos) << o.err;
  o = brioche("eval ifeval --rescore " + (root_ / "nothing").string(), root_ / "err");
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.err.find("not a folder"), std::string::npos) << o.err;
  o = brioche("eval ifeval --limit 1 --adapter " + (root_ / "missing_adapter").string(), root_ / "err");
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.err.find("--adapter missing_adapter"), std::string::npos) << o.err;
  o = brioche("eval", root_ / "err");
  EXPECT_EQ(o.code, 2);
}

}  // namespace
}  // namespace brioche::cli
