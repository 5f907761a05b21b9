// Qwen 3.5 (dense hybrid and hybrid MoE) against transformers: random-weight
// checkpoints and goldens from tools/oracle/qwen35_oracle.py
// (tests/fixtures/qwen35/{dense,moe}). Layers [linear, full, linear, full];
// transformers runs the chunked delta rule (chunks of 64) for prefill and the
// recurrent one for decode, brioche the exact recurrent form throughout.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/safetensors.h"
#include "model/model.h"
#include "ops/device.h"
#include "testing_paths.h"

namespace brioche::model {
namespace {

namespace fs = std::filesystem;

std::string fixture_dir(const std::string& name) {
  return std::string(BRIOCHE_SOURCE_DIR) + "/tests/fixtures/qwen35/" + name;
}

std::vector<float> read_f32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  in.seekg(0, std::ios::end);
  std::vector<float> v(size_t(in.tellg()) / sizeof(float));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(v.data()), std::streamsize(v.size() * sizeof(float)));
  return v;
}

struct Golden {
  std::vector<int32_t> short_ids, long_ids, long_rows, prompt_ids, greedy_ids;
  std::vector<float> short_logits, long_logits, greedy_logits;  // row-major [rows, vocab]
};

Golden read_golden(const std::string& name) {
  std::ifstream in(fixture_dir(name) + "/golden.json");
  nlohmann::json j = nlohmann::json::parse(in);
  Golden g;
  g.short_ids = j["short_ids"].get<std::vector<int32_t>>();
  g.long_ids = j["long_ids"].get<std::vector<int32_t>>();
  g.long_rows = j["long_rows"].get<std::vector<int32_t>>();
  g.prompt_ids = j["prompt_ids"].get<std::vector<int32_t>>();
  g.greedy_ids = j["greedy_ids"].get<std::vector<int32_t>>();
  g.short_logits = read_f32(fixture_dir(name) + "/short_logits.f32");
  g.long_logits = read_f32(fixture_dir(name) + "/long_logits.f32");
  g.greedy_logits = read_f32(fixture_dir(name) + "/greedy_logits.f32");
  return g;
}

// A sequence run through a model step by step: its block table, state slot
// and position.
struct Runner {
  Model& model;
  KvCache& cache;
  int32_t next_block = 0;

  struct Seq {
    std::vector<int32_t> blocks;
    int32_t n_past = 0;
    int32_t slot = 0;
  };
  struct Chunk {
    Seq* seq;
    std::vector<int32_t> tokens;
    std::vector<uint8_t> wants;  // per token; empty: only the last
  };

  // One forward over several sequences' chunks; returns logits [rows wanted, vocab].
  Tensor step(std::vector<Chunk> chunks) {
    ForwardBatch batch;
    for (Chunk& c : chunks) {
      Seq& s = *c.seq;
      const int32_t end = s.n_past + int32_t(c.tokens.size());
      while (int32_t(s.blocks.size()) * cache.block_size() < end) s.blocks.push_back(next_block++);
      batch.sequences.push_back({.first_row = batch.n_rows(),
                                 .n_rows = int32_t(c.tokens.size()),
                                 .n_past = s.n_past,
                                 .block_table = s.blocks,
                                 .state_slot = s.slot});
      for (size_t i = 0; i < c.tokens.size(); ++i) {
        batch.tokens.push_back(c.tokens[i]);
        batch.positions.push_back(s.n_past + int32_t(i));
        batch.wants_logits.push_back(c.wants.empty() ? i + 1 == c.tokens.size() : c.wants[i]);
      }
    }
    Tensor logits;
    model.forward(batch, cache, logits);
    for (Chunk& c : chunks) c.seq->n_past += int32_t(c.tokens.size());
    return logits;
  }
};

double max_abs_diff(const float* a, const float* b, int64_t n) {
  double err = 0;
  for (int64_t i = 0; i < n; ++i) err = std::max(err, std::abs(double(a[i]) - double(b[i])));
  return err;
}

int32_t argmax(const float* row, int64_t n) { return int32_t(std::max_element(row, row + n) - row); }

// Measured max abs logit error (f32, logits std ~0.8), dense / moe: prefill
// 5.7e-5 / 6.6e-6, the 200-token prompt 6.0e-5 / 4.1e-5, 40 decode steps
// 1.7e-5 / 1.2e-4. transformers' own two forms (chunked prefill vs
// token-by-token recurrent) differ by 4.8e-5 on the dense short prompt.
constexpr double kTolerance = 5e-4;

class Qwen35 : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    model = Model::load(fixture_dir(GetParam()));
    golden = read_golden(GetParam());
    vocab = model->config().vocab_size;
  }
  KvCache make_cache(int slots = 4) {
    return KvCache(model->config(), {.block_size = 16, .n_blocks = 64, .dtype = DType::F32, .n_state_slots = slots});
  }
  std::unique_ptr<Model> model;
  Golden golden;
  int64_t vocab = 0;
};

TEST_P(Qwen35, ConfigFromConfigJson) {
  const ModelConfig& c = model->config();
  EXPECT_EQ(c.architecture, GetParam() == "moe" ? "qwen3_5_moe" : "qwen3_5");
  EXPECT_EQ(c.n_layers, 4);
  EXPECT_TRUE(c.tied_embeddings);
  ASSERT_EQ(c.kv_layers.size(), 4u);
  EXPECT_EQ(c.kv_layers[0].n_kv_heads, 0);  // linear attention: no K/V
  EXPECT_EQ(c.kv_layers[1].n_kv_heads, 2);
  ASSERT_EQ(c.state_layers.size(), 4u);
  EXPECT_EQ(c.state_layers[0].conv_channels, 2 * 2 * 16 + 4 * 16);
  EXPECT_EQ(c.state_layers[1].conv_channels, 0);
  EXPECT_EQ(KvCache::state_slot_bytes(c), size_t(2 * (3 * 128 + 4 * 16 * 16) * 4));
}

TEST_P(Qwen35, PrefillMatchesTransformers) {
  KvCache cache = make_cache();
  Runner run{*model, cache};
  Runner::Seq seq;
  Tensor logits = run.step({{&seq, golden.short_ids, std::vector<uint8_t>(golden.short_ids.size(), 1)}});
  ASSERT_EQ(logits.dim(0), int64_t(golden.short_ids.size()));
  const double err = max_abs_diff(logits.data_as<float>(), golden.short_logits.data(), logits.numel());
  EXPECT_LT(err, kTolerance);
  std::printf("[ measured ] qwen35 %s prefill (13 rows) max abs logit error %.2e\n", GetParam().c_str(), err);
}

// 200 tokens (more than three of transformers' 64-token chunks) run as
// chunks of 77, 64 and 59 rows: the conv and delta-rule states carry across
// forwards.
TEST_P(Qwen35, LongPromptInChunksMatchesTransformers) {
  KvCache cache = make_cache();
  Runner run{*model, cache};
  Runner::Seq seq;
  std::vector<uint8_t> wants(golden.long_ids.size(), 0);
  for (int32_t r : golden.long_rows) wants[size_t(r)] = 1;
  std::vector<float> ours;
  size_t pos = 0;
  for (size_t chunk : {77, 64, 59}) {
    std::vector<int32_t> ids(golden.long_ids.begin() + pos, golden.long_ids.begin() + pos + chunk);
    std::vector<uint8_t> w(wants.begin() + pos, wants.begin() + pos + chunk);
    Tensor logits = run.step({{&seq, ids, w}});
    ours.insert(ours.end(), logits.data_as<float>(), logits.data_as<float>() + logits.numel());
    pos += chunk;
  }
  ASSERT_EQ(ours.size(), golden.long_logits.size());
  const double err = max_abs_diff(ours.data(), golden.long_logits.data(), int64_t(ours.size()));
  EXPECT_LT(err, kTolerance);
  std::printf("[ measured ] qwen35 %s 200-token prompt max abs logit error %.2e\n", GetParam().c_str(), err);
}

// Prompt of 50, then 40 greedy decode steps (crossing position 64): ids
// equal to transformers' generate() and each step's logits close.
TEST_P(Qwen35, GreedyDecodeMatchesTransformers) {
  KvCache cache = make_cache();
  Runner run{*model, cache};
  Runner::Seq seq;
  Tensor logits = run.step({{&seq, golden.prompt_ids, {}}});
  double err = 0;
  std::vector<int32_t> ids;
  for (size_t i = 0; i < golden.greedy_ids.size(); ++i) {
    err = std::max(err, max_abs_diff(logits.data_as<float>(), golden.greedy_logits.data() + i * size_t(vocab), vocab));
    ids.push_back(argmax(logits.data_as<float>(), vocab));
    logits = run.step({{&seq, {ids.back()}, {}}});
  }
  EXPECT_EQ(ids, golden.greedy_ids);
  EXPECT_LT(err, kTolerance);
  std::printf("[ measured ] qwen35 %s greedy decode (40 steps) max abs logit error %.2e\n", GetParam().c_str(), err);
}

// Three sequences of very different lengths in one batch per step (a
// 200-token prompt in chunks, a 13-token prompt, a 50-token prompt then
// decode), in slots other than their solo runs': every row's logits equal
// the same sequence run alone, bit for bit (row-independent CPU forward).
TEST_P(Qwen35, BatchedRowsEqualEachSequenceAlone) {
  auto solo = [&](const std::vector<std::vector<int32_t>>& chunks) {
    KvCache cache = make_cache();
    Runner run{*model, cache};
    Runner::Seq seq;
    std::vector<std::vector<float>> out;
    for (const auto& c : chunks) {
      Tensor l = run.step({{&seq, c, std::vector<uint8_t>(c.size(), 1)}});
      for (int64_t r = 0; r < l.dim(0); ++r) out.emplace_back(l.row_as<float>(r), l.row_as<float>(r) + vocab);
    }
    return out;
  };
  const std::vector<int32_t>& L = golden.long_ids;
  std::vector<std::vector<int32_t>> a = {
      {L.begin(), L.begin() + 90}, {L.begin() + 90, L.begin() + 91}, {L.begin() + 91, L.begin() + 200}};
  std::vector<std::vector<int32_t>> b = {golden.short_ids, {7}, {8}};
  std::vector<std::vector<int32_t>> c = {{golden.prompt_ids.begin(), golden.prompt_ids.begin() + 3},
                                         {golden.prompt_ids.begin() + 3, golden.prompt_ids.end()},
                                         {9}};
  auto alone_a = solo(a), alone_b = solo(b), alone_c = solo(c);

  KvCache cache = make_cache(4);
  Runner run{*model, cache};
  Runner::Seq sa{.slot = 3}, sb{.slot = 0}, sc{.slot = 2};
  size_t ia = 0, ib = 0, ic = 0;
  for (int step = 0; step < 3; ++step) {
    std::vector<Runner::Chunk> chunks = {{&sb, b[size_t(step)], std::vector<uint8_t>(b[size_t(step)].size(), 1)},
                                         {&sa, a[size_t(step)], std::vector<uint8_t>(a[size_t(step)].size(), 1)},
                                         {&sc, c[size_t(step)], std::vector<uint8_t>(c[size_t(step)].size(), 1)}};
    Tensor l = run.step(chunks);
    int64_t r = 0;
    for (size_t i = 0; i < b[size_t(step)].size(); ++i, ++r)
      ASSERT_EQ(max_abs_diff(l.row_as<float>(r), alone_b[ib++].data(), vocab), 0.0)
          << "b step " << step << " row " << i;
    for (size_t i = 0; i < a[size_t(step)].size(); ++i, ++r)
      ASSERT_EQ(max_abs_diff(l.row_as<float>(r), alone_a[ia++].data(), vocab), 0.0)
          << "a step " << step << " row " << i;
    for (size_t i = 0; i < c[size_t(step)].size(); ++i, ++r)
      ASSERT_EQ(max_abs_diff(l.row_as<float>(r), alone_c[ic++].data(), vocab), 0.0)
          << "c step " << step << " row " << i;
  }
}

// A slot reused by a new sequence (n_past 0) starts from a zero state,
// whatever the previous holder left there.
TEST_P(Qwen35, ReusedSlotStartsFresh) {
  KvCache cache = make_cache(1);
  Runner run{*model, cache};
  Runner::Seq first;
  run.step({{&first, golden.long_ids, {}}});
  Runner::Seq second;
  Tensor logits = run.step({{&second, golden.short_ids, std::vector<uint8_t>(golden.short_ids.size(), 1)}});
  EXPECT_LT(max_abs_diff(logits.data_as<float>(), golden.short_logits.data(), logits.numel()), kTolerance);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Qwen35, ::testing::Values("dense", "moe"));

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Qwen35Errors, BatchWithoutStateSlotsIsRefused) {
  auto model = Model::load(fixture_dir("dense"));
  KvCache no_slots(model->config(), {.block_size = 16, .n_blocks = 4});
  Runner run{*model, no_slots};
  Runner::Seq seq;
  std::string msg = error_of([&] { run.step({{&seq, {1, 2, 3}, {}}}); });
  EXPECT_NE(msg.find("no recurrent state slots"), std::string::npos) << msg;
  KvCache cache(model->config(), {.block_size = 16, .n_blocks = 4, .n_state_slots = 2});
  Runner run2{*model, cache};
  Runner::Seq bad{.slot = 2};
  msg = error_of([&] { run2.step({{&bad, {1, 2, 3}, {}}}); });
  EXPECT_NE(msg.find("state slot 2, expected one in [0, 2)"), std::string::npos) << msg;
}

// Qwen 3.5 runs on CUDA (tests/model/cuda_qwen35_test.cpp); a build or a
// machine without it says so when the weights are moved.
TEST(Qwen35Errors, CudaWithoutADeviceFailsClearly) {
  if (ops::cuda_available()) GTEST_SKIP() << "a CUDA device is present (cuda_qwen35_test.cpp runs the model there)";
  std::string msg = error_of([] { Model::load(fixture_dir("dense"), {.device = Device::CUDA}); });
  EXPECT_NE(msg.find("CUDA"), std::string::npos) << msg;
}

// A copy of the dense fixture with one tensor dropped or replaced, or its
// config edited: each load fails with one line naming the key.
class BrokenCopy {
 public:
  explicit BrokenCopy(const std::string& name, const std::string& source = "dense")
      : source_(source), dir_(fs::temp_directory_path() / ("brioche_qwen35_" + name)) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json"})
      fs::copy_file(fs::path(fixture_dir(source)) / f, dir_ / f);
  }
  ~BrokenCopy() { fs::remove_all(dir_); }
  void write_tensors(const std::string& drop, const std::string& reshape_name = "", const Tensor& replacement = {}) {
    auto file = formats::SafetensorsFile::open(fixture_dir(source_) + "/model.safetensors");
    formats::SafetensorsWriter w;
    for (const auto& info : file->tensors()) {
      if (info.name == drop) continue;
      w.add(info.name, info.name == reshape_name ? replacement : file->tensor(info.name));
    }
    w.write((dir_ / "model.safetensors").string());
  }
  // Every tensor through `rewrite` (name -> tensors to write in its place).
  void rewrite_tensors(const std::function<std::vector<std::pair<std::string, Tensor>>(
                           const std::string&, const Tensor&, const formats::SafetensorsFile&)>& rewrite) {
    auto file = formats::SafetensorsFile::open(fixture_dir(source_) + "/model.safetensors");
    formats::SafetensorsWriter w;
    for (const auto& info : file->tensors())
      for (auto& [name, t] : rewrite(info.name, file->tensor(info.name), *file)) w.add(name, t);
    w.write((dir_ / "model.safetensors").string());
  }
  const fs::path& dir() const { return dir_; }
  void edit_config(const std::function<void(nlohmann::json&)>& edit) {
    std::ifstream in(dir_ / "config.json");
    nlohmann::json j = nlohmann::json::parse(in);
    edit(j);
    std::ofstream(dir_ / "config.json") << j.dump();
  }
  std::string load_error() const {
    return error_of([&] { Model::load(dir_.string()); });
  }

 private:
  std::string source_;
  fs::path dir_;
};

// Prefill logits of `dir` for the fixture's short prompt.
std::vector<float> short_prompt_logits(const std::string& dir) {
  auto model = Model::load(dir);
  KvCache cache(model->config(), {.block_size = 16, .n_blocks = 8, .dtype = DType::F32, .n_state_slots = 1});
  Runner run{*model, cache};
  Runner::Seq seq;
  const Golden g = read_golden("dense");
  Tensor l = run.step({{&seq, g.short_ids, std::vector<uint8_t>(g.short_ids.size(), 1)}});
  return {l.data_as<float>(), l.data_as<float>() + l.numel()};
}

// The released checkpoints' layout (Qwen3_5ForConditionalGeneration): the
// text settings under text_config, tensors under model.language_model., a
// vision tower and an MTP head beside them (not read): the same logits.
TEST(Qwen35Layouts, ConditionalGenerationDirectoryLoadsItsTextModel) {
  BrokenCopy copy("conditional");
  copy.rewrite_tensors([](const std::string& name, const Tensor& t, const formats::SafetensorsFile&) {
    std::vector<std::pair<std::string, Tensor>> out{{"model.language_model." + name.substr(6), t}};
    if (name == "model.norm.weight") {
      out.push_back({"model.visual.blocks.0.attn.qkv.weight", Tensor::zeros(DType::F32, {3, 2})});
      out.push_back({"mtp.fc.weight", Tensor::zeros(DType::F32, {2, 2})});
    }
    return out;
  });
  copy.edit_config([](nlohmann::json& j) {
    nlohmann::json text = j;
    j = {{"architectures", {"Qwen3_5ForConditionalGeneration"}},
         {"model_type", "qwen3_5"},
         {"text_config", text},
         {"vision_config", {{"depth", 1}}},
         {"tie_word_embeddings", true}};
  });
  EXPECT_EQ(short_prompt_logits(copy.dir().string()), short_prompt_logits(fixture_dir("dense")));
}

// MoE experts stacked as transformers holds them in memory
// (mlp.experts.gate_up_proj [E, 2I, H], mlp.experts.down_proj [E, H, I])
// instead of one tensor per expert: the same logits.
TEST(Qwen35Layouts, StackedExpertsLoadLikePerExpertOnes) {
  BrokenCopy copy("stacked", "moe");
  const int experts = 4;
  copy.rewrite_tensors([&](const std::string& name, const Tensor& t, const formats::SafetensorsFile& file) {
    std::vector<std::pair<std::string, Tensor>> out;
    const size_t at = name.find("mlp.experts.");
    if (at == std::string::npos) return std::vector<std::pair<std::string, Tensor>>{{name, t}};
    if (name.find("experts.0.gate_proj") == std::string::npos) return out;  // written with expert 0's gate
    const std::string p = name.substr(0, at) + "mlp.experts.";
    const int64_t inter = t.dim(0), hidden = t.dim(1);
    Tensor gate_up = Tensor::zeros(DType::F32, {experts, 2 * inter, hidden});
    Tensor down = Tensor::zeros(DType::F32, {experts, hidden, inter});
    for (int e = 0; e < experts; ++e) {
      const std::string x = p + std::to_string(e) + ".";
      Tensor g = file.tensor(x + "gate_proj.weight"), u = file.tensor(x + "up_proj.weight"),
             d = file.tensor(x + "down_proj.weight");
      float* gu = gate_up.data_as<float>() + e * 2 * inter * hidden;
      std::copy_n(g.data_as<float>(), inter * hidden, gu);
      std::copy_n(u.data_as<float>(), inter * hidden, gu + inter * hidden);
      std::copy_n(d.data_as<float>(), hidden * inter, down.data_as<float>() + e * hidden * inter);
    }
    out.push_back({p + "gate_up_proj", gate_up});
    out.push_back({p + "down_proj", down});
    return out;
  });
  auto logits = [](const std::string& dir) {
    auto model = Model::load(dir);
    KvCache cache(model->config(), {.block_size = 16, .n_blocks = 8, .dtype = DType::F32, .n_state_slots = 1});
    Runner run{*model, cache};
    Runner::Seq seq;
    const Golden g = read_golden("moe");
    Tensor l = run.step({{&seq, g.short_ids, std::vector<uint8_t>(g.short_ids.size(), 1)}});
    return std::vector<float>(l.data_as<float>(), l.data_as<float>() + l.numel());
  };
  EXPECT_EQ(logits(copy.dir().string()), logits(fixture_dir("moe")));
}

TEST(Qwen35Errors, MissingStateTensorNamesTheKey) {
  BrokenCopy copy("missing_a_log");
  copy.write_tensors("model.layers.2.linear_attn.A_log");
  const std::string msg = copy.load_error();
  EXPECT_NE(msg.find("model.layers.2.linear_attn.A_log"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

TEST(Qwen35Errors, WrongConvShapeNamesTheKey) {
  BrokenCopy copy("conv_shape");
  copy.write_tensors("", "model.layers.0.linear_attn.conv1d.weight", Tensor::zeros(DType::F32, {128, 1, 3}));
  const std::string msg = copy.load_error();
  EXPECT_NE(msg.find("model.layers.0.linear_attn.conv1d.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected shape [128, 1, 4]"), std::string::npos) << msg;
}

TEST(Qwen35Errors, InconsistentHeadCountsNameTheKey) {
  BrokenCopy copy("heads");
  copy.write_tensors("");
  copy.edit_config([](nlohmann::json& j) { j["linear_num_value_heads"] = 3; });
  std::string msg = copy.load_error();
  EXPECT_NE(msg.find("linear_num_value_heads: expected a multiple of linear_num_key_heads 2, found 3"),
            std::string::npos)
      << msg;
  copy.edit_config([](nlohmann::json& j) {
    j["linear_num_value_heads"] = 4;
    j["layer_types"] = {"linear_attention", "full_attention", "sliding_attention", "full_attention"};
  });
  msg = copy.load_error();
  EXPECT_NE(msg.find("layer_types[2]"), std::string::npos) << msg;
  copy.edit_config([](nlohmann::json& j) {
    j["layer_types"] = {"linear_attention", "full_attention", "linear_attention", "full_attention"};
    j["num_key_value_heads"] = 3;
  });
  msg = copy.load_error();
  EXPECT_NE(msg.find("num_key_value_heads"), std::string::npos) << msg;
}

}  // namespace
}  // namespace brioche::model
