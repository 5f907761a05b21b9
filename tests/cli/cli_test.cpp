// The `brioche` program as a user runs it: exit codes, one-line errors,
// streamed output, on the default model.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli/common.h"
#include "formats/gguf.h"
#include "ops/device.h"

namespace brioche::cli {
namespace {

struct Outcome {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

Outcome run_brioche(const std::string& args) {
  std::string command = std::string(BRIOCHE_BINARY_DIR) + "/brioche " + args + " 2>&1";
  Outcome outcome;
  FILE* pipe = popen(command.c_str(), "r");
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) outcome.output.append(buffer.data(), n);
  int status = pclose(pipe);
  outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return outcome;
}

int count_lines(const std::string& s) {
  int lines = 0;
  for (char c : s) lines += c == '\n';
  return lines;
}

bool have_default_model() { return std::filesystem::exists(default_model_path()); }

TEST(Cli, UnknownFlagIsOneLineUsageError) {
  Outcome o = run_brioche("run --no-such-flag");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_EQ(count_lines(o.output), 1) << o.output;
  EXPECT_NE(o.output.find("--no-such-flag"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("--help"), std::string::npos) << o.output;
}

// --gpus N (data-parallel training) needs CUDA GPUs and says how to get them.
TEST(Cli, TrainGpusNeedsCudaDevices) {
  if (!have_default_model()) GTEST_SKIP() << "skipped: default model not installed";
  const auto data = std::filesystem::temp_directory_path() / "brioche_cli_test_gpus";
  std::filesystem::create_directories(data);
  std::ofstream(data / "train.jsonl") << R"({"text": "hello"})"
                                      << "\n";
  Outcome o = run_brioche("train --gpus 2 --data " + data.string() + " -o " + (data / "out").string());
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("--gpus 2 trains on GPUs: add --device cuda"), std::string::npos) << o.output;
  if (!ops::cuda_available()) {
    o = run_brioche("train --gpus 2 --device cuda --data " + data.string() + " -o " + (data / "out").string());
    EXPECT_EQ(o.exit_code, 2) << o.output;
    EXPECT_EQ(count_lines(o.output), 1) << o.output;
  }
  o = run_brioche("train --gpus 0 --data " + data.string());
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("gpus must be between 1 and 64"), std::string::npos) << o.output;
}

TEST(Cli, MissingModelFileSaysWhatWasExpected) {
  Outcome o = run_brioche("run -m /nonexistent/model.gguf -p hi");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_EQ(count_lines(o.output), 1) << o.output;
  EXPECT_NE(o.output.find("/nonexistent/model.gguf"), std::string::npos) << o.output;
}

TEST(Cli, UnknownArchitectureIsUsageError) {
  auto path = std::filesystem::temp_directory_path() / "brioche_cli_test_gpt2.gguf";
  formats::GgufWriter writer;
  writer.add("general.architecture", formats::GgufValue::string("gpt2"));
  writer.write(path.string());
  Outcome o = run_brioche("info " + path.string());
  std::filesystem::remove(path);
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_EQ(count_lines(o.output), 1) << o.output;
  EXPECT_NE(o.output.find("gpt2"), std::string::npos) << o.output;
}

TEST(Cli, InfoDescribesTheDefaultModel) {
  if (!have_default_model()) GTEST_SKIP() << "skipped: default model missing (run scripts/setup.sh)";
  Outcome o = run_brioche("info");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  for (const char* expected : {"llama", "30 layers", "hidden 576", "q4_1", "vocab 49152", "chat template  present"}) {
    EXPECT_NE(o.output.find(expected), std::string::npos) << "missing '" << expected << "' in:\n" << o.output;
  }
}

TEST(Cli, GreedyRunIsDeterministicAndReportsSpeed) {
  if (!have_default_model()) GTEST_SKIP() << "skipped: default model missing (run scripts/setup.sh)";
  Outcome a = run_brioche("run -p 'What is 2+2?' --temp 0 -n 16 -t 2");
  Outcome b = run_brioche("run -p 'What is 2+2?' --temp 0 -n 16 -t 2");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  auto text = [](const std::string& s) { return s.substr(0, s.find("\n[")); };
  EXPECT_EQ(text(a.output), text(b.output));
  EXPECT_NE(text(a.output).find("4"), std::string::npos) << a.output;
  EXPECT_NE(a.output.find("tok/s"), std::string::npos) << a.output;
}

TEST(Cli, SeededSamplingRepeats) {
  if (!have_default_model()) GTEST_SKIP() << "skipped: default model missing (run scripts/setup.sh)";
  Outcome a = run_brioche("run -p 'Tell me a story.' --temp 1 --seed 7 -n 12 -t 2");
  Outcome b = run_brioche("run -p 'Tell me a story.' --temp 1 --seed 7 -n 12 -t 2");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  auto text = [](const std::string& s) { return s.substr(0, s.find("\n[")); };
  EXPECT_EQ(text(a.output), text(b.output));
}

TEST(Cli, BenchPrintsATable) {
  if (!have_default_model()) GTEST_SKIP() << "skipped: default model missing (run scripts/setup.sh)";
  Outcome o = run_brioche("bench -p 16 -n 4 -r 1 -t 2");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("| pp 16"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("| tg 4"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("peak RSS"), std::string::npos) << o.output;
}

TEST(Cli, BenchEngineRowsGoThroughTheSampler) {
  if (!have_default_model()) GTEST_SKIP() << "skipped: default model missing (run scripts/setup.sh)";
  Outcome o = run_brioche("bench -p 16 -n 4 -b 1 -b 2 -r 1 -t 2 --engine --temperature 0.7 --top-k 20 --top-p 0.9");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("engine: T 0.70, top-k 20, top-p 0.90, sampled on the host"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("| engine tg 4 "), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("| engine tg 4 x2"), std::string::npos) << o.output;
}

TEST(Cli, BenchSpeculativeComparesWithAndWithoutInOneRun) {
  if (!have_default_model()) GTEST_SKIP() << "skipped: default model missing (run scripts/setup.sh)";
  Outcome o = run_brioche("bench -n 24 -r 1 -t 2 --speculative prompt-lookup --temperature 0");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("speculative: prompt-lookup, up to 4 drafts (adaptive), T 0.00"), std::string::npos)
      << o.output;
  EXPECT_NE(o.output.find("| speed-up | accepted | per step | same output |"), std::string::npos) << o.output;
  // The built-in editing prompt: greedy output identical with and without.
  const size_t row = o.output.find("| edit ");
  ASSERT_NE(row, std::string::npos) << o.output;
  EXPECT_NE(o.output.substr(row, o.output.find('\n', row) - row).find("| yes"), std::string::npos) << o.output;
}

TEST(Cli, TrainTomlConfigErrorsNameFileLineAndKey) {
  auto dir = std::filesystem::temp_directory_path() / "brioche_cli_test_toml";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "train.toml").string();
  std::ofstream(path) << "method = \"orpo\"\nrank = \"sixteen\"\n";
  Outcome o = run_brioche("train --config " + path + " -d " + dir.string());
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_EQ(count_lines(o.output), 1) << o.output;
  EXPECT_NE(o.output.find(path + ":2:1: option \"rank\": wrong type"), std::string::npos) << o.output;
  std::ofstream(path) << "method = \"orpo\"\nrank = [\n";
  o = run_brioche("train --config " + path + " -d " + dir.string());
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find(path + ":2:10: invalid TOML"), std::string::npos) << o.output;
  std::filesystem::remove_all(dir);
}

// The reference trainer's switches: mapped (tested in tests/train) or refused with a reason; --device.
TEST(Cli, TrainRefusesUnsupportedSwitchesAndDevices) {
  auto dir = std::filesystem::temp_directory_path() / "brioche_cli_test_switches";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "train.jsonl") << R"({"prompt": "a", "chosen": "b", "rejected": "c"})"
                                     << "\n";
  std::ofstream(dir / "mlp.json") << R"({"mlp_split": true})";
  struct Refusal {
    std::string args, says;
  };
  std::vector<Refusal> refusals = {
      {"--method orpo --grad-checkpoint --segment-size 4", "exclusive"},
      {"--config " + (dir / "mlp.json").string(), "mlp_split is not supported"},
      {"--device tpu", "expected cpu, cuda or auto, got 'tpu'"},
      {"--method orpo --grad-checkpoint --offload-attention", "offload_attention needs offload_boundaries"},
      {"--method orpo --grad-checkpoint --device-boundaries 2", "device_boundaries needs offload_boundaries"},
      {"--method orpo --grad-checkpoint --boundary-dtype f16", "boundary_dtype: expected f32 or bf16, got 'f16'"},
  };
  if (!ops::cuda_available())
    refusals.push_back({"--device cuda --grad-accum 2 --resume " + (dir / "none").string(),
                        "--device cuda: no CUDA device is visible"});
  for (const Refusal& r : refusals) {
    const Outcome o = run_brioche("train " + r.args + " -d " + dir.string());
    EXPECT_EQ(o.exit_code, 2) << r.args << ": " << o.output;
    EXPECT_NE(o.output.find(r.says), std::string::npos) << r.args << ": " << o.output;
  }
  std::filesystem::remove_all(dir);
}

TEST(Cli, TrainedAdapterLoadsIntoRun) {
  if (!have_default_model()) GTEST_SKIP() << "skipped: default model missing (run scripts/setup.sh)";
  auto dir = std::filesystem::temp_directory_path() / "brioche_cli_test_adapter";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "data");
  {
    FILE* f = std::fopen((dir / "data" / "train.jsonl").c_str(), "w");
    for (int i = 0; i < 4; ++i) {
      std::fputs(
          R"({"messages":[{"role":"user","content":"Repeat: blue boats"},{"role":"assistant","content":"BLUE BOATS"}]})"
          "\n",
          f);
    }
    std::fclose(f);
  }
  // Options from a TOML file, the command line overriding one of them (rank).
  std::ofstream(dir / "train.toml") << "iters = 2\nnum_layers = 1\nrank = 8\nthreads = 2\n";
  Outcome train =
      run_brioche("train --config " + (dir / "train.toml").string() + " -d " + (dir / "data").string() + " -o " +
                  (dir / "adapter").string() + " --rank 4 --grad-checkpoint --boundary-dtype bf16 -q");
  ASSERT_EQ(train.exit_code, 0) << train.output;
  EXPECT_TRUE(std::filesystem::exists(dir / "adapter" / "adapter_config.json"));
  EXPECT_TRUE(std::filesystem::exists(dir / "adapter" / "adapter_model.safetensors"));
  {
    std::ifstream in(dir / "adapter" / "metrics.json");
    const std::string metrics((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(metrics.find("\"rank\": 4"), std::string::npos) << metrics;
    EXPECT_NE(metrics.find("\"iters\": 2"), std::string::npos) << metrics;
    EXPECT_NE(metrics.find("\"num_layers\": 1"), std::string::npos) << metrics;
    EXPECT_NE(metrics.find("\"boundary_dtype\": \"bf16\""), std::string::npos) << metrics;
  }
  Outcome adapted =
      run_brioche("run -p 'Repeat: blue boats' --temp 0 -n 4 -t 2 --adapter " + (dir / "adapter").string());
  EXPECT_EQ(adapted.exit_code, 0) << adapted.output;
  Outcome missing = run_brioche("run -p hi --adapter " + (dir / "nope").string());
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_EQ(count_lines(missing.output), 1) << missing.output;
  EXPECT_NE(missing.output.find("adapter_config.json"), std::string::npos) << missing.output;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace brioche::cli
