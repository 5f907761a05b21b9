#include "model/hf_export.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/safetensors.h"
#include "ops/quantize.h"

namespace brioche::model {

namespace {

using json = nlohmann::json;

const char* hf_class(const std::string& arch) {
  if (arch == "llama") return "LlamaForCausalLM";
  if (arch == "mistral") return "MistralForCausalLM";
  if (arch == "qwen2") return "Qwen2ForCausalLM";
  if (arch == "qwen3") return "Qwen3ForCausalLM";
  return nullptr;
}

// A float as the short decimal a config.json holds (1e-05, not
// 9.999999747378752e-06, the double nearest to the float 1e-5f).
double config_number(float v) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", double(v));
  return std::strtod(text, nullptr);
}

const char* dtype_word(DType d) { return d == DType::F32 ? "float32" : d == DType::F16 ? "float16" : "bfloat16"; }

// llama.cpp's converter stores the Q/K rows of a llama model head by head
// with each head's two rotary halves interleaved: GGUF row h·d + 2i + s is
// Hugging Face row h·d + s·d/2 + i. Undone here on an f32 [rows, cols] copy.
Tensor rows_to_hf_order(const Tensor& f32, int head_dim) {
  Tensor out = Tensor::zeros(DType::F32, {f32.dim(0), f32.dim(1)});
  const size_t row_bytes = size_t(f32.dim(1)) * sizeof(float);
  for (int64_t r = 0; r < f32.dim(0); ++r) {
    const int64_t h = r / head_dim, within = r % head_dim, i = within / 2, s = within % 2;
    std::memcpy(out.row_ptr(h * head_dim + s * (head_dim / 2) + i), f32.row_ptr(r), row_bytes);
  }
  return out;
}

}  // namespace

json hf_config_json(const ModelConfig& c, DType dtype, int bos_token_id, int eos_token_id) {
  const char* cls = hf_class(c.architecture);
  BRIOCHE_CHECK(cls != nullptr, "architecture '", c.architecture,
                "' is not written as a Hugging Face folder (supported: llama, mistral, qwen2, qwen3)");
  BRIOCHE_CHECK(c.rope.freq_factors.empty() || c.rope.scaling.kind == ops::RopeScalingKind::Llama3,
                "RoPE frequency factors without llama3 scaling have no config.json form");
  json j = {{"architectures", {cls}},
            {"model_type", c.architecture},
            {"vocab_size", c.vocab_size},
            {"hidden_size", c.hidden_size},
            {"intermediate_size", c.intermediate_size},
            {"num_hidden_layers", c.n_layers},
            {"num_attention_heads", c.n_heads},
            {"num_key_value_heads", c.n_kv_heads},
            {"head_dim", c.head_dim},
            {"hidden_act", "silu"},
            {"rms_norm_eps", config_number(c.rms_eps)},
            {"max_position_embeddings", c.max_context > 0 ? c.max_context : 4096},
            {"tie_word_embeddings", c.tied_embeddings},
            {"attention_bias", c.qkv_bias},
            {"mlp_bias", false},
            {"attention_dropout", 0.0},
            {"use_cache", true},
            {"dtype", dtype_word(dtype)},
            {"torch_dtype", dtype_word(dtype)}};
  // transformers 5 reads rope_parameters, earlier versions rope_theta + rope_scaling.
  json rope = {{"rope_theta", config_number(c.rope.theta)}, {"rope_type", "default"}};
  const ops::RopeScaling& s = c.rope.scaling;
  if (s.kind == ops::RopeScalingKind::Linear) {
    rope["rope_type"] = "linear";
    rope["factor"] = s.factor;
  } else if (s.kind == ops::RopeScalingKind::Llama3) {
    rope.update({{"rope_type", "llama3"},
                 {"factor", s.factor},
                 {"low_freq_factor", s.low_freq_factor},
                 {"high_freq_factor", s.high_freq_factor},
                 {"original_max_position_embeddings", s.original_context}});
  }
  j["rope_parameters"] = rope;
  j["rope_theta"] = rope["rope_theta"];
  if (rope["rope_type"] != "default") j["rope_scaling"] = rope;
  if (c.sliding_window > 0) j["sliding_window"] = c.sliding_window;
  if (bos_token_id >= 0) j["bos_token_id"] = bos_token_id;
  if (eos_token_id >= 0) j["eos_token_id"] = eos_token_id;
  return j;
}

size_t write_hf_model(const Checkpoint& ck, const HfExportOptions& o) {
  namespace fs = std::filesystem;
  BRIOCHE_CHECK(o.dtype == DType::F32 || o.dtype == DType::F16 || o.dtype == DType::BF16,
                "a Hugging Face folder holds f32, f16 or bf16, got ", dtype_name(o.dtype));
  const json config = hf_config_json(ck.config, o.dtype, o.bos_token_id, o.eos_token_id);
  BRIOCHE_CHECK(!fs::exists(o.directory), o.directory, " exists; choose another path");
  // GGUF llama files carry interleaved Q/K rows; qwen2/qwen3 GGUFs and every
  // safetensors folder keep Hugging Face's order.
  const bool from_interleaved = ck.gguf != nullptr && ck.config.rope.style == ops::RopeStyle::Interleaved;
  const int head_dim = ck.config.head_dim;

  formats::SafetensorsWriter out;
  auto matrix = [&](const std::string& name, const Tensor& t, bool per_head_rows) {
    if (!per_head_rows && t.dtype() == o.dtype) {
      out.add(name, t.is_contiguous() ? t : ops::convert(t, o.dtype));
      return;
    }
    Tensor f32 = ops::convert(t, DType::F32);
    if (per_head_rows) f32 = rows_to_hf_order(f32, head_dim);
    out.add(name, o.dtype == DType::F32 ? f32 : ops::convert(f32, o.dtype));
  };
  auto vector = [&](const std::string& name, const Tensor& t) {
    if (!t.defined()) return;
    Tensor f32 = ops::convert(t, DType::F32);
    out.add(name, o.dtype == DType::F32 ? f32 : ops::convert(f32, o.dtype));
  };
  const ModelWeights& w = ck.weights;
  matrix("model.embed_tokens.weight", w.token_embd, false);
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const LayerWeights& L = w.layers[l];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    vector(p + "input_layernorm.weight", L.attn_norm);
    vector(p + "post_attention_layernorm.weight", L.ffn_norm);
    matrix(p + "self_attn.q_proj.weight", L.wq, from_interleaved);
    matrix(p + "self_attn.k_proj.weight", L.wk, from_interleaved);
    matrix(p + "self_attn.v_proj.weight", L.wv, false);
    matrix(p + "self_attn.o_proj.weight", L.wo, false);
    BRIOCHE_CHECK(!from_interleaved || !L.bq.defined(), "layer ", l,
                  " has Q/K biases in GGUF's interleaved row order, which this writer does not reorder");
    vector(p + "self_attn.q_proj.bias", L.bq);
    vector(p + "self_attn.k_proj.bias", L.bk);
    vector(p + "self_attn.v_proj.bias", L.bv);
    BRIOCHE_CHECK(!L.bo.defined(), "layer ", l, " has an output-projection bias, which ", ck.config.architecture,
                  " in transformers does not take");
    vector(p + "self_attn.q_norm.weight", L.q_norm);
    vector(p + "self_attn.k_norm.weight", L.k_norm);
    matrix(p + "mlp.gate_proj.weight", L.w_gate, false);
    matrix(p + "mlp.up_proj.weight", L.w_up, false);
    matrix(p + "mlp.down_proj.weight", L.w_down, false);
  }
  vector("model.norm.weight", w.output_norm);
  if (!ck.config.tied_embeddings) matrix("lm_head.weight", w.output, false);
  out.set_metadata({{"format", "pt"}});

  fs::create_directories(o.directory);
  std::ofstream(fs::path(o.directory) / "config.json") << config.dump(2) << "\n";
  const fs::path weights = fs::path(o.directory) / "model.safetensors";
  out.write(weights.string());
  return size_t(fs::file_size(weights));
}

}  // namespace brioche::model
