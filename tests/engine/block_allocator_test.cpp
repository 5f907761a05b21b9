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

TEST(BlockAllocator, EveryByteOfTheParentNamesTheChain) {
  // The chain's start is 0 for the base model and the adapter's id otherwise
  // (engine/scheduler.h prefix_seed): parents that differ in any one byte, a
  // small id included, give different hashes (the low byte once cancelled out).
  const std::vector<int32_t> b = {5, 6, 7, 8};
  const BlockHash base = chain_block_hash(0, b);
  for (int byte = 0; byte < 8; ++byte)
    for (uint64_t v : {uint64_t(1), uint64_t(0xa1), uint64_t(0xff)})
      EXPECT_NE(chain_block_hash(v << (8 * byte), b), base) << "byte " << byte << " value " << v;
  EXPECT_NE(chain_block_hash(0x1234567890abcd01ull, b), chain_block_hash(0x1234567890abcd02ull, b));
}

TEST(BlockAllocator, PrefixCacheReusesReleasedBlocksUntilEvicted) {
  BlockAllocator alloc(2, 4);
  std::vector<int32_t> tokens = {1, 2, 3, 4};
  BlockHash h = chain_block_hash(0, tokens);
  int32_t b = *alloc.allocate();
  alloc.register_full_block(b, 0, h, tokens);
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
    alloc.register_full_block(b, 0, hashes.back(), t);
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

TEST(BlockAllocator, PartialLookupFindsTheLongestLeadingMatchAfterTheSameParent) {
  BlockAllocator alloc(4, 4);
  std::vector<int32_t> head = {1, 2, 3, 4}, x = {5, 6, 7, 8}, y = {5, 6, 9, 9};
  BlockHash h0 = chain_block_hash(0, head);
  int32_t b0 = *alloc.allocate();
  alloc.register_full_block(b0, 0, h0, head);
  int32_t bx = *alloc.allocate();
  alloc.register_full_block(bx, h0, chain_block_hash(h0, x), x);
  int32_t by = *alloc.allocate();
  alloc.register_full_block(by, h0, chain_block_hash(h0, y), y);
  alloc.release(bx);
  alloc.release(by);

  std::vector<int32_t> want = {5, 6, 7, 1};
  std::optional<PartialBlockHit> hit = alloc.lookup_partial(h0, want);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->block, bx);
  EXPECT_EQ(hit->n_tokens, 3);
  EXPECT_EQ(alloc.ref_count(bx), 1);  // retained until the caller has copied
  alloc.release(bx);
  // Never longer than what was asked for.
  std::vector<int32_t> short_want = {5, 6, 9};
  hit = alloc.lookup_partial(h0, short_want);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->block, by);
  EXPECT_EQ(hit->n_tokens, 3);
  alloc.release(by);
  // Same tokens after another prefix, or no leading token in common: a miss.
  std::vector<int32_t> five_six = {5, 6};
  EXPECT_FALSE(alloc.lookup_partial(0, five_six).has_value());
  std::vector<int32_t> none = {7, 5, 6};
  EXPECT_FALSE(alloc.lookup_partial(h0, none).has_value());
  // First blocks are found after parent 0.
  std::vector<int32_t> head_start = {1, 2, 0};
  hit = alloc.lookup_partial(0, head_start);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->block, b0);
  EXPECT_EQ(hit->n_tokens, 2);
  alloc.release(b0);
  alloc.release(b0);
  // An evicted block is no longer a candidate: the free block goes first,
  // then the least recently released cached one (bx).
  alloc.allocate();
  EXPECT_EQ(*alloc.allocate(), bx);
  hit = alloc.lookup_partial(h0, want);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->block, by);
  EXPECT_EQ(hit->n_tokens, 2);
}

}  // namespace
}  // namespace brioche::engine
