// `brioche info -m FILE` and `brioche run -m FILE` on every hostile model of
// tests/model/hostile_model_files.h, and on models whose tokenizer does not
// fit them: one line of error naming the field, a non-zero exit (not a
// signal), within seconds (a FIFO must not hang the program).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "cli/run_brioche.h"
#include "model/hostile_model_files.h"

namespace brioche::cli {
namespace {

using model::testing::HostileCase;

using Outcome = BriocheOutcome;

// `timeout` turns a hang into exit code 124, so a regression fails the test.
Outcome run_brioche(const std::string& args) { return run_brioche_shell(args); }

int count_lines(const std::string& s) {
  int lines = 0;
  for (char c : s) lines += c == '\n';
  return lines;
}

// A temporary directory per test.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path = std::filesystem::temp_directory_path() /
           ("brioche_hostile_cli_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

void expect_clean_failure(const Outcome& o, const std::string& expected, const std::string& what) {
  EXPECT_TRUE(o.exit_code == 1 || o.exit_code == 2) << what << ": exit " << o.exit_code << "\n" << o.output;
  EXPECT_EQ(count_lines(o.output), 1) << what << ":\n" << o.output;
  EXPECT_NE(o.output.find(expected), std::string::npos) << what << ": expected '" << expected << "' in:\n" << o.output;
}

class HostileModelCli : public ::testing::TestWithParam<HostileCase> {};

TEST_P(HostileModelCli, InfoAndRunFailWithOneLine) {
  const HostileCase& c = GetParam();
  TempDir dir;
  const std::string path = c.make(dir.path.string());
  expect_clean_failure(run_brioche("info -m " + path), c.expected, "info " + c.name);
  expect_clean_failure(run_brioche("run -m " + path + " -p hi -n 2"), c.expected, "run " + c.name);
}

INSTANTIATE_TEST_SUITE_P(Cases, HostileModelCli, ::testing::ValuesIn(model::testing::hostile_cases()),
                         [](const ::testing::TestParamInfo<HostileCase>& info) { return info.param.name; });

// A tokenizer of more ids than the model has rows could only produce prompts
// the model cannot embed: refused at load (engine/model_tokenizer.cpp).
TEST(HostileModelCli, TokenizerLargerThanTheModelIsRefused) {
  TempDir dir;
  const std::string path = (dir.path / "model.gguf").string();
  model::testing::TinyGguf::llama({}, /*tokenizer_vocab=*/80).write(path);
  const std::string expected = "tokenizer vocabulary: expected at most 64 ids";
  expect_clean_failure(run_brioche("info -m " + path), expected, "info");
  expect_clean_failure(run_brioche("run -m " + path + " -p hi -n 2"), expected, "run");
}

// Rows far beyond the tokenizer are not padding: their untrained logits
// would be sampled and fail in the detokenizer on every request.
TEST(HostileModelCli, ModelFarLargerThanItsTokenizerIsRefused) {
  TempDir dir;
  const std::string path = (dir.path / "model.gguf").string();
  model::testing::TinyGguf::llama({.vocab = 2048}, /*tokenizer_vocab=*/64).write(path);
  const std::string expected = "by padding of at most 1024 rows, found 1984";
  expect_clean_failure(run_brioche("info -m " + path), expected, "info");
  expect_clean_failure(run_brioche("run -m " + path + " -p hi -n 2"), expected, "run");
}

// Padding (rows a little beyond the tokenizer, as Qwen and Phi ship) loads.
TEST(HostileModelCli, PaddedModelLoads) {
  TempDir dir;
  const std::string path = (dir.path / "model.gguf").string();
  model::testing::TinyGguf::llama({}, /*tokenizer_vocab=*/60).write(path);
  Outcome o = run_brioche("info -m " + path);
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("vocab 64"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("tokenizer      vocab 60"), std::string::npos) << o.output;
}

// Errors quote bytes from the files: a model_type decoded from JSON escapes
// into terminal control bytes (an ESC sequence clears the screen, a carriage
// return rewrites the line), a key that is not UTF-8 quoted by the JSON
// parser. They reach the terminal escaped, on one line, naming the file.
TEST(HostileModelCli, ControlBytesInAnErrorArePrintedEscaped) {
  TempDir dir;
  const std::string header = "{}      ";
  const uint64_t header_len = header.size();
  std::ofstream st(dir.path / "model.safetensors", std::ios::binary);
  st.write(reinterpret_cast<const char*>(&header_len), 8);
  st << header;
  st.close();
  struct Case {
    std::string config, expected, escaped;
  };
  const Case cases[] = {
      {R"({"model_type": "\u001b[2Jevil\r", "architectures": ["LlamaForCausalLM"]})", "unsupported architecture",
       "'\\x1b[2Jevil\\x0d'"},
      {"{\"\xff\xfe\": 1}", "config.json: JSON at byte", "\\xff"},
  };
  for (const Case& c : cases) {
    std::ofstream(dir.path / "config.json", std::ios::binary | std::ios::trunc) << c.config;
    for (const char* command : {"info -m ", "run -p hi -n 2 -m "}) {
      const Outcome o = run_brioche(command + dir.path.string());
      expect_clean_failure(o, c.expected, command + c.config);
      for (const char raw : {'\x1b', '\r', '\xff'})
        EXPECT_EQ(o.output.find(raw), std::string::npos) << command << c.config << ": a raw byte reached the terminal";
      EXPECT_NE(o.output.find(c.escaped), std::string::npos) << command << c.config << ": " << o.output;
    }
  }
}

}  // namespace
}  // namespace brioche::cli
