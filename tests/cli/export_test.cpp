// `brioche export`: the merged GGUF runs as the base with --adapter does
// (f32 merged tensors: the same arithmetic), keeps every other tensor and
// key of the base, and refuses to overwrite.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "formats/gguf.h"
#include "model/weights.h"
#include "train/adapter_io.h"
#include "train/lora.h"
#include "train/lora_tensors.h"

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

// A Hugging Face folder (-o DIR): every tensor brioche reads back from it
// is, bit for bit, the GGUF base's with the adapter merged, de-quantized to
// f32, with the Q/K rows in Hugging Face's order; `brioche run -m DIR` runs
// (its tokenizer.json rebuilt from the GGUF). Its answers are not compared
// with the GGUF's: the Q4_1 base computes with 8-bit activations (0.5% of
// a token's log-prob on this model), the folder in f32. transformers and
// peft read the folder: tests/cli/export_hf_e2e_test.py.
TEST(CliExport, HuggingFaceFolderHoldsTheMergedWeights) {
  if (!fs::exists(default_model_path())) GTEST_SKIP() << "skipped: default model not installed";
  const fs::path root = fs::temp_directory_path() / "brioche_cli_export_hf";
  fs::remove_all(root);
  fs::create_directories(root);
  model::Checkpoint ck = model::load_gguf_checkpoint(default_model_path());
  train::LoraAdapter adapter(ck.config, {.rank = 8, .alpha = 32, .num_layers = 8}, 7);
  std::mt19937 rng{11};
  std::normal_distribution<float> normal(0.0f, 0.1f);
  for (auto& e : adapter.entries())
    for (int64_t i = 0; i < e.factors->b.numel(); ++i) e.factors->b.data_as<float>()[i] = normal(rng);
  train::save_adapter((root / "adapter").string(), adapter, ck);

  const std::string folder = (root / "merged").string();
  auto [code, said] = brioche("export --adapter " + (root / "adapter").string() + " -o " + folder + " --type f32");
  ASSERT_EQ(code, 0) << said;
  EXPECT_NE(said.find("merged 56 projections"), std::string::npos) << said;
  for (const char* name : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"})
    EXPECT_TRUE(fs::is_regular_file(fs::path(folder) / name)) << name;

  train::merge_adapter(ck, *train::load_adapter((root / "adapter").string(), ck));
  model::Checkpoint hf = model::load_safetensors_checkpoint(folder);
  EXPECT_EQ(hf.config.n_layers, ck.config.n_layers);
  EXPECT_EQ(hf.config.rope.theta, ck.config.rope.theta);
  EXPECT_EQ(hf.config.tied_embeddings, ck.config.tied_embeddings);
  int compared = 0, differing = 0;
  auto same = [&](const Tensor& gguf_tensor, const Tensor& folder_tensor, bool qk) {
    Tensor want = train::copy_f32(gguf_tensor.rank() == 1 ? gguf_tensor.reshape({1, gguf_tensor.dim(0)}) : gguf_tensor);
    if (qk) want = train::reorder_rows(want, ck.config.head_dim, /*to_hf=*/true);
    Tensor got =
        train::copy_f32(folder_tensor.rank() == 1 ? folder_tensor.reshape({1, folder_tensor.dim(0)}) : folder_tensor);
    ++compared;
    differing += want.nbytes() != got.nbytes() || std::memcmp(want.data(), got.data(), want.nbytes()) != 0;
  };
  same(ck.weights.token_embd, hf.weights.token_embd, false);
  same(ck.weights.output_norm, hf.weights.output_norm, false);
  for (size_t l = 0; l < ck.weights.layers.size(); ++l) {
    const model::LayerWeights &a = ck.weights.layers[l], &b = hf.weights.layers[l];
    same(a.attn_norm, b.attn_norm, false), same(a.ffn_norm, b.ffn_norm, false);
    same(a.wq, b.wq, true), same(a.wk, b.wk, true), same(a.wv, b.wv, false), same(a.wo, b.wo, false);
    same(a.w_gate, b.w_gate, false), same(a.w_up, b.w_up, false), same(a.w_down, b.w_down, false);
  }
  EXPECT_EQ(differing, 0) << "of " << compared << " tensors";
  EXPECT_EQ(compared, 2 + 9 * ck.config.n_layers);
  const auto from_folder = brioche("run -m " + folder + " -p 'Write a haiku about bread.' --temp 0 -n 8 -t 2");
  EXPECT_EQ(from_folder.first, 0);
  EXPECT_FALSE(from_folder.second.empty());

  // --unmerged: the base alone, the adapter beside it naming the folder.
  const std::string unmerged = (root / "unmerged").string();
  ASSERT_EQ(
      brioche("export --adapter " + (root / "adapter").string() + " -o " + unmerged + " --unmerged --type bf16").first,
      0);
  EXPECT_EQ(brioche("run -m " + unmerged + " --adapter " + unmerged + "/adapter -p hi -n 4 -t 2").first, 0);
  const auto config = nlohmann::json::parse(std::ifstream(unmerged + "/adapter/adapter_config.json"));
  EXPECT_EQ(config["base_model_name_or_path"], fs::absolute(unmerged).lexically_normal().string());

  EXPECT_EQ(brioche("export --adapter " + (root / "adapter").string() + " -o " + folder).first, 2);  // exists
  EXPECT_EQ(brioche("export -o " + (root / "q").string() + " --type q4_k").first, 2);  // not a folder's type
  fs::remove_all(root);
}

}  // namespace
}  // namespace brioche::cli
