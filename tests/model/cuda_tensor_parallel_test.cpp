// The tensor-parallel path on one GPU: a TensorParallelModel over an NCCL
// communicator of one rank (real NCCL all-reduces and broadcasts, recorded
// into the decode graphs) against the plain model on the same weights.
// With one rank the all-reduce is the identity, so logits match bit for bit
// up to the unfused o_proj/down + add (measured NMSE 0 on the H200).
// Teardown: graphs that captured NCCL go before the communicator.
// Several ranks need several GPUs: cuda_model_bench --tp N --check
// (docs/cuda.md). Without a GPU every test reports "skipped: no CUDA device".
#include <gtest/gtest.h>

#if BRIOCHE_CUDA

#include <memory>
#include <vector>

#include "batch_builder.h"
#include "model/device_weights.h"
#include "model/llama.h"
#include "model/tensor_parallel.h"
#include "ops/collective.h"
#include "ops/device.h"
#include "tools/gen_model_lib.h"

namespace brioche::model {
namespace {

using testing::BatchBuilder;
using testing::BlockPool;
using testing::Step;
using testing::TestSequence;

const tools::ShapePreset kTiny{"tiny", "llama", 1000, 256, 512, 2, 4, 2, 64, 10000.0f, false, false};

TEST(CudaTensorParallel, OneRankThroughNcclMatchesThePlainModel) {
  if (!ops::cuda_available()) GTEST_SKIP() << "skipped: no CUDA device";
  Checkpoint a = tools::random_checkpoint(kTiny, DType::BF16, 9);
  Checkpoint b = shard_checkpoint(a, {.rank = 0, .size = 1});
  move_weights(a, Device::CUDA);
  move_weights(b, Device::CUDA);
  LlamaModel plain(std::move(a));
  TensorParallelModel tp(std::make_unique<LlamaModel>(std::move(b)),
                         ops::connect_nccl({.rank = 0, .size = 1, .master = "127.0.0.1:1"}));
  const KvCacheOptions kv{.block_size = 16, .n_blocks = 64, .dtype = DType::F16, .device = Device::CUDA};
  KvCache cache_plain(plain.config(), kv), cache_tp(tp.config(), kv);
  BlockPool pool_plain(64, 1), pool_tp(64, 1);
  TestSequence sp[2], st[2];
  std::vector<int32_t> next = {1, 2};
  for (int step = 0; step < 12; ++step) {
    std::vector<int32_t> p0 = {next[0]}, p1 = {next[1]};
    if (step == 0) {
      p0 = {5, 6, 7, 8, 9, 10, 11};
      p1 = {12, 13, 14};
    }
    BatchBuilder bp({{&sp[0], p0}, {&sp[1], p1}}, pool_plain, 16), bt({{&st[0], p0}, {&st[1], p1}}, pool_tp, 16);
    Tensor lp, lt;
    plain.forward(bp.batch, cache_plain, lp);
    tp.forward(bt.batch, cache_tp, lt);
    bp.commit();
    bt.commit();
    ASSERT_EQ(lp.shape(), lt.shape());
    double num = 0, den = 0;
    for (int64_t i = 0; i < lp.numel(); ++i) {
      const double d = double(lt.data_as<float>()[i]) - lp.data_as<float>()[i];
      num += d * d;
      den += double(lp.data_as<float>()[i]) * lp.data_as<float>()[i];
    }
    EXPECT_LT(num / den, 1e-10) << "step " << step;
    std::vector<int32_t> ids(2), ids_tp(2);
    ops::argmax_rows(lp, ids);
    ops::argmax_rows(lt, ids_tp);
    ASSERT_EQ(ids, ids_tp) << "step " << step;
    next = ids;
  }
  EXPECT_GE(tp.shard().n_decode_graphs(), 1u);  // NCCL calls recorded into a graph
}

// A decode graph that recorded NCCL calls keeps ncclCommDestroy waiting
// until the graph is destroyed. Detaching the collective drops the graphs,
// so the communicator may then go first (the order a worker's locals die
// in; before the fix this hung the first two-GPU run at exit).
TEST(CudaTensorParallel, DetachedCollectiveCanBeDestroyedBeforeTheModel) {
  if (!ops::cuda_available()) GTEST_SKIP() << "skipped: no CUDA device";
  Checkpoint ck = tools::random_checkpoint(kTiny, DType::BF16, 9);
  move_weights(ck, Device::CUDA);
  auto model = std::make_unique<LlamaModel>(std::move(ck));
  auto collective = ops::connect_nccl({.rank = 0, .size = 1, .master = "127.0.0.1:1"});
  model->set_collective(collective.get());
  const KvCacheOptions kv{.block_size = 16, .n_blocks = 16, .dtype = DType::F16, .device = Device::CUDA};
  KvCache cache(model->config(), kv);
  BlockPool pool(16, 1);
  TestSequence seq;
  auto step = [&](std::vector<int32_t> tokens) {
    BatchBuilder b({{&seq, std::move(tokens)}}, pool, 16);
    Tensor logits;
    model->forward(b.batch, cache, logits);
    b.commit();
  };
  step({5, 6, 7});
  for (int32_t t : {8, 9, 10}) step({t});  // decode steps: recorded with NCCL inside, replayed
  ASSERT_GE(model->n_decode_graphs(), 1u);
  model->set_collective(nullptr);
  EXPECT_EQ(model->n_decode_graphs(), 0u);
  collective.reset();  // returns: no graph holds the communicator any more
  step({11});          // the model goes on without it (a fresh graph, no NCCL)
  EXPECT_EQ(model->n_decode_graphs(), 1u);
}

}  // namespace
}  // namespace brioche::model

#else

TEST(CudaTensorParallel, NotBuilt) { GTEST_SKIP() << "skipped: no CUDA device (built without BRIOCHE_CUDA)"; }

#endif
