// Training objectives on per-sequence log-probabilities.
//
// Every loss reads, per logical sequence s, the sum of log p over its scored
// response tokens (R_s, count n_s; mean ℓ_s = R_s/n_s) and over its scored
// prompt tokens (P_s, count p_s; only present for sft_scope=full), and
// returns the loss with dL/dR_s and dL/dP_s: a token's log-prob gradient is
// that of its sequence's sum. Preference batches pair sequences: 2i chosen
// (w), 2i+1 rejected (r); B pairs.
//
//   SFT   L = −Σ_s (R_s + P_s) / Σ_s (n_s + p_s)                 (token mean over the batch)
//   ORPO  L = NLL + λ · mean_i −log σ(o_i)                         (Hong et al. 2024, TRL ORPOTrainer)
//         NLL = −Σ_w (R_w + P_w) / Σ_w (n_w + p_w)                 (chosen only; P from sft_scope=full)
//         o   = (ℓ_w − ℓ_r) − (log1mexp(ℓ_w) − log1mexp(ℓ_r)),  log1mexp(x) = log(1 − eˣ)
//   DPO   L = mean_i −log σ(β((R_w − R_w^ref) − (R_r − R_r^ref)))   (sums; ref = frozen base)
//   IPO   L = mean_i ((ℓ_w − ℓ_w^ref) − (ℓ_r − ℓ_r^ref) − 1/(2β))²  (means, as TRL)
//         either + α · NLL with rpo_alpha α (RPO, Pang et al. 2024): the NLL of
//         ORPO above, a token mean over the batch's chosen replies, as TRL's
//         rpo_alpha and TRL 1.16's loss_type ["sigmoid", "sft"], loss_weights [1, α]
//   SimPO L = mean_i −log σ(β(ℓ_w − ℓ_r) − γ)                       (means, no reference)
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "train/token_batch.h"

namespace brioche::train {

enum class Method : uint8_t { SFT, DPO, ORPO, SimPO, IPO };
enum class SftScope : uint8_t { Full, Response };

Method parse_method(const std::string& name);  // "sft" | "dpo" | "orpo" | "simpo" | "ipo"
std::string method_name(Method m);
SftScope parse_sft_scope(const std::string& name);  // "full" | "response"
bool is_preference(Method m);
bool needs_reference(Method m);  // DPO, IPO

struct LossConfig {
  Method method = Method::SFT;
  float orpo_lambda = 0.1f;
  float beta = 0.1f;         // DPO / IPO / SimPO temperature
  float simpo_gamma = 0.5f;  // SimPO target margin
  // DPO / IPO: weight of the chosen replies' NLL added to the loss; unset = no
  // NLL term (TRL's rpo_alpha None).
  std::optional<float> rpo_alpha;
};

// Whether the loss has an NLL term on the chosen replies (ORPO always; DPO and
// IPO with rpo_alpha): the trainer logs it as TRL's nll_loss.
bool has_nll_term(const LossConfig& config);

struct SequenceLogps {
  double response_sum = 0.0;
  int response_n = 0;
  double prompt_sum = 0.0;
  int prompt_n = 0;
  double response_mean() const { return response_n > 0 ? response_sum / response_n : 0.0; }
};

std::vector<SequenceLogps> sequence_logps(std::span<const ScoredToken> scored, std::span<const float> logp,
                                          int n_sequences);

struct LossValue {
  double loss = 0.0;
  std::vector<double> d_response_sum;  // [n_sequences]
  std::vector<double> d_prompt_sum;    // [n_sequences]
  // Preference metrics (sums over pairs; divide by n_pairs).
  int n_pairs = 0;
  double nll = 0.0;          // the NLL term, unweighted (ORPO, DPO/IPO with rpo_alpha) or the loss (SFT)
  double or_loss_sum = 0.0;  // Σ −log σ(o) (ORPO) or Σ per-pair loss (others)
  double correct = 0.0;      // pairs with the chosen ahead (ℓ_w > ℓ_r, or reward_w > reward_r)
  double margin_sum = 0.0;   // Σ (ℓ_w − ℓ_r)
  double chosen_mean_sum = 0.0, rejected_mean_sum = 0.0;
  // TRL's rewards (sums over pairs), as TRL 1.16 logs them: DPO and IPO
  // β·(π − π_ref) of the summed log-probs (DPOTrainer rewards every loss
  // type so, though IPO's loss reads per-token means), ORPO and SimPO
  // β·(mean log-prob) with ORPO's β the λ; and ORPO's log σ(log-odds) and
  // log-odds. TRL's logps/*: the summed log-probs for DPO/IPO, the
  // per-token means for ORPO/SimPO (what each trainer's loss reads).
  double reward_chosen_sum = 0.0, reward_rejected_sum = 0.0;
  double trl_logps_chosen_sum = 0.0, trl_logps_rejected_sum = 0.0;
  double log_odds_ratio_sum = 0.0, log_odds_chosen_sum = 0.0;
  int64_t tokens = 0;  // scored tokens in the NLL
};

// log(1 − eˣ) for x < 0, stable at both ends.
double log1mexp(double x);

// reference: per-sequence log-probs of the frozen base (DPO/IPO), else empty.
LossValue compute_loss(const LossConfig& config, std::span<const SequenceLogps> sequences,
                       std::span<const SequenceLogps> reference);

// d loss / d logp per scored token, times `scale` (1/grad_accumulation_steps).
std::vector<float> token_grads(std::span<const ScoredToken> scored, const LossValue& loss, double scale);

}  // namespace brioche::train
