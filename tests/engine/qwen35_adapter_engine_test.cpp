// Served LoRA adapters on a hybrid model (Qwen 3.5 dense fixture, tests/
// fixtures/qwen35/dense: linear-attention layers with a recurrent state per
// sequence) through the engine: one batch mixing requests of two adapters
// (A: random factors on every projection peft targets; B: on a few) and of
// the base, greedy and seeded, gives each request exactly the tokens it gets
// alone; and the prefix cache, whose K/V blocks and recurrent-state
// snapshots are keyed by the chained hash that starts at the adapter's id,
// never hands one adapter's (or the base's) prefix to another: the same
// prompt under another adapter reuses nothing, under the same one it reuses
// up to its last snapshot.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "core/half.h"
#include "engine/engine.h"
#include "model/model.h"
#include "model/qwen35.h"
#include "model/served_adapter.h"

namespace brioche::engine {
namespace {

using model::Projection;

std::string fixture() { return std::string(BRIOCHE_SOURCE_DIR) + "/tests/fixtures/qwen35/dense"; }

std::vector<int32_t> golden_ids(const char* key) {
  std::ifstream in(fixture() + "/golden.json");
  return nlohmann::json::parse(in)[key].get<std::vector<int32_t>>();
}

// {in, out} of projection p in `layer` of the Qwen 3.5 model; {0, 0} where the layer has none.
std::pair<int64_t, int64_t> projection_shape(const model::Model& m, int layer, Projection p) {
  const model::ModelConfig& c = m.config();
  const model::Qwen35Config& q = dynamic_cast<const model::Qwen35Model&>(m).qwen35_config();
  const bool linear = q.linear_layers[size_t(layer)] != 0;
  const int64_t hidden = c.hidden_size, heads_dim = int64_t(c.n_heads) * c.head_dim;
  switch (p) {
    case Projection::Q: return linear ? std::pair<int64_t, int64_t>{} : std::pair{hidden, 2 * heads_dim};
    case Projection::K:
    case Projection::V: return linear ? std::pair<int64_t, int64_t>{} : std::pair{hidden, int64_t(c.kv_dim())};
    case Projection::O: return linear ? std::pair<int64_t, int64_t>{} : std::pair{heads_dim, hidden};
    case Projection::Gate:
    case Projection::Up: return {hidden, c.intermediate_size};
    case Projection::Down: return {c.intermediate_size, hidden};
    case Projection::LinearQkv:
      return linear ? std::pair{hidden, int64_t(q.conv_channels())} : std::pair<int64_t, int64_t>{};
    case Projection::LinearZ:
      return linear ? std::pair{hidden, int64_t(q.value_width())} : std::pair<int64_t, int64_t>{};
    case Projection::LinearB:
    case Projection::LinearA:
      return linear ? std::pair{hidden, int64_t(q.linear_v_heads)} : std::pair<int64_t, int64_t>{};
    case Projection::LinearOut:
      return linear ? std::pair{int64_t(q.value_width()), hidden} : std::pair<int64_t, int64_t>{};
    case Projection::SharedExpertGate:
      return q.n_experts > 0 ? std::pair{hidden, int64_t(1)} : std::pair<int64_t, int64_t>{};
  }
  return {};
}

// An adapter of `rank` with random f16 factors on `targets` where each layer has them.
std::shared_ptr<model::ServedAdapter> random_adapter(const model::Model& m, const char* name, uint64_t id, int rank,
                                                     const std::vector<Projection>& targets) {
  auto adapter = std::make_shared<model::ServedAdapter>();
  adapter->name = name;
  adapter->id = id;
  adapter->rank = rank;
  adapter->layers.resize(size_t(m.config().n_layers));
  std::mt19937 rng{uint32_t(id)};
  for (int l = 0; l < m.config().n_layers; ++l)
    for (Projection p : targets) {
      const auto [in, out] = projection_shape(m, l, p);
      if (in == 0) continue;
      std::normal_distribution<float> a_dist(0.0f, 1.0f / std::sqrt(float(in))), bt_dist(0.0f, 0.1f);
      Tensor a = Tensor::zeros(DType::F16, {rank, in}), bt = Tensor::zeros(DType::F16, {rank, out});
      for (int64_t i = 0; i < a.numel(); ++i) a.data_as<uint16_t>()[i] = f32_to_f16(a_dist(rng));
      for (int64_t i = 0; i < bt.numel(); ++i) bt.data_as<uint16_t>()[i] = f32_to_f16(bt_dist(rng));
      adapter->layers[size_t(l)][size_t(p)] = {.a = a, .bt = bt};
    }
  return adapter;
}

struct Outcome {
  std::vector<int32_t> tokens;
  int32_t cached_prompt_tokens = -1;
};

Outcome collect(RequestHandle& handle) {
  Outcome out;
  while (std::optional<GenerationEvent> e = handle.next()) {
    EXPECT_NE(e->finish, FinishReason::Error) << e->error;
    out.tokens.insert(out.tokens.end(), e->tokens.begin(), e->tokens.end());
    if (e->done) out.cached_prompt_tokens = e->usage.cached_prompt_tokens;
  }
  return out;
}

class Qwen35EngineAdapters : public ::testing::Test {
 protected:
  void SetUp() override {
    // 6 state slots: the whole batch runs at once; 24 snapshot slots: every
    // boundary of the prompts below stays kept.
    engine = Engine::load({.model_path = fixture(),
                           .kv = {.block_size = 16,
                                  .n_blocks = 96,
                                  .max_context = 256,
                                  .dtype = DType::F32,
                                  .state_slots = 6,
                                  .state_snapshots = 24},
                           .scheduler = {.max_batch_tokens = 64}});
    const model::Model& m = *engine->model();
    a = random_adapter(
        m, "a", 0xa1, 8,
        {Projection::Q, Projection::K, Projection::V, Projection::O, Projection::Gate, Projection::Up, Projection::Down,
         Projection::LinearQkv, Projection::LinearZ, Projection::LinearB, Projection::LinearA, Projection::LinearOut});
    b = random_adapter(m, "b", 0xb2, 4, {Projection::Q, Projection::LinearZ, Projection::LinearOut, Projection::Down});
  }

  GenerationRequest request(std::vector<int32_t> prompt, std::shared_ptr<const model::ServedAdapter> adapter,
                            uint64_t seed) const {
    GenerationRequest r;
    r.prompt_tokens = std::move(prompt);
    if (seed != 0) {
      r.sampling.temperature = 0.9f;
      r.sampling.top_p = 0.95f;
      r.sampling.seed = seed;
    } else {
      r.sampling.temperature = 0.0f;
    }
    r.max_tokens = 16;
    r.ignore_eos = true;
    r.adapter = std::move(adapter);
    return r;
  }

  std::shared_ptr<Engine> engine;
  std::shared_ptr<model::ServedAdapter> a, b;
};

TEST_F(Qwen35EngineAdapters, MixedBatchOfTwoAdaptersAndTheBaseGivesEachRequestItsSoloTokens) {
  const std::vector<int32_t> long_ids = golden_ids("long_ids"), short_ids = golden_ids("short_ids"),
                             prompt_ids = golden_ids("prompt_ids");
  const std::vector<int32_t> p90(long_ids.begin(), long_ids.begin() + 90);
  // The same prompt under A, the base and B; others under A and B; greedy and seeded.
  auto batch = [&] {
    std::vector<GenerationRequest> r;
    r.push_back(request(p90, a, 0));
    r.push_back(request(p90, nullptr, 0));
    r.push_back(request(p90, b, 0));
    r.push_back(request(short_ids, a, 1001));
    r.push_back(request(prompt_ids, b, 1002));
    r.push_back(request(prompt_ids, nullptr, 1003));
    return r;
  };
  // Alone, one after another.
  std::vector<Outcome> alone;
  for (GenerationRequest& r : batch()) alone.push_back(collect(*engine->submit(std::move(r))));
  // The 90-token prompt under the base and under B came after A's: nothing
  // of A's blocks or state snapshots is theirs.
  EXPECT_EQ(alone[1].cached_prompt_tokens, 0);
  EXPECT_EQ(alone[2].cached_prompt_tokens, 0);
  EXPECT_NE(alone[0].tokens, alone[1].tokens) << "adapter A changes the answer";
  EXPECT_NE(alone[2].tokens, alone[1].tokens) << "adapter B changes the answer";
  EXPECT_NE(alone[0].tokens, alone[2].tokens);

  std::vector<std::shared_ptr<RequestHandle>> handles = engine->submit_all(batch());
  for (size_t i = 0; i < handles.size(); ++i) {
    const Outcome together = collect(*handles[i]);
    ASSERT_EQ(alone[i].tokens.size(), 16u) << "request " << i;
    EXPECT_EQ(together.tokens, alone[i].tokens) << "request " << i;
    // Second time round each reuses its own earlier prompt, up to its last
    // snapshot (the 90-token prompt: 80).
    if (i < 3) {
      EXPECT_EQ(together.cached_prompt_tokens, 80) << "request " << i;
    }
  }
}

TEST_F(Qwen35EngineAdapters, PrefixCacheIsKeyedByAdapter) {
  const std::vector<int32_t> long_ids = golden_ids("long_ids");
  const std::vector<int32_t> p90(long_ids.begin(), long_ids.begin() + 90);
  const Outcome base = collect(*engine->submit(request(p90, nullptr, 0)));
  EXPECT_EQ(base.cached_prompt_tokens, 0);
  const Outcome with_a = collect(*engine->submit(request(p90, a, 0)));
  EXPECT_EQ(with_a.cached_prompt_tokens, 0) << "the base's blocks and snapshots are not adapter A's";
  const Outcome again = collect(*engine->submit(request(p90, a, 0)));
  EXPECT_EQ(again.cached_prompt_tokens, 80);
  EXPECT_EQ(again.tokens, with_a.tokens);
  // Another load of the same factors (a new id) starts its own chain.
  auto reloaded = std::make_shared<model::ServedAdapter>(*a);
  reloaded->id = 0xa3;
  const Outcome other = collect(*engine->submit(request(p90, reloaded, 0)));
  EXPECT_EQ(other.cached_prompt_tokens, 0);
  EXPECT_EQ(other.tokens, with_a.tokens);
  const Outcome base_again = collect(*engine->submit(request(p90, nullptr, 0)));
  EXPECT_EQ(base_again.cached_prompt_tokens, 80);
  EXPECT_EQ(base_again.tokens, base.tokens);
}

}  // namespace
}  // namespace brioche::engine
