// Hostile model files (tests/model/hostile_model_files.h): zero, negative,
// absurd and inconsistent counts in GGUF metadata and config.json, tensors
// that disagree with the config, truncated files, FIFOs, devices and
// directories where a file belongs. Each must make Model::load throw a
// brioche::Error that names the key or tensor, promptly: never a crash, a
// hang or a huge allocation.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <future>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/error.h"
#include "formats/formats_test_util.h"
#include "model/hostile_model_files.h"
#include "model/model.h"
#include "model/weights.h"

namespace brioche::model {
namespace {

using formats::testing::TempDir;
using ::testing::HasSubstr;
using testing::HostileCase;

// The error of Model::load(path), or a test failure when it does not throw a
// brioche::Error within 20 s. A load stuck in open() on a FIFO is released by
// opening the FIFO's write end, so that a regression fails instead of hanging.
std::string load_error(const std::string& path) {
  auto result = std::async(std::launch::async, [path]() -> std::string {
    try {
      Model::load(path);
    } catch (const Error& e) {
      return e.what();
    } catch (const std::exception& e) {
      return std::string("NOT A brioche::Error: ") + e.what();
    }
    return "NO ERROR";
  });
  if (result.wait_for(std::chrono::seconds(20)) == std::future_status::timeout) {
    ADD_FAILURE() << "Model::load(" << path << ") still running after 20 s (hung on a FIFO?)";
    int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  }
  return result.get();
}

class HostileModel : public ::testing::TestWithParam<HostileCase> {};

TEST_P(HostileModel, LoadFailsWithOneLineNamingTheField) {
  const HostileCase& c = GetParam();
  TempDir dir;
  const std::string path = c.make(dir.path().string());
  const auto start = std::chrono::steady_clock::now();
  const std::string error = load_error(path);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_THAT(error, HasSubstr(c.expected)) << c.name;
  EXPECT_EQ(error.find('\n'), std::string::npos) << c.name << ": expected one line, found " << error;
  EXPECT_LT(seconds, 5.0) << c.name << " took " << seconds << " s to fail";
}

INSTANTIATE_TEST_SUITE_P(Cases, HostileModel, ::testing::ValuesIn(testing::hostile_cases()),
                         [](const ::testing::TestParamInfo<HostileCase>& info) { return info.param.name; });

// Controls: the unedited tiny models load, so each hostile case fails for its
// own edit, not for something the builders got wrong.
TEST(HostileModelControl, TinyGgufAndSafetensorsLoad) {
  TempDir dir;
  testing::TinyGguf::llama().write(dir.file("model.gguf"));
  auto gguf = Model::load(dir.file("model.gguf"));
  EXPECT_EQ(gguf->config().n_layers, 2);
  EXPECT_EQ(gguf->config().vocab_size, 64);
  testing::TinySafetensors::llama().write(dir.file("model"));
  auto hf = Model::load(dir.file("model"));
  EXPECT_EQ(hf->config().n_heads, 4);
  EXPECT_EQ(hf->config().head_dim, 8);
}

TEST(HostileModelControl, HeadDimDerivedWhenAbsent) {
  TempDir dir;
  testing::TinyGguf g = testing::TinyGguf::llama();
  g.metadata.erase("llama.attention.key_length");
  g.write(dir.file("model.gguf"));
  EXPECT_EQ(Model::load(dir.file("model.gguf"))->config().head_dim, 8);  // 32 / 4
}

// The bounds themselves, on a config built in memory (validate_model_config
// is what Model::load runs last, whatever adjusted the checkpoint).
TEST(ModelConfigValidation, BoundsNameTheField) {
  ModelConfig c;
  c.vocab_size = 64, c.hidden_size = 32, c.intermediate_size = 48, c.n_layers = 2;
  c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 8;
  const ConfigKeyNames keys = ConfigKeyNames::fields();
  EXPECT_NO_THROW(validate_model_config(c, keys, "mem"));
  auto error_with = [&](auto edit) {
    ModelConfig bad = c;
    edit(bad);
    return formats::testing::error_of([&] { validate_model_config(bad, keys, "mem"); });
  };
  EXPECT_EQ(error_with([](ModelConfig& m) { m.n_layers = 5000; }),
            "mem: n_layers: expected an integer in 1..4096, found 5000");
  EXPECT_EQ(error_with([](ModelConfig& m) { m.max_context = -1; }),
            "mem: max_context: expected an integer in 0..16777216, found -1");
  EXPECT_EQ(error_with([](ModelConfig& m) { m.sliding_window = -7; }),
            "mem: sliding_window: expected an integer in 0..16777216, found -7");
  EXPECT_EQ(error_with([](ModelConfig& m) { m.rope.scaling = {.kind = ops::RopeScalingKind::Linear, .factor = 0.0f}; }),
            "mem: rope.scaling.factor: expected a finite number > 0, found 0");
  EXPECT_EQ(error_with([](ModelConfig& m) {
              m.rope.freq_factors = {1.0f, 2.0f};
            }),
            "mem: rope.freq_factors: expected 4 factors (head_dim / 2), found 2");
  EXPECT_EQ(formats::testing::error_of([] { config_count(int64_t(1) << 31, "k", "f"); }),
            "f: k: expected an integer in 0..2147483647, found 2147483648");
  EXPECT_EQ(config_float(1e300), std::numeric_limits<float>::infinity());
  EXPECT_EQ(config_float(-1e300), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(config_float(0.5), 0.5f);
}

TEST(HostileModelOverride, MaxContextOverrideIsValidatedToo) {
  TempDir dir;
  testing::TinyGguf::llama().write(dir.file("model.gguf"));
  EXPECT_THAT(formats::testing::error_of([&] { Model::load(dir.file("model.gguf"), {.max_context = 1 << 30}); }),
              HasSubstr("max_context: expected an integer in 0..16777216, found 1073741824"));
}

}  // namespace
}  // namespace brioche::model
