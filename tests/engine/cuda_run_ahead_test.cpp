// Running one step ahead (scheduler.cpp, run_ahead): with device sampling
// the engine queues decode step t + 1, fed by step t's sampled ids on the
// device, before the host has those ids. It must give what waiting for the
// host gives (BRIOCHE_RUN_AHEAD=0), on a small random model on the GPU:
//   * requests decoding side by side (greedy, seeded, penalized with
//     logprobs, forked, a grammar mask, different lengths): the same tokens and logprobs, and steps were run ahead;
//   * requests that end where the engine cannot foresee it (a stop string,
//     EOS, a cancellation), one at a time: the same tokens and finish, the
//     row run ahead for nothing dropped, the engine still serving after;
//   * a grammar whose forced tokens are appended unsampled (jump-forward):
//     the queued row is left unsampled and the text follows the grammar.
// Side by side, no request ends before its max_tokens: a row that ended
// early would leave the queued step one row more than the next plan, and
// a batch of another size may round differently (decode kernels are sized
// per row count), so the two runs could part on a near tie.
// Without a GPU every test reports "skipped: no CUDA device".
#include <gtest/gtest.h>

#if BRIOCHE_CUDA

#include <chrono>
#include <cstdlib>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "engine/cuda_tiny_engine.h"
#include "ops/device.h"
#include "require_cuda.h"

namespace brioche::engine {
namespace {

using namespace cuda_test;

std::shared_ptr<model::Model> tiny_model() {
  static std::shared_ptr<model::Model> model = tiny_cuda_llama(5);
  return model;
}

std::unique_ptr<Engine> make_engine(bool run_ahead, std::vector<int32_t> eos = {}) {
  setenv("BRIOCHE_RUN_AHEAD", run_ahead ? "1" : "0", 1);
  auto engine =
      std::make_unique<Engine>(make_model_runner(tiny_model(), {.block_size = 16, .n_blocks = 256, .max_context = 256}),
                               std::make_unique<SemicolonCodec>(std::move(eos)));
  unsetenv("BRIOCHE_RUN_AHEAD");
  return engine;
}

struct Output {
  std::vector<int32_t> tokens;  // choices concatenated, each after a marker -1 - choice
  std::vector<float> logprobs;
  std::string text;
  FinishReason finish = FinishReason::Error;
};

Output collect(RequestHandle& handle) {
  Output out;
  while (std::optional<GenerationEvent> e = handle.next()) {
    EXPECT_NE(e->finish, FinishReason::Error) << e->error;
    out.tokens.push_back(-1 - e->choice);
    out.tokens.insert(out.tokens.end(), e->tokens.begin(), e->tokens.end());
    for (const TokenLogprob& lp : e->logprobs) out.logprobs.push_back(lp.logprob);
    out.text += e->text;
    if (e->finish) out.finish = *e->finish;
  }
  return out;
}

// The engine publishes its stats after the step that sent a request's last
// event: wait until `finished` requests are counted.
EngineStats stats_after(const Engine& engine, uint64_t finished) {
  for (int spin = 0; spin < 5000 && engine.stats().requests_finished < finished; ++spin)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return engine.stats();
}

std::vector<GenerationRequest> side_by_side_requests() {
  std::vector<GenerationRequest> out;
  out.push_back(request({1, 2, 3, 4, 5}, 40, {.temperature = 0.0f}));
  out.push_back(request({9, 8, 7}, 33, {.temperature = 0.8f, .top_k = 50, .top_p = 0.9f, .seed = 11}));
  GenerationRequest penalized = request({5, 5, 6, 7, 5, 100, 200}, 28,
                                        {.temperature = 1.0f,
                                         .min_p = 0.05f,
                                         .repetition_penalty = 1.2f,
                                         .presence_penalty = 0.3f,
                                         .frequency_penalty = 0.1f,
                                         .logit_bias = {{5, 2.0f}, {42, -3.0f}},
                                         .seed = 12});
  penalized.top_logprobs = 3;
  out.push_back(penalized);
  GenerationRequest forked = request({300, 301, 302, 303}, 24, {.temperature = 1.2f, .seed = 13});
  forked.n = 2;
  out.push_back(forked);
  // Every step of this one's masks (a grammar that never ends: no EOS).
  GenerationRequest masked = request({17, 18}, 36, {.temperature = 0.9f, .seed = 14});
  masked.constraint.compiled = compile(R"(root ::= ("x5;" | "x6;" | "x7;" | "x8" [0-9] ";")+)");
  out.push_back(masked);
  out.push_back(request({40, 41}, 6, {.temperature = 0.0f}));  // ends first
  return out;
}

TEST(CudaEngineRunAhead, SideBySideGivesWhatWaitingForTheHostGives) {
  REQUIRE_CUDA_DEVICE();
  std::vector<Output> outputs[2];
  uint64_t overlapped[2] = {};
  for (int ahead = 0; ahead < 2; ++ahead) {
    std::unique_ptr<Engine> engine = make_engine(ahead == 1);
    std::vector<GenerationRequest> requests = side_by_side_requests();
    const size_t n = requests.size();
    for (const std::shared_ptr<RequestHandle>& h : engine->submit_all(std::move(requests)))
      outputs[ahead].push_back(collect(*h));
    overlapped[ahead] = stats_after(*engine, n).overlapped_steps;
  }
  EXPECT_EQ(overlapped[0], 0u);
  // 40 steps of the longest request: all but the first two (the prompts,
  // then the fork's) and the last of each length run ahead.
  EXPECT_GT(overlapped[1], 25u);
  ASSERT_EQ(outputs[1].size(), outputs[0].size());
  for (size_t i = 0; i < outputs[0].size(); ++i) {
    EXPECT_GT(outputs[0][i].tokens.size(), 6u) << "request " << i;
    EXPECT_EQ(outputs[1][i].tokens, outputs[0][i].tokens) << "request " << i;
    EXPECT_EQ(outputs[1][i].logprobs, outputs[0][i].logprobs) << "request " << i;
    EXPECT_EQ(outputs[1][i].finish, FinishReason::Length) << "request " << i;
  }
  const std::regex masked_text("(x5;|x6;|x7;|x8[0-9];)+");
  EXPECT_TRUE(std::regex_match(outputs[1][4].text, masked_text)) << outputs[1][4].text;
}

TEST(CudaEngineRunAhead, RowsThatEndUnforeseenAreDropped) {
  REQUIRE_CUDA_DEVICE();
  // A tenth of the vocabulary ends generation: random logits reach one soon.
  std::vector<int32_t> eos;
  for (int32_t t = 900; t < 1000; ++t) eos.push_back(t);
  std::vector<GenerationRequest> requests;
  GenerationRequest stop = request({3, 1, 4, 1, 5}, 60, {.temperature = 1.0f, .seed = 21});
  stop.stop = {"7;"};  // ends at the first token whose id ends in 7
  requests.push_back(stop);
  GenerationRequest until_eos = request({2, 7, 1, 8}, 60, {.temperature = 1.0f, .seed = 22});
  until_eos.ignore_eos = false;
  requests.push_back(until_eos);
  requests.push_back(request({6, 6, 6}, 9, {.temperature = 0.0f}));

  std::vector<Output> outputs[2];
  for (int ahead = 0; ahead < 2; ++ahead) {
    std::unique_ptr<Engine> engine = make_engine(ahead == 1, eos);
    for (const GenerationRequest& r : requests) outputs[ahead].push_back(collect(*engine->submit(r)));
    // A request cancelled while its steps run ahead; the engine serves on.
    GenerationRequest endless = request({11, 12}, 200, {.temperature = 0.0f});
    std::shared_ptr<RequestHandle> h = engine->submit(endless);
    int events = 0;
    FinishReason finish = FinishReason::Error;
    while (std::optional<GenerationEvent> e = h->next()) {
      if (++events == 5) engine->cancel(h->id());
      if (e->finish) finish = *e->finish;
    }
    EXPECT_EQ(finish, FinishReason::Cancelled);
    outputs[ahead].push_back(collect(*engine->submit(request({13, 14, 15}, 12, {.temperature = 0.0f}))));
    const EngineStats s = stats_after(*engine, requests.size() + 2);
    if (ahead == 1) {
      EXPECT_GT(s.overlapped_steps, 0u);
    }
  }
  ASSERT_EQ(outputs[1].size(), outputs[0].size());
  for (size_t i = 0; i < outputs[0].size(); ++i) {
    EXPECT_EQ(outputs[1][i].tokens, outputs[0][i].tokens) << "request " << i;
    EXPECT_EQ(outputs[1][i].text, outputs[0][i].text) << "request " << i;
    EXPECT_EQ(outputs[1][i].finish, outputs[0][i].finish) << "request " << i;
  }
  EXPECT_EQ(outputs[0][0].finish, FinishReason::Stop);
  EXPECT_EQ(outputs[0][0].text.find("7;"), std::string::npos) << "the stop string is not part of the text";
  EXPECT_EQ(outputs[0][1].finish, FinishReason::Stop) << "no EOS in 60 tokens at 1/10 a token";
  EXPECT_EQ(outputs[0][2].finish, FinishReason::Length);
}

TEST(CudaEngineRunAhead, ForcedTokensLeaveTheQueuedRowUnsampled) {
  REQUIRE_CUDA_DEVICE();
  // After the first token the grammar allows one token at a time for three
  // tokens: jump-forward appends them unsampled, and the row queued ahead
  // (the first token's) is not at the sequence's end any more.
  GenerationRequest r = request({21, 22, 23}, 24, {.temperature = 0.7f, .seed = 31});
  r.constraint.compiled = compile(R"(root ::= ("x1;" | "x2;") "x37;" "x38;" "x39;" ("x5;" | "x6;" | "x7;")+)");
  r.constraint.jump_forward = true;
  std::unique_ptr<Engine> engine = make_engine(true);
  std::vector<GenerationRequest> both = {r, r};
  both[1].sampling.seed = 32;
  std::vector<Output> outputs;
  for (const std::shared_ptr<RequestHandle>& h : engine->submit_all(both)) outputs.push_back(collect(*h));
  EXPECT_GT(stats_after(*engine, 2).overlapped_steps, 0u);
  const std::regex text("(x1;|x2;)x37;x38;x39;(x5;|x6;|x7;)+");
  for (const Output& out : outputs) {
    EXPECT_TRUE(std::regex_match(out.text, text)) << out.text;
    EXPECT_EQ(out.finish, FinishReason::Length);
  }
}

}  // namespace
}  // namespace brioche::engine

#else

TEST(CudaEngineRunAhead, NotBuilt) { GTEST_SKIP() << "skipped: no CUDA device (built without BRIOCHE_CUDA)"; }

#endif
