// Paged KV-cache block bookkeeping: reference counts and the prefix cache.
//
// The KV cache is an array of fixed-size blocks; sequences own lists of block
// ids (block tables). A block is shared when several sequences hold it (n > 1
// forks, equal prompt prefixes): its reference count says how many.
//
// Prefix cache: once a block is full and its K/V rows are written, it is
// registered under a chained hash h_i = H(h_{i-1}, tokens of block i), so the
// hash names the whole prefix up to the block's end, not just its own tokens.
// A new sequence walks its full prompt blocks in order and reuses every block
// whose chained hash (and tokens, checked to rule out collisions) match.
// Below block granularity: cached blocks are also indexed by their parent
// hash, so a sequence whose next block is not a full hit can still find a
// cached block with the same prefix before it whose first t tokens equal its
// own (lookup_partial); the caller copies those t tokens' K/V into a fresh
// block of its own (the cached block stays read-only for its other holders).
// Blocks whose reference count drops to zero keep their contents and stay
// findable in an LRU list; allocation takes never-cached free blocks first and
// then evicts the least recently released cached block.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace brioche::engine {

using BlockHash = uint64_t;

// The chained hash of one full block: H(parent, tokens). parent = 0 for the first block.
BlockHash chain_block_hash(BlockHash parent, std::span<const int32_t> block_tokens);

// A cached block whose first n_tokens tokens equal the ones asked for.
struct PartialBlockHit {
  int32_t block = -1;
  int32_t n_tokens = 0;
};

struct BlockAllocatorStats {
  int32_t total_blocks = 0;
  int32_t used_blocks = 0;           // reference count > 0
  int32_t cached_free_blocks = 0;    // reference count 0, contents kept for reuse
  uint64_t prefix_hit_blocks = 0;    // blocks reused through the prefix cache
  uint64_t prefix_query_blocks = 0;  // full blocks looked up
};

class BlockAllocator {
 public:
  BlockAllocator(int32_t n_blocks, int32_t block_size);

  int32_t block_size() const { return block_size_; }
  int32_t total_blocks() const { return int32_t(blocks_.size()); }
  // Blocks an allocation could take now (never-cached free + evictable cached).
  int32_t available_blocks() const { return int32_t(free_.size() + lru_.size()); }

  // A fresh block with reference count 1, or nullopt when every block is held.
  std::optional<int32_t> allocate();
  // Reference count += 1 (a fork shares the block).
  void retain(int32_t block);
  // Reference count -= 1; at zero the block becomes free (cached if registered).
  void release(int32_t block);
  int32_t ref_count(int32_t block) const { return blocks_.at(size_t(block)).ref_count; }

  // Looks up a full block of the prefix cache; on a hit the block is retained
  // (reference count += 1) and returned.
  std::optional<int32_t> lookup(BlockHash hash, std::span<const int32_t> block_tokens);
  // Among the cached blocks that follow `parent` (0: first blocks), the one
  // whose leading tokens match `tokens` longest (at most tokens.size(), at
  // least one); it is retained, like a lookup hit, until the caller has
  // copied from it and releases it.
  std::optional<PartialBlockHit> lookup_partial(BlockHash parent, std::span<const int32_t> tokens);
  // Marks `block` (held, full, K/V written) as the cached copy of `hash` =
  // chain_block_hash(parent, block_tokens). If another block already holds
  // that hash the call does nothing.
  void register_full_block(int32_t block, BlockHash parent, BlockHash hash, std::span<const int32_t> block_tokens);

  // Whether a cached block holds `hash` (held or free).
  bool is_cached(BlockHash hash) const { return by_hash_.count(hash) != 0; }
  // Called with a block's hash when eviction takes it out of the prefix
  // cache (the hybrid models' state snapshot at its end goes with it).
  void on_evict(std::function<void(BlockHash)> callback) { on_evict_ = std::move(callback); }

  BlockAllocatorStats stats() const;

 private:
  struct BlockInfo {
    int32_t ref_count = 0;
    bool cached = false;  // registered in by_hash_
    BlockHash hash = 0;
    BlockHash parent = 0;
    std::vector<int32_t> tokens;  // [block_size] when cached, to verify hits
    std::list<int32_t>::iterator lru_pos;
    bool in_lru = false;
  };

  void evict_cached(int32_t block);
  void take(int32_t block);  // reference count += 1, out of the LRU if it was there

  int32_t block_size_;
  std::vector<BlockInfo> blocks_;
  std::vector<int32_t> free_;  // ref 0, not cached (stack)
  std::list<int32_t> lru_;     // ref 0, cached; front = least recently released
  std::unordered_map<BlockHash, int32_t> by_hash_;
  std::unordered_multimap<BlockHash, int32_t> by_parent_;  // parent hash -> cached blocks that follow it
  uint64_t hit_blocks_ = 0;
  uint64_t query_blocks_ = 0;
  std::function<void(BlockHash)> on_evict_;
};

}  // namespace brioche::engine
