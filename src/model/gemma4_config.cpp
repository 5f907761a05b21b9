// config.json -> Gemma4Config (see gemma4_config.h for the layer rules).
// Defaults are transformers 5.25's Gemma4TextConfig defaults; every count is
// range-checked and every string value is one the model implements, else the
// error names the key and what was expected.
#include "model/gemma4_config.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/config_fields.h"

namespace brioche::model {

using nlohmann::json;

namespace {

Gemma4Rope read_rope(const ConfigFields& rope_parameters, const std::string& type) {
  static const json kDefaults = {
      {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
      {"full_attention", {{"rope_type", "proportional"}, {"partial_rotary_factor", 0.25}, {"rope_theta", 1000000.0}}}};
  const json* given = rope_parameters.find(type);
  if (given != nullptr && !given->is_object()) rope_parameters.wrong(type, "an object", *given);
  const ConfigFields r{given != nullptr ? *given : kDefaults[type], rope_parameters.prefix + type + ".",
                       rope_parameters.source};
  r.only({"rope_type", "rope_theta", "partial_rotary_factor", "factor"});
  Gemma4Rope rope;
  const std::string kind = r.string("rope_type", "default");
  if (kind != "default" && kind != "proportional") r.wrong("rope_type", "\"default\" or \"proportional\"", json(kind));
  rope.proportional = kind == "proportional";
  if (!r.has("rope_theta")) r.absent("rope_theta", "a finite number > 0");
  rope.theta = r.positive("rope_theta", 10000.0f);
  if (rope.proportional) {
    rope.partial_rotary_factor = r.positive("partial_rotary_factor", 1.0f, 1.0f);
    rope.factor = r.positive("factor", 1.0f);
  } else {
    // transformers' default RoPE reads neither: refused rather than ignored.
    for (const char* key : {"partial_rotary_factor", "factor"})
      if (r.has(key)) r.wrong(key, "absent with rope_type \"default\"", *r.find(key));
  }
  return rope;
}

void check_heads(const ConfigFields& f, const std::string& key, int n_heads, int n_kv_heads) {
  if (n_heads % n_kv_heads != 0)
    f.wrong(key, "a divisor of num_attention_heads " + std::to_string(n_heads), json(n_kv_heads));
  if (n_heads / n_kv_heads > kMaxGqaGroup)
    f.wrong(key,
            "at least num_attention_heads / " + std::to_string(kMaxGqaGroup) +
                " (the attention kernels' largest GQA group)",
            json(n_kv_heads));
}

void check_head_dim(const ConfigFields& f, const std::string& key, int head_dim) {
  if (head_dim % 2 != 0) f.wrong(key, "an even number (RoPE rotates pairs)", json(head_dim));
}

}  // namespace

std::vector<float> Gemma4Config::inv_freq(int layer) const {
  const Gemma4LayerSpec& l = layers[size_t(layer)];
  const Gemma4Rope& r = l.sliding ? rope_sliding : rope_full;
  const int half = l.head_dim / 2;
  // transformers: rope_angles = int(partial_rotary_factor * head_dim // 2).
  const int rotated = r.proportional ? int(std::floor(double(r.partial_rotary_factor) * l.head_dim / 2.0)) : half;
  std::vector<float> w = ops::rope_inv_freq(l.head_dim, r.theta, {});
  for (int i = 0; i < half; ++i) w[size_t(i)] = i < rotated ? w[size_t(i)] / r.factor : 0.0f;
  return w;
}

bool is_gemma4_config(const json& config) {
  if (!config.is_object()) return false;
  auto type = config.find("model_type");
  if (type != config.end() && type->is_string()) return *type == "gemma4" || *type == "gemma4_text";
  auto classes = config.find("architectures");
  if (classes != config.end() && classes->is_array() && !classes->empty() && (*classes)[0].is_string()) {
    const std::string cls = (*classes)[0].get<std::string>();
    return cls == "Gemma4ForCausalLM" || cls == "Gemma4ForConditionalGeneration";
  }
  return false;
}

Gemma4Config read_gemma4_config(const json& config, const std::string& source) {
  BRIOCHE_CHECK(config.is_object(), source, ": expected a JSON object");
  Gemma4Config g;
  const ConfigFields top{config, "", source};
  const std::string model_type = top.string("model_type", "");
  const bool nested = model_type == "gemma4" || (model_type.empty() && top.has("text_config"));
  g.multimodal = nested;
  g.tensor_prefix = nested ? "model.language_model." : "model.";
  const ConfigFields t = nested ? top.object("text_config") : top;

  ModelConfig& c = g.base;
  c.architecture = "gemma4";
  c.vocab_size = t.count("vocab_size", 1, std::numeric_limits<int>::max());
  c.hidden_size = t.count("hidden_size", 1, kMaxHiddenSize);
  c.intermediate_size = t.count("intermediate_size", 1, kMaxIntermediateSize);
  c.n_layers = t.count("num_hidden_layers", 1, kMaxLayers);
  c.n_heads = t.count("num_attention_heads", 1, kMaxHeads);
  c.n_kv_heads = t.count("num_key_value_heads", 1, c.n_heads, 4);
  check_heads(t, "num_key_value_heads", c.n_heads, c.n_kv_heads);
  c.head_dim = t.count("head_dim", 2, kMaxHeadDim, 256);
  check_head_dim(t, "head_dim", c.head_dim);
  c.max_context = t.count("max_position_embeddings", 0, kMaxContext, 131072);
  c.sliding_window = t.count("sliding_window", 1, kMaxContext, 512);
  {
    const json* eps = t.find("rms_norm_eps");
    c.rms_eps = 1e-6f;
    if (eps != nullptr) {
      if (!eps->is_number() || !(eps->get<double>() >= 0.0 && eps->get<double>() <= 1.0))
        t.wrong("rms_norm_eps", "a number in [0, 1]", *eps);
      c.rms_eps = float(eps->get<double>());
    }
  }
  c.tied_embeddings = t.boolean("tie_word_embeddings", top.boolean("tie_word_embeddings", true));
  c.rope.style = ops::RopeStyle::NeoX;

  // What this implementation computes, refused otherwise (naming the key).
  if (const std::string act = t.string("hidden_activation", "gelu_pytorch_tanh"); act != "gelu_pytorch_tanh")
    t.wrong("hidden_activation", "\"gelu_pytorch_tanh\"", json(act));
  g.attention_bias = t.boolean("attention_bias", false);
  if (const std::string bidi = t.string("use_bidirectional_attention", ""); !bidi.empty() && bidi != "vision")
    t.wrong("use_bidirectional_attention", "null or \"vision\" (causal text attention)", json(bidi));
  if (t.has("final_logit_softcapping")) g.final_logit_softcap = t.positive("final_logit_softcapping", 0.0f);

  // Layer types; transformers forces the last layer to full attention.
  std::vector<bool> sliding(size_t(c.n_layers));
  if (const json* types = t.find("layer_types")) {
    if (!types->is_array() || int(types->size()) != c.n_layers)
      t.wrong("layer_types", "an array of num_hidden_layers (" + std::to_string(c.n_layers) + ") layer types", *types);
    for (int i = 0; i < c.n_layers; ++i) {
      const json& v = (*types)[size_t(i)];
      if (v != "sliding_attention" && v != "full_attention")
        t.wrong("layer_types[" + std::to_string(i) + "]", "\"sliding_attention\" or \"full_attention\"", v);
      sliding[size_t(i)] = v == "sliding_attention";
    }
  } else {
    for (int i = 0; i < c.n_layers; ++i) sliding[size_t(i)] = (i + 1) % 6 != 0;
  }
  sliding.back() = false;

  static const json kNoRope = json::object();
  const json* rope_json = t.find("rope_parameters");
  if (rope_json != nullptr && !rope_json->is_object()) t.wrong("rope_parameters", "an object", *rope_json);
  const ConfigFields rope{rope_json != nullptr ? *rope_json : kNoRope, t.prefix + "rope_parameters.", source};
  rope.only({"sliding_attention", "full_attention"});
  if (std::count(sliding.begin(), sliding.end(), true) > 0) g.rope_sliding = read_rope(rope, "sliding_attention");
  g.rope_full = read_rope(rope, "full_attention");

  // Full layers' shape: per_layer_config, else global_head_dim (+ kv heads).
  const bool k_eq_v = t.boolean("attention_k_eq_v", false);
  g.layers.resize(size_t(c.n_layers));
  for (int i = 0; i < c.n_layers; ++i) {
    Gemma4LayerSpec& l = g.layers[size_t(i)];
    l.sliding = sliding[size_t(i)];
    l.head_dim = c.head_dim;
    l.n_kv_heads = c.n_kv_heads;
    l.v_from_k = k_eq_v && !l.sliding;
  }
  if (const json* per_layer = t.find("per_layer_config")) {
    if (!per_layer->is_object()) t.wrong("per_layer_config", "an object of layer index -> overrides", *per_layer);
    const ConfigFields pl{*per_layer, t.prefix + "per_layer_config.", source};
    for (auto it = per_layer->begin(); it != per_layer->end(); ++it) {
      const std::string& key = it.key();
      int layer = -1;
      if (!key.empty() && key.size() <= 6 && std::all_of(key.begin(), key.end(), ::isdigit)) layer = std::stoi(key);
      if (layer < 0 || layer >= c.n_layers)
        pl.wrong(key, "a layer index in 0.." + std::to_string(c.n_layers - 1) + " as the key", json(key));
      if (!it->is_object()) pl.wrong(key, "an object", *it);
      const ConfigFields o{*it, pl.prefix + key + ".", source};
      o.only({"head_dim", "num_key_value_heads"});
      Gemma4LayerSpec& l = g.layers[size_t(layer)];
      l.head_dim = o.count("head_dim", 2, kMaxHeadDim, l.head_dim);
      check_head_dim(o, "head_dim", l.head_dim);
      l.n_kv_heads = o.count("num_key_value_heads", 1, c.n_heads, l.n_kv_heads);
      check_heads(o, "num_key_value_heads", c.n_heads, l.n_kv_heads);
    }
  } else {
    const int global_head_dim = t.count("global_head_dim", 2, kMaxHeadDim, 512);
    check_head_dim(t, "global_head_dim", global_head_dim);
    int global_kv = 0;
    if (k_eq_v && t.has("num_global_key_value_heads")) {
      global_kv = t.count("num_global_key_value_heads", 1, c.n_heads);
      check_heads(t, "num_global_key_value_heads", c.n_heads, global_kv);
    }
    for (Gemma4LayerSpec& l : g.layers) {
      if (l.sliding) continue;
      l.head_dim = global_head_dim;
      if (global_kv > 0) l.n_kv_heads = global_kv;
    }
  }

  // KV sharing: the last num_kv_shared_layers layers read the cache of the
  // last earlier layer of their type.
  const int n_shared = t.count("num_kv_shared_layers", 0, c.n_layers - 1, 0);
  const int first_shared = c.n_layers - n_shared;
  const bool double_wide = t.boolean("use_double_wide_mlp", false);
  for (int i = 0; i < c.n_layers; ++i) {
    Gemma4LayerSpec& l = g.layers[size_t(i)];
    l.kv_source = i;
    l.intermediate_size = c.intermediate_size;
    if (i < first_shared) continue;
    int source = -1;
    for (int j = first_shared - 1; j >= 0 && source < 0; --j)
      if (g.layers[size_t(j)].sliding == l.sliding) source = j;
    if (source < 0)
      t.wrong("num_kv_shared_layers",
              "a count that leaves a " + std::string(l.sliding ? "sliding" : "full") +
                  " attention layer before the shared ones (layer " + std::to_string(i) + " reads its K/V)",
              json(n_shared));
    const Gemma4LayerSpec& s = g.layers[size_t(source)];
    if (s.head_dim != l.head_dim || s.n_kv_heads != l.n_kv_heads)
      t.wrong("per_layer_config",
              "layer " + std::to_string(i) + " shaped as layer " + std::to_string(source) + " whose K/V it reads",
              json(std::to_string(l.n_kv_heads) + " x " + std::to_string(l.head_dim)));
    l.kv_source = source;
    if (double_wide) l.intermediate_size = 2 * c.intermediate_size;
  }
  for (int i = 0; i < c.n_layers; ++i) {
    const Gemma4LayerSpec& l = g.layers[size_t(i)];
    // A KV-shared layer keeps none: it reads its source's (same type, so the same window).
    c.kv_layers.push_back(l.kv_source == i ? KvLayerShape{l.n_kv_heads, l.head_dim, l.sliding ? c.sliding_window : 0}
                                           : KvLayerShape{0, 0, 0});
  }

  // Per-layer inputs.
  g.ple_dim = t.count("hidden_size_per_layer_input", 0, kMaxHiddenSize, 256);
  if (g.ple_dim > 0) {
    g.ple_vocab = t.count("vocab_size_per_layer_input", 1, std::numeric_limits<int>::max(), 262144);
    if (int64_t(g.ple_dim) * c.n_layers > kMaxIntermediateSize)
      t.wrong("hidden_size_per_layer_input",
              "at most " + std::to_string(kMaxIntermediateSize / c.n_layers) +
                  " (times num_hidden_layers, the packed per-layer width)",
              json(g.ple_dim));
  }

  g.moe = t.boolean("enable_moe_block", false);
  if (g.moe) {
    g.n_experts = t.count("num_experts", 1, 4096);
    g.top_k_experts = t.count("top_k_experts", 1, g.n_experts);
    g.moe_intermediate_size = t.count("moe_intermediate_size", 1, kMaxIntermediateSize);
  }

  // The shared fields' bounds (names as config.json spells them).
  ConfigKeyNames keys = ConfigKeyNames::hf_config();
  for (std::string* k :
       {&keys.vocab_size, &keys.hidden_size, &keys.intermediate_size, &keys.n_layers, &keys.n_heads, &keys.n_kv_heads,
        &keys.head_dim, &keys.rms_eps, &keys.max_context, &keys.sliding_window, &keys.rope_theta})
    *k = t.prefix + *k;
  validate_model_config(c, keys, source);
  return g;
}

}  // namespace brioche::model
