// Datasets (formats, template split, truncation, errors with file:line),
// config parsing and defaults, schedules, AdamW and clipping.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"
#include "train/dataset.h"
#include "train/optimizer.h"
#include "train/train_config.h"

namespace brioche::train {
namespace {

using ::testing::HasSubstr;

std::string default_model() {
  if (const char* env = std::getenv("BRIOCHE_DEFAULT_MODEL")) return env;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.cache/brioche/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

class DatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(default_model())) GTEST_SKIP() << "skipped: default model missing";
    ck_ = std::make_unique<model::Checkpoint>(model::load_gguf_checkpoint(default_model()));
    tok_ = tokenizer::Tokenizer::from_gguf(*ck_->gguf);
    dir_ = std::string(BRIOCHE_BINARY_DIR) + "/train_dataset_test";
    std::filesystem::create_directories(dir_);
  }
  std::string write(const std::string& name, const std::vector<std::string>& lines) {
    std::ofstream out(dir_ + "/" + name);
    for (const auto& l : lines) out << l << "\n";
    return dir_ + "/" + name;
  }
  DatasetOptions options(bool preference, int max_len = 256) {
    return {.preference = preference,
            .max_seq_length = max_len,
            .tokenizer = tok_.get(),
            .render = make_chat_renderer(ck_->chat_template, *tok_),
            .quiet = true};
  }
  std::string error_of(const std::string& path, const DatasetOptions& o) {
    try {
      load_dataset(path, o);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  std::unique_ptr<model::Checkpoint> ck_;
  std::unique_ptr<tokenizer::Tokenizer> tok_;
  std::string dir_;
};

TEST_F(DatasetTest, ChatCompletionAndTextFormats) {
  auto path =
      write("sft.jsonl",
            {R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there"}]})",
             R"({"prompt": "Hi", "completion": "Hello there"})", "", R"({"text": "Plain text to model."})"});
  Dataset ds = load_dataset(path, options(false));
  ASSERT_EQ(ds.examples.size(), 3u);
  EXPECT_EQ(ds.examples[0].prompt, ds.examples[1].prompt);
  EXPECT_EQ(ds.examples[0].response, ds.examples[1].response);
  EXPECT_EQ(tok_->decode(ds.examples[0].response), "Hello there<|im_end|>\n");
  EXPECT_THAT(tok_->decode(ds.examples[0].prompt), ::testing::EndsWith("<|im_start|>assistant\n"));
  EXPECT_TRUE(ds.examples[2].prompt.empty());
  EXPECT_EQ(tok_->decode(ds.examples[2].response), "Plain text to model.");
}

TEST_F(DatasetTest, PreferenceAndDpoAlias) {
  auto path = write("pref.jsonl", {R"({"prompt": "Say hi", "chosen": "HI", "rejected": "hi"})",
                                   R"({"dpo": {"prompt": "Say hi", "chosen": "HI", "rejected": "hi"}})"});
  Dataset ds = load_dataset(path, options(true));
  ASSERT_EQ(ds.pairs.size(), 2u);
  EXPECT_EQ(ds.pairs[0].prompt, ds.pairs[1].prompt);
  EXPECT_EQ(tok_->decode(ds.pairs[0].chosen), "HI<|im_end|>\n");
  EXPECT_EQ(tok_->decode(ds.pairs[0].rejected), "hi<|im_end|>\n");
}

TEST_F(DatasetTest, LeftTruncationKeepsTheBoundary) {
  auto path =
      write("long.jsonl", {R"({"prompt": "one two three four five six seven eight nine ten", "completion": "done"})",
                           R"({"prompt": "x", "completion": "a b c d e f g h i j k l m n o p q r s t u v w x y z"})"});
  Dataset full = load_dataset(path, options(false, 1000));
  Dataset ds = load_dataset(path, options(false, 20));
  EXPECT_EQ(ds.truncated, 2);
  EXPECT_EQ(ds.response_overflow, 1);
  // First: the response is intact, the prompt lost tokens on the left.
  EXPECT_EQ(ds.examples[0].response, full.examples[0].response);
  EXPECT_EQ(ds.examples[0].prompt.size() + ds.examples[0].response.size(), 20u);
  EXPECT_TRUE(
      std::equal(ds.examples[0].prompt.rbegin(), ds.examples[0].prompt.rend(), full.examples[0].prompt.rbegin()));
  // Second: the response alone is too long: one prompt token kept, response cut on the right.
  EXPECT_EQ(ds.examples[1].prompt.size(), 1u);
  EXPECT_EQ(ds.examples[1].prompt.back(), full.examples[1].prompt.back());
  EXPECT_EQ(ds.examples[1].response.size(), 19u);
  // Not quiet: both are reported on stderr, the overflowing line by number.
  DatasetOptions loud = options(false, 20);
  loud.quiet = false;
  ::testing::internal::CaptureStderr();
  load_dataset(path, loud);
  const std::string warnings = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(warnings, HasSubstr("long.jsonl:2: the response alone exceeds max_seq_length 20"));
  EXPECT_THAT(warnings, HasSubstr("2 examples longer than max_seq_length 20 were left-truncated"));
}

TEST_F(DatasetTest, PreferenceTruncationKeepsBothResponses) {
  auto path =
      write("long_pairs.jsonl", {R"({"prompt": "one two three four five six seven eight nine ten eleven twelve", )"
                                 R"("chosen": "A B C D", "rejected": "a"})"});
  Dataset full = load_dataset(path, options(true, 1000));
  Dataset ds = load_dataset(path, options(true, 24));
  ASSERT_EQ(ds.pairs.size(), 1u);
  EXPECT_EQ(ds.truncated, 1);
  EXPECT_EQ(ds.response_overflow, 0);
  // The longer response fits with the prompt; both responses are intact and
  // the prompt keeps its end (the boundary).
  EXPECT_EQ(ds.pairs[0].chosen, full.pairs[0].chosen);
  EXPECT_EQ(ds.pairs[0].rejected, full.pairs[0].rejected);
  EXPECT_EQ(ds.pairs[0].prompt.size() + ds.pairs[0].chosen.size(), 24u);
  EXPECT_TRUE(std::equal(ds.pairs[0].prompt.rbegin(), ds.pairs[0].prompt.rend(), full.pairs[0].prompt.rbegin()));
}

TEST_F(DatasetTest, MalformedLinesNameFileAndLine) {
  auto bad_json = write("bad.jsonl", {R"({"text": "ok"})", R"({"text": "ok"})", R"({"text": )"});
  EXPECT_THAT(error_of(bad_json, options(false)), HasSubstr("bad.jsonl:3: invalid JSON"));
  auto missing = write("missing.jsonl", {R"({"prompt": "p", "chosen": "c"})"});
  EXPECT_THAT(error_of(missing, options(true)), HasSubstr("missing.jsonl:1: needs both \"chosen\" and \"rejected\""));
  auto wrong = write("wrong.jsonl", {R"({"text": "fine"})", R"({"prompt": "p", "chosen": "c", "rejected": "r"})"});
  EXPECT_THAT(error_of(wrong, options(false)), HasSubstr("wrong.jsonl:2: preference data needs a preference method"));
  auto last = write("last.jsonl",
                    {R"({"messages": [{"role": "assistant", "content": "a"}, {"role": "user", "content": "u"}]})"});
  EXPECT_THAT(error_of(last, options(false)), HasSubstr("last.jsonl:1: the last message must be the assistant's"));
  auto type = write("type.jsonl", {R"({"text": 5})"});
  EXPECT_THAT(error_of(type, options(false)), HasSubstr("type.jsonl:1: \"text\" must be a string"));
}

TEST(TrainConfig, JsonKeysMethodDefaultsAndErrors) {
  TrainConfig c;
  apply_config_json(c, nlohmann::json::parse(R"({"method": "orpo", "data": "d", "orpo_lambda": 0.2,
      "target_modules": ["q_proj", "v_proj"], "segment_size": 2, "prefix_shared": true, "rs_lora": true})"),
                    "cfg.json");
  c.finalize();
  EXPECT_EQ(c.method, Method::ORPO);
  EXPECT_EQ(*c.rank, 16);
  EXPECT_FLOAT_EQ(*c.scale, 2.0f);
  EXPECT_FLOAT_EQ(*c.learning_rate, 1e-5f);
  LoraConfig lora = c.lora_config();
  EXPECT_FLOAT_EQ(lora.scale(), 2.0f);  // rs_lora: alpha = scale·√r
  EXPECT_EQ(lora.targets, (std::vector<Module>{Module::Q, Module::V}));
  TrainConfig s;
  s.data = "d";
  s.finalize();
  EXPECT_EQ(*s.rank, 8);
  EXPECT_FLOAT_EQ(*s.learning_rate, 2e-4f);
  auto err = [](const char* text) {
    TrainConfig t;
    try {
      apply_config_json(t, nlohmann::json::parse(text), "cfg.json");
      t.data = "d";
      t.finalize();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_THAT(err(R"({"lerning_rate": 1})"), HasSubstr("cfg.json: option \"lerning_rate\": unknown option"));
  EXPECT_THAT(err(R"({"method": "ppo"})"), HasSubstr("expected sft, dpo, orpo, simpo or ipo, got 'ppo'"));
  EXPECT_THAT(err(R"({"rank": "big"})"), HasSubstr("option \"rank\": wrong type"));
  EXPECT_THAT(err(R"({"target_modules": ["qq"]})"), HasSubstr("unknown module 'qq'"));
  EXPECT_THAT(err(R"({"prefix_shared": true})"), HasSubstr("prefix_shared needs a preference method"));
}

TEST(Optimizer, SchedulesWarmupAndDecay) {
  ScheduleConfig c{.learning_rate = 1.0f, .schedule = LrSchedule::Cosine, .warmup = 4, .total_steps = 14};
  EXPECT_FLOAT_EQ(learning_rate_at(c, 0), 0.25f);
  EXPECT_FLOAT_EQ(learning_rate_at(c, 3), 1.0f);
  EXPECT_FLOAT_EQ(learning_rate_at(c, 4), 1.0f);
  EXPECT_NEAR(learning_rate_at(c, 9), 0.5f, 1e-6);
  EXPECT_NEAR(learning_rate_at(c, 14), 0.0f, 1e-6);
  c.schedule = LrSchedule::Linear;
  EXPECT_NEAR(learning_rate_at(c, 9), 0.5f, 1e-6);
  c.schedule = LrSchedule::Constant;
  EXPECT_FLOAT_EQ(learning_rate_at(c, 13), 1.0f);
}

TEST(Optimizer, AdamWStepClipAndLoraPlus) {
  model::ModelConfig mc;
  mc.hidden_size = 4, mc.intermediate_size = 4, mc.n_layers = 1, mc.n_heads = 1, mc.n_kv_heads = 1, mc.head_dim = 4;
  LoraAdapter adapter(mc, {.rank = 1, .alpha = 1, .targets = {Module::Q}}, 1);
  auto* f = adapter.factors(0, Module::Q);
  const float a0 = f->a.data_as<float>()[0];
  std::fill_n(f->grad_a.data_as<float>(), 4, 3.0f);  // |g| = sqrt(4·9 + 4·16) = 10
  std::fill_n(f->grad_b.data_as<float>(), 4, 4.0f);
  EXPECT_NEAR(clip_grad_norm(adapter, 5.0), 10.0, 1e-6);
  EXPECT_NEAR(f->grad_a.data_as<float>()[0], 1.5f, 1e-5);
  AdamW opt(adapter, {.weight_decay = 0.1f, .lora_plus_ratio = 4.0f});
  opt.step(0.01f);
  // First Adam step: m̂/√v̂ = sign(g) → p − lr·wd·p − lr
  EXPECT_NEAR(f->a.data_as<float>()[0], a0 - 0.01f * 0.1f * a0 - 0.01f, 1e-6);
  EXPECT_NEAR(f->b.data_as<float>()[0], -0.04f, 1e-6);  // B starts at 0; LoRA+ ×4
}

}  // namespace
}  // namespace brioche::train
