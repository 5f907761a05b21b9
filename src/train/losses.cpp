#include "train/losses.h"

#include <cmath>

#include "core/error.h"

namespace brioche::train {

namespace {

double sigmoid(double x) { return x >= 0 ? 1.0 / (1.0 + std::exp(-x)) : std::exp(x) / (1.0 + std::exp(x)); }
// −log σ(x) = softplus(−x)
double neg_log_sigmoid(double x) { return x >= 0 ? std::log1p(std::exp(-x)) : -x + std::log1p(std::exp(x)); }

// d log1mexp(x)/dx = −eˣ/(1 − eˣ) = −1/(e^{−x} − 1) = −1/expm1(−x)
double d_log1mexp(double x) { return -1.0 / std::expm1(-x); }

void sft(const LossConfig&, std::span<const SequenceLogps> seqs, LossValue& out) {
  double sum = 0.0;
  int64_t n = 0;
  for (const auto& s : seqs) sum += s.response_sum + s.prompt_sum, n += s.response_n + s.prompt_n;
  BRIOCHE_CHECK(n > 0, "sft loss: the batch has no scored tokens");
  out.loss = out.nll = -sum / double(n);
  out.tokens = n;
  for (size_t i = 0; i < seqs.size(); ++i) out.d_response_sum[i] = out.d_prompt_sum[i] = -1.0 / double(n);
}

void preference(const LossConfig& c, std::span<const SequenceLogps> seqs, std::span<const SequenceLogps> ref,
                LossValue& out) {
  BRIOCHE_CHECK(seqs.size() % 2 == 0, "preference loss: ", seqs.size(), " sequences is not whole pairs");
  const int pairs = int(seqs.size() / 2);
  out.n_pairs = pairs;
  if (needs_reference(c.method)) {
    BRIOCHE_CHECK(ref.size() == seqs.size(), c.method == Method::DPO ? "dpo" : "ipo", ": ", ref.size(),
                  " reference log-probs for ", seqs.size(), " sequences");
  }
  // The NLL term of ORPO (weight 1) and of DPO/IPO with rpo_alpha (weight α):
  // token mean over the chosen sequences of the batch.
  if (has_nll_term(c)) {
    const double weight = c.method == Method::ORPO ? 1.0 : double(*c.rpo_alpha);
    double nll_sum = 0.0;
    int64_t nll_n = 0;
    for (int i = 0; i < pairs; ++i) {
      const auto& w = seqs[size_t(2 * i)];
      nll_sum += w.response_sum + w.prompt_sum;
      nll_n += w.response_n + w.prompt_n;
    }
    BRIOCHE_CHECK(nll_n > 0, method_name(c.method), " loss: the chosen sequences have no scored tokens");
    out.nll = -nll_sum / double(nll_n);
    out.tokens = nll_n;
    out.loss = weight * out.nll;
    for (int i = 0; i < pairs; ++i) {
      out.d_response_sum[size_t(2 * i)] = -weight / double(nll_n);
      out.d_prompt_sum[size_t(2 * i)] = -weight / double(nll_n);
    }
  }
  for (int i = 0; i < pairs; ++i) {
    const auto& w = seqs[size_t(2 * i)];
    const auto& r = seqs[size_t(2 * i + 1)];
    BRIOCHE_CHECK(w.response_n > 0 && r.response_n > 0, "preference loss: pair ", i, " has an empty response");
    const double lw = w.response_mean(), lr = r.response_mean();
    out.margin_sum += lw - lr;
    out.chosen_mean_sum += lw;
    out.rejected_mean_sum += lr;
    double pair_loss = 0.0, d_rw = 0.0, d_rr = 0.0;  // d pair_loss / d R_w, d R_r
    bool chosen_ahead = lw > lr;
    switch (c.method) {
      case Method::ORPO: {
        const double o = (lw - lr) - (log1mexp(lw) - log1mexp(lr));
        pair_loss = neg_log_sigmoid(o);
        out.log_odds_ratio_sum -= pair_loss;  // log σ(o)
        out.log_odds_chosen_sum += o;
        out.reward_chosen_sum += c.orpo_lambda * lw, out.reward_rejected_sum += c.orpo_lambda * lr;
        const double d_o = -sigmoid(-o);  // d(−log σ(o))/do
        d_rw = d_o * (1.0 - d_log1mexp(lw)) / w.response_n;
        d_rr = -d_o * (1.0 - d_log1mexp(lr)) / r.response_n;
        pair_loss *= c.orpo_lambda, d_rw *= c.orpo_lambda, d_rr *= c.orpo_lambda;
        break;
      }
      case Method::DPO: {
        const double rw = w.response_sum - ref[size_t(2 * i)].response_sum;
        const double rr = r.response_sum - ref[size_t(2 * i + 1)].response_sum;
        const double x = c.beta * (rw - rr);
        out.reward_chosen_sum += c.beta * rw, out.reward_rejected_sum += c.beta * rr;
        pair_loss = neg_log_sigmoid(x);
        d_rw = -c.beta * sigmoid(-x);
        d_rr = -d_rw;
        chosen_ahead = rw > rr;
        break;
      }
      case Method::IPO: {
        const double rw = lw - ref[size_t(2 * i)].response_mean();
        const double rr = lr - ref[size_t(2 * i + 1)].response_mean();
        const double x = (rw - rr) - 1.0 / (2.0 * c.beta);
        out.reward_chosen_sum += c.beta * (w.response_sum - ref[size_t(2 * i)].response_sum);
        out.reward_rejected_sum += c.beta * (r.response_sum - ref[size_t(2 * i + 1)].response_sum);
        pair_loss = x * x;
        d_rw = 2.0 * x / w.response_n;
        d_rr = -2.0 * x / r.response_n;
        // TRL's rewards/accuracies compares its (summed) rewards
        chosen_ahead =
            w.response_sum - ref[size_t(2 * i)].response_sum > r.response_sum - ref[size_t(2 * i + 1)].response_sum;
        break;
      }
      case Method::SimPO: {
        const double x = c.beta * (lw - lr) - c.simpo_gamma;
        out.reward_chosen_sum += c.beta * lw, out.reward_rejected_sum += c.beta * lr;
        pair_loss = neg_log_sigmoid(x);
        const double d = -c.beta * sigmoid(-x);
        d_rw = d / w.response_n;
        d_rr = -d / r.response_n;
        break;
      }
      case Method::SFT: break;
    }
    out.correct += chosen_ahead ? 1.0 : 0.0;
    const bool summed = needs_reference(c.method);  // DPO/IPO log summed log-probs, ORPO/SimPO means
    out.trl_logps_chosen_sum += summed ? w.response_sum : lw;
    out.trl_logps_rejected_sum += summed ? r.response_sum : lr;
    out.or_loss_sum += c.method == Method::ORPO ? pair_loss / c.orpo_lambda : pair_loss;
    out.loss += pair_loss / pairs;
    out.d_response_sum[size_t(2 * i)] += d_rw / pairs;
    out.d_response_sum[size_t(2 * i + 1)] += d_rr / pairs;
  }
}

}  // namespace

Method parse_method(const std::string& name) {
  if (name == "sft") return Method::SFT;
  if (name == "dpo") return Method::DPO;
  if (name == "orpo") return Method::ORPO;
  if (name == "simpo") return Method::SimPO;
  if (name == "ipo") return Method::IPO;
  fail("method: expected sft, dpo, orpo, simpo or ipo, got '", name, "'");
}

std::string method_name(Method m) {
  switch (m) {
    case Method::SFT: return "sft";
    case Method::DPO: return "dpo";
    case Method::ORPO: return "orpo";
    case Method::SimPO: return "simpo";
    case Method::IPO: return "ipo";
  }
  return "?";
}

SftScope parse_sft_scope(const std::string& name) {
  if (name == "full") return SftScope::Full;
  if (name == "response") return SftScope::Response;
  fail("sft_scope: expected full or response, got '", name, "'");
}

bool is_preference(Method m) { return m != Method::SFT; }
bool needs_reference(Method m) { return m == Method::DPO || m == Method::IPO; }
bool has_nll_term(const LossConfig& c) {
  return c.method == Method::ORPO || (needs_reference(c.method) && c.rpo_alpha.has_value());
}

double log1mexp(double x) {
  // log(1 − eˣ): log1p(−eˣ) is accurate for x < −ln 2, log(−expm1(x)) near 0.
  return x < -0.6931471805599453 ? std::log1p(-std::exp(x)) : std::log(-std::expm1(x));
}

std::vector<SequenceLogps> sequence_logps(std::span<const ScoredToken> scored, std::span<const float> logp,
                                          int n_sequences) {
  BRIOCHE_CHECK(scored.size() == logp.size(), "sequence_logps: ", logp.size(), " log-probs for ", scored.size(),
                " tokens");
  std::vector<SequenceLogps> out(static_cast<size_t>(n_sequences));
  for (size_t i = 0; i < scored.size(); ++i) {
    auto& s = out[size_t(scored[i].sequence)];
    if (scored[i].response) {
      s.response_sum += logp[i];
      s.response_n += 1;
    } else {
      s.prompt_sum += logp[i];
      s.prompt_n += 1;
    }
  }
  return out;
}

LossValue compute_loss(const LossConfig& c, std::span<const SequenceLogps> seqs,
                       std::span<const SequenceLogps> reference) {
  LossValue out;
  out.d_response_sum.assign(seqs.size(), 0.0);
  out.d_prompt_sum.assign(seqs.size(), 0.0);
  if (c.method == Method::SFT) {
    sft(c, seqs, out);
  } else {
    preference(c, seqs, reference, out);
  }
  return out;
}

std::vector<float> token_grads(std::span<const ScoredToken> scored, const LossValue& loss, double scale) {
  std::vector<float> g(scored.size());
  for (size_t i = 0; i < scored.size(); ++i) {
    const auto s = size_t(scored[i].sequence);
    g[i] = float(scale * (scored[i].response ? loss.d_response_sum[s] : loss.d_prompt_sum[s]));
  }
  return g;
}

}  // namespace brioche::train
