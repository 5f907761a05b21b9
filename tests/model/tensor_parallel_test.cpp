// Tensor-parallel sharding on the CPU, without NCCL: slices, block alignment
// of quantized column slices, divisibility errors, the batch wire format,
// and the math itself — each rank's attention and MLP blocks run in turn on
// their shard, their partial outputs are summed by hand (the all-reduce),
// and the result matches the unsharded blocks over two layers and two steps
// (prefill, then decode against the sharded KV caches).
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "batch_builder.h"
#include "core/error.h"
#include "model/blocks.h"
#include "model/tensor_parallel.h"
#include "ops/collective.h"
#include "ops/device.h"
#include "ops/rendezvous.h"
#include "tools/gen_model_lib.h"

namespace brioche::model {
namespace {

using testing::BatchBuilder;
using testing::BlockPool;
using testing::Step;
using testing::TestSequence;

// GQA (4 heads, 2 KV heads), qkv bias; head_dim 32 so a Q8_0 o_proj splits on blocks.
const tools::ShapePreset kTiny{"tiny-tp", "qwen2", 97, 64, 128, 2, 4, 2, 32, 10000.0f, false, true};

Checkpoint tiny_checkpoint(DType dtype) {
  Checkpoint ck = tools::random_checkpoint(kTiny, dtype, 5);
  // Exercise every optional tensor: o_proj bias (added once, after the
  // sum) and Qwen3-style q/k norms (replicated).
  for (LayerWeights& l : ck.weights.layers) {
    l.bo = tools::random_tensor(DType::F32, 1, kTiny.hidden, 77).reshape({kTiny.hidden});
    l.q_norm = tools::random_tensor(DType::F32, 1, kTiny.head_dim, 78).reshape({kTiny.head_dim});
    l.k_norm = tools::random_tensor(DType::F32, 1, kTiny.head_dim, 79).reshape({kTiny.head_dim});
    for (Tensor* t : {&l.q_norm, &l.k_norm})
      for (int64_t i = 0; i < t->dim(0); ++i) t->data_as<float>()[i] += 1.0f;
  }
  ck.config.qk_norm = true;
  return ck;
}

float at(const Tensor& t, int64_t r, int64_t c) { return t.row_as<float>(r)[c]; }

TEST(TensorParallelShard, ConfigDividesHeadsAndIntermediate) {
  ModelConfig full = tiny_checkpoint(DType::F32).config;
  ModelConfig s = shard_config(full, {.rank = 1, .size = 2});
  EXPECT_EQ(s.n_heads, 2);
  EXPECT_EQ(s.n_kv_heads, 1);
  EXPECT_EQ(s.intermediate_size, 64);
  EXPECT_EQ(s.hidden_size, full.hidden_size);
  EXPECT_EQ(s.vocab_size, full.vocab_size);
}

TEST(TensorParallelShard, IndivisibleCountsAreClearErrors) {
  ModelConfig full = tiny_checkpoint(DType::F32).config;
  try {
    shard_config(full, {.rank = 0, .size = 4});  // 2 KV heads over 4 ranks
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("KV head count (2) is not divisible by 4"), std::string::npos) << e.what();
  }
  full.n_heads = 6;
  full.n_kv_heads = 6;
  EXPECT_THROW(shard_config(full, {.rank = 0, .size = 4}), Error);
  full.n_heads = 4;
  full.n_kv_heads = 4;
  full.intermediate_size = 90;
  try {
    shard_config(full, {.rank = 0, .size = 4});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("intermediate size (90)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(shard_config(full, {.rank = 2, .size = 2}), Error);
}

TEST(TensorParallelShard, SlicesHaveTheRightRowsAndColumns) {
  const Checkpoint full = tiny_checkpoint(DType::F32);
  const int N = 2;
  for (int r = 0; r < N; ++r) {
    const Checkpoint s = shard_checkpoint(full, {.rank = r, .size = N});
    const LayerWeights& f = full.weights.layers[1];
    const LayerWeights& l = s.weights.layers[1];
    const int64_t q_dim = 2 * 32, kv_dim = 32, inter = 64;
    ASSERT_EQ(l.wq.shape(), (Shape{q_dim, 64}));
    ASSERT_EQ(l.wk.shape(), (Shape{kv_dim, 64}));
    ASSERT_EQ(l.wo.shape(), (Shape{64, q_dim}));
    ASSERT_EQ(l.w_gate.shape(), (Shape{inter, 64}));
    ASSERT_EQ(l.w_down.shape(), (Shape{64, inter}));
    ASSERT_EQ(l.bq.dim(0), q_dim);
    for (int64_t i = 0; i < q_dim; ++i) {
      EXPECT_EQ(at(l.wq, i, 5), at(f.wq, r * q_dim + i, 5));
      EXPECT_EQ(at(l.wo, 7, i), at(f.wo, 7, r * q_dim + i));
      EXPECT_EQ(l.bq.data_as<float>()[i], f.bq.data_as<float>()[r * q_dim + i]);
    }
    for (int64_t i = 0; i < kv_dim; ++i) {
      EXPECT_EQ(at(l.wk, i, 3), at(f.wk, r * kv_dim + i, 3));
      EXPECT_EQ(at(l.wv, i, 63), at(f.wv, r * kv_dim + i, 63));
      EXPECT_EQ(l.bv.data_as<float>()[i], f.bv.data_as<float>()[r * kv_dim + i]);
    }
    for (int64_t i = 0; i < inter; ++i) {
      EXPECT_EQ(at(l.w_up, i, 0), at(f.w_up, r * inter + i, 0));
      EXPECT_EQ(at(l.w_gate, i, 9), at(f.w_gate, r * inter + i, 9));
      EXPECT_EQ(at(l.w_down, 11, i), at(f.w_down, 11, r * inter + i));
    }
    // Replicated tensors share storage with the full checkpoint.
    EXPECT_EQ(s.weights.token_embd.data(), full.weights.token_embd.data());
    EXPECT_EQ(s.weights.output.data(), full.weights.output.data());
    EXPECT_EQ(l.bo.data(), f.bo.data());
    EXPECT_EQ(l.q_norm.data(), f.q_norm.data());
  }
}

TEST(TensorParallelShard, QuantizedColumnSlicesAreWholeBlocks) {
  // Q8_0 blocks of 32 columns: 64 columns split in two lands on a border.
  Tensor w = tools::random_tensor(DType::Q8_0, 3, 64, 9);
  Tensor right = copy_columns(w, 32, 64, "o_proj");
  ASSERT_EQ(right.shape(), (Shape{3, 32}));
  const size_t block = size_t(dtype_info(DType::Q8_0).block_bytes);
  for (int64_t r = 0; r < 3; ++r)
    EXPECT_EQ(std::memcmp(right.row_ptr(r), static_cast<const char*>(w.row_ptr(r)) + block, block), 0);
  try {
    copy_columns(w, 16, 48, "layer 0 o_proj");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("inside a q8_0 block of 32 columns"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("layer 0 o_proj"), std::string::npos) << e.what();
  }
  // A whole quantized checkpoint whose head width is one block shards fine.
  const Checkpoint full = tiny_checkpoint(DType::Q8_0);
  const Checkpoint s = shard_checkpoint(full, {.rank = 1, .size = 2});
  EXPECT_EQ(s.weights.layers[0].wo.dtype(), DType::Q8_0);
  EXPECT_EQ(s.weights.layers[0].wo.shape(), (Shape{64, 64}));
  // Q4_K blocks are 256 columns: a split at 128 is refused, at 256 taken.
  Tensor k = tools::random_tensor(DType::Q4_K, 2, 512, 10);
  ASSERT_EQ(k.dtype(), DType::Q4_K);
  EXPECT_THROW(copy_columns(k, 0, 128, "down_proj"), Error);
  EXPECT_EQ(copy_columns(k, 256, 512, "down_proj").shape(), (Shape{2, 256}));
}

// The all-reduce of one rank, done by hand: the first pass records each
// rank's partial output; the second replaces it with the sum of them all.
class HandSum final : public ops::Collective {
 public:
  HandSum(int rank, int size, std::vector<Tensor>& partials, const Tensor* sum)
      : rank_(rank), size_(size), partials_(partials), sum_(sum) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(Tensor& t) override {
    if (sum_ == nullptr) {
      partials_[size_t(rank_)] = ops::zeros(DType::F32, {t.dim(0), t.dim(1)}, Device::CPU);
      ops::copy(t, partials_[size_t(rank_)]);
    } else {
      ops::copy(*sum_, t);
    }
  }
  void broadcast(std::span<int32_t>, int) override { FAIL() << "not used by the blocks"; }

 private:
  int rank_, size_;
  std::vector<Tensor>& partials_;
  const Tensor* sum_;
};

TEST(TensorParallelShard, SummedShardBlocksEqualTheFullBlocks) {
  const Checkpoint full = tiny_checkpoint(DType::F32);
  const ModelConfig& fc = full.config;
  const int N = 2;
  std::vector<Checkpoint> shards;
  for (int r = 0; r < N; ++r) shards.push_back(shard_checkpoint(full, {.rank = r, .size = N}));
  const std::vector<float> inv_freq = ops::rope_inv_freq(fc.head_dim, fc.rope.theta, fc.rope.scaling, {});
  const KvCacheOptions kv{.block_size = 4, .n_blocks = 16};
  KvCache full_cache(fc, kv);
  std::vector<std::unique_ptr<KvCache>> caches;
  for (const Checkpoint& s : shards) caches.push_back(std::make_unique<KvCache>(s.config, kv));

  BlockPool pool(16, 3);
  TestSequence a, b;
  const std::vector<std::vector<Step>> steps = {
      {{&a, {1, 2, 3, 4, 5, 6, 7}}, {&b, {8, 9, 10, 11, 12}}},  // prefill (two blocks each)
      {{&a, {13}}, {&b, {14}}},                                 // decode against the cache
  };
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  double worst = 0;
  for (const std::vector<Step>& step : steps) {
    BatchBuilder bb(step, pool, kv.block_size);
    const int64_t n = bb.batch.n_rows();
    std::vector<ops::AttentionSequence> seqs;
    for (const SequenceView& s : bb.batch.sequences) seqs.push_back({s.first_row, s.n_rows, s.n_past, s.block_table});
    const BlockContext ctx{.config = fc, .positions = bb.batch.positions, .sequences = seqs, .inv_freq = inv_freq};

    ActivationBuffers full_buffers;
    Activations fa = full_buffers.view(fc, n);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < fc.hidden_size; ++c) fa.x.row_as<float>(r)[c] = uni(rng);
    Tensor x = ops::zeros(DType::F32, {n, fc.hidden_size}, Device::CPU);  // the sharded run's residual stream
    ops::copy(fa.x, x);
    std::vector<ActivationBuffers> buffers(N);

    for (int layer = 0; layer < fc.n_layers; ++layer) {
      for (int half = 0; half < 2; ++half) {  // attention, then MLP
        const LayerWeights& flw = full.weights.layers[size_t(layer)];
        if (half == 0)
          attention_block(ctx, flw, {.k = full_cache.keys(layer), .v = full_cache.values(layer)}, fa);
        else
          mlp_block(ctx, flw, fa);

        std::vector<Tensor> partials(N);
        Tensor sum;
        std::vector<Tensor> results;
        for (int pass = 0; pass < 2; ++pass) {
          results.clear();
          for (int r = 0; r < N; ++r) {
            const Checkpoint& s = shards[size_t(r)];
            const LayerWeights& lw = s.weights.layers[size_t(layer)];
            HandSum collective(r, N, partials, pass == 0 ? nullptr : &sum);
            Activations sa = buffers[size_t(r)].view(s.config, n);
            ops::copy(x, sa.x);
            const BlockContext sctx{.config = s.config,
                                    .positions = ctx.positions,
                                    .sequences = ctx.sequences,
                                    .inv_freq = ctx.inv_freq,
                                    .collective = &collective};
            if (half == 0)
              attention_block(sctx, lw, {.k = caches[size_t(r)]->keys(layer), .v = caches[size_t(r)]->values(layer)},
                              sa);
            else
              mlp_block(sctx, lw, sa);
            results.push_back(sa.x);
          }
          if (pass == 0) {
            sum = ops::zeros(DType::F32, {n, fc.hidden_size}, Device::CPU);
            for (const Tensor& p : partials)
              for (int64_t i = 0; i < p.numel(); ++i) sum.data_as<float>()[i] += p.data_as<float>()[i];
          }
        }
        // Every rank holds the same residual stream, equal to the full block's.
        for (int r = 0; r < N; ++r) {
          for (int64_t i = 0; i < n; ++i)
            for (int64_t c = 0; c < fc.hidden_size; ++c) {
              const double d = std::abs(double(at(results[size_t(r)], i, c)) - at(fa.x, i, c));
              worst = std::max(worst, d);
              ASSERT_LT(d, 1e-4) << "layer " << layer << (half == 0 ? " attention" : " mlp") << " rank " << r << " row "
                                 << i << " col " << c;
            }
        }
        ops::copy(results[0], x);
      }
    }
    bb.commit();
  }
  EXPECT_LT(worst, 1e-4);
}

TEST(TensorParallelWire, BatchRoundTrips) {
  const ModelConfig c = tiny_checkpoint(DType::F32).config;
  KvCache cache(c, {.block_size = 4, .n_blocks = 16, .dtype = DType::F16});
  BlockPool pool(16, 5);
  TestSequence a, b;
  BatchBuilder bb({{&a, {1, 2, 3, 4, 5}, true}, {&b, {6}}}, pool, 4);
  std::vector<int32_t> header, payload;
  tp_wire::encode(bb.batch, cache, header, payload);
  EXPECT_EQ(header[tp_wire::kBlocks], 16);
  EXPECT_EQ(header[tp_wire::kBlockSize], 4);
  EXPECT_EQ(DType(header[tp_wire::kCacheDType]), DType::F16);
  const ForwardBatch got = tp_wire::decode(header, payload);
  EXPECT_EQ(got.tokens, bb.batch.tokens);
  EXPECT_EQ(got.positions, bb.batch.positions);
  EXPECT_EQ(got.wants_logits, bb.batch.wants_logits);
  ASSERT_EQ(got.sequences.size(), 2u);
  for (size_t s = 0; s < 2; ++s) {
    const SequenceView &x = got.sequences[s], &y = bb.batch.sequences[s];
    EXPECT_EQ(x.first_row, y.first_row);
    EXPECT_EQ(x.n_rows, y.n_rows);
    EXPECT_EQ(x.n_past, y.n_past);
    EXPECT_EQ(std::vector<int32_t>(x.block_table.begin(), x.block_table.end()),
              std::vector<int32_t>(y.block_table.begin(), y.block_table.end()));
  }
  payload.resize(3);  // truncated
  EXPECT_THROW(tp_wire::decode(header, payload), Error);
}

TEST(TensorParallelRendezvous, TwoRanksExchangeTheIdOverTcp) {
  const int port = 20000 + int(::getpid() % 20000);
  const std::string master = "127.0.0.1:" + std::to_string(port);
  std::vector<uint8_t> id(128);
  for (size_t i = 0; i < id.size(); ++i) id[i] = uint8_t(i * 37 + 1);
  std::vector<uint8_t> got1, got2;
  std::string error;
  // Ranks 1 and 2 may start before rank 0 listens: they retry.
  std::thread r1([&] { got1 = ops::rendezvous({.rank = 1, .size = 3, .master = master, .timeout_s = 20}); });
  std::thread r2([&] { got2 = ops::rendezvous({.rank = 2, .size = 3, .master = master, .timeout_s = 20}); });
  std::vector<uint8_t> got0 = ops::rendezvous({.rank = 0, .size = 3, .master = master, .payload = id, .timeout_s = 20});
  r1.join();
  r2.join();
  EXPECT_EQ(got0, id);
  EXPECT_EQ(got1, id);
  EXPECT_EQ(got2, id);
}

TEST(TensorParallelRendezvous, ErrorsSayWhatWentWrong) {
  EXPECT_THROW(ops::parse_host_port("localhost"), Error);
  EXPECT_THROW(ops::parse_host_port("localhost:http"), Error);
  EXPECT_THROW(ops::parse_host_port("localhost:70000"), Error);
  EXPECT_EQ(ops::parse_host_port("[::1]:29500").host, "::1");
  EXPECT_EQ(ops::parse_host_port("node0:29500").port, 29500);
  try {  // nobody listens there
    ops::rendezvous({.rank = 1, .size = 2, .master = "127.0.0.1:1", .timeout_s = 1});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("could not reach rank 0 at 127.0.0.1:1"), std::string::npos) << e.what();
  }
}

#if !BRIOCHE_CUDA
TEST(TensorParallelNccl, CpuBuildSaysItHasNoNccl) {
  try {
    ops::connect_nccl({.rank = 0, .size = 2, .master = "127.0.0.1:29500"});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA/NCCL backend"), std::string::npos) << e.what();
  }
}
#endif

}  // namespace
}  // namespace brioche::model
