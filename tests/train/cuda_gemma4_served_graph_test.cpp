// Gemma 4's decode steps with served adapters (brioche serve --lora) as
// CUDA graphs: the adapters go through the adapter table on the device
// (model/adapter_table.h), so any mix of adapters and base rows replays
// the graph of its bucket. Four sequences — peft's adapter for the
// fixture, the base, a second copy of the adapter (another slot), the base
// — prefill, then decode with 4, 3 and 2 rows as they finish: with
// graphs the logits are the eager steps' bits (both run the table's
// kernels on the same rows), decode graphs were recorded, and both are
// within 2e-3 of the CPU's per-run path (f32 weights and cache; the bound
// of cuda_gemma4_test.cpp). Fixtures: mix (sliding and full layers,
// attention_k_eq_v) and e2b (per-layer inputs, KV-shared layers). Without
// a GPU these report "skipped: no CUDA device".
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "model/gemma4.h"
#include "model/model.h"
#include "ops/device.h"
#include "train/adapter_io.h"
#include "train/served_plans.h"
#include "train/train_base.h"

namespace brioche::train {
namespace {

using testing::Plan;

std::string fixture(const std::string& path) {
  return std::string(BRIOCHE_SOURCE_DIR) + "/tests/fixtures/gemma4/" + path;
}

std::vector<int32_t> tokens(int32_t first, int32_t count, int32_t vocab) {
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < count; ++i) ids.push_back((first + 37 * i) % (vocab - 3) + 3);
  return ids;
}

std::vector<std::vector<float>> run(model::Model& m, const std::vector<Plan>& plans, bool graphs) {
  setenv("BRIOCHE_CUDA_GRAPHS", graphs ? "1" : "0", 1);
  std::vector<std::vector<float>> out = testing::run_plans(m, plans, {.block_size = 4, .n_blocks = 128});
  unsetenv("BRIOCHE_CUDA_GRAPHS");
  return out;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double err = a.size() == b.size() ? 0.0 : INFINITY;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const double d = std::abs(double(a[i]) - double(b[i]));
    err = std::max(err, std::isfinite(d) ? d : INFINITY);
  }
  return err;
}

class CudaGemma4ServedGraphs : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaGemma4ServedGraphs, AdapterMixesReplayTheEagerSteps) {
  if (!ops::cuda_available()) GTEST_SKIP() << "skipped: no CUDA device";
  const std::string name = GetParam();
  auto cpu = model::Model::load(fixture(name), {.convert_weights = DType::F32});
  auto gpu = model::Model::load(fixture(name), {.convert_weights = DType::F32, .device = Device::CUDA});
  auto* gemma = dynamic_cast<model::Gemma4Model*>(gpu.get());
  ASSERT_NE(gemma, nullptr);
  const auto adapter = load_adapter(fixture("lora/" + name), cpu->config(), false, 1 << 16, lora_shapes_of(*cpu));
  const auto cpu_p = serving_adapter(*adapter, Device::CPU), cpu_q = serving_adapter(*adapter, Device::CPU);
  const auto gpu_p = serving_adapter(*adapter, Device::CUDA), gpu_q = serving_adapter(*adapter, Device::CUDA);
  cpu_p->name = gpu_p->name = "p";
  cpu_q->name = gpu_q->name = "q";
  const int32_t vocab = cpu->config().vocab_size;
  const auto plans = [&](const model::ServedAdapter* p, const model::ServedAdapter* q) {
    return std::vector<Plan>{{tokens(3, 9, vocab), tokens(500, 6, vocab), p},
                             {tokens(11, 11, vocab), tokens(700, 5, vocab), nullptr},
                             {tokens(5, 17, vocab), tokens(900, 4, vocab), q},
                             {tokens(29, 6, vocab), tokens(1100, 6, vocab), nullptr}};
  };
  const auto eager = run(*gpu, plans(gpu_p.get(), gpu_q.get()), false);
  EXPECT_EQ(gemma->n_decode_graphs(), 0u);
  const auto graph = run(*gpu, plans(gpu_p.get(), gpu_q.get()), true);
  // Buckets of 4, 3 and 2 rows (the sequences finish at 4, 5 and 6 decodes).
  EXPECT_EQ(gemma->n_decode_graphs(), 3u) << name;
  const auto ref = run(*cpu, plans(cpu_p.get(), cpu_q.get()), false);
  double vs_cpu = 0;
  for (size_t s = 0; s < ref.size(); ++s) {
    EXPECT_EQ(graph[s], eager[s]) << name << " sequence " << s << ": graph steps are not the eager bits";
    vs_cpu = std::max(vs_cpu, max_abs_diff(graph[s], ref[s]));
  }
  EXPECT_LT(vs_cpu, 2e-3) << name;
  std::printf("[ measured ] gemma4 %s served adapters on CUDA: %zu decode graphs, max |graph - cpu| %.2e\n",
              name.c_str(), gemma->n_decode_graphs(), vs_cpu);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaGemma4ServedGraphs, ::testing::Values("mix", "e2b"));

}  // namespace
}  // namespace brioche::train
