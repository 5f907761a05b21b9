// The splits and checkpoints of a RecurrentSequence are checked before
// either recurrent op runs: each bad one gets an error naming the sequence,
// what was expected and what was found.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "ops/causal_conv1d.h"
#include "ops/gated_delta_rule.h"

namespace brioche {
namespace {

std::string conv_error(const ops::RecurrentSequence& seq) {
  Tensor x = Tensor::zeros(DType::F32, {8, 4}), w = Tensor::zeros(DType::F32, {4, 4}),
         state = Tensor::zeros(DType::F32, {3, 3, 4}), out = Tensor::zeros(DType::F32, {8, 4});
  try {
    ops::causal_conv1d_silu(x, w, {&seq, 1}, state, out);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string delta_rule_error(const ops::RecurrentSequence& seq) {
  Tensor qk = Tensor::zeros(DType::F32, {8, 4}), v = Tensor::zeros(DType::F32, {8, 4}),
         gates = Tensor::zeros(DType::F32, {8, 1}), state = Tensor::zeros(DType::F32, {3, 1, 4, 4}),
         out = Tensor::zeros(DType::F32, {8, 4});
  try {
    ops::gated_delta_rule({.q = qk, .k = qk, .v = v, .g = gates, .beta = gates},
                          {.n_k_heads = 1, .n_v_heads = 1, .key_dim = 4, .value_dim = 4}, {&seq, 1}, state, out);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(RecurrentSequence, BadSplitsAndCheckpointsAreRefusedByBothOps) {
  const std::vector<int32_t> outside = {10, 20}, descending = {14, 12};
  const std::vector<ops::StateCheckpoint> own_slot = {{.position = 12, .slot = 0}},
                                          no_slot = {{.position = 12, .slot = 3}},
                                          past_end = {{.position = 19, .slot = 1}};
  const ops::RecurrentSequence base{.first_row = 0, .n_rows = 8, .state_slot = 0, .first_position = 10};
  struct Case {
    ops::RecurrentSequence seq;
    const char* message;
  };
  std::vector<Case> cases = {
      {base, "has split 10, expected ascending positions inside (10, 18)"},
      {base, "has split 12, expected ascending positions inside (10, 18)"},
      {base, "checkpoints into slot 0, which a sequence of the batch runs in"},
      {base, "checkpoints into slot 3, outside [0, 3)"},
      {base, "has a checkpoint at 19, expected ascending positions in [10, 18]"},
  };
  cases[0].seq.splits = outside;
  cases[1].seq.splits = descending;
  cases[2].seq.checkpoints = own_slot;
  cases[3].seq.checkpoints = no_slot;
  cases[4].seq.checkpoints = past_end;
  for (const Case& c : cases) {
    EXPECT_NE(conv_error(c.seq).find(std::string("causal_conv1d: sequence 0 ") + c.message), std::string::npos)
        << conv_error(c.seq);
    EXPECT_NE(delta_rule_error(c.seq).find(std::string("gated_delta_rule: sequence 0 ") + c.message), std::string::npos)
        << delta_rule_error(c.seq);
  }
  ops::RecurrentSequence good = base;
  const std::vector<int32_t> splits = {11, 15};
  const std::vector<ops::StateCheckpoint> checkpoints = {{.position = 10, .slot = 1}, {.position = 18, .slot = 2}};
  good.splits = splits;
  good.checkpoints = checkpoints;
  EXPECT_EQ(conv_error(good), "");
  EXPECT_EQ(delta_rule_error(good), "");
}

}  // namespace
}  // namespace brioche
