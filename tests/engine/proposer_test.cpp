// Prompt lookup: which continuation it proposes, and when it has none.
#include <gtest/gtest.h>

#include "core/error.h"
#include "engine/proposer.h"

namespace brioche::engine {
namespace {

using Tokens = std::vector<int32_t>;

TEST(PromptLookup, ProposesWhatFollowedTheLastNgramEarlier) {
  PromptLookupProposer proposer(1, 3);
  // "5 6 7" occurred before, followed by 8 9 10.
  Tokens tokens = {1, 5, 6, 7, 8, 9, 10, 2, 5, 6, 7};
  EXPECT_EQ(proposer.lookup(tokens, 3), (Tokens{8, 9, 10}));
  EXPECT_EQ(proposer.lookup(tokens, 2), (Tokens{8, 9}));
}

TEST(PromptLookup, LongerNgramsWinOverShorterAndRecentOverOld) {
  PromptLookupProposer proposer(1, 2);
  // Last bigram "3 4" occurs at 0 (-> 5); the unigram "4" more recently at 6 (-> 9).
  Tokens tokens = {3, 4, 5, 0, 0, 0, 4, 9, 3, 4};
  EXPECT_EQ(proposer.lookup(tokens, 1), (Tokens{5}));
  // Two earlier occurrences of the bigram: the most recent one's continuation.
  Tokens twice = {3, 4, 5, 3, 4, 6, 3, 4};
  EXPECT_EQ(proposer.lookup(twice, 1), (Tokens{6}));
}

TEST(PromptLookup, TheContinuationStopsAtTheEndOfTheTokens) {
  PromptLookupProposer proposer(1, 1);
  // The latest earlier "7" is at index 2: only 8 follows before the end.
  Tokens tokens = {1, 2, 7, 8, 7};
  EXPECT_EQ(proposer.lookup(tokens, 4), (Tokens{8, 7}));
}

TEST(PromptLookup, NoMatchOrNoRoomProposesNothing) {
  PromptLookupProposer proposer(2, 3);
  EXPECT_TRUE(proposer.lookup(Tokens{1, 2, 3, 4, 5}, 4).empty());
  EXPECT_TRUE(proposer.lookup(Tokens{1, 2, 1, 2}, 0).empty());
  EXPECT_TRUE(proposer.lookup(Tokens{1}, 4).empty());
  EXPECT_TRUE(proposer.lookup(Tokens{}, 4).empty());
  // A bigram that only matches itself (no earlier start) is no match.
  EXPECT_TRUE(proposer.lookup(Tokens{9, 1, 2}, 4).empty());
}

TEST(PromptLookup, RejectsBadNgramRanges) {
  EXPECT_THROW(PromptLookupProposer(0, 2), Error);
  EXPECT_THROW(PromptLookupProposer(3, 2), Error);
}

}  // namespace
}  // namespace brioche::engine
