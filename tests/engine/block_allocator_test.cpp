#include "engine/block_allocator.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"

namespace brioche::engine {
namespace {

TEST(BlockAllocator, AllocatesEveryBlockOnceThenRunsOut) {
  BlockAllocator alloc(4, 16);
  std::vector<int32_t> got;
  for (int i = 0; i < 4; ++i) got.push_back(*alloc.allocate());
  EXPECT_FALSE(alloc.allocate().has_value());
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<int32_t>{0, 1, 2, 3}));
  alloc.release(2);
  EXPECT_EQ(alloc.available_blocks(), 1);
  EXPECT_EQ(*alloc.allocate(), 2);
}

TEST(BlockAllocator, SharedBlockIsFreedOnlyByTheLastHolder) {
  BlockAllocator alloc(2, 4);
  int32_t b = *alloc.allocate();
  alloc.retain(b);
  EXPECT_EQ(alloc.ref_count(b), 2);
  alloc.release(b);
  EXPECT_EQ(alloc.available_blocks(), 1);
  alloc.release(b);
  EXPECT_EQ(alloc.available_blocks(), 2);
  EXPECT_THROW(alloc.release(b), Error);
}

TEST(BlockAllocator, ChainedHashNamesTheWholePrefix) {
  std::vector<int32_t> a = {1, 2, 3, 4}, b = {5, 6, 7, 8};
  BlockHash ha = chain_block_hash(0, a);
  EXPECT_NE(chain_block_hash(ha, b), chain_block_hash(0, b));  // same block, different prefix
  EXPECT_EQ(chain_block_hash(ha, b), chain_block_hash(chain_block_hash(0, a), b));
}

TEST(BlockAllocator, PrefixCacheReusesReleasedBlocksUntilEvicted) {
  BlockAllocator alloc(2, 4);
  std::vector<int32_t> tokens = {1, 2, 3, 4};
  BlockHash h = chain_block_hash(0, tokens);
  int32_t b = *alloc.allocate();
  alloc.register_full_block(b, h, tokens);
  alloc.release(b);
  EXPECT_EQ(alloc.stats().cached_free_blocks, 1);
  // A hit revives the cached block.
  std::optional<int32_t> hit = alloc.lookup(h, tokens);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(*hit, b);
  EXPECT_EQ(alloc.ref_count(b), 1);
  // Same hash with different tokens (a collision) is a miss.
  std::vector<int32_t> other = {9, 9, 9, 9};
  EXPECT_FALSE(alloc.lookup(h, other).has_value());
  alloc.release(b);
  // Allocation prefers the never-cached block, then evicts the cached one.
  int32_t first = *alloc.allocate();
  EXPECT_NE(first, b);
  EXPECT_TRUE(alloc.lookup(h, tokens).has_value());
  alloc.release(b);
  int32_t second = *alloc.allocate();
  EXPECT_EQ(second, b);
  EXPECT_FALSE(alloc.lookup(h, tokens).has_value());
}

TEST(BlockAllocator, EvictsLeastRecentlyReleasedFirst) {
  BlockAllocator alloc(3, 2);
  std::vector<std::vector<int32_t>> toks = {{1, 1}, {2, 2}, {3, 3}};
  std::vector<BlockHash> hashes;
  std::vector<int32_t> blocks;
  for (auto& t : toks) {
    int32_t b = *alloc.allocate();
    hashes.push_back(chain_block_hash(0, t));
    alloc.register_full_block(b, hashes.back(), t);
    blocks.push_back(b);
  }
  alloc.release(blocks[1]);
  alloc.release(blocks[0]);
  alloc.release(blocks[2]);
  EXPECT_EQ(*alloc.allocate(), blocks[1]);
  EXPECT_FALSE(alloc.lookup(hashes[1], toks[1]).has_value());
  EXPECT_TRUE(alloc.lookup(hashes[0], toks[0]).has_value());
  EXPECT_TRUE(alloc.lookup(hashes[2], toks[2]).has_value());
}

}  // namespace
}  // namespace brioche::engine
