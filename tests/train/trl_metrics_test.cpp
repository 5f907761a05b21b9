// The preference metrics under TRL's names, from TRL's definitions
// (trl.DPOTrainer.dpo_loss, trl.ORPOTrainer.odds_ratio_loss, trl.CPOTrainer
// for SimPO): one pair with known log-probs, each method's rewards,
// ORPO's log_odds_ratio = mean log σ(log-odds) and log_odds_chosen = mean log-odds.
#include <gtest/gtest.h>

#include <cmath>

#include "train/losses.h"

namespace brioche::train {
namespace {

// Chosen: 4 response tokens summing to −2 (mean −0.5); rejected: 5 summing to −5 (mean −1).
const SequenceLogps kPolicy[] = {{.response_sum = -2.0, .response_n = 4}, {.response_sum = -5.0, .response_n = 5}};
// The reference (adapter off): chosen −3 (mean −0.75), rejected −4 (mean −0.8).
const SequenceLogps kReference[] = {{.response_sum = -3.0, .response_n = 4}, {.response_sum = -4.0, .response_n = 5}};

TEST(TrlMetrics, DpoRewardsAreBetaTimesSummedLogRatios) {
  const LossValue v = compute_loss({.method = Method::DPO, .beta = 0.1f}, kPolicy, kReference);
  EXPECT_NEAR(v.reward_chosen_sum, 0.1 * (-2.0 - -3.0), 1e-6);    // 0.1
  EXPECT_NEAR(v.reward_rejected_sum, 0.1 * (-5.0 - -4.0), 1e-6);  // −0.1
  EXPECT_EQ(v.correct, 1.0);
  EXPECT_NEAR(v.loss, -std::log(1.0 / (1.0 + std::exp(-0.2))), 1e-6);  // −log σ(β·(Δw − Δr))
  EXPECT_NEAR(v.trl_logps_chosen_sum, -2.0, 1e-12);                    // logps/*: summed log-probs
  EXPECT_NEAR(v.trl_logps_rejected_sum, -5.0, 1e-12);
}

// TRL 1.16's DPOTrainer logs β·(summed log-ratio) as the reward of every loss
// type, IPO included, though IPO's loss reads the per-token means.
TEST(TrlMetrics, IpoRewardsUseSummedLogRatiosAsTrlLogsThem) {
  const LossValue v = compute_loss({.method = Method::IPO, .beta = 0.1f}, kPolicy, kReference);
  EXPECT_NEAR(v.reward_chosen_sum, 0.1 * (-2.0 - -3.0), 1e-6);
  EXPECT_NEAR(v.reward_rejected_sum, 0.1 * (-5.0 - -4.0), 1e-6);
  EXPECT_EQ(v.correct, 1.0);
  const double x = (-0.5 - -0.75) - (-1.0 - -0.8) - 1.0 / (2 * 0.1);  // the loss: per-token means
  EXPECT_NEAR(v.loss, x * x, 1e-5);
  EXPECT_NEAR(v.trl_logps_chosen_sum, -2.0, 1e-12);  // logps/*: sums
}

TEST(TrlMetrics, OrpoRewardsAndLogOdds) {
  const LossValue v = compute_loss({.method = Method::ORPO, .orpo_lambda = 0.25f}, kPolicy, {});
  const double lw = -0.5, lr = -1.0;
  const double log_odds = (lw - lr) - (std::log1p(-std::exp(lw)) - std::log1p(-std::exp(lr)));
  EXPECT_NEAR(v.log_odds_chosen_sum, log_odds, 1e-9);
  EXPECT_NEAR(v.log_odds_ratio_sum, std::log(1.0 / (1.0 + std::exp(-log_odds))), 1e-9);
  EXPECT_NEAR(v.reward_chosen_sum, 0.25 * lw, 1e-6);
  EXPECT_NEAR(v.reward_rejected_sum, 0.25 * lr, 1e-6);
}

TEST(TrlMetrics, SimpoRewardsAreBetaTimesMeanLogProbs) {
  const LossValue v = compute_loss({.method = Method::SimPO, .beta = 2.0f}, kPolicy, {});
  EXPECT_NEAR(v.reward_chosen_sum, 2.0 * -0.5, 1e-6);
  EXPECT_NEAR(v.reward_rejected_sum, 2.0 * -1.0, 1e-6);
  EXPECT_NEAR(v.trl_logps_chosen_sum, -0.5, 1e-12);  // logps/*: per-token means
}

}  // namespace
}  // namespace brioche::train
