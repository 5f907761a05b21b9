// Positive controls on the default model (SmolLM2-135M-Instruct Q4_1, CPU):
//  - ORPO on a generated "prefer the answer in upper case" preference set
//    ("Repeat: the quiet river" -> chosen "THE QUIET RIVER", rejected "the
//    quiet river") reaches >= 90% validation preference accuracy, and the
//    adapted model, loaded the way `brioche run --adapter DIR` loads it (PEFT
//    files read back, merged at load, the inference engine generating),
//    answers held-out prompts with the upper-case *words* of the prompt - not
//    just capital letters: garbled spellings ("THE BALLMARLS") fail;
//  - SFT on the same kind of answers lowers validation loss.
// Upper-case words are mostly not single tokens here (" QUIET" is " Q" "UI"
// "ET"), so the adapter has to learn to spell: the phrases recombine a fixed
// vocabulary (held-out phrases are new combinations of seen words) and LoRA
// covers the last 8 of 30 layers; with 4 layers the model learns "capitals"
// but misspells words it has seen (see docs/training.md).
// Kept CI-cheap: rank 8, frozen layers' output cached per example,
// prefix-shared forward, response-scope NLL; ORPO 60 steps of 2 pairs
// (lr 1e-3, lambda 0.5), SFT 20 steps of 2 conversations (lr 1e-3, dropout 0.05).
#include <gtest/gtest.h>

#include <cctype>
#include <chrono>
#include <filesystem>
#include <cmath>
#include <fstream>
#include <random>
#include <set>

#include "engine/engine.h"
#include "model/model.h"
#include "model/weights.h"
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

// "<determiner> <adjective> <noun>" phrases; example k is combination
// (k * 2741 + 17) mod 3600, a fixed permutation (2741 is prime to 3600), so
// the split is the same on every platform.
const char* const kDeterminers[] = {"the", "my", "one", "this"};
const char* const kAdjectives[] = {"red",   "blue",   "green", "old",   "new",    "small", "big",  "quiet",
                                   "happy", "dark",   "warm",  "cold",  "bright", "soft",  "fast", "slow",
                                   "tall",  "little", "sweet", "wild",  "empty",  "open",  "busy", "heavy",
                                   "kind",  "funny",  "deep",  "white", "black",  "golden"};
const char* const kNouns[] = {"house", "door",  "river", "bridge", "tree",  "garden", "road",   "book",
                              "city",  "cat",   "dog",   "bird",   "boat",  "train",  "street", "window",
                              "table", "chair", "apple", "flower", "cloud", "star",   "moon",   "lake",
                              "hill",  "room",  "box",   "clock",  "song",  "letter"};
constexpr int kTrainPhrases = 100, kValidPhrases = 20;

std::string phrase(int k) {
  const int combo = int((int64_t(k) * 2741 + 17) % (4 * 30 * 30));
  return std::string(kDeterminers[combo % 4]) + " " + kAdjectives[combo / 4 % 30] + " " + kNouns[combo / 120];
}

std::string upper(std::string s) {
  for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

void write_jsonl(const std::string& path, int begin, int end, bool preference) {
  std::ofstream out(path);
  for (int i = begin; i < end; ++i) {
    const std::string p = phrase(i);
    nlohmann::json j;
    if (preference)
      j = {{"prompt", "Repeat: " + p}, {"chosen", upper(p)}, {"rejected", p}};
    else
      j = {{"messages",
            {{{"role", "user"}, {"content", "Repeat: " + p}}, {{"role", "assistant"}, {"content", upper(p)}}}}};
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
    write_jsonl(dir + "/train.jsonl", 0, kTrainPhrases, preference);
    write_jsonl(dir + "/valid.jsonl", kTrainPhrases, kTrainPhrases + kValidPhrases, preference);
    DatasetOptions o{.preference = preference, .max_seq_length = 128, .tokenizer = tok.get(), .render = render};
    return {load_dataset(dir + "/train.jsonl", o), load_dataset(dir + "/valid.jsonl", o)};
  }
};

// Greedy answers to `prompts` from the inference engine on the default
// model, with `adapter_dir` merged at load as `brioche run --adapter` does.
std::vector<std::string> generate(const std::string& adapter_dir, const tokenizer::Tokenizer& tok,
                                  const ChatRenderer& render, const std::vector<std::string>& prompts, int max_tokens) {
  model::LoadOptions options;
  if (!adapter_dir.empty()) {
    options.adjust_checkpoint = [&](model::Checkpoint& ck) { merge_adapter(ck, *load_adapter(adapter_dir, ck)); };
  }
  auto engine = engine::Engine::from_model(model::Model::load(default_model(), std::move(options)), {});
  std::vector<std::shared_ptr<engine::RequestHandle>> handles;
  for (const auto& p : prompts) {
    nlohmann::ordered_json msgs = nlohmann::ordered_json::array({{{"role", "user"}, {"content", p}}});
    engine::GenerationRequest req{.prompt_tokens = tok.encode(render(msgs, true), {.parse_special = true}),
                                  .max_tokens = max_tokens};
    req.sampling.temperature = 0.0f;
    handles.push_back(engine->submit(std::move(req)));
  }
  std::vector<std::string> out;
  for (auto& h : handles) {
    std::string text;
    while (auto e = h->next()) {
      EXPECT_TRUE(e->error.empty()) << e->error;
      text += e->text;
    }
    out.push_back(text);
  }
  return out;
}

std::vector<std::string> alphabetic_words(const std::string& s) {
  std::vector<std::string> words(1);
  for (unsigned char c : s) {
    if (std::isalpha(c))
      words.back() += char(c);
    else if (!words.back().empty())
      words.emplace_back();
  }
  if (words.back().empty()) words.pop_back();
  return words;
}

TEST(PositiveControl, OrpoPrefersUpperCase) {
  if (!std::filesystem::exists(default_model()))
    GTEST_SKIP() << "skipped: default model missing at " << default_model();
  SmolFixture f("train_control_orpo");
  TrainConfig c;
  c.model = default_model();
  c.data = f.dir;
  c.output = f.dir + "/adapter";
  c.method = Method::ORPO;
  c.sft_scope = SftScope::Response;
  c.orpo_lambda = 0.5f;
  c.learning_rate = 1e-3f;
  c.iters = 60;
  c.batch_size = 1;
  c.grad_accumulation_steps = 2;
  c.rank = 8;
  c.scale = 2.0f;
  c.num_layers = 8;
  c.prefix_shared = true;
  c.steps_per_eval = 0;  // validation before and after training
  c.steps_per_report = 20;
  c.seed = 7;
  const auto t0 = std::chrono::steady_clock::now();
  Trainer trainer(c, f.ck, f.data(true));
  TrainResult r = trainer.run();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(r.first_eval && r.last_eval);
  std::printf("[ orpo control ] %.1f s; val accuracy %.3f -> %.3f, margin %.3f -> %.3f, chosen logp %.3f -> %.3f\n",
              secs, r.first_eval->accuracy, r.last_eval->accuracy, r.first_eval->margin, r.last_eval->margin,
              r.first_eval->chosen_logp, r.last_eval->chosen_logp);
  EXPECT_GE(r.last_eval->accuracy, 0.9);
  EXPECT_GT(r.last_eval->margin, r.first_eval->margin);
  EXPECT_TRUE(std::filesystem::exists(c.output + "/adapter_model.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(c.output + "/metrics.json"));

  // Greedy answers to the held-out prompts, base vs adapted (inference engine).
  std::set<std::string> vocabulary;  // the domain: every word of every phrase, upper case
  for (int k = 0; k < kTrainPhrases + kValidPhrases; ++k)
    for (const auto& w : alphabetic_words(upper(phrase(k)))) vocabulary.insert(w);
  std::vector<std::string> prompts;
  for (int k = kTrainPhrases; k < kTrainPhrases + kValidPhrases; ++k) prompts.push_back("Repeat: " + phrase(k));
  const std::vector<std::string> before = generate("", *f.tok, f.render, prompts, 10);
  const std::vector<std::string> after = generate(c.output, *f.tok, f.render, prompts, 10);
  int words = 0, domain_words = 0, base_words = 0, base_upper = 0, exact = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::printf("[ orpo control ] %-30s base: %-34s adapted: %s\n", prompts[i].c_str(), before[i].c_str(),
                after[i].c_str());
    const auto got = alphabetic_words(after[i]);
    for (const auto& w : got) {
      ++words;
      domain_words += upper(w) == w && vocabulary.count(w) ? 1 : 0;
    }
    exact += got == alphabetic_words(upper(phrase(kTrainPhrases + int(i)))) ? 1 : 0;
    for (const auto& w : alphabetic_words(before[i])) ++base_words, base_upper += upper(w) == w ? 1 : 0;
  }
  const double domain_share = words ? double(domain_words) / words : 0.0;
  std::printf(
      "[ orpo control ] adapted: %d/%d words are upper-case domain words, %d/%zu answers exact; "
      "base: %d/%d words upper case\n",
      domain_words, words, exact, prompts.size(), base_upper, base_words);
  // Upper-case words of the domain, not fragments or other words.
  EXPECT_GE(domain_share, 0.85);
  EXPECT_GE(exact, int(prompts.size()) / 2);
  EXPECT_LT(double(base_upper), 0.2 * base_words);
}

// An adapter on a GGUF llama (Q/K rows permuted for interleaved RoPE) written
// in PEFT order, read back and merged into the quantized base, gives the same
// hidden states as the unmerged adapter in the training stack.
TEST(PositiveControl, GgufAdapterRoundTripAndMerge) {
  if (!std::filesystem::exists(default_model()))
    GTEST_SKIP() << "skipped: default model missing at " << default_model();
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
  if (!std::filesystem::exists(default_model()))
    GTEST_SKIP() << "skipped: default model missing at " << default_model();
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
