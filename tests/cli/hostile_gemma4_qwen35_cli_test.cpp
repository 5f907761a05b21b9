// `brioche run -m MODEL` on the Gemma 4 and Qwen 3.5 fixtures (safetensors
// directories and GGUF files) made hostile one way at a time (issues 46 and
// 47): a config.json key or GGUF metadata value missing, of the wrong type,
// out of range or inconsistent with another; a tensor missing, of the wrong
// shape or dtype, or non-finite where the loader reads it; a truncated or
// lying safetensors file. Each gives one line that names the key or the
// tensor, with what was expected and what was found, and a non-zero exit
// (not a signal, not a hang) within seconds.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/run_brioche.h"
#include "core/tensor.h"
#include "formats/gguf.h"

namespace brioche::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// model.safetensors split into its JSON header and the data section after it.
struct SafetensorsParts {
  json header;
  std::string data;
};

SafetensorsParts read_parts(const fs::path& file) {
  const std::string bytes = read_text(file);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);  // little-endian, as the host
  return {json::parse(bytes.substr(8, header_len)), bytes.substr(8 + header_len)};
}

void write_parts(const fs::path& file, const SafetensorsParts& parts) {
  std::string header = parts.header.dump();
  header.append((8 - header.size() % 8) % 8, ' ');
  const uint64_t header_len = header.size();
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(&header_len), 8);
  out << header << parts.data;
}

// Writes `bytes` over tensor `name`'s data from its byte `offset` on.
void poke(SafetensorsParts& parts, const std::string& name, size_t offset, const std::string& bytes) {
  const size_t begin = parts.header.at(name).at("data_offsets").at(0).get<size_t>();
  parts.data.replace(begin + offset, bytes.size(), bytes);
}

std::string f32_bytes(float v) { return std::string(reinterpret_cast<const char*>(&v), 4); }

// Relabels tensor `name` as `dtype` (4-byte elements) with zero data appended for it.
void retype_4_bytes(SafetensorsParts& parts, const std::string& name, const std::string& dtype) {
  json& info = parts.header.at(name);
  size_t numel = 1;
  for (const json& d : info.at("shape")) numel *= d.get<size_t>();
  info["dtype"] = dtype;
  info["data_offsets"] = {parts.data.size(), parts.data.size() + 4 * numel};
  parts.data.append(4 * numel, '\0');
}

// What `-m` names: the directory, or the GGUF file.
using Edit = std::function<void(const fs::path& model)>;

Edit config(std::function<void(json&)> change) {
  return [change](const fs::path& dir) {
    json c = json::parse(read_text(dir / "config.json"));
    change(c);
    std::ofstream(dir / "config.json", std::ios::trunc) << c.dump(2);
  };
}

Edit tensors(std::function<void(SafetensorsParts&)> change) {
  return [change](const fs::path& dir) {
    SafetensorsParts parts = read_parts(dir / "model.safetensors");
    change(parts);
    write_parts(dir / "model.safetensors", parts);
  };
}

Edit file_bytes(std::function<void(std::string&)> change) {
  return [change](const fs::path& dir) {
    std::string bytes = read_text(dir / "model.safetensors");
    change(bytes);
    std::ofstream(dir / "model.safetensors", std::ios::binary | std::ios::trunc) << bytes;
  };
}

// A GGUF file's metadata and tensors (views of the original until rewritten).
struct GgufParts {
  std::vector<std::pair<std::string, formats::GgufValue>> metadata;
  std::vector<std::pair<std::string, Tensor>> tensors;
};

Edit gguf(std::function<void(GgufParts&)> change) {
  return [change](const fs::path& file) {
    GgufParts parts;
    {
      auto f = formats::GgufFile::open(file.string());
      parts.metadata = f->metadata();
      for (const formats::GgufTensorInfo& t : f->tensors()) parts.tensors.emplace_back(t.name, f->tensor(t.name));
    }
    change(parts);
    formats::GgufWriter w;
    for (auto& [key, value] : parts.metadata) w.add(key, value);
    for (auto& [name, tensor] : parts.tensors) w.add_tensor(name, tensor);
    const fs::path rewritten = file.string() + ".new";
    w.write(rewritten.string());
    fs::rename(rewritten, file);
  };
}

formats::GgufValue& metadata(GgufParts& parts, const std::string& key) {
  for (auto& [k, v] : parts.metadata)
    if (k == key) return v;
  throw std::runtime_error("no metadata " + key);
}

// The same integer with the value's GGUF type.
void set_int(GgufParts& parts, const std::string& key, int64_t value) {
  formats::GgufValue& v = metadata(parts, key);
  v = formats::GgufValue::integer(v.type(), value);
}

Tensor& gguf_tensor(GgufParts& parts, const std::string& name) {
  for (auto& [n, t] : parts.tensors)
    if (n == name) return t;
  throw std::runtime_error("no tensor " + name);
}

// An f32 copy of tensor `name` with element 0 NaN.
void nan_first(GgufParts& parts, const std::string& name) {
  Tensor& t = gguf_tensor(parts, name);
  Tensor copy = Tensor::zeros(DType::F32, t.shape().data(), t.rank());
  std::memcpy(copy.data(), t.data(), copy.nbytes());
  copy.data_as<float>()[0] = NAN;
  t = copy;
}

// Relabels f32 tensor `name` as ggml's i32 (type 26) in the file's tensor
// table: the writer refuses i32, a mislabelled file need not.
Edit gguf_i32(const std::string& name) {
  return [name](const fs::path& file) {
    std::string bytes = read_text(file);
    const size_t at = bytes.find(name);
    uint32_t n_dims = 0;
    std::memcpy(&n_dims, bytes.data() + at + name.size(), 4);
    const size_t type_at = at + name.size() + 4 + 8 * size_t(n_dims);
    const uint32_t ggml_i32 = 26;
    std::memcpy(bytes.data() + type_at, &ggml_i32, 4);
    std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
  };
}

struct HostileFixture {
  std::string name;     // the test's name
  std::string fixture;  // under tests/fixtures/: a directory or a .gguf file
  Edit edit;
  std::string expected;  // in the one line of error
};

void PrintTo(const HostileFixture& c, std::ostream* os) { *os << c.fixture << ": " << c.name; }

const std::string kLayer0 = "model.layers.0.";  // e2b and the Qwen 3.5 fixtures are text models: "model.*"

std::vector<HostileFixture> hostile_fixtures() {
  return {
      // ---- Gemma 4: config.json ----
      {"Gemma4HeadsNotDividing", "gemma4/e2b", config([](json& c) { c["num_key_value_heads"] = 3; }),
       "config.json: num_key_value_heads: expected a divisor of num_attention_heads 4, found 3"},
      {"Gemma4NegativeSize", "gemma4/e2b", config([](json& c) { c["hidden_size"] = -48; }),
       "config.json: hidden_size: expected an integer in 1..262144, found -48"},
      {"Gemma4HugeSize", "gemma4/e2b", config([](json& c) { c["vocab_size"] = int64_t(1) << 40; }),
       "config.json: vocab_size: expected an integer in 1..2147483647, found 1099511627776"},
      {"Gemma4WrongType", "gemma4/e2b", config([](json& c) { c["rms_norm_eps"] = "1e-6"; }),
       "config.json: rms_norm_eps: expected a number in [0, 1], found \"1e-6\""},
      {"Gemma4KvSharedPastTheLayers", "gemma4/e2b", config([](json& c) { c["num_kv_shared_layers"] = 9; }),
       "config.json: num_kv_shared_layers: expected an integer in 0..4, found 9"},
      {"Gemma4SlidingWindowZero", "gemma4/e2b", config([](json& c) { c["sliding_window"] = 0; }),
       "config.json: sliding_window: expected an integer in 1..16777216, found 0"},
      {"Gemma4LayerTypesLength", "gemma4/e2b", config([](json& c) {
         c["layer_types"] = {"sliding_attention", "full_attention"};
       }),
       "config.json: layer_types: expected an array of num_hidden_layers (5) layer types"},
      {"Gemma4UnknownRopeKey", "gemma4/e2b",
       config([](json& c) { c["rope_parameters"]["sliding_attention"]["beta_fast"] = 32; }),
       "config.json: rope_parameters.sliding_attention.beta_fast: unknown key"},
      {"Gemma4UnsupportedActivation", "gemma4/e2b", config([](json& c) { c["hidden_activation"] = "relu"; }),
       "config.json: hidden_activation: expected \"gelu_pytorch_tanh\", found \"relu\""},
      {"Gemma4TopKPastTheExperts", "gemma4/moe", config([](json& c) { c["text_config"]["top_k_experts"] = 9; }),
       "config.json: text_config.top_k_experts: expected an integer in 1..4, found 9"},
      {"Gemma4TextConfigNotAnObject", "gemma4/moe", config([](json& c) { c["text_config"] = {1}; }),
       "config.json: text_config: expected an object, found [1]"},
      // ---- Gemma 4: tensors ----
      {"Gemma4MissingTensor", "gemma4/e2b",
       tensors([](SafetensorsParts& p) { p.header.erase("model.layers.1.mlp.up_proj.weight"); }),
       "tensor 'model.layers.1.mlp.up_proj.weight' expected, found absent"},
      {"Gemma4WrongShape", "gemma4/e2b", tensors([](SafetensorsParts& p) {
         p.header[kLayer0 + "self_attn.q_proj.weight"]["shape"] = {48, 64};
       }),
       "tensor 'model.layers.0.self_attn.q_proj.weight' expected shape [64, 48], found bf16[48, 64]"},
      {"Gemma4IndexDtype", "gemma4/e2b",
       tensors([](SafetensorsParts& p) { retype_4_bytes(p, kLayer0 + "self_attn.q_proj.weight", "I32"); }),
       "tensor 'model.layers.0.self_attn.q_proj.weight' expected a float type, found i32"},
      {"Gemma4NonFiniteLayerScalar", "gemma4/e2b",
       tensors([](SafetensorsParts& p) { poke(p, kLayer0 + "layer_scalar", 0, std::string("\xc0\x7f", 2)); }),
       "tensor 'model.layers.0.layer_scalar' [0]: expected a finite number, found nan"},
      // ---- Gemma 4: the file ----
      {"Gemma4Truncated", "gemma4/e2b", file_bytes([](std::string& b) { b.resize(b.size() / 2); }),
       "model.safetensors: tensor 'model.layers.2.mlp.up_proj.weight' data at byte"},
      {"Gemma4HeaderLengthPastTheEnd", "gemma4/e2b", file_bytes([](std::string& b) {
         const uint64_t len = b.size();
         std::memcpy(b.data(), &len, 8);
       }),
       "model.safetensors: header length at byte 0: expected at most"},
      {"Gemma4DataOffsetsPastTheEnd", "gemma4/e2b", tensors([](SafetensorsParts& p) {
         p.header["model.norm.weight"]["data_offsets"] = {p.data.size(), p.data.size() + 96};
       }),
       "tensor 'model.norm.weight' data at byte"},

      // ---- Qwen 3.5: config.json ----
      {"Qwen35HeadsNotDividing", "qwen35/dense", config([](json& c) { c["num_key_value_heads"] = 3; }),
       "config.json: num_key_value_heads: expected a divisor of num_attention_heads 4"},
      {"Qwen35LinearHeadsNotAMultiple", "qwen35/dense", config([](json& c) { c["linear_num_value_heads"] = 3; }),
       "config.json: linear_num_value_heads: expected a multiple of linear_num_key_heads 2, found 3"},
      {"Qwen35NegativeSize", "qwen35/dense", config([](json& c) { c["linear_value_head_dim"] = -16; }),
       "config.json: linear_value_head_dim: expected an integer in 1..1024, found -16"},
      {"Qwen35HugeSize", "qwen35/dense", config([](json& c) { c["linear_conv_kernel_dim"] = 1 << 30; }),
       "config.json: linear_conv_kernel_dim: expected an integer in 2..64, found 1073741824"},
      {"Qwen35LayerTypesLength", "qwen35/dense", config([](json& c) { c["layer_types"] = {"linear_attention"}; }),
       "config.json: layer_types: expected an array of 4 layer types"},
      {"Qwen35UnknownLayerType", "qwen35/dense", config([](json& c) { c["layer_types"][2] = "sliding_attention"; }),
       "config.json: layer_types[2]: expected \"linear_attention\" or \"full_attention\", found \"sliding_attention\""},
      {"Qwen35RopeScalingKey", "qwen35/dense", config([](json& c) { c["rope_parameters"]["factor"] = 4.0; }),
       "config.json: rope_parameters.factor: unknown key"},
      {"Qwen35TextConfigNotAnObject", "qwen35/dense", config([](json& c) { c["text_config"] = {1}; }),
       "config.json: text_config: expected an object, found [1]"},
      // transformers' default head_dim is 256, not hidden / heads: the q_proj of 4 heads of 16 no longer fits.
      {"Qwen35HeadDimDefaultsAsTransformers", "qwen35/dense", config([](json& c) { c.erase("head_dim"); }),
       "tensor 'model.layers.1.self_attn.q_proj.weight' expected shape [2048, 64], found f32[128, 64]"},
      {"Qwen35TopKPastTheExperts", "qwen35/moe", config([](json& c) { c["num_experts_per_tok"] = 9; }),
       "config.json: num_experts_per_tok: expected an integer in 1..4, found 9"},
      {"Qwen35SharedExpertDropped", "qwen35/moe", config([](json& c) { c["shared_expert_intermediate_size"] = 0; }),
       "config.json: shared_expert_intermediate_size: expected the width of model.layers.0.mlp.shared_expert.*"},
      // ---- Qwen 3.5: tensors ----
      {"Qwen35MissingStateTensor", "qwen35/dense",
       tensors([](SafetensorsParts& p) { p.header.erase("model.layers.2.linear_attn.A_log"); }),
       "tensor 'model.layers.2.linear_attn.A_log' expected, found absent"},
      {"Qwen35MissingExpert", "qwen35/moe",
       tensors([](SafetensorsParts& p) { p.header.erase("model.layers.1.mlp.experts.2.up_proj.weight"); }),
       "tensor 'model.layers.1.mlp.experts.2.up_proj.weight' expected, found absent"},
      {"Qwen35ConvShape", "qwen35/dense", tensors([](SafetensorsParts& p) {
         p.header[kLayer0 + "linear_attn.conv1d.weight"]["shape"] = {128, 4};
       }),
       "tensor 'model.layers.0.linear_attn.conv1d.weight' expected shape [128, 1, 4] (transformers) or [128, 4, 1] "
       "(MLX), found [128, 4]"},
      {"Qwen35IndexDtypeMatrix", "qwen35/dense",
       tensors([](SafetensorsParts& p) { p.header[kLayer0 + "linear_attn.in_proj_qkv.weight"]["dtype"] = "I32"; }),
       "tensor 'model.layers.0.linear_attn.in_proj_qkv.weight' expected a float type, found i32"},
      {"Qwen35IndexDtypeEmbedding", "qwen35/dense",
       tensors([](SafetensorsParts& p) { p.header["model.embed_tokens.weight"]["dtype"] = "I32"; }),
       "tensor 'model.embed_tokens.weight' expected a float type, found i32"},
      {"Qwen35IndexDtypeConv", "qwen35/dense",
       tensors([](SafetensorsParts& p) { p.header[kLayer0 + "linear_attn.conv1d.weight"]["dtype"] = "I32"; }),
       "tensor 'model.layers.0.linear_attn.conv1d.weight' expected a float type, found i32"},
      {"Qwen35NonFiniteDecay", "qwen35/dense",
       tensors([](SafetensorsParts& p) { poke(p, kLayer0 + "linear_attn.A_log", 4, f32_bytes(NAN)); }),
       "tensor 'model.layers.0.linear_attn.A_log' [1]: expected a finite number, found nan"},
      {"Qwen35UnknownDtype", "qwen35/dense",
       tensors([](SafetensorsParts& p) { p.header["model.norm.weight"]["dtype"] = "Q4"; }),
       "tensor 'model.norm.weight' dtype at byte"},
      // ---- Qwen 3.5: the file ----
      {"Qwen35Truncated", "qwen35/dense", file_bytes([](std::string& b) { b.resize(b.size() - 1000); }),
       "model.safetensors: tensor 'model.layers.3.self_attn.v_proj.weight' data at byte"},
      {"Qwen35HeaderLengthPastTheEnd", "qwen35/dense", file_bytes([](std::string& b) {
         const uint64_t len = uint64_t(1) << 62;
         std::memcpy(b.data(), &len, 8);
       }),
       "model.safetensors: header length at byte 0: expected at most"},

      // ---- GGUF ----
      {"Gemma4GgufIndexDtypeEmbedding", "gemma4/gguf/e2b.f32.gguf", gguf_i32("token_embd.weight"),
       "tensor 'token_embd.weight' expected a float type, found i32"},
      {"Gemma4GgufRopeDimensions", "gemma4/gguf/e2b.f32.gguf",
       gguf([](GgufParts& p) { set_int(p, "gemma4.rope.dimension_count", 1000); }),
       "gemma4.rope.dimension_count: expected 32 (= the key length; rope_freqs.weight gives partial rotation), "
       "found 1000"},
      {"Gemma4GgufPatternLength", "gemma4/gguf/e2b.f32.gguf", gguf([](GgufParts& p) {
         metadata(p, "gemma4.attention.sliding_window_pattern") = formats::GgufValue::bools({true, false});
       }),
       "gemma4.attention.sliding_window_pattern: expected 5 booleans, found array<bool>[2]"},
      {"Gemma4GgufKvSharedPastTheLayers", "gemma4/gguf/e2b.f32.gguf",
       gguf([](GgufParts& p) { set_int(p, "gemma4.attention.shared_kv_layers", 9); }),
       "num_kv_shared_layers: expected an integer in 0..4, found 9"},
      {"Gemma4GgufNonFiniteExpertScale", "gemma4/gguf/moe.f32.gguf",
       gguf([](GgufParts& p) { nan_first(p, "blk.0.ffn_down_exps.scale"); }),
       "tensor 'blk.0.ffn_down_exps.scale' [0]: expected a finite number, found nan"},
      {"Qwen35GgufBlockCountZero", "qwen35/gguf/dense.f32.gguf",
       gguf([](GgufParts& p) { set_int(p, "qwen35.block_count", 0); }),
       "qwen35.block_count: expected 1..4096, found 0"},
      {"Qwen35GgufGroupsNotDividing", "qwen35/gguf/dense.f32.gguf",
       gguf([](GgufParts& p) { set_int(p, "qwen35.ssm.group_count", 3); }),
       "linear_num_value_heads: expected a multiple of linear_num_key_heads 3, found 4"},
      {"Qwen35GgufMissingStateTensor", "qwen35/gguf/dense.f32.gguf",
       gguf([](GgufParts& p) { std::erase_if(p.tensors, [](const auto& t) { return t.first == "blk.2.ssm_a"; }); }),
       "tensor 'blk.2.ssm_a' expected, found absent"},
      {"Qwen35GgufIndexDtypeEmbedding", "qwen35/gguf/dense.f32.gguf", gguf_i32("token_embd.weight"),
       "tensor 'token_embd.weight' expected a float type, found i32"},
      {"Qwen35GgufNonFiniteDtBias", "qwen35/gguf/dense.f32.gguf",
       gguf([](GgufParts& p) { nan_first(p, "blk.0.ssm_dt.bias"); }),
       "tensor 'blk.0.ssm_dt.bias' (head 0): expected a finite number, found nan"},
      {"Qwen35GgufSharedExpertDropped", "qwen35/gguf/moe.f32.gguf",
       gguf([](GgufParts& p) { set_int(p, "qwen35moe.expert_shared_feed_forward_length", 0); }),
       "qwen35moe.expert_shared_feed_forward_length: expected the width of blk.0.ffn_*_shexp (present), found 0"},
  };
}

int count_lines(const std::string& s) {
  int lines = 0;
  for (char c : s) lines += c == '\n';
  return lines;
}

class HostileGemma4Qwen35 : public ::testing::TestWithParam<HostileFixture> {};

TEST_P(HostileGemma4Qwen35, RunFailsWithOneLineNamingIt) {
  const HostileFixture& c = GetParam();
  const fs::path dir = fs::temp_directory_path() / ("brioche_hostile_" + c.name + "_" + std::to_string(::getpid()));
  const fs::path fixture = fs::path(BRIOCHE_SOURCE_DIR) / "tests/fixtures" / c.fixture;
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path model = fs::is_directory(fixture) ? dir / "model" : dir / fixture.filename();
  fs::copy(fixture, model, fs::copy_options::recursive);
  c.edit(model);
  const BriocheOutcome o = run_brioche_shell("run -m " + model.string() + " -p hi -n 4");
  fs::remove_all(dir);
  EXPECT_TRUE(o.exit_code == 1 || o.exit_code == 2) << "exit " << o.exit_code << "\n" << o.output;
  EXPECT_EQ(count_lines(o.output), 1) << o.output;
  EXPECT_NE(o.output.find(c.expected), std::string::npos) << "expected '" << c.expected << "' in:\n" << o.output;
}

INSTANTIATE_TEST_SUITE_P(Cases, HostileGemma4Qwen35, ::testing::ValuesIn(hostile_fixtures()),
                         [](const ::testing::TestParamInfo<HostileFixture>& info) { return info.param.name; });

// The control: every fixture the cases start from runs.
TEST(HostileGemma4Qwen35Control, UnchangedFixturesRun) {
  for (const char* fixture : {"gemma4/e2b", "gemma4/moe", "gemma4/gguf/e2b.f32.gguf", "gemma4/gguf/moe.f32.gguf",
                              "qwen35/dense", "qwen35/moe", "qwen35/gguf/dense.f32.gguf", "qwen35/gguf/moe.f32.gguf"}) {
    const BriocheOutcome o =
        run_brioche_shell("run -m " + std::string(BRIOCHE_SOURCE_DIR) + "/tests/fixtures/" + fixture + " -p hi -n 4");
    EXPECT_EQ(o.exit_code, 0) << fixture << ":\n" << o.output;
  }
}

}  // namespace
}  // namespace brioche::cli
