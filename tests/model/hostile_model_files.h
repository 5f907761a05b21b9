// Tiny model files, valid or made hostile one field at a time: the loader's
// tests (tests/model/hostile_model_test.cpp) and the CLI's
// (tests/cli/hostile_model_cli_test.cpp) run every case of hostile_cases().
//
// A tiny llama: vocab 64, hidden 32, 2 layers, 4 heads of 8 over 2 kv heads,
// f32 zeros (values do not matter to a loader), as a GGUF file (optionally
// with a byte-level tokenizer of any size) or a safetensors directory.
#pragma once

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tensor.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"

namespace brioche::model::testing {

struct TinyShape {
  int vocab = 64, hidden = 32, intermediate = 48, layers = 2, heads = 4, kv_heads = 2, head_dim = 8;
};

inline Tensor ones_f32(std::initializer_list<int64_t> shape) {
  Tensor t = Tensor::zeros(DType::F32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = 1.0f;
  return t;
}

// A GGUF under construction: tests edit metadata and tensors, then write().
struct TinyGguf {
  std::map<std::string, formats::GgufValue> metadata;
  std::map<std::string, Tensor> tensors;

  // `tokenizer_vocab` > 0 adds a gpt2 (byte-level) tokenizer of that many tokens.
  static TinyGguf llama(TinyShape s = {}, int tokenizer_vocab = 0) {
    using formats::GgufType;
    using formats::GgufValue;
    TinyGguf g;
    auto u32 = [](int64_t v) { return GgufValue::integer(GgufType::U32, v); };
    g.metadata["general.architecture"] = GgufValue::string("llama");
    g.metadata["llama.context_length"] = u32(256);
    g.metadata["llama.embedding_length"] = u32(s.hidden);
    g.metadata["llama.block_count"] = u32(s.layers);
    g.metadata["llama.feed_forward_length"] = u32(s.intermediate);
    g.metadata["llama.attention.head_count"] = u32(s.heads);
    g.metadata["llama.attention.head_count_kv"] = u32(s.kv_heads);
    g.metadata["llama.attention.key_length"] = u32(s.head_dim);
    g.metadata["llama.attention.layer_norm_rms_epsilon"] = GgufValue::floating(GgufType::F32, 1e-5);
    g.metadata["llama.rope.freq_base"] = GgufValue::floating(GgufType::F32, 10000.0);
    if (tokenizer_vocab > 0) {
      std::vector<std::string> tokens;
      for (int i = 0; i < tokenizer_vocab; ++i) tokens.push_back("t" + std::to_string(i));
      g.metadata["tokenizer.ggml.model"] = GgufValue::string("gpt2");
      g.metadata["tokenizer.ggml.tokens"] = GgufValue::strings(tokens);
      g.metadata["tokenizer.ggml.merges"] = GgufValue::strings({});
    }
    const int64_t q = int64_t(s.heads) * s.head_dim, kv = int64_t(s.kv_heads) * s.head_dim;
    g.tensors["token_embd.weight"] = Tensor::zeros(DType::F32, {s.vocab, s.hidden});
    g.tensors["output_norm.weight"] = ones_f32({s.hidden});
    for (int l = 0; l < s.layers; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      g.tensors[p + "attn_norm.weight"] = ones_f32({s.hidden});
      g.tensors[p + "ffn_norm.weight"] = ones_f32({s.hidden});
      g.tensors[p + "attn_q.weight"] = Tensor::zeros(DType::F32, {q, s.hidden});
      g.tensors[p + "attn_k.weight"] = Tensor::zeros(DType::F32, {kv, s.hidden});
      g.tensors[p + "attn_v.weight"] = Tensor::zeros(DType::F32, {kv, s.hidden});
      g.tensors[p + "attn_output.weight"] = Tensor::zeros(DType::F32, {s.hidden, q});
      g.tensors[p + "ffn_gate.weight"] = Tensor::zeros(DType::F32, {s.intermediate, s.hidden});
      g.tensors[p + "ffn_up.weight"] = Tensor::zeros(DType::F32, {s.intermediate, s.hidden});
      g.tensors[p + "ffn_down.weight"] = Tensor::zeros(DType::F32, {s.hidden, s.intermediate});
    }
    return g;
  }

  void write(const std::string& path) const {
    formats::GgufWriter w;
    for (const auto& [key, value] : metadata) w.add(key, value);
    for (const auto& [name, tensor] : tensors) w.add_tensor(name, tensor);
    w.write(path);
  }
};

// A safetensors directory under construction: config.json and the tensors of
// model.safetensors, in Hugging Face names.
struct TinySafetensors {
  nlohmann::json config;
  std::map<std::string, Tensor> tensors;

  static TinySafetensors llama(TinyShape s = {}) {
    TinySafetensors d;
    d.config = {{"architectures", {"LlamaForCausalLM"}},
                {"model_type", "llama"},
                {"vocab_size", s.vocab},
                {"hidden_size", s.hidden},
                {"intermediate_size", s.intermediate},
                {"num_hidden_layers", s.layers},
                {"num_attention_heads", s.heads},
                {"num_key_value_heads", s.kv_heads},
                {"head_dim", s.head_dim},
                {"rms_norm_eps", 1e-5},
                {"rope_theta", 10000.0},
                {"max_position_embeddings", 256},
                {"tie_word_embeddings", true}};
    const int64_t q = int64_t(s.heads) * s.head_dim, kv = int64_t(s.kv_heads) * s.head_dim;
    d.tensors["model.embed_tokens.weight"] = Tensor::zeros(DType::F32, {s.vocab, s.hidden});
    d.tensors["model.norm.weight"] = ones_f32({s.hidden});
    for (int l = 0; l < s.layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      d.tensors[p + "input_layernorm.weight"] = ones_f32({s.hidden});
      d.tensors[p + "post_attention_layernorm.weight"] = ones_f32({s.hidden});
      d.tensors[p + "self_attn.q_proj.weight"] = Tensor::zeros(DType::F32, {q, s.hidden});
      d.tensors[p + "self_attn.k_proj.weight"] = Tensor::zeros(DType::F32, {kv, s.hidden});
      d.tensors[p + "self_attn.v_proj.weight"] = Tensor::zeros(DType::F32, {kv, s.hidden});
      d.tensors[p + "self_attn.o_proj.weight"] = Tensor::zeros(DType::F32, {s.hidden, q});
      d.tensors[p + "mlp.gate_proj.weight"] = Tensor::zeros(DType::F32, {s.intermediate, s.hidden});
      d.tensors[p + "mlp.up_proj.weight"] = Tensor::zeros(DType::F32, {s.intermediate, s.hidden});
      d.tensors[p + "mlp.down_proj.weight"] = Tensor::zeros(DType::F32, {s.hidden, s.intermediate});
    }
    return d;
  }

  void write(const std::string& dir) const { write(dir, config.dump(2)); }
  // With config.json's text given as is (for text that is not a JSON value).
  void write(const std::string& dir, const std::string& config_text) const {
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/config.json") << config_text;
    formats::SafetensorsWriter w;
    for (const auto& [name, tensor] : tensors) w.add(name, tensor);
    w.write(dir + "/model.safetensors");
  }
};

// One hostile model: make(dir) builds it inside the empty directory `dir` and
// returns the path to hand the loader; loading must fail with a brioche::Error
// containing `expected`.
struct HostileCase {
  std::string name;
  std::function<std::string(const std::string& dir)> make;
  std::string expected;
};

inline std::vector<HostileCase> hostile_cases() {
  using formats::GgufType;
  using formats::GgufValue;
  std::vector<HostileCase> cases;
  // A GGUF of the tiny llama with one edit.
  auto gguf = [&](std::string name, std::function<void(TinyGguf&)> edit, std::string expected, TinyShape s = {}) {
    cases.push_back({std::move(name),
                     [edit, s](const std::string& dir) {
                       TinyGguf g = TinyGguf::llama(s);
                       edit(g);
                       g.write(dir + "/model.gguf");
                       return dir + "/model.gguf";
                     },
                     std::move(expected)});
  };
  auto set_u32 = [](const char* key, int64_t v) {
    return [key = std::string(key), v](TinyGguf& g) { g.metadata[key] = GgufValue::integer(GgufType::U32, v); };
  };
  auto set_f32 = [](const char* key, double v) {
    return [key = std::string(key), v](TinyGguf& g) { g.metadata[key] = GgufValue::floating(GgufType::F32, v); };
  };
  gguf("gguf_zero_heads", set_u32("llama.attention.head_count", 0),
       "llama.attention.head_count: expected an integer in 1..1024, found 0");
  gguf(
      "gguf_zero_heads_no_head_dim",
      [](TinyGguf& g) {
        g.metadata["llama.attention.head_count"] = GgufValue::integer(GgufType::U32, 0);
        g.metadata.erase("llama.attention.key_length");
      },
      "llama.attention.head_count: expected an integer in 1..1024, found 0");
  gguf(
      "gguf_heads_not_dividing_hidden",
      [](TinyGguf& g) {
        g.metadata["llama.attention.head_count"] = GgufValue::integer(GgufType::U32, 5);
        g.metadata.erase("llama.attention.key_length");
      },
      "llama.attention.head_count: expected a divisor of llama.embedding_length 32");
  gguf("gguf_zero_kv_heads", set_u32("llama.attention.head_count_kv", 0),
       "llama.attention.head_count_kv: expected an integer in 1..4, found 0");
  gguf("gguf_kv_heads_not_dividing_heads", set_u32("llama.attention.head_count_kv", 3),
       "llama.attention.head_count_kv: expected a divisor of llama.attention.head_count 4");
  gguf("gguf_zero_layers", set_u32("llama.block_count", 0),
       "llama.block_count: expected an integer in 1..4096, found 0");
  gguf("gguf_absurd_layers", set_u32("llama.block_count", 4000000000),
       "llama.block_count: expected an integer in 0..2147483647, found 4000000000");
  gguf(
      "gguf_u64_layers",
      [](TinyGguf& g) { g.metadata["llama.block_count"] = GgufValue::integer(GgufType::U64, int64_t(1) << 40); },
      "llama.block_count: expected an integer in 0..2147483647, found 1099511627776");
  gguf(
      "gguf_negative_heads",
      [](TinyGguf& g) { g.metadata["llama.attention.head_count"] = GgufValue::integer(GgufType::I32, -4); },
      "llama.attention.head_count: expected an integer in 0..2147483647, found -4");
  gguf(
      "gguf_string_heads", [](TinyGguf& g) { g.metadata["llama.attention.head_count"] = GgufValue::string("4"); },
      "'llama.attention.head_count': expected an integer, found string \"4\"");
  gguf("gguf_absurd_hidden", set_u32("llama.embedding_length", 1u << 30),
       "llama.embedding_length: expected an integer in 1..262144, found 1073741824");
  gguf("gguf_zero_intermediate", set_u32("llama.feed_forward_length", 0),
       "llama.feed_forward_length: expected an integer in 1..1048576, found 0");
  gguf("gguf_zero_head_dim", set_u32("llama.attention.key_length", 0),
       "llama.attention.key_length: expected an integer in 2..1024, found 0");
  gguf("gguf_odd_head_dim", set_u32("llama.attention.key_length", 7),
       "llama.attention.key_length: expected an even number");
  gguf("gguf_absurd_head_dim", set_u32("llama.attention.key_length", 1u << 20),
       "llama.attention.key_length: expected an integer in 2..1024, found 1048576");
  gguf("gguf_absurd_context", set_u32("llama.context_length", 4000000000u),
       "llama.context_length: expected an integer in 0..2147483647, found 4000000000");
  gguf("gguf_huge_context", set_u32("llama.context_length", 1u << 30),
       "llama.context_length: expected an integer in 0..16777216, found 1073741824");
  gguf("gguf_zero_rope_theta", set_f32("llama.rope.freq_base", 0.0),
       "llama.rope.freq_base: expected a finite number > 0, found 0");
  gguf("gguf_nan_rope_theta", set_f32("llama.rope.freq_base", std::nan("")),
       "llama.rope.freq_base: expected a finite number > 0, found nan");
  gguf("gguf_negative_rms_eps", set_f32("llama.attention.layer_norm_rms_epsilon", -1.0),
       "llama.attention.layer_norm_rms_epsilon: expected a number in [0, 1], found -1");
  gguf(
      "gguf_negative_rope_scaling_factor",
      [](TinyGguf& g) {
        g.metadata["llama.rope.scaling.type"] = GgufValue::string("linear");
        g.metadata["llama.rope.scaling.factor"] = GgufValue::floating(GgufType::F32, -2.0);
      },
      "llama.rope.scaling.factor: expected a finite number > 0, found -2");
  gguf(
      "gguf_zero_rope_freq_factor",
      [](TinyGguf& g) { g.tensors["rope_freqs.weight"] = Tensor::zeros(DType::F32, {4}); },
      "rope_freqs.weight[0]: expected a finite number > 0, found 0");
  gguf(
      "gguf_rope_freqs_wrong_size", [](TinyGguf& g) { g.tensors["rope_freqs.weight"] = ones_f32({4096}); },
      "tensor 'rope_freqs.weight' expected shape [4]");
  gguf(
      "gguf_embedding_without_rows",
      [](TinyGguf& g) {
        g.tensors["token_embd.weight"] = Tensor::zeros(DType::F32, {0, 32});
      },
      "('token_embd.weight') ne[1] at byte");
  gguf(
      "gguf_tensor_wrong_shape",
      [](TinyGguf& g) {
        g.tensors["blk.1.attn_q.weight"] = Tensor::zeros(DType::F32, {33, 32});
      },
      "tensor 'blk.1.attn_q.weight' expected shape [32, 32]");
  gguf(
      "gguf_embedding_wrong_width",
      [](TinyGguf& g) {
        g.tensors["token_embd.weight"] = Tensor::zeros(DType::F32, {64, 16});
      },
      "tensor 'token_embd.weight' expected [vocab, 32]");
  gguf(
      "gguf_missing_layer", [](TinyGguf& g) { g.tensors.erase("blk.1.ffn_up.weight"); },
      "tensor 'blk.1.ffn_up.weight' expected, found absent");
  gguf(
      "gguf_gate_and_up_of_different_types",
      [](TinyGguf& g) {
        g.tensors["blk.1.ffn_up.weight"] = Tensor::zeros(DType::F16, {48, 32});
      },
      "layer 1 up projection: expected the gate projection's type f32");
  // Heads over kv heads beyond the kernels' group of 16.
  gguf(
      "gguf_gqa_group_too_large",
      [](TinyGguf& g) {
        g.metadata["llama.attention.head_count"] = GgufValue::integer(GgufType::U32, 32);
        g.metadata["llama.attention.head_count_kv"] = GgufValue::integer(GgufType::U32, 1);
      },
      "llama.attention.head_count_kv: expected at least 2 (groups of at most 16");

  cases.push_back({"gguf_truncated",
                   [](const std::string& dir) {
                     TinyGguf::llama().write(dir + "/model.gguf");
                     std::filesystem::resize_file(dir + "/model.gguf",
                                                  std::filesystem::file_size(dir + "/model.gguf") / 2);
                     return dir + "/model.gguf";
                   },
                   "to lie within the file"});
  cases.push_back({"gguf_empty",
                   [](const std::string& dir) {
                     std::ofstream(dir + "/model.gguf");
                     return dir + "/model.gguf";
                   },
                   "magic at byte 0: expected 4 bytes, found 0"});
  cases.push_back({"fifo_as_model",
                   [](const std::string& dir) {
                     ::mkfifo((dir + "/model.gguf").c_str(), 0600);
                     return dir + "/model.gguf";
                   },
                   "model.gguf: expected a regular file, found a FIFO (named pipe)"});
  cases.push_back({"char_device_as_model", [](const std::string&) { return std::string("/dev/zero"); },
                   "/dev/zero: expected a regular file, found a character device"});
  cases.push_back({"empty_directory_as_model", [](const std::string& dir) { return dir; },
                   "config.json: expected the model's config.json, found nothing"});

  // A safetensors directory of the tiny llama with one edit of its config.json.
  auto hf = [&](std::string name, std::function<void(nlohmann::json&)> edit, std::string expected) {
    cases.push_back({std::move(name),
                     [edit](const std::string& dir) {
                       TinySafetensors d = TinySafetensors::llama();
                       edit(d.config);
                       d.write(dir + "/model");
                       return dir + "/model";
                     },
                     std::move(expected)});
  };
  hf(
      "hf_zero_heads",
      [](nlohmann::json& c) {
        c["num_attention_heads"] = 0;
        c.erase("head_dim");
      },
      "config.json: num_attention_heads: expected an integer in 1..1024, found 0");
  hf(
      "hf_heads_not_dividing_hidden",
      [](nlohmann::json& c) {
        c["num_attention_heads"] = 3;
        c["num_key_value_heads"] = 3;
        c.erase("head_dim");
      },
      "config.json: num_attention_heads: expected a divisor of hidden_size 32");
  hf(
      "hf_zero_layers", [](nlohmann::json& c) { c["num_hidden_layers"] = 0; },
      "config.json: num_hidden_layers: expected an integer in 1..4096, found 0");
  hf(
      "hf_absurd_layers", [](nlohmann::json& c) { c["num_hidden_layers"] = 1000000000000; },
      "config.json: num_hidden_layers: expected an integer in 0..2147483647, found 1000000000000");
  hf(
      "hf_string_heads", [](nlohmann::json& c) { c["num_attention_heads"] = "4"; },
      "config.json: num_attention_heads: expected an integer, found \"4\"");
  hf(
      "hf_zero_vocab", [](nlohmann::json& c) { c["vocab_size"] = 0; },
      "config.json: vocab_size: expected an integer in 1..2147483647, found 0");
  hf(
      "hf_vocab_not_matching_embedding", [](nlohmann::json& c) { c["vocab_size"] = 100; },
      "tensor 'model.embed_tokens.weight' expected shape [100, 32]");
  hf(
      "hf_zero_head_dim", [](nlohmann::json& c) { c["head_dim"] = 0; },
      "config.json: head_dim: expected an integer in 2..1024, found 0");
  hf(
      "hf_negative_context", [](nlohmann::json& c) { c["max_position_embeddings"] = -1; },
      "config.json: max_position_embeddings: expected an integer in 0..2147483647, found -1");
  hf(
      "hf_huge_rms_eps", [](nlohmann::json& c) { c["rms_norm_eps"] = 1e300; },
      "config.json: rms_norm_eps: expected a number in [0, 1], found inf");
  hf(
      "hf_zero_rope_theta", [](nlohmann::json& c) { c["rope_theta"] = 0; },
      "config.json: rope_theta: expected a finite number > 0, found 0");
  hf(
      "hf_llama3_equal_freq_factors",
      [](nlohmann::json& c) {
        c["rope_scaling"] = {
            {"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 4.0}, {"high_freq_factor", 4.0}};
      },
      "config.json: rope_scaling.high_freq_factor: expected more than rope_scaling.low_freq_factor 4, found 4");
  hf(
      "hf_llama3_zero_original_context",
      [](nlohmann::json& c) {
        c["rope_parameters"] = {
            {"rope_type", "llama3"}, {"rope_theta", 10000.0}, {"original_max_position_embeddings", 0}};
      },
      "config.json: rope_parameters.original_max_position_embeddings: expected an integer in 1..16777216, found 0");
  hf(
      "hf_rope_scaling_not_an_object", [](nlohmann::json& c) { c["rope_scaling"] = 7; },
      "config.json: rope_scaling: expected an object, found 7");
  hf(
      "hf_gqa_group_too_large",
      [](nlohmann::json& c) {
        c["num_attention_heads"] = 32;
        c["num_key_value_heads"] = 1;
      },
      "config.json: num_key_value_heads: expected at least 2");
  cases.push_back({"hf_config_nested_deep",
                   [](const std::string& dir) {
                     TinySafetensors::llama().write(dir + "/model", std::string(10000, '[') + std::string(10000, ']'));
                     return dir + "/model";
                   },
                   "config.json: expected arrays/objects nested at most 128 deep, found 10000"});
  cases.push_back({"hf_config_number_beyond_double",
                   [](const std::string& dir) {
                     TinySafetensors::llama().write(dir + "/model", R"({"rms_norm_eps": 1e400})");
                     return dir + "/model";
                   },
                   "config.json: expected valid JSON, found: [json.exception.out_of_range.406]"});
  cases.push_back({"hf_config_is_a_fifo",
                   [](const std::string& dir) {
                     std::filesystem::create_directories(dir + "/model");
                     ::mkfifo((dir + "/model/config.json").c_str(), 0600);
                     return dir + "/model";
                   },
                   "config.json: expected a regular file, found a FIFO (named pipe)"});
  cases.push_back({"hf_weights_are_a_directory",
                   [](const std::string& dir) {
                     TinySafetensors d = TinySafetensors::llama();
                     d.write(dir + "/model");
                     std::filesystem::remove(dir + "/model/model.safetensors");
                     std::filesystem::create_directories(dir + "/model/model.safetensors");
                     return dir + "/model";
                   },
                   "model.safetensors: expected a regular file, found a directory"});
  cases.push_back({"hf_weights_truncated",
                   [](const std::string& dir) {
                     TinySafetensors::llama().write(dir + "/model");
                     const std::string st = dir + "/model/model.safetensors";
                     std::filesystem::resize_file(st, std::filesystem::file_size(st) - 100);
                     return dir + "/model";
                   },
                   "of the data section to lie within its"});
  return cases;
}

}  // namespace brioche::model::testing
