// Qwen 3.5 GGUF files written by llama.cpp's own converter
// (tools/oracle/qwen35_gguf_fixtures.py: convert_hf_to_gguf.py, f32) from the
// transformers fixtures tests/fixtures/qwen35/{dense,moe}; f32 is lossless, so
// the fixtures' transformers goldens are the oracle. The converter tiles the
// linear-attention value heads (2 key heads, 4 value heads here), writes
// -exp(A_log) and + 1 on the norms: a loader that missed any of it would be
// far off.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_features.h"
#include "core/error.h"
#include "formats/gguf.h"
#include "model/forward_batch.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace brioche::model {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string fixtures() { return std::string(BRIOCHE_SOURCE_DIR) + "/tests/fixtures/qwen35/"; }

std::vector<float> read_f32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  in.seekg(0, std::ios::end);
  std::vector<float> v(size_t(in.tellg()) / sizeof(float));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(v.data()), std::streamsize(v.size() * sizeof(float)));
  return v;
}

// One prefill of `ids`; the logits of the rows in `rows` (all when empty).
std::vector<float> prefill(Model& model, const std::vector<int32_t>& ids, const std::vector<int32_t>& rows) {
  KvCache cache(model.config(), {.block_size = 16, .n_blocks = 16, .dtype = DType::F32, .n_state_slots = 2});
  ForwardBatch batch;
  std::vector<int32_t> blocks;
  for (int32_t b = 0; b * 16 < int32_t(ids.size()); ++b) blocks.push_back(b);
  batch.sequences.push_back(
      {.first_row = 0, .n_rows = int32_t(ids.size()), .n_past = 0, .block_table = blocks, .state_slot = 0});
  for (size_t i = 0; i < ids.size(); ++i) {
    batch.tokens.push_back(ids[i]);
    batch.positions.push_back(int32_t(i));
    batch.wants_logits.push_back(rows.empty() || std::find(rows.begin(), rows.end(), int32_t(i)) != rows.end());
  }
  Tensor logits;
  model.forward(batch, cache, logits);
  return std::vector<float>(logits.data_as<float>(), logits.data_as<float>() + logits.numel());
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double err = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) err = std::max(err, std::abs(double(a[i]) - double(b[i])));
  return err;
}

// As the safetensors fixtures (qwen35_test.cpp): measured on the dev machine
// dense / moe 13 rows 5.7e-5 / 6.6e-6, 200 tokens 6.0e-5 / 4.1e-5.
constexpr double kTolerance = 5e-4;

class Qwen35Gguf : public ::testing::TestWithParam<std::string> {};

TEST_P(Qwen35Gguf, LogitsMatchTransformers) {
  const std::string name = GetParam();
  std::unique_ptr<Model> model = Model::load(fixtures() + "gguf/" + name + ".f32.gguf");
  EXPECT_EQ(model->config().architecture, name == "moe" ? "qwen3_5_moe" : "qwen3_5");
  EXPECT_TRUE(Model::has_cuda_kernels(fixtures() + "gguf/" + name + ".f32.gguf"));
  std::ifstream in(fixtures() + name + "/golden.json");
  const nlohmann::json g = nlohmann::json::parse(in);
  const double short_err = max_abs_diff(prefill(*model, g["short_ids"].get<std::vector<int32_t>>(), {}),
                                        read_f32(fixtures() + name + "/short_logits.f32"));
  const double long_err = max_abs_diff(
      prefill(*model, g["long_ids"].get<std::vector<int32_t>>(), g["long_rows"].get<std::vector<int32_t>>()),
      read_f32(fixtures() + name + "/long_logits.f32"));
  std::printf("[ measured ] qwen35 %s GGUF: max abs logit error 13 rows %.2e, 200 tokens %.2e\n", name.c_str(),
              short_err, long_err);
  EXPECT_LT(short_err, kTolerance);
  EXPECT_LT(long_err, kTolerance);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Qwen35Gguf, ::testing::Values("dense", "moe"));

// Q8_0, as users have it quantized: the untiling moves quantized rows (and
// ssm_out's columns, through f32 where a head is less than a block) and must
// read as the same file dequantized by gguf-py. On the scalar CPU path
// (every weight row made f32, then f32 dots in one order) the two are
// bit-identical (measured 0); a row or column moved wrongly in the quantized
// form alone would not be.
TEST(Qwen35GgufQuantized, Q8ReadsAsItsDequantizedCopy) {
  cpu::set_isa_override(cpu::Isa::Scalar);
  std::unique_ptr<Model> q8 = Model::load(fixtures() + "gguf/dense.q8_0.gguf");
  std::unique_ptr<Model> f32 = Model::load(fixtures() + "gguf/dense.q8_0-dequantized.f32.gguf");
  EXPECT_EQ(q8->config().weight_dtype, DType::Q8_0);
  std::ifstream in(fixtures() + "dense/golden.json");
  const nlohmann::json g = nlohmann::json::parse(in);
  const std::vector<int32_t> ids = g["long_ids"].get<std::vector<int32_t>>();
  const std::vector<float> a = prefill(*q8, ids, {}), b = prefill(*f32, ids, {});
  cpu::clear_isa_override();
  double scale = 0;
  for (float v : b) scale = std::max(scale, double(std::abs(v)));
  const double err = max_abs_diff(a, b) / scale;
  std::printf("[ measured ] qwen35 dense Q8_0 GGUF vs its f32 dequantized copy, 200 rows: %.2e of the largest logit\n",
              err);
  EXPECT_LT(err, 1e-4);
}

// The dense file rewritten with one metadata key or tensor changed.
std::string error_with(const std::function<void(formats::GgufWriter&, const formats::GgufFile&)>& edit,
                       const std::string& drop_key, const std::string& drop_tensor) {
  const auto f = formats::GgufFile::open(fixtures() + "gguf/dense.f32.gguf");
  formats::GgufWriter w;
  for (const auto& [key, value] : f->metadata())
    if (key != drop_key) w.add(key, value);
  for (const auto& t : f->tensors())
    if (t.name != drop_tensor) w.add_tensor(t.name, f->tensor(t.name));
  edit(w, *f);
  const fs::path path = fs::temp_directory_path() / ("brioche_qwen35_gguf_" + std::to_string(::getpid()) + ".gguf");
  w.write(path.string());
  std::string msg = "(loaded)";
  try {
    Model::load(path.string());
  } catch (const Error& e) {
    msg = e.what();
  }
  fs::remove(path);
  return msg;
}

TEST(Qwen35GgufErrors, NameTheKeyOrTensor) {
  auto none = [](formats::GgufWriter&, const formats::GgufFile&) {};
  EXPECT_THAT(error_with(none, "qwen35.ssm.group_count", ""),
              HasSubstr("metadata 'qwen35.ssm.group_count' expected, found absent"));
  EXPECT_THAT(error_with(none, "", "blk.0.ssm_out.weight"), HasSubstr("blk.0.ssm_out.weight"));
  EXPECT_THAT(error_with(
                  [](formats::GgufWriter& w, const formats::GgufFile&) {
                    w.add("qwen35.ssm.time_step_rank", formats::GgufValue::integer(formats::GgufType::U32, 3));
                  },
                  "qwen35.ssm.time_step_rank", ""),
              HasSubstr("qwen35.ssm.inner_size: expected a multiple of qwen35.ssm.time_step_rank 3, found 64"));
  EXPECT_THAT(error_with(
                  [](formats::GgufWriter& w, const formats::GgufFile&) {
                    Tensor a = Tensor::zeros(DType::F32, {4});
                    w.add_tensor("blk.0.ssm_a", a);
                  },
                  "", "blk.0.ssm_a"),
              HasSubstr("tensor 'blk.0.ssm_a' [0]: expected a finite negative number (-exp(A_log)), found 0"));
}

}  // namespace
}  // namespace brioche::model
