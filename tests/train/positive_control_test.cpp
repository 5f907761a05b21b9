// Positive controls on the default model (SmolLM2-135M-Instruct Q4_1, CPU):
//  - ORPO on a generated "prefer the answer in upper case" preference set
//    reaches >= 90% validation preference accuracy, and greedy generations of
//    the adapted model (adapter merged into the base) turn upper case;
//  - SFT on the same answers lowers validation loss.
// Kept CI-cheap: LoRA rank 8 on the last 4 of 30 layers (the frozen layers'
// output is cached per example), prefix-shared forward, response-scope NLL,
// about 40 optimizer steps of 2 pairs (ORPO, lr 1e-3, lambda 0.5) and 20 of
// 2 conversations (SFT, lr 1e-3, dropout 0.05).
#include <gtest/gtest.h>

#include <cctype>
#include <chrono>
#include <filesystem>
#include <cmath>
#include <fstream>
#include <random>

#include "model/weights.h"
#include "ops/matmul.h"
#include "tokenizer/tokenizer.h"
#include "train/adapter_io.h"
#include "train/trainer.h"

namespace brioche::train {
namespace {

std::string default_model() {
  if (const char* env = std::getenv("BRIOCHE_DEFAULT_MODEL")) return env;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.cache/brioche/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

const std::vector<std::string> kPhrases = {
    "good morning", "the red house", "open the door", "blue sky today", "a quiet river", "fresh bread",
    "the old bridge", "green apples", "a cold winter", "happy birthday", "slow and steady", "the last train",
    "bright stars", "warm coffee", "a small garden", "the tall tree", "summer rain", "an empty street",
    "the big city", "soft music", "a long road", "sweet dreams", "the dark forest", "white clouds",
    "fast cars", "a new book", "the first snow", "golden light", "a lucky day", "the silver moon",
    "wild horses", "a paper boat", "the open sea", "quiet nights", "a busy market", "the orange cat",
    "strong wind", "a secret door", "the morning sun", "little birds", "a deep lake", "the yellow bus",
    "kind words", "a heavy box", "the sleepy dog", "cool water", "a funny story", "the broken clock",
    "bright colors", "a tiny mouse", "the snowy hill", "gentle waves", "a warm blanket", "the empty room",
    "red roses", "a quick fox", "the rainy season", "a wooden chair", "the stone wall", "the pink flower"};

std::string upper(std::string s) {
  for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

void write_jsonl(const std::string& path, size_t begin, size_t end, bool preference) {
  std::ofstream out(path);
  for (size_t i = begin; i < end; ++i) {
    const std::string& p = kPhrases[i];
    nlohmann::json j;
    if (preference) j = {{"prompt", "Repeat: " + p}, {"chosen", upper(p)}, {"rejected", p}};
    else j = {{"messages", {{{"role", "user"}, {"content", "Repeat: " + p}}, {{"role", "assistant"}, {"content", upper(p)}}}}};
    out << j.dump() << "\n";
  }
}

struct SmolFixture {
  model::Checkpoint ck;
  std::unique_ptr<tokenizer::Tokenizer> tok;
  ChatRenderer render;
  std::string dir;
  explicit SmolFixture(const std::string& name) {
    ck = model::load_gguf_checkpoint(default_model());
    tok = tokenizer::Tokenizer::from_gguf(*ck.gguf);
    render = make_chat_renderer(ck.chat_template, *tok);
    dir = std::string(BRIOCHE_BINARY_DIR) + "/" + name;
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  TrainData data(bool preference) {
    write_jsonl(dir + "/train.jsonl", 0, 40, preference);
    write_jsonl(dir + "/valid.jsonl", 40, kPhrases.size(), preference);
    DatasetOptions o{.preference = preference, .max_seq_length = 128, .tokenizer = tok.get(), .render = render};
    return {load_dataset(dir + "/train.jsonl", o), load_dataset(dir + "/valid.jsonl", o)};
  }
};

// Greedy continuation with the full dense forward (no KV cache; a few tokens).
std::string greedy(const model::Checkpoint& ck, const tokenizer::Tokenizer& tok, const ChatRenderer& render,
                   const std::string& user, int max_tokens) {
  nlohmann::ordered_json msgs = nlohmann::ordered_json::array({{{"role", "user"}, {"content", user}}});
  std::vector<int32_t> ids = tok.encode(render(msgs, true), {.parse_special = true});
  const size_t prompt_len = ids.size();
  TrainModel model(ck, nullptr);
  const auto eos = tok.eos_ids();
  for (int t = 0; t < max_tokens; ++t) {
    TokenBatch b;
    b.tokens = ids;
    for (int32_t i = 0; i < int32_t(ids.size()); ++i) b.positions.push_back(i);
    b.spans.push_back({0, int32_t(ids.size())});
    Tensor h = model.forward(b, {.for_backward = false});
    Tensor last = h.slice(0, h.dim(0) - 1, h.dim(0));
    Tensor logits = Tensor::zeros(DType::F32, {1, ck.config.vocab_size});
    ops::matmul(last, ck.weights.output, logits);
    const float* z = logits.data_as<float>();
    const int32_t next = int32_t(std::max_element(z, z + ck.config.vocab_size) - z);
    if (std::find(eos.begin(), eos.end(), next) != eos.end()) break;
    ids.push_back(next);
  }
  return tok.decode(std::span<const int32_t>(ids).subspan(prompt_len));
}

double upper_share(const std::string& s) {
  int up = 0, letters = 0;
  for (unsigned char c : s) {
    if (std::isalpha(c)) ++letters, up += std::isupper(c) ? 1 : 0;
  }
  return letters ? double(up) / letters : 0.0;
}

TEST(PositiveControl, OrpoPrefersUpperCase) {
  if (!std::filesystem::exists(default_model())) GTEST_SKIP() << "skipped: default model missing at " << default_model();
  SmolFixture f("train_control_orpo");
  TrainConfig c;
  c.model = default_model();
  c.data = f.dir;
  c.output = f.dir + "/adapter";
  c.method = Method::ORPO;
  c.sft_scope = SftScope::Response;
  c.orpo_lambda = 0.5f;
  c.learning_rate = 1e-3f;
  c.iters = 40;
  c.batch_size = 1;
  c.grad_accumulation_steps = 2;
  c.rank = 8;
  c.scale = 2.0f;
  c.num_layers = 4;
  c.prefix_shared = true;
  c.steps_per_eval = 20;
  c.steps_per_report = 10;
  c.seed = 7;
  const auto t0 = std::chrono::steady_clock::now();
  Trainer trainer(c, f.ck, f.data(true));
  TrainResult r = trainer.run();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(r.first_eval && r.last_eval);
  std::printf("[ orpo control ] %.1f s; val accuracy %.3f -> %.3f, margin %.3f -> %.3f\n", secs,
              r.first_eval->accuracy, r.last_eval->accuracy, r.first_eval->margin, r.last_eval->margin);
  EXPECT_GE(r.last_eval->accuracy, 0.9);
  EXPECT_GT(r.last_eval->margin, r.first_eval->margin);
  EXPECT_TRUE(std::filesystem::exists(c.output + "/adapter_model.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(c.output + "/metrics.json"));

  // Generations: base vs base + merged adapter (read back from disk).
  model::Checkpoint adapted = model::load_gguf_checkpoint(default_model());
  EXPECT_EQ(merge_adapter(adapted, *load_adapter(c.output, adapted)), 4 * 7);
  for (const char* prompt : {"Repeat: the quiet library", "Repeat: seven blue boats"}) {
    const std::string before = greedy(f.ck, *f.tok, f.render, prompt, 6);
    const std::string after = greedy(adapted, *f.tok, f.render, prompt, 6);
    std::printf("[ orpo control ] %-28s base: %-28s adapted: %s\n", prompt, before.c_str(), after.c_str());
    EXPECT_GT(upper_share(after), 0.8) << after;
    EXPECT_GT(upper_share(after), upper_share(before));
  }
}

// An adapter on a GGUF llama (Q/K rows permuted for interleaved RoPE) written
// in PEFT order, read back and merged into the quantized base, gives the same
// hidden states as the unmerged adapter in the training stack.
TEST(PositiveControl, GgufAdapterRoundTripAndMerge) {
  if (!std::filesystem::exists(default_model())) GTEST_SKIP() << "skipped: default model missing at " << default_model();
  SmolFixture f("train_gguf_roundtrip");
  LoraAdapter adapter(f.ck.config, {.rank = 4, .alpha = 8.0f, .num_layers = 2}, 11);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  for (auto& e : adapter.entries())
    for (int64_t i = 0; i < e.factors->b.numel(); ++i) e.factors->b.data_as<float>()[i] = normal(rng);
  save_adapter(f.dir, adapter, f.ck);
  auto loaded = load_adapter(f.dir, f.ck);
  auto a = adapter.entries(), b = loaded->entries();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(0, std::memcmp(a[i].factors->a.data(), b[i].factors->a.data(), a[i].factors->a.nbytes()));
    ASSERT_EQ(0, std::memcmp(a[i].factors->b.data(), b[i].factors->b.data(), a[i].factors->b.nbytes()));
  }
  auto cfg = nlohmann::json::parse(std::ifstream(f.dir + "/adapter_config.json"));
  EXPECT_EQ(cfg["layers_to_transform"], nlohmann::json({28, 29}));

  TokenBatch batch;
  batch.tokens = f.tok->encode("The quick brown fox jumps over the lazy dog");
  for (int32_t i = 0; i < int32_t(batch.tokens.size()); ++i) batch.positions.push_back(i);
  batch.spans.push_back({0, int32_t(batch.tokens.size())});
  TrainModel unmerged(f.ck, loaded.get());
  Tensor h1 = unmerged.forward(batch, {.for_backward = false});
  Tensor h_base = unmerged.forward(batch, {.adapter_enabled = false, .for_backward = false});
  // Merged weights are f32, which skips the 8-bit activation rounding of the
  // Q4_1 matmul; so the unmerged reference runs on the same layers dequantized
  // to f32 (a merge with B = 0) for a like-for-like comparison.
  auto merged_checkpoint = [&](bool zero_b) {
    model::Checkpoint merged = model::load_gguf_checkpoint(default_model());
    auto copy = load_adapter(f.dir, merged);
    if (zero_b)
      for (auto& e : copy->entries()) std::fill_n(e.factors->b.data_as<float>(), e.factors->b.numel(), 0.0f);
    EXPECT_EQ(merge_adapter(merged, *copy), 2 * 7);
    return merged;
  };
  model::Checkpoint merged = merged_checkpoint(false), dequantized = merged_checkpoint(true);
  Tensor h2 = TrainModel(merged, nullptr).forward(batch, {.for_backward = false});
  TrainModel reference(dequantized, loaded.get());
  Tensor h3 = reference.forward(batch, {.for_backward = false});
  Tensor h3_base = reference.forward(batch, {.adapter_enabled = false, .for_backward = false});
  double diff = 0, effect = 0;
  for (int64_t i = 0; i < h2.numel(); ++i) {
    diff = std::max(diff, double(std::abs(h2.data_as<float>()[i] - h3.data_as<float>()[i])));
    effect = std::max(effect, double(std::abs(h3.data_as<float>()[i] - h3_base.data_as<float>()[i])));
  }
  std::printf("[ gguf merge ] max |merged - unmerged| %.3g, adapter effect %.3g\n", diff, effect);
  EXPECT_LT(diff, 1e-3 * effect);
  EXPECT_GT(effect, 0.05);
}

TEST(PositiveControl, SftLowersValidationLoss) {
  if (!std::filesystem::exists(default_model())) GTEST_SKIP() << "skipped: default model missing at " << default_model();
  SmolFixture f("train_control_sft");
  TrainConfig c;
  c.model = default_model();
  c.data = f.dir;
  c.output = f.dir + "/adapter";
  c.method = Method::SFT;
  c.sft_scope = SftScope::Response;
  c.learning_rate = 1e-3f;
  c.iters = 20;
  c.batch_size = 2;
  c.rank = 8;
  c.scale = 2.0f;
  c.num_layers = 4;
  c.seed = 3;
  c.lora_dropout = 0.05f;
  Trainer trainer(c, f.ck, f.data(false));
  TrainResult r = trainer.run();
  ASSERT_TRUE(r.first_eval && r.last_eval);
  std::printf("[ sft control ] val loss %.4f -> %.4f in %.1f s\n", r.first_eval->loss, r.last_eval->loss, r.seconds);
  EXPECT_LT(r.last_eval->loss, 0.85 * r.first_eval->loss);
}

}  // namespace
}  // namespace brioche::train
