// Validation of a ModelConfig read from a file (see model_config.h for why
// it exists and where it runs).
#include "model/model_config.h"

#include <cmath>
#include <limits>

#include "core/error.h"

namespace brioche::model {

namespace {

// Checks that an int field lies in [lo, hi], naming the file's key.
void check_range(int64_t value, int64_t lo, int64_t hi, const std::string& key, const std::string& source) {
  if (value < lo || value > hi) fail(source, ": ", key, ": expected an integer in ", lo, "..", hi, ", found ", value);
}

// A float the model divides by or takes the log of: finite and > 0.
void check_positive(float value, const std::string& key, const std::string& source) {
  if (!(std::isfinite(value) && value > 0.0f)) fail(source, ": ", key, ": expected a finite number > 0, found ", value);
}

}  // namespace

ConfigKeyNames ConfigKeyNames::gguf(const std::string& arch) {
  auto k = [&](const char* suffix) { return arch + "." + suffix; };
  return {.vocab_size = "token_embd.weight rows",
          .hidden_size = k("embedding_length"),
          .intermediate_size = k("feed_forward_length"),
          .n_layers = k("block_count"),
          .n_heads = k("attention.head_count"),
          .n_kv_heads = k("attention.head_count_kv"),
          .head_dim = k("attention.key_length"),
          .rms_eps = k("attention.layer_norm_rms_epsilon"),
          .max_context = k("context_length"),
          .sliding_window = k("attention.sliding_window"),
          .rope_theta = k("rope.freq_base"),
          .rope_factor = k("rope.scaling.factor"),
          .rope_low_freq_factor = k("rope.scaling.low_freq_factor"),
          .rope_high_freq_factor = k("rope.scaling.high_freq_factor"),
          .rope_original_context = k("rope.scaling.original_context_length"),
          .rope_freq_factors = "rope_freqs.weight"};
}

ConfigKeyNames ConfigKeyNames::hf_config() {
  return {.vocab_size = "vocab_size",
          .hidden_size = "hidden_size",
          .intermediate_size = "intermediate_size",
          .n_layers = "num_hidden_layers",
          .n_heads = "num_attention_heads",
          .n_kv_heads = "num_key_value_heads",
          .head_dim = "head_dim",
          .rms_eps = "rms_norm_eps",
          .max_context = "max_position_embeddings",
          .sliding_window = "sliding_window",
          .rope_theta = "rope_theta",
          .rope_factor = "rope_scaling.factor",
          .rope_low_freq_factor = "rope_scaling.low_freq_factor",
          .rope_high_freq_factor = "rope_scaling.high_freq_factor",
          .rope_original_context = "rope_scaling.original_max_position_embeddings",
          .rope_freq_factors = "rope frequency factors"};
}

ConfigKeyNames ConfigKeyNames::fields() {
  return {.vocab_size = "vocab_size",
          .hidden_size = "hidden_size",
          .intermediate_size = "intermediate_size",
          .n_layers = "n_layers",
          .n_heads = "n_heads",
          .n_kv_heads = "n_kv_heads",
          .head_dim = "head_dim",
          .rms_eps = "rms_eps",
          .max_context = "max_context",
          .sliding_window = "sliding_window",
          .rope_theta = "rope.theta",
          .rope_factor = "rope.scaling.factor",
          .rope_low_freq_factor = "rope.scaling.low_freq_factor",
          .rope_high_freq_factor = "rope.scaling.high_freq_factor",
          .rope_original_context = "rope.scaling.original_context",
          .rope_freq_factors = "rope.freq_factors"};
}

int config_count(int64_t value, const std::string& key, const std::string& source) {
  check_range(value, 0, std::numeric_limits<int>::max(), key, source);
  return int(value);
}

float config_float(double value) {
  constexpr double kMax = std::numeric_limits<float>::max();
  if (std::isnan(value)) return std::numeric_limits<float>::quiet_NaN();
  if (value > kMax) return std::numeric_limits<float>::infinity();
  if (value < -kMax) return -std::numeric_limits<float>::infinity();
  return float(value);
}

int derived_head_dim(int hidden_size, int n_heads, const ConfigKeyNames& keys, const std::string& source) {
  check_range(hidden_size, 1, kMaxHiddenSize, keys.hidden_size, source);
  check_range(n_heads, 1, kMaxHeads, keys.n_heads, source);
  if (hidden_size % n_heads != 0) {
    fail(source, ": ", keys.n_heads, ": expected a divisor of ", keys.hidden_size, " ", hidden_size, " (no ",
         keys.head_dim, " given, so head_dim = hidden / heads), found ", n_heads);
  }
  return hidden_size / n_heads;
}

void validate_model_config(const ModelConfig& c, const ConfigKeyNames& keys, const std::string& source) {
  check_range(c.n_layers, 1, kMaxLayers, keys.n_layers, source);
  check_range(c.hidden_size, 1, kMaxHiddenSize, keys.hidden_size, source);
  check_range(c.intermediate_size, 1, kMaxIntermediateSize, keys.intermediate_size, source);
  check_range(c.vocab_size, 1, std::numeric_limits<int>::max(), keys.vocab_size, source);
  check_range(c.n_heads, 1, kMaxHeads, keys.n_heads, source);
  check_range(c.n_kv_heads, 1, c.n_heads, keys.n_kv_heads, source);
  if (c.n_heads % c.n_kv_heads != 0) {
    fail(source, ": ", keys.n_kv_heads, ": expected a divisor of ", keys.n_heads, " ", c.n_heads,
         " (each kv head serves a whole group of query heads), found ", c.n_kv_heads);
  }
  if (c.n_heads / c.n_kv_heads > kMaxGqaGroup) {
    fail(source, ": ", keys.n_kv_heads, ": expected at least ", (c.n_heads + kMaxGqaGroup - 1) / kMaxGqaGroup,
         " (groups of at most ", kMaxGqaGroup, " query heads per kv head, the attention kernels' limit), found ",
         c.n_kv_heads, " for ", c.n_heads, " heads");
  }
  check_range(c.head_dim, 2, kMaxHeadDim, keys.head_dim, source);
  if (c.head_dim % 2 != 0) {
    fail(source, ": ", keys.head_dim, ": expected an even number (RoPE rotates pairs), found ", c.head_dim);
  }
  check_range(c.max_context, 0, kMaxContext, keys.max_context, source);
  check_range(c.sliding_window, 0, kMaxContext, keys.sliding_window, source);
  if (!(std::isfinite(c.rms_eps) && c.rms_eps >= 0.0f && c.rms_eps <= 1.0f)) {
    fail(source, ": ", keys.rms_eps, ": expected a number in [0, 1], found ", c.rms_eps);
  }
  check_positive(c.rope.theta, keys.rope_theta, source);
  const ops::RopeScaling& s = c.rope.scaling;
  if (s.kind != ops::RopeScalingKind::None) check_positive(s.factor, keys.rope_factor, source);
  if (s.kind == ops::RopeScalingKind::Llama3) {
    // The blend divides by (high - low) and the context by each factor.
    check_positive(s.low_freq_factor, keys.rope_low_freq_factor, source);
    check_positive(s.high_freq_factor, keys.rope_high_freq_factor, source);
    if (!(s.high_freq_factor > s.low_freq_factor)) {
      fail(source, ": ", keys.rope_high_freq_factor, ": expected more than ", keys.rope_low_freq_factor, " ",
           s.low_freq_factor, ", found ", s.high_freq_factor);
    }
    check_range(s.original_context, 1, kMaxContext, keys.rope_original_context, source);
  }
  if (!c.rope.freq_factors.empty()) {
    if (int64_t(c.rope.freq_factors.size()) != c.head_dim / 2) {
      fail(source, ": ", keys.rope_freq_factors, ": expected ", c.head_dim / 2, " factors (head_dim / 2), found ",
           c.rope.freq_factors.size());
    }
    for (size_t i = 0; i < c.rope.freq_factors.size(); ++i) {
      check_positive(c.rope.freq_factors[i], keys.rope_freq_factors + "[" + std::to_string(i) + "]", source);
    }
  }
  // With the bounds above every product the model forms fits easily
  // (q_dim <= 2^20; vocab x hidden < 2^49 elements; layers x 3 x hidden x
  // intermediate < 2^52), so sizes computed in int64 or size_t cannot wrap.
  static_assert(int64_t(kMaxHeads) * kMaxHeadDim <= std::numeric_limits<int>::max());
  static_assert(int64_t(kMaxLayers) * 3 * kMaxHiddenSize * kMaxIntermediateSize < (int64_t(1) << 62));
}

}  // namespace brioche::model
