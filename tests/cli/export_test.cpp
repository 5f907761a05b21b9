// `brioche export`: the merged GGUF runs as the base with --adapter does
// (f32 merged tensors: the same arithmetic), keeps every other tensor and
// key of the base, and refuses to overwrite.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>

#include "cli/common.h"
#include "formats/gguf.h"
#include "model/weights.h"
#include "train/adapter_io.h"
#include "train/lora.h"

namespace brioche::cli {
namespace {

namespace fs = std::filesystem;

std::pair<int, std::string> brioche(const std::string& args) {
  const std::string command = std::string(BRIOCHE_BINARY_DIR) + "/brioche " + args + " 2>/dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  std::string out;
  std::array<char, 4096> buffer;
  for (size_t n; (n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0;) out.append(buffer.data(), n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

TEST(CliExport, MergedModelRunsAsTheAdapterDoes) {
  if (!fs::exists(default_model_path())) GTEST_SKIP() << "skipped: default model not installed";
  const fs::path root = fs::temp_directory_path() / "brioche_cli_export";
  fs::remove_all(root);
  fs::create_directories(root);
  model::Checkpoint ck = model::load_gguf_checkpoint(default_model_path());
  // A random adapter on the last 8 layers, strong enough to change the answer.
  train::LoraAdapter adapter(ck.config, {.rank = 8, .alpha = 32, .num_layers = 8}, 7);
  std::mt19937 rng{7};
  std::normal_distribution<float> normal(0.0f, 0.1f);
  for (auto& e : adapter.entries())
    for (int64_t i = 0; i < e.factors->b.numel(); ++i) e.factors->b.data_as<float>()[i] = normal(rng);
  train::save_adapter((root / "adapter").string(), adapter, ck);

  const std::string merged = (root / "merged.gguf").string();
  auto [code, said] = brioche("export --adapter " + (root / "adapter").string() + " -o " + merged + " --type f32");
  ASSERT_EQ(code, 0) << said;
  EXPECT_NE(said.find("merged 56 projections"), std::string::npos) << said;

  const std::string prompt = " -p 'Write a haiku about bread.' --temp 0 -n 32 -t 2";
  const auto with_adapter = brioche("run --adapter " + (root / "adapter").string() + prompt);
  const auto from_file = brioche("run -m " + merged + prompt);
  const auto base = brioche("run" + prompt);
  ASSERT_EQ(with_adapter.first, 0);
  EXPECT_EQ(from_file.second, with_adapter.second);
  EXPECT_NE(base.second, with_adapter.second);  // the adapter matters, so the equality above does

  // Every key and tensor of the base; only the 56 merged tensors change type (to f32).
  auto a = formats::GgufFile::open(default_model_path()), b = formats::GgufFile::open(merged);
  EXPECT_EQ(a->metadata().size(), b->metadata().size());
  ASSERT_EQ(a->tensors().size(), b->tensors().size());
  int changed = 0;
  for (size_t i = 0; i < a->tensors().size(); ++i) {
    EXPECT_EQ(a->tensors()[i].name, b->tensors()[i].name);
    changed += a->tensors()[i].dtype != b->tensors()[i].dtype;
  }
  EXPECT_EQ(changed, 56);

  EXPECT_EQ(brioche("export --adapter " + (root / "adapter").string() + " -o " + merged).first, 2);  // exists
  EXPECT_NE(brioche("export --adapter " + (root / "nope").string() + " -o " + (root / "x.gguf").string()).first, 0);
}

}  // namespace
}  // namespace brioche::cli
