// The paged KV cache's per-layer shapes (ModelConfig::kv_layers).
#include "model/kv_cache.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace brioche::model {
namespace {

std::vector<int64_t> dims(const Tensor& t) {
  std::vector<int64_t> d;
  for (int i = 0; i < t.rank(); ++i) d.push_back(t.dim(i));
  return d;
}

ModelConfig three_layers() {
  ModelConfig c;
  c.n_layers = 3;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  return c;
}

TEST(KvCacheShapes, UniformWhenNoPerLayerShapes) {
  const ModelConfig c = three_layers();
  KvCache cache(c, {.block_size = 4, .n_blocks = 5});
  for (int l = 0; l < 3; ++l) EXPECT_EQ(dims(cache.keys(l)), (std::vector<int64_t>{5, 4, 2, 8}));
  EXPECT_EQ(KvCache::block_bytes(c, 4, DType::F32), size_t(2 * 3 * 4 * 16 * 4));
  EXPECT_EQ(cache.bytes(), 5 * KvCache::block_bytes(c, 4, DType::F32));
}

TEST(KvCacheShapes, EachLayerItsOwnShapeAndCachelessLayersTakeNothing) {
  ModelConfig c = three_layers();
  c.kv_layers = {{2, 8}, {0, 0}, {1, 32}};  // a sliding layer, a layer reading another's K/V, a wide full layer
  KvCache cache(c, {.block_size = 4, .n_blocks = 5, .dtype = DType::F16});
  EXPECT_EQ(dims(cache.keys(0)), (std::vector<int64_t>{5, 4, 2, 8}));
  EXPECT_FALSE(cache.keys(1).defined());
  EXPECT_FALSE(cache.values(1).defined());
  EXPECT_EQ(dims(cache.values(2)), (std::vector<int64_t>{5, 4, 1, 32}));
  // (16 + 0 + 32) values per position, K and V, 2 bytes each
  EXPECT_EQ(KvCache::block_bytes(c, 4, DType::F16), size_t(2 * 48 * 4 * 2));
  EXPECT_EQ(cache.bytes(), 5 * KvCache::block_bytes(c, 4, DType::F16));
  cache.copy_block(0, 3);  // skips the cacheless layer
}

TEST(KvCacheShapes, ShapeCountMustMatchTheLayers) {
  ModelConfig c = three_layers();
  c.kv_layers = {{2, 8}};
  EXPECT_THROW(KvCache(c, {.block_size = 4, .n_blocks = 5}), Error);
}

}  // namespace
}  // namespace brioche::model
