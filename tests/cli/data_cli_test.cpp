// `brioche data` as a user runs it: curate/convert/inspect on the fixtures,
// exit codes and one-line errors, and `brioche train` reading what they write.
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
  std::string output;  // stdout and stderr together
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

std::string fixture(const std::string& name) {
  return std::string(BRIOCHE_SOURCE_DIR) + "/tests/data/fixtures/" + name;
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return nlohmann::json::parse(s.str());
}

int count_lines(const fs::path& p) {
  std::ifstream in(p);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) n += !line.empty();
  return n;
}

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("brioche_data_cli_" + name);
  fs::remove_all(dir);
  return dir;
}

TEST(DataCli, CurateWritesWhatTrainReads) {
  const fs::path out = scratch("curate");
  Outcome o = brioche("data curate " + fixture("ultrafeedback.jsonl") + " -o " + out.string() +
                      " --valid-fraction 0.34 --seed 1");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("rows 12, kept 6, dropped 6"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("line 5: invalid_json"), std::string::npos) << o.output;
  EXPECT_EQ(count_lines(out / "train.jsonl"), 4);
  EXPECT_EQ(count_lines(out / "valid.jsonl"), 2);
  const nlohmann::json stats = read_json(out / "stats.json");
  EXPECT_EQ(stats["dropped"], nlohmann::json::parse(R"({"tie": 1, "invalid_json": 1, "duplicate_prompt": 1,
      "too_few_completions": 1, "bad_row": 2})"));
  EXPECT_EQ(stats["dropped_at"]["bad_row"], nlohmann::json::parse("[10, 12]"));
  // Again without --overwrite: refused before any work, naming the flag.
  o = brioche("data curate " + fixture("ultrafeedback.jsonl") + " -o " + out.string());
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("exists: pass --overwrite"), std::string::npos) << o.output;
  if (!fs::exists(default_model_path())) GTEST_SKIP() << "skipped: default model not installed (train step)";
  o = brioche("train -q --data " + out.string() + " --method orpo --iters 1 -o " + (out / "adapter").string());
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_TRUE(fs::exists(out / "adapter" / "adapter_model.safetensors"));
}

TEST(DataCli, ConvertEachLayout) {
  const fs::path out = scratch("convert");
  const std::pair<const char*, int> cases[] = {
      {"trl_conversational.jsonl", 3}, {"hh_rlhf.jsonl", 2}, {"sharegpt.jsonl", 2}, {"alpaca.json", 3}};
  for (const auto& [name, rows] : cases) {
    const fs::path file = out / (std::string(name) + ".out.jsonl");
    const Outcome o = brioche("data convert " + fixture(name) + " -o " + file.string());
    EXPECT_EQ(o.exit_code, 0) << name << o.output;
    EXPECT_EQ(count_lines(file), rows) << name;
  }
  if (!fs::exists(default_model_path())) GTEST_SKIP() << "skipped: default model not installed (train step)";
  const fs::path dir = out / "sharegpt";
  Outcome o = brioche("data convert " + fixture("sharegpt.jsonl") + " -o " + dir.string());
  ASSERT_EQ(o.exit_code, 0) << o.output;
  o = brioche("train -q --data " + dir.string() + " --iters 1 -o " + (dir / "adapter").string());
  EXPECT_EQ(o.exit_code, 0) << o.output;
}

TEST(DataCli, InspectWithTheModelsTokenizer) {
  if (!fs::exists(default_model_path())) GTEST_SKIP() << "skipped: default model not installed";
  Outcome o = brioche("data inspect " + fixture("ultrafeedback.jsonl") + " -m " + default_model_path() + " --json");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const nlohmann::json s = nlohmann::json::parse(o.output.substr(o.output.find('{')));
  // Per row, prompt + longest completion, from tests/data/golden/token_lengths.json: max line 6 (36 + 25).
  EXPECT_EQ(s["tokens"]["max"], 61.0);
  EXPECT_EQ(s["tokens"]["min"], 38.0);
  EXPECT_EQ(s["tokens"]["histogram"], nlohmann::json::parse(R"([{"from": 32, "to": 64, "rows": 9}])"));
  o = brioche("data inspect " + fixture("hh_rlhf.jsonl"));
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("kind: preference pairs; layouts: hh-rlhf 3"), std::string::npos) << o.output;
}

TEST(DataCli, ErrorsSayWhatWasExpected) {
  Outcome o = brioche("data inspect /nonexistent.jsonl");
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("input not found: /nonexistent.jsonl"), std::string::npos) << o.output;
  o = brioche("data convert " + fixture("alpaca.json") + " --from csv -o " + scratch("from").string());
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("--from csv: expected auto or one of preference,"), std::string::npos) << o.output;
  o = brioche("data inspect " + fixture("ultrafeedback.jsonl") + " --strict");
  EXPECT_EQ(o.exit_code, 1) << o.output;
  EXPECT_NE(o.output.find("ultrafeedback.jsonl: line 5: invalid JSON"), std::string::npos) << o.output;
  o = brioche("data convert " + fixture("ultrafeedback.jsonl") + " -o " + scratch("rated").string());
  EXPECT_EQ(o.exit_code, 1) << o.output;  // nothing convertible: every row is rated or bad
  EXPECT_NE(o.output.find("brioche data curate"), std::string::npos) << o.output;
  o = brioche("data");
  EXPECT_EQ(o.exit_code, 2) << o.output;
}

}  // namespace
}  // namespace brioche::cli
