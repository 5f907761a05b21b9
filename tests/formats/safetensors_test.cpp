// safetensors reader/writer against fixtures written by the python safetensors
// package, MLX affine repacking against MLX-packed weights, and hostile files.
#include <cmath>
#include <cstring>
#include <fstream>

#include "core/half.h"
#include "formats/file_write.h"
#include "formats/safetensors.h"
#include "formats_test_util.h"

namespace brioche::formats {
namespace {

using namespace testing;
using ::testing::HasSubstr;

float element_as_float(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::F32: return t.data_as<float>()[i];
    case DType::F16: return f16_to_f32(t.data_as<uint16_t>()[i]);
    case DType::BF16: return bf16_to_f32(t.data_as<uint16_t>()[i]);
    case DType::I32: return float(t.data_as<int32_t>()[i]);
    default: ADD_FAILURE() << "unexpected dtype"; return 0;
  }
}

// x = scale * q + bias over the brioche affine block layout (dtype.h).
float affine_element(const Tensor& t, int64_t row, int64_t col) {
  auto info = dtype_info(t.dtype());
  int bits =
      (t.dtype() == DType::AFFINE4_G32 || t.dtype() == DType::AFFINE4_G64 || t.dtype() == DType::AFFINE4_G128) ? 4 : 8;
  const uint8_t* block = t.row_as<uint8_t>(row) + (col / info.block_elems) * info.block_bytes;
  float scale, bias;
  std::memcpy(&scale, block, 4);
  std::memcpy(&bias, block + 4, 4);
  int j = int(col % info.block_elems);
  int q = bits == 8 ? block[8 + j] : (block[8 + j / 2] >> (4 * (j % 2))) & 0xf;
  return scale * float(q) + bias;
}

TEST(SafetensorsFile, ReadsPythonWrittenFile) {
  auto golden = load_json(source_path("tests/formats/golden/safetensors_basic.json"));
  auto file = SafetensorsFile::open(source_path("tests/formats/fixtures/basic.safetensors"));
  EXPECT_EQ(file->tensors().size(), 5u);
  EXPECT_EQ(file->metadata()["format"], "pt");
  EXPECT_EQ(file->metadata()["note"], "brioche fixture");
  for (const char* name : {"a.f32", "b.f16", "c.bf16", "d.i32"}) {
    SCOPED_TRACE(name);
    Tensor t = file->tensor(name);
    auto shape = golden["shapes"][name].get<std::vector<int64_t>>();
    ASSERT_EQ(t.rank(), int(shape.size()));
    for (int d = 0; d < t.rank(); ++d) EXPECT_EQ(t.dim(d), shape[d]);
    auto values = golden["values"][name].get<std::vector<double>>();
    for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(element_as_float(t, int64_t(i)), float(values[i])) << i;
  }
  EXPECT_EQ(file->tensor("a.f32").dtype(), DType::F32);
  EXPECT_EQ(file->tensor("b.f16").dtype(), DType::F16);
  EXPECT_EQ(file->tensor("c.bf16").dtype(), DType::BF16);
  RawTensor u8 = file->raw("e.u8");
  EXPECT_EQ(u8.dtype, "U8");
  ASSERT_EQ(u8.nbytes, 3u);
  EXPECT_EQ(u8.data[2], 255);
  EXPECT_THAT(error_of([&] { file->tensor("e.u8"); }), HasSubstr("dtype U8 has no brioche DType"));
  EXPECT_THAT(error_of([&] { file->tensor("zz"); }),
              HasSubstr("basic.safetensors: tensor 'zz' expected, found absent"));
}

// A tensor the file places at an odd byte (the format does not align; mlx's
// writer does not pad its header) comes back as an aligned copy with the
// same values, not a misaligned view.
TEST(SafetensorsFile, MisalignedTensorIsCopiedAligned) {
  TempDir dir;
  std::string header = R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})";
  if ((8 + header.size()) % 2 == 0) header += " ";  // data at an odd offset
  const float values[3] = {1.5f, -2.25f, 3.0f};
  std::string bytes(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);
  bytes += header;
  bytes.append(reinterpret_cast<const char*>(values), sizeof(values));
  const std::string path = dir.file("odd.safetensors");
  std::ofstream(path, std::ios::binary) << bytes;
  auto file = SafetensorsFile::open(path);
  const Tensor t = file->tensor("a");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % alignof(float), 0u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(t.data_as<float>()[i], values[i]);
}

TEST(SafetensorsDir, ReadsShardedIndex) {
  auto dir = SafetensorsDir::open(source_path("tests/formats/fixtures/sharded"));
  EXPECT_EQ(dir.config()["model_type"], "llama");
  EXPECT_EQ(dir.names(), (std::vector<std::string>{"lm_head.weight", "model.embed_tokens.weight",
                                                   "model.layers.0.input_layernorm.weight"}));
  EXPECT_TRUE(dir.has("lm_head.weight"));
  EXPECT_FALSE(dir.has("lm_head.bias"));
  Tensor embed = dir.tensor("model.embed_tokens.weight");
  Tensor head = dir.tensor("lm_head.weight");
  ASSERT_EQ(embed.dtype(), DType::BF16);
  ASSERT_EQ(head.dim(0), 4);
  ASSERT_EQ(head.dim(1), 2);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(element_as_float(embed, i), float(i));
    EXPECT_EQ(element_as_float(head, i), -float(i));
  }
  EXPECT_THAT(dir.file_of("lm_head.weight").path(), HasSubstr("model-00002-of-00002.safetensors"));
  EXPECT_FALSE(dir.is_quantized("lm_head"));
}

TEST(SafetensorsDir, RepacksMlxAffineQuantization) {
  auto dir = SafetensorsDir::open(source_path("tests/formats/fixtures/mlx_quant"));
  auto expected = SafetensorsFile::open(source_path("tests/formats/fixtures/mlx_quant_expected.safetensors"));
  struct Case {
    const char* prefix;
    DType dtype;
    int bits, group;
  };
  for (Case c : {Case{"model.layers.0.self_attn.q_proj", DType::AFFINE4_G32, 4, 32},
                 Case{"model.layers.0.mlp.down_proj", DType::AFFINE8_G64, 8, 64},
                 Case{"model.embed_tokens", DType::AFFINE4_G128, 4, 128}}) {
    SCOPED_TRACE(c.prefix);
    ASSERT_TRUE(dir.is_quantized(c.prefix));
    auto q = dir.quantization(c.prefix);
    ASSERT_TRUE(q.has_value());
    EXPECT_EQ(q->bits, c.bits);
    EXPECT_EQ(q->group_size, c.group);
    Tensor w = dir.quantized_weight(c.prefix);
    Tensor ref = expected->tensor(c.prefix);  // [out, in] f32 = scales * q + biases
    EXPECT_EQ(w.dtype(), c.dtype);
    ASSERT_EQ(w.dim(0), ref.dim(0));
    ASSERT_EQ(w.dim(1), ref.dim(1));
    for (int64_t r = 0; r < ref.dim(0); ++r) {
      for (int64_t k = 0; k < ref.dim(1); ++k) {
        float want = ref.row_as<float>(r)[k];
        ASSERT_NEAR(affine_element(w, r, k), want, 1e-6f * std::max(1.0f, std::fabs(want))) << r << "," << k;
      }
    }
  }
  EXPECT_FALSE(dir.is_quantized("lm_head"));  // config says false
  EXPECT_FALSE(dir.quantization("lm_head").has_value());
  EXPECT_FALSE(dir.is_quantized("model.norm"));  // no scales
  EXPECT_EQ(dir.tensor("lm_head.weight").dtype(), DType::F32);
  EXPECT_EQ(dir.tensor("model.layers.0.self_attn.q_proj.weight").dtype(), DType::I32);  // raw u32 words
  EXPECT_THAT(error_of([&] { dir.quantized_weight("lm_head"); }), HasSubstr("expected MLX quantization"));
}

TEST(SafetensorsWriter, RoundTripsWithMetadata) {
  TempDir dir;
  Tensor f32 = Tensor::zeros(DType::F32, {2, 3});
  Tensor f16 = Tensor::zeros(DType::F16, {5});
  Tensor bf16 = Tensor::zeros(DType::BF16, {1, 2, 3});
  for (int i = 0; i < 6; ++i) {
    f32.data_as<float>()[i] = float(i) * 0.25f;
    bf16.data_as<uint16_t>()[i] = f32_to_bf16(-float(i));
  }
  for (int i = 0; i < 5; ++i) f16.data_as<uint16_t>()[i] = f32_to_f16(float(i) + 0.5f);
  SafetensorsWriter w;
  w.add("base_model.model.layers.0.q_proj.lora_A.weight", f32);
  w.add("b", f16);
  w.add("c", bf16);
  w.set_metadata({{"format", "pt"}});
  w.write(dir.file("adapter_model.safetensors"));
  auto bytes = read_bytes(dir.file("adapter_model.safetensors"));
  uint64_t header_len;
  std::memcpy(&header_len, bytes.data(), 8);
  EXPECT_EQ((8 + header_len) % 8, 0u);  // data section aligned

  auto file = SafetensorsFile::open(dir.file("adapter_model.safetensors"));
  EXPECT_EQ(file->metadata()["format"], "pt");
  Tensor a = file->tensor("base_model.model.layers.0.q_proj.lora_A.weight");
  EXPECT_EQ(a.describe(), f32.describe());
  EXPECT_EQ(std::memcmp(a.data(), f32.data(), f32.nbytes()), 0);
  EXPECT_EQ(std::memcmp(file->tensor("b").data(), f16.data(), f16.nbytes()), 0);
  Tensor c = file->tensor("c");
  EXPECT_EQ(c.describe(), bf16.describe());
  EXPECT_EQ(std::memcmp(c.data(), bf16.data(), bf16.nbytes()), 0);

  EXPECT_THROW(w.add("b", f16), Error);
  EXPECT_THROW(w.add("q", Tensor::zeros(DType::Q4_0, {32})), Error);
  EXPECT_THROW(w.add_raw("r", "F32", {3}, f32.data(), 8), Error);
}

// write() streams the header and each tensor's bytes to the file (a tensor
// from add() straight from its storage, add_raw's from the writer's copy or
// the vector it took): the file holds exactly what serialize() returns.
TEST(SafetensorsWriter, WriteStreamsWhatSerializeReturns) {
  TempDir dir;
  Tensor f32 = Tensor::zeros(DType::F32, {4, 3});
  for (int i = 0; i < 12; ++i) f32.data_as<float>()[i] = float(i) - 5.5f;
  const uint16_t halves[3] = {1, 2, 0xffff};
  std::vector<uint8_t> words(4 * 2 * 4);
  for (size_t i = 0; i < words.size(); ++i) words[i] = uint8_t(i * 29 + 3);
  SafetensorsWriter w;
  w.add("dense", f32);
  w.add_raw("copied", "BF16", {3}, halves, sizeof halves);
  w.add_raw("moved", "U32", {4, 2}, std::move(words));
  w.write(dir.file("m.safetensors"));
  EXPECT_EQ(read_bytes(dir.file("m.safetensors")), w.serialize());
  auto file = SafetensorsFile::open(dir.file("m.safetensors"));
  EXPECT_EQ(std::memcmp(file->tensor("dense").data(), f32.data(), f32.nbytes()), 0);
  EXPECT_EQ(std::memcmp(file->tensor("copied").data(), halves, sizeof halves), 0);
  const Tensor moved_tensor = file->tensor("moved");  // (at an offset U32 does not divide: a copy)
  const auto* moved = static_cast<const uint8_t*>(moved_tensor.data());
  for (int i = 0; i < 32; ++i) ASSERT_EQ(moved[i], uint8_t(i * 29 + 3));
  EXPECT_THROW(w.add_raw("short", "U32", {4, 2}, std::vector<uint8_t>(31)), Error);
}

// A body that fails midway leaves the file that was there, and no ".part".
TEST(WriteFileAtomically, AFailedWriteKeepsTheOldFile) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  write_file_atomically(path, [](std::ostream& out) { out.write("\x01\x02\x03", 3); });
  EXPECT_THROW(write_file_atomically(path,
                                     [](std::ostream& out) {
                                       out.write("partial", 7);
                                       fail("the generator ran out of memory");
                                     }),
               Error);
  EXPECT_EQ(read_bytes(path), (std::vector<uint8_t>{1, 2, 3}));
  EXPECT_FALSE(std::filesystem::exists(path + ".part"));
  const std::string error =
      error_of([&] { write_file_atomically(dir.file("no/such/dir/x.gguf"), [](std::ostream&) {}); });
  EXPECT_THAT(error, HasSubstr("no/such/dir/x.gguf: cannot open"));
}

// Builds a safetensors file from a header text and data bytes.
std::vector<uint8_t> st_bytes(const std::string& header, size_t data_bytes, uint64_t claimed_len = 0) {
  std::vector<uint8_t> out(8 + header.size() + data_bytes, 0);
  uint64_t len = claimed_len ? claimed_len : header.size();
  std::memcpy(out.data(), &len, 8);
  std::memcpy(out.data() + 8, header.data(), header.size());
  return out;
}

std::string st_error(const std::vector<uint8_t>& bytes) {
  return error_of([&] { SafetensorsFile::parse(bytes.data(), bytes.size(), "bad.safetensors"); });
}

TEST(SafetensorsHostile, EveryPrefixIsAnError) {
  auto bytes = read_bytes(source_path("tests/formats/fixtures/basic.safetensors"));
  ASSERT_NO_THROW(SafetensorsFile::parse(bytes.data(), bytes.size(), "basic.safetensors"));
  for (size_t len = 0; len < bytes.size(); ++len) {
    std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + len);
    std::string msg = error_of([&] { SafetensorsFile::parse(prefix.data(), len, "cut.safetensors"); });
    ASSERT_THAT(msg, HasSubstr("cut.safetensors: ")) << len;
    ASSERT_THAT(msg, HasSubstr(" at byte ")) << len;
  }
}

TEST(SafetensorsHostile, CorruptHeaders) {
  EXPECT_THAT(st_error(st_bytes("{}", 0, uint64_t(1) << 62)), HasSubstr("header length at byte 0: expected at most 2"));
  EXPECT_THAT(st_error(st_bytes("{\"a\": ", 0)), HasSubstr("header JSON at byte"));
  EXPECT_THAT(st_error(st_bytes("[1]", 0)), HasSubstr("header JSON at byte 8: expected an object, found array"));
  const std::string ok = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  EXPECT_NO_THROW(SafetensorsFile::parse(st_bytes(ok, 8).data(), st_bytes(ok, 8).size(), "ok"));
  EXPECT_THAT(st_error(st_bytes(R"({"t":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", 8)),
              HasSubstr("tensor 't' dtype at byte 9: expected a known safetensors dtype, found \"F33\""));
  EXPECT_THAT(st_error(st_bytes(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8)),
              HasSubstr("tensor 't' shape at byte 9: expected non-negative sizes, found -2"));
  EXPECT_THAT(st_error(st_bytes(R"({"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8)),
              HasSubstr("expected an element count below 2^63"));
  EXPECT_THAT(st_error(st_bytes(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8)),
              HasSubstr("tensor 't' data_offsets at byte 9: expected 3 x 4 bytes"));
  EXPECT_THAT(st_error(st_bytes(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8)),
              HasSubstr("expected [begin, end] with 0 <= begin <= end"));
  EXPECT_THAT(
      st_error(st_bytes(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", 8)),
      HasSubstr("tensor 't' data at byte 71: expected bytes [8, 16) of the data section to lie within its 8 bytes"));
  EXPECT_THAT(
      st_error(st_bytes(
          R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"u":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
          8)),
      HasSubstr("expected no overlap with tensor 't'"));
  EXPECT_THAT(st_error(st_bytes(R"({"__metadata__":{"k":1}})", 0)),
              HasSubstr("__metadata__.k at byte 9: expected a string value"));
  EXPECT_THAT(st_error(st_bytes(R"({"t":7})", 0)), HasSubstr("tensor 't' at byte 9: expected an object, found number"));
  EXPECT_THAT(st_error(st_bytes(R"({"t":{"dtype":"F32","shape":[2]}})", 8)), HasSubstr("data_offsets at byte 9"));
  // Deeply nested JSON is refused before parsing (core/json_limits.h), not by a stack overflow.
  std::string deep = "{\"t\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
  EXPECT_THAT(st_error(st_bytes(deep, 0)),
              HasSubstr("header JSON at byte 8: expected arrays/objects nested at most 128 deep, found 100001"));
  // A number beyond double is nlohmann's out_of_range, not a parse_error: still one brioche::Error (found by safetensors_fuzz).
  EXPECT_THAT(st_error(st_bytes(R"({"t":{"dtype":"F32","shape":[1e400],"data_offsets":[0,4]}})", 4)),
              HasSubstr("header JSON at byte 8: expected valid JSON, found: [json.exception.out_of_range.406]"));
}

TEST(SafetensorsHostile, BadDirectories) {
  TempDir dir;
  EXPECT_THAT(error_of([&] { SafetensorsDir::open(dir.file("nope")); }), HasSubstr("expected a model directory"));
  EXPECT_THAT(error_of([&] { SafetensorsDir::open(dir.path().string()); }),
              HasSubstr("config.json: expected the model's config.json"));
  std::ofstream(dir.file("config.json")) << "{\"model_type\": ";
  EXPECT_THAT(error_of([&] { SafetensorsDir::open(dir.path().string()); }), HasSubstr("config.json: JSON at byte"));
  std::ofstream(dir.file("config.json")) << "{\"model_type\": \"llama\"}";
  EXPECT_THAT(error_of([&] { SafetensorsDir::open(dir.path().string()); }), HasSubstr("found none"));
  std::ofstream(dir.file("model.safetensors.index.json")) << R"({"weight_map": {"a": "../../etc/passwd"}})";
  EXPECT_THAT(error_of([&] { SafetensorsDir::open(dir.path().string()); }),
              HasSubstr("weight_map['a']: expected a file name inside the directory"));
  SafetensorsWriter w;
  w.add("b", Tensor::zeros(DType::F32, {1}));
  w.write(dir.file("shard.safetensors"));
  std::ofstream(dir.file("model.safetensors.index.json")) << R"({"weight_map": {"a": "shard.safetensors"}})";
  EXPECT_THAT(error_of([&] { SafetensorsDir::open(dir.path().string()); }),
              HasSubstr("weight_map['a']: expected the tensor in shard.safetensors, found it in no shard"));
  std::ofstream(dir.file("config.json")) << R"({"quantization": {"bits": 7, "group_size": 64}})";
  std::ofstream(dir.file("model.safetensors.index.json")) << R"({"weight_map": {"b": "shard.safetensors"}})";
  auto d = SafetensorsDir::open(dir.path().string());
  EXPECT_THAT(error_of([&] { d.quantized_weight("x"); }), HasSubstr("expected bits 2, 3, 4, 5, 6 or 8"));
}

}  // namespace
}  // namespace brioche::formats
