#include "engine/block_allocator.h"

#include <algorithm>

#include "core/error.h"

namespace brioche::engine {

BlockHash chain_block_hash(BlockHash parent, std::span<const int32_t> block_tokens) {
  // FNV-1a over the parent hash and the token ids, then a splitmix64 finalizer
  // so that nearby inputs spread over all 64 bits. (The offset basis is not
  // XORed with the parent as well: the first byte mixed in would cancel the
  // parent's low byte, and a parent below 256 — a small adapter id as the
  // chain's start — would vanish.)
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix_in = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 0x100000001b3ull;
    }
  };
  mix_in(parent);
  for (int32_t t : block_tokens) mix_in(uint64_t(uint32_t(t)));
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h == 0 ? 1 : h;  // 0 is reserved for "no parent"
}

BlockAllocator::BlockAllocator(int32_t n_blocks, int32_t block_size)
    : block_size_(block_size), blocks_(size_t(n_blocks)) {
  BRIOCHE_CHECK(n_blocks > 0 && block_size > 0, "BlockAllocator: expected positive block count and size, got ",
                n_blocks, " blocks of ", block_size);
  free_.reserve(size_t(n_blocks));
  // Stack order: block 0 is handed out first.
  for (int32_t b = n_blocks - 1; b >= 0; --b) free_.push_back(b);
}

std::optional<int32_t> BlockAllocator::allocate() {
  int32_t block;
  if (!free_.empty()) {
    block = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    block = lru_.front();
    evict_cached(block);
  } else {
    return std::nullopt;
  }
  blocks_[size_t(block)].ref_count = 1;
  return block;
}

void BlockAllocator::evict_cached(int32_t block) {
  BlockInfo& info = blocks_[size_t(block)];
  if (info.in_lru) {
    lru_.erase(info.lru_pos);
    info.in_lru = false;
  }
  if (info.cached) {
    auto it = by_hash_.find(info.hash);
    if (it != by_hash_.end() && it->second == block) by_hash_.erase(it);
    auto [first, last] = by_parent_.equal_range(info.parent);
    for (auto child = first; child != last; ++child) {
      if (child->second == block) {
        by_parent_.erase(child);
        break;
      }
    }
    info.cached = false;
    info.tokens.clear();
    if (on_evict_) on_evict_(info.hash);
  }
}

void BlockAllocator::retain(int32_t block) {
  BlockInfo& info = blocks_.at(size_t(block));
  BRIOCHE_CHECK(info.ref_count > 0, "BlockAllocator::retain: block ", block, " is free");
  ++info.ref_count;
}

void BlockAllocator::release(int32_t block) {
  BlockInfo& info = blocks_.at(size_t(block));
  BRIOCHE_CHECK(info.ref_count > 0, "BlockAllocator::release: block ", block, " is already free");
  if (--info.ref_count > 0) return;
  if (info.cached) {
    lru_.push_back(block);
    info.lru_pos = std::prev(lru_.end());
    info.in_lru = true;
  } else {
    free_.push_back(block);
  }
}

std::optional<int32_t> BlockAllocator::lookup(BlockHash hash, std::span<const int32_t> block_tokens) {
  ++query_blocks_;
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return std::nullopt;
  int32_t block = it->second;
  BlockInfo& info = blocks_[size_t(block)];
  if (!std::equal(info.tokens.begin(), info.tokens.end(), block_tokens.begin(), block_tokens.end()))
    return std::nullopt;  // a 64-bit collision: treat as a miss
  take(block);
  ++hit_blocks_;
  return block;
}

void BlockAllocator::take(int32_t block) {
  BlockInfo& info = blocks_[size_t(block)];
  if (info.ref_count == 0) {
    lru_.erase(info.lru_pos);
    info.in_lru = false;
  }
  ++info.ref_count;
}

std::optional<PartialBlockHit> BlockAllocator::lookup_partial(BlockHash parent, std::span<const int32_t> tokens) {
  PartialBlockHit best;
  auto [first, last] = by_parent_.equal_range(parent);
  for (auto child = first; child != last; ++child) {
    const std::vector<int32_t>& cached = blocks_[size_t(child->second)].tokens;
    size_t n = std::min(cached.size(), tokens.size());
    int32_t same =
        int32_t(std::mismatch(cached.begin(), cached.begin() + ptrdiff_t(n), tokens.begin()).first - cached.begin());
    if (same > best.n_tokens) best = {child->second, same};
  }
  if (best.n_tokens == 0) return std::nullopt;
  take(best.block);
  return best;
}

void BlockAllocator::register_full_block(int32_t block, BlockHash parent, BlockHash hash,
                                         std::span<const int32_t> block_tokens) {
  BlockInfo& info = blocks_.at(size_t(block));
  BRIOCHE_CHECK(info.ref_count > 0, "BlockAllocator::register_full_block: block ", block, " is free");
  BRIOCHE_CHECK(int32_t(block_tokens.size()) == block_size_, "BlockAllocator::register_full_block: expected ",
                block_size_, " tokens, got ", block_tokens.size());
  if (info.cached || by_hash_.count(hash)) return;
  info.cached = true;
  info.hash = hash;
  info.parent = parent;
  info.tokens.assign(block_tokens.begin(), block_tokens.end());
  by_hash_.emplace(hash, block);
  by_parent_.emplace(parent, block);
}

BlockAllocatorStats BlockAllocator::stats() const {
  BlockAllocatorStats s;
  s.total_blocks = total_blocks();
  s.cached_free_blocks = int32_t(lru_.size());
  s.used_blocks = s.total_blocks - int32_t(free_.size()) - s.cached_free_blocks;
  s.prefix_hit_blocks = hit_blocks_;
  s.prefix_query_blocks = query_blocks_;
  return s;
}

}  // namespace brioche::engine
