// gen_model's safetensors directories (tools/gen_model_safetensors.h) read
// back by the model loader (load_safetensors_checkpoint): the config, and
// every weight as generated, MLX affine groups with their scale and bias
// rounded to bf16 as the file stores them. GGUF block types are refused
// with an error that names the tensor.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "core/error.h"
#include "core/half.h"
#include "formats/formats_test_util.h"
#include "model/weights.h"
#include "tools/gen_model_lib.h"
#include "tools/gen_model_safetensors.h"

namespace brioche {
namespace {

using formats::testing::error_of;
using formats::testing::TempDir;

float bf16_rounded(float v) { return bf16_to_f32(f32_to_bf16(v)); }

// `got` holds `want`'s blocks with scale and bias rounded to bf16 and the same q.
void expect_same_affine_blocks(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.nbytes(), want.nbytes()) << what;
  const size_t block = size_t(dtype_info(want.dtype()).block_bytes);
  const auto* g = static_cast<const uint8_t*>(got.data());
  const auto* w = static_cast<const uint8_t*>(want.data());
  for (size_t b = 0; b < want.nbytes() / block; ++b) {
    float gs[2], ws[2];
    std::memcpy(gs, g + b * block, 8);
    std::memcpy(ws, w + b * block, 8);
    ASSERT_EQ(gs[0], bf16_rounded(ws[0])) << what << " block " << b << " scale";
    ASSERT_EQ(gs[1], bf16_rounded(ws[1])) << what << " block " << b << " bias";
    ASSERT_EQ(std::memcmp(g + b * block + 8, w + b * block + 8, block - 8), 0) << what << " block " << b << " q";
  }
}

TEST(RandomCheckpointDir, MlxAffineModelLoadsAsGenerated) {
  const tools::ShapePreset& shape = tools::find_shape("smollm2-135m");
  const model::Checkpoint ck = tools::random_checkpoint(shape, DType::AFFINE4_G64);
  const TempDir dir;
  tools::write_safetensors_dir(ck, dir.path().string());

  const model::Checkpoint back = model::load_safetensors_checkpoint(dir.path().string());
  const model::ModelConfig &c = back.config, &want = ck.config;
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.vocab_size, want.vocab_size);
  EXPECT_EQ(c.hidden_size, want.hidden_size);
  EXPECT_EQ(c.intermediate_size, want.intermediate_size);
  EXPECT_EQ(c.n_layers, want.n_layers);
  EXPECT_EQ(c.n_heads, want.n_heads);
  EXPECT_EQ(c.n_kv_heads, want.n_kv_heads);
  EXPECT_EQ(c.head_dim, want.head_dim);
  EXPECT_EQ(c.rope.theta, want.rope.theta);
  EXPECT_EQ(c.rms_eps, want.rms_eps);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(c.weight_dtype, DType::AFFINE4_G64);

  expect_same_affine_blocks(back.weights.token_embd, ck.weights.token_embd, "embed_tokens");
  for (int l : {0, shape.layers - 1}) {
    const model::LayerWeights &g = back.weights.layers[size_t(l)], &w = ck.weights.layers[size_t(l)];
    const std::string at = "layer " + std::to_string(l) + " ";
    expect_same_affine_blocks(g.wq, w.wq, at + "q_proj");
    expect_same_affine_blocks(g.wk, w.wk, at + "k_proj");
    expect_same_affine_blocks(g.wv, w.wv, at + "v_proj");
    expect_same_affine_blocks(g.wo, w.wo, at + "o_proj");
    expect_same_affine_blocks(g.w_gate, w.w_gate, at + "gate_proj");
    expect_same_affine_blocks(g.w_up, w.w_up, at + "up_proj");
    expect_same_affine_blocks(g.w_down, w.w_down, at + "down_proj");
    EXPECT_EQ(g.attn_norm.data_as<float>()[0], 1.0f);
    EXPECT_EQ(g.ffn_norm.data_as<float>()[shape.hidden - 1], 1.0f);
  }
}

TEST(RandomCheckpointDir, GgufBlockTypesAreRefusedByName) {
  // A Q4_K matrix itself.
  formats::SafetensorsWriter out;
  const std::string q4_k = error_of([&] {
    tools::detail::add_matrix(out, "model.layers.0.mlp.up_proj", Tensor::zeros(DType::Q4_K, {2, 256}));
  });
  EXPECT_NE(q4_k.find("model.layers.0.mlp.up_proj.weight"), std::string::npos) << q4_k;
  EXPECT_NE(q4_k.find("is q4_k, a GGUF block type"), std::string::npos) << q4_k;
  // A whole Q4_K model: SmolLM2's 576-wide embedding is the generator's Q8_0
  // fallback, the first tensor written, and refused the same way.
  const model::Checkpoint ck = tools::random_checkpoint(tools::find_shape("smollm2-135m"), DType::Q4_K);
  const TempDir dir;
  const std::string model = error_of([&] { tools::write_safetensors_dir(ck, dir.path().string()); });
  EXPECT_NE(model.find("model.embed_tokens.weight"), std::string::npos) << model;
  EXPECT_NE(model.find("no safetensors form"), std::string::npos) << model;
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "model.safetensors"));
}

}  // namespace
}  // namespace brioche
