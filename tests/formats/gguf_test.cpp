// GGUF reader against goldens from the python gguf package (default model and
// a fixture written by gguf.GGUFWriter), and writer -> reader round trips.
#include <bit>
#include <cmath>

#include "core/half.h"
#include "formats/gguf.h"
#include "formats_test_util.h"

namespace brioche::formats {
namespace {

using namespace testing;

void expect_metadata_matches(const GgufFile& file, const nlohmann::json& golden) {
  size_t expected_keys = golden["metadata"].size();
  EXPECT_EQ(file.metadata().size(), expected_keys);
  for (auto it = golden["metadata"].begin(); it != golden["metadata"].end(); ++it) {
    SCOPED_TRACE(it.key());
    const GgufValue* v = file.find(it.key());
    ASSERT_NE(v, nullptr);
    const auto& g = it.value();
    EXPECT_EQ(gguf_type_name(v->type()), g["type"].get<std::string>());
    if (g["type"] != "array") {
      const auto& value = g["value"];
      if (value.is_string())
        EXPECT_EQ(v->as_string(), value.get<std::string>());
      else if (value.is_boolean())
        EXPECT_EQ(v->as_bool(), value.get<bool>());
      else if (value.is_number_float())
        EXPECT_DOUBLE_EQ(v->as_float(), value.get<double>());
      else if (value.is_number_unsigned())
        EXPECT_EQ(v->as_uint(), value.get<uint64_t>());
      else
        EXPECT_EQ(v->as_int(), value.get<int64_t>());
      continue;
    }
    ASSERT_EQ(v->array_size(), g["count"].get<size_t>());
    EXPECT_EQ(gguf_type_name(v->element_type()), g["element_type"].get<std::string>());
    if (g.contains("nested")) {
      const auto& items = v->nested();
      ASSERT_EQ(items.size(), g["nested"].size());
      for (size_t i = 0; i < items.size(); ++i)
        EXPECT_EQ(items[i].as_ints(), g["nested"][i].get<std::vector<int64_t>>());
      continue;
    }
    if (g["element_type"] == "string") {
      const auto& strings = v->string_list();
      for (size_t i = 0; i < g["first"].size(); ++i) EXPECT_EQ(strings[i], g["first"][i].get<std::string>());
      EXPECT_EQ(strings.back(), g["last"].get<std::string>());
      uint64_t h = 0xCBF29CE484222325ull;
      for (const auto& s : strings) {
        uint64_t len = s.size();
        h = fnv1a(&len, 8, h);
        h = fnv1a(s.data(), s.size(), h);
      }
      EXPECT_EQ(hex64(h), g["fnv1a"].get<std::string>());
    } else if (g["element_type"] == "f32" || g["element_type"] == "f64") {
      auto floats = v->as_floats();
      for (size_t i = 0; i < g["first"].size(); ++i) EXPECT_FLOAT_EQ(floats[i], g["first"][i].get<float>());
    } else {
      auto ints = v->as_ints();
      for (size_t i = 0; i < g["first"].size(); ++i) EXPECT_EQ(ints[i], g["first"][i].get<int64_t>());
      uint64_t h = 0xCBF29CE484222325ull;
      for (int64_t x : ints) h = fnv1a(&x, 8, h);
      EXPECT_EQ(hex64(h), g["fnv1a"].get<std::string>());
    }
  }
}

void expect_tensors_match(const GgufFile& file, const nlohmann::json& golden) {
  ASSERT_EQ(file.tensors().size(), golden["tensors"].size());
  for (size_t i = 0; i < file.tensors().size(); ++i) {
    const auto& t = file.tensors()[i];
    const auto& g = golden["tensors"][i];
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.name, g["name"].get<std::string>());
    EXPECT_EQ(t.ggml_type, g["ggml_type"].get<uint32_t>());
    EXPECT_EQ(t.shape, g["shape"].get<std::vector<int64_t>>());
    EXPECT_EQ(t.offset, g["offset"].get<uint64_t>());
    EXPECT_EQ(t.nbytes, g["nbytes"].get<size_t>());
    Tensor view = file.tensor(t.name);
    EXPECT_EQ(view.dtype(), t.dtype);
    EXPECT_EQ(view.nbytes(), t.nbytes);
    EXPECT_EQ(hex_bytes(view.data(), std::min<size_t>(16, t.nbytes)), g["head"].get<std::string>());
  }
}

TEST(GgufReader, DefaultModelMatchesPythonGguf) {
  std::string path = default_model_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "skipped: default model not found at " << path;
  auto golden = load_json(source_path("tests/formats/golden/smollm2_gguf.json"));
  auto file = GgufFile::open(path);
  EXPECT_EQ(file->version(), golden["version"].get<uint32_t>());
  EXPECT_EQ(file->alignment(), golden["alignment"].get<uint64_t>());
  EXPECT_EQ(file->data_offset(), golden["data_offset"].get<uint64_t>());
  EXPECT_EQ(file->file_size(), golden["file_size"].get<size_t>());
  expect_metadata_matches(*file, golden);
  expect_tensors_match(*file, golden);

  // The facts the model layer relies on, spelled out.
  EXPECT_EQ(file->get("general.architecture").as_string(), "llama");
  EXPECT_EQ(file->get("tokenizer.ggml.tokens").array_size(), 49152u);
  EXPECT_EQ(file->get_int("llama.embedding_length", 0), 576);
  EXPECT_EQ(file->tensors().size(), 272u);
  const GgufTensorInfo* embd = file->find_tensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->dtype, DType::Q8_0);
  EXPECT_EQ(embd->shape, (std::vector<int64_t>{49152, 576}));
  const GgufTensorInfo* q = file->find_tensor("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->dtype, DType::Q4_1);
  EXPECT_EQ(q->shape, (std::vector<int64_t>{576, 576}));
  EXPECT_EQ(file->find_tensor("blk.0.attn_norm.weight")->dtype, DType::F32);
}

TEST(GgufReader, AccessorsNameTheKey) {
  std::string path = default_model_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "skipped: default model not found at " << path;
  auto file = GgufFile::open(path);
  EXPECT_EQ(file->find("no.such.key"), nullptr);
  EXPECT_THAT(error_of([&] { file->get("no.such.key"); }), ::testing::HasSubstr("'no.such.key'"));
  EXPECT_THAT(error_of([&] { file->get("general.architecture").as_int(); }),
              ::testing::AllOf(::testing::HasSubstr("general.architecture"),
                               ::testing::HasSubstr("expected an integer"), ::testing::HasSubstr("string \"llama\"")));
  EXPECT_THAT(error_of([&] { file->get("llama.block_count").as_string(); }),
              ::testing::HasSubstr("key 'llama.block_count': expected string, found u32 30"));
  EXPECT_EQ(file->get_string("missing", "fallback"), "fallback");
  EXPECT_EQ(file->get_int("missing", -7), -7);
  EXPECT_FLOAT_EQ(float(file->get_float("llama.attention.layer_norm_rms_epsilon", 0)), 1e-5f);
  EXPECT_THAT(error_of([&] { file->tensor("blk.99.none"); }), ::testing::HasSubstr("'blk.99.none'"));
}

TEST(GgufReader, TensorViewOutlivesFile) {
  std::string path = default_model_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "skipped: default model not found at " << path;
  Tensor norm;
  {
    auto file = GgufFile::open(path);
    norm = file->tensor("output_norm.weight");
  }
  ASSERT_EQ(norm.dtype(), DType::F32);
  ASSERT_EQ(norm.dim(0), 576);
  for (int64_t i = 0; i < 576; ++i) ASSERT_TRUE(std::isfinite(norm.data_as<float>()[i]));  // mapping still alive
}

TEST(GgufReader, PythonWrittenFixtureWithEveryType) {
  auto golden = load_json(source_path("tests/formats/golden/all_types_gguf.json"));
  auto file = GgufFile::open(source_path("tests/formats/fixtures/all_types.gguf"));
  EXPECT_EQ(file->version(), 3u);
  EXPECT_EQ(file->alignment(), 64u);
  EXPECT_EQ(file->data_offset(), golden["data_offset"].get<uint64_t>());
  expect_metadata_matches(*file, golden);
  expect_tensors_match(*file, golden);
  EXPECT_EQ(file->get("t.u64").as_uint(), 18000000000000000000ull);
  EXPECT_THAT(error_of([&] { file->get("t.u64").as_int(); }), ::testing::HasSubstr("t.u64"));

  // Values through the views: plain types directly, Q8_0 by its block formula x = d * q.
  auto values = golden["values"];
  auto check = [&](const std::string& name, auto element) {
    Tensor t = file->tensor(name);
    auto expected = values[name].get<std::vector<float>>();
    ASSERT_EQ(size_t(t.numel()), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(element(t, i), expected[i]) << name << "[" << i << "]";
  };
  check("a.f32", [](const Tensor& t, size_t i) { return t.data_as<float>()[i]; });
  check("b.f16", [](const Tensor& t, size_t i) { return f16_to_f32(t.data_as<uint16_t>()[i]); });
  check("c.bf16", [](const Tensor& t, size_t i) { return bf16_to_f32(t.data_as<uint16_t>()[i]); });
  check("d.q8_0", [](const Tensor& t, size_t i) {
    const uint8_t* block = t.data_as<uint8_t>() + (i / 32) * 34;
    uint16_t d;
    std::memcpy(&d, block, 2);
    return f16_to_f32(d) * float(int8_t(block[2 + i % 32]));
  });
}

GgufWriter every_type_writer() {
  GgufWriter w;
  w.add("general.architecture", GgufValue::string("llama"));
  w.add("u8", GgufValue::integer(GgufType::U8, 255));
  w.add("i8", GgufValue::integer(GgufType::I8, -128));
  w.add("u16", GgufValue::integer(GgufType::U16, 65535));
  w.add("i16", GgufValue::integer(GgufType::I16, -32768));
  w.add("u32", GgufValue::integer(GgufType::U32, 4294967295ll));
  w.add("i32", GgufValue::integer(GgufType::I32, INT32_MIN));
  w.add("u64", GgufValue::integer(GgufType::U64, INT64_MAX));
  w.add("i64", GgufValue::integer(GgufType::I64, INT64_MIN));
  w.add("f32", GgufValue::floating(GgufType::F32, 0.1));
  w.add("f64", GgufValue::floating(GgufType::F64, 0.1));
  w.add("bool", GgufValue::boolean(false));
  w.add("str", GgufValue::string(std::string("nul\0inside", 10)));
  w.add("strs", GgufValue::strings({"x", "", "zz"}));
  w.add("ints", GgufValue::ints(GgufType::I16, {-1, 2, -3}));
  w.add("u64s", GgufValue::ints(GgufType::U64, {0, 1}));
  w.add("f64s", GgufValue::floats(GgufType::F64, {1.5, -0.25}));
  w.add("bools", GgufValue::bools({true, false, true}));
  w.add("nested", GgufValue::arrays({GgufValue::strings({"a"}), GgufValue::arrays({GgufValue::ints(GgufType::U8, {7})}),
                                     GgufValue::floats(GgufType::F32, {})}));
  Tensor f32 = Tensor::zeros(DType::F32, {2, 3});
  for (int i = 0; i < 6; ++i) f32.data_as<float>()[i] = float(i) - 2.5f;
  w.add_tensor("w.f32", f32);
  Tensor q41 = Tensor::zeros(DType::Q4_1, {3, 64});
  for (size_t i = 0; i < q41.nbytes(); ++i) q41.data_as<uint8_t>()[i] = uint8_t(i * 37 + 1);
  w.add_tensor("w.q4_1", q41);
  Tensor q6k = Tensor::zeros(DType::Q6_K, {1, 256});
  for (size_t i = 0; i < q6k.nbytes(); ++i) q6k.data_as<uint8_t>()[i] = uint8_t(i * 11);
  w.add_tensor("w.q6_k", q6k);
  return w;
}

TEST(GgufWriter, RoundTripsEveryTypeAndTensor) {
  TempDir dir;
  GgufWriter w = every_type_writer();
  w.write(dir.file("rt.gguf"));
  auto file = GgufFile::open(dir.file("rt.gguf"));
  EXPECT_EQ(file->version(), 3u);
  EXPECT_EQ(file->alignment(), 32u);
  ASSERT_EQ(file->metadata().size(), 19u);
  EXPECT_EQ(file->metadata()[0].first, "general.architecture");  // file order kept
  EXPECT_EQ(file->get("u8").as_int(), 255);
  EXPECT_EQ(file->get("i8").as_int(), -128);
  EXPECT_EQ(file->get("u16").as_int(), 65535);
  EXPECT_EQ(file->get("i16").as_int(), -32768);
  EXPECT_EQ(file->get("u32").as_int(), 4294967295ll);
  EXPECT_EQ(file->get("i32").as_int(), INT32_MIN);
  EXPECT_EQ(file->get("u64").as_uint(), uint64_t(INT64_MAX));
  EXPECT_EQ(file->get("i64").as_int(), INT64_MIN);
  EXPECT_EQ(file->get("f32").as_float(), double(0.1f));
  EXPECT_EQ(file->get("f64").as_float(), 0.1);
  EXPECT_FALSE(file->get("bool").as_bool());
  EXPECT_EQ(file->get("str").as_string(), std::string("nul\0inside", 10));
  EXPECT_EQ(file->get("strs").as_strings(), (std::vector<std::string>{"x", "", "zz"}));
  EXPECT_EQ(file->get("ints").element_type(), GgufType::I16);
  EXPECT_EQ(file->get("ints").as_ints(), (std::vector<int64_t>{-1, 2, -3}));
  EXPECT_EQ(file->get("u64s").as_ints(), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(file->get("f64s").as_floats(), (std::vector<float>{1.5f, -0.25f}));
  EXPECT_EQ(file->get("bools").as_ints(), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(file->get("bools").at(2).as_bool(), true);
  const auto& nested = file->get("nested").nested();
  ASSERT_EQ(nested.size(), 3u);
  EXPECT_EQ(nested[0].as_strings(), std::vector<std::string>{"a"});
  EXPECT_EQ(nested[1].nested()[0].as_ints(), std::vector<int64_t>{7});
  EXPECT_EQ(nested[2].element_type(), GgufType::F32);
  EXPECT_EQ(nested[2].array_size(), 0u);
  EXPECT_EQ(file->get("strs").describe(), "array<string>[3]");

  ASSERT_EQ(file->tensors().size(), 3u);
  Tensor f32 = file->tensor("w.f32");
  EXPECT_EQ(f32.describe(), Tensor::zeros(DType::F32, {2, 3}).describe());
  EXPECT_EQ(f32.data_as<float>()[5], 2.5f);
  for (const auto& t : file->tensors()) EXPECT_EQ(t.offset % 32, 0u) << t.name;
  Tensor q41 = file->tensor("w.q4_1");
  EXPECT_EQ(q41.dtype(), DType::Q4_1);
  EXPECT_EQ(q41.dim(0), 3);
  EXPECT_EQ(q41.dim(1), 64);
  for (size_t i = 0; i < q41.nbytes(); ++i) ASSERT_EQ(q41.data_as<uint8_t>()[i], uint8_t(i * 37 + 1));
  Tensor q6k = file->tensor("w.q6_k");
  EXPECT_EQ(q6k.dtype(), DType::Q6_K);
  for (size_t i = 0; i < q6k.nbytes(); ++i) ASSERT_EQ(q6k.data_as<uint8_t>()[i], uint8_t(i * 11));
}

TEST(GgufWriter, HonoursGeneralAlignment) {
  GgufWriter w;
  w.add("general.alignment", GgufValue::integer(GgufType::U32, 256));
  Tensor a = Tensor::zeros(DType::F32, {3});
  w.add_tensor("a", a);
  w.add_tensor("b", a);
  auto bytes = w.serialize();
  auto file = GgufFile::parse(bytes.data(), bytes.size(), "aligned.gguf");
  EXPECT_EQ(file->alignment(), 256u);
  EXPECT_EQ(file->data_offset() % 256, 0u);
  EXPECT_EQ(file->tensors()[1].offset - file->tensors()[0].offset, 256u);
}

TEST(GgufWriter, RefusesBadInput) {
  GgufWriter w;
  w.add("k", GgufValue::boolean(true));
  EXPECT_THROW(w.add("k", GgufValue::boolean(false)), Error);
  EXPECT_THROW(w.add("general.alignment", GgufValue::integer(GgufType::U32, 48)), Error);
  EXPECT_THROW(GgufValue::integer(GgufType::U8, 256), Error);
  EXPECT_THROW(GgufValue::integer(GgufType::F32, 1), Error);
  EXPECT_THROW(w.add_tensor("affine", Tensor::zeros(DType::AFFINE4_G32, {1, 32})), Error);
}

TEST(GgufReader, AcceptsVersion2) {
  GgufWriter w = every_type_writer();
  auto bytes = w.serialize();
  bytes[4] = 2;
  auto file = GgufFile::parse(bytes.data(), bytes.size(), "v2.gguf");
  EXPECT_EQ(file->version(), 2u);
  EXPECT_EQ(file->tensors().size(), 3u);
}

}  // namespace
}  // namespace brioche::formats
