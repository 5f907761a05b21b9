// The layout by which a decode attention cluster's splits hand each other
// their partials (ClusterMergeLayout, attention_decode_splits.h): a host
// check of the index arithmetic the CUDA kernels use, for every group size
// they take and every count of active splits, so it runs without a GPU.
#include <gtest/gtest.h>

#include <vector>

#include "backend/cuda/attention_decode_splits.h"

namespace brioche::cuda {
namespace {

TEST(ClusterMergeLayout, EveryBlockHasOneOwnerAndEveryPartialItsOwnSlot) {
  // Blocks of 32 values: 1 to 8 heads of head_dim 64, 128 or 256 (1..64),
  // and up to kMaxClusterSplits active splits.
  for (int blocks = 1; blocks <= 64; ++blocks) {
    const int slots = ClusterMergeLayout::slots_for(blocks);
    for (int active = 1; active <= kMaxClusterSplits; ++active) {
      const ClusterMergeLayout layout{blocks, active};
      std::vector<int> owned(size_t(active), 0);
      std::vector<std::vector<bool>> taken(size_t(active), std::vector<bool>(size_t(slots), false));
      for (int b = 0; b < blocks; ++b) {
        const int owner = layout.owner(b);
        ASSERT_GE(owner, 0);
        ASSERT_LT(owner, active) << "block " << b << " of " << blocks << ", " << active << " splits";
        ++owned[size_t(owner)];
        for (int s = 0; s < active; ++s) {
          const int slot = layout.slot(b, s);
          ASSERT_GE(slot, 0);
          ASSERT_LT(slot, slots) << "block " << b << " split " << s << " of " << active << ", " << blocks
                                 << " blocks: past the buffer's slots";
          ASSERT_FALSE(taken[size_t(owner)][size_t(slot)])
              << "two partials in slot " << slot << " of split " << owner << " (block " << b << ", split " << s << ", "
              << blocks << " blocks, " << active << " splits)";
          taken[size_t(owner)][size_t(slot)] = true;
        }
        // The owner finds the block's partials from split 0's slot on.
        EXPECT_EQ(layout.slot(b, 0) + active - 1, layout.slot(b, active - 1));
      }
      // What each owner's barrier expects: the partials of the blocks it owns.
      for (int s = 0; s < active; ++s)
        EXPECT_EQ(owned[size_t(s)], layout.owned_by(s)) << "split " << s << " of " << active << ", " << blocks;
      EXPECT_EQ(layout.owned_by(active), 0) << "a split without keys owns nothing";
      // The owner walks its blocks by owned_block and finds their partials
      // from owned_slots on (merge_in_cluster): every block once, each its own.
      std::vector<int> walked(size_t(blocks), 0);
      for (int s = 0; s < active; ++s)
        for (int j = 0; j < layout.owned_by(s); ++j) {
          const int b = layout.owned_block(s, j);
          ASSERT_LT(b, blocks) << "split " << s << "'s block " << j << " of " << active << " splits, " << blocks;
          EXPECT_EQ(layout.owner(b), s);
          EXPECT_EQ(layout.owned_slots(j), layout.slot(b, 0));
          ++walked[size_t(b)];
        }
      for (int b = 0; b < blocks; ++b) EXPECT_EQ(walked[size_t(b)], 1) << "block " << b << " walked by its owner";
    }
  }
}

}  // namespace
}  // namespace brioche::cuda
