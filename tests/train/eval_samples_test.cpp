// Evaluation samples (train/eval_samples.h): every token greedy_completion
// picks is the argmax of the model's next-token distribution with the adapter
// on (scored over the whole vocabulary by the plain head), a stop id ends the
// completion, and the trainer logs one "sample" event per prompt per evaluation.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "train/eval_samples.h"
#include "train/lm_head.h"
#include "train/trainer.h"
#include "train/train_test_data.h"

namespace brioche::train {
namespace {

TEST(EvalSamples, EachTokenIsTheArgmaxWithTheAdapterOn) {
  model::Checkpoint ck = model::load_safetensors_checkpoint(golden("tiny_llama"));
  LoraAdapter adapter(ck.config, {.rank = 4, .alpha = 8}, 5);
  std::mt19937 rng{5};
  std::normal_distribution<float> normal(0.0f, 0.3f);
  for (auto& e : adapter.entries())  // B ≠ 0: the adapter changes the answer
    for (int64_t i = 0; i < e.factors->b.numel(); ++i) e.factors->b.data_as<float>()[i] = normal(rng);
  TrainModel model(ck, &adapter, {});
  const std::vector<int32_t> prompt = {1, 5, 9, 13};
  const std::vector<int32_t> completion = greedy_completion(model, ck.weights.output, prompt, 6, {});
  ASSERT_EQ(completion.size(), 6u);

  PlainLogpHead head(ck.weights.output);
  const int vocab = ck.config.vocab_size;
  std::vector<int32_t> sequence = prompt;
  for (int32_t next : completion) {
    const int32_t n = int32_t(sequence.size());
    TokenBatch b;
    b.tokens = sequence;
    for (int32_t i = 0; i < n; ++i) b.positions.push_back(i);
    b.branch.assign(size_t(n), 0);
    b.spans = {ops::AttentionSpan{.first_row = 0, .n_rows = n}};
    b.n_sequences = 1;
    for (int32_t v = 0; v < vocab; ++v) b.scored.push_back({.row = n - 1, .target = v, .sequence = 0});
    const std::vector<float> logp = head.forward(model.forward(b, {.for_backward = false}), b.scored);
    EXPECT_EQ(int32_t(std::max_element(logp.begin(), logp.end()) - logp.begin()), next);
    sequence.push_back(next);
  }
  // A stop id ends the completion before it.
  const int32_t stop = completion[3];
  const auto first_stop = std::find(completion.begin(), completion.end(), stop) - completion.begin();
  const std::vector<int32_t> stopped =
      greedy_completion(model, ck.weights.output, prompt, 6, std::vector<int32_t>{stop});
  EXPECT_EQ(stopped, std::vector<int32_t>(completion.begin(), completion.begin() + first_stop));
}

TEST(EvalSamples, TheTrainerLogsOneSamplePerPromptPerEvaluation) {
  model::Checkpoint ck = model::load_safetensors_checkpoint(golden("tiny_llama"));
  const std::string out = std::string(BRIOCHE_BINARY_DIR) + "/train_eval_samples_test";
  std::filesystem::remove_all(out);
  TrainConfig c = tiny_orpo_config(out);
  c.iters = 4;
  c.steps_per_eval = 2;
  c.eval_samples = 3;
  c.eval_sample_tokens = 5;
  Trainer trainer(c, ck, {synthetic_pairs(8, 1), synthetic_pairs(4, 2)});
  trainer.set_sample_decoder({.decode =
                                  [](std::span<const int32_t> ids) {
                                    std::string s;
                                    for (int32_t id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
                                    return s;
                                  },
                              .stop_ids = {2}});
  trainer.run();
  std::ifstream log(out + "/log.jsonl");
  int samples = 0;
  for (std::string line; std::getline(log, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j["event"] != "sample") continue;
    ++samples;
    std::printf("[ sample ] step %d #%d: %s\n", j["step"].get<int>(), j["index"].get<int>(),
                j["completion"].get<std::string>().c_str());
    EXPECT_LE(j["completion_tokens"].get<int>(), 5);
    EXPECT_EQ(j["step"].get<int>() % 2, 0);
    EXPECT_EQ((" " + j["completion"].get<std::string>() + " ").find(" 2 "), std::string::npos);  // stopped before EOS
  }
  EXPECT_EQ(samples, 3 * 3);  // evaluations at 0, 2, 4; three prompts each
  std::filesystem::remove_all(out);
}

}  // namespace
}  // namespace brioche::train
