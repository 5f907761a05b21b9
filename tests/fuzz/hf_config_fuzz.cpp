// libFuzzer target: the Hugging Face config.json readers of Qwen 3.5
// (src/model/load_qwen35.cpp) and Gemma 4 (src/model/gemma4_config.cpp,
// load_gemma4.cpp), each beside real weights: a mutated config.json goes
// into a directory holding one of the committed fixtures' model.safetensors
// (tests/fixtures/qwen35/{dense,moe}, tests/fixtures/gemma4/{mix,e2b,moe},
// and the MLX ones qwen35/mlx-{dense,moe}, gemma4/mlx-{ple,moe}: their
// quantization blocks, per-module bits and group sizes, mutate too),
// then Model::load and, when it loads, one forward of two tokens (with a
// state slot for hybrid models). Any input must either load and run or throw
// brioche::Error: no crash, no SIGFPE, no allocation the config alone asks
// for (libFuzzer's malloc limit catches those).
//
// Input: one byte choosing the fixture (its value modulo 9, in the order
// above), then the config.json text. Seeds: tests/fuzz/corpus/hf_config (the
// nine fixtures' own configs); dictionary tests/fuzz/hf_config.dict.
#include <unistd.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "core/error.h"
#include "core/thread_pool.h"
#include "model/model.h"

namespace {

using namespace brioche;
namespace fs = std::filesystem;

constexpr std::array<const char*, 9> kFixtures = {"qwen35/dense",   "qwen35/moe",     "gemma4/mix",
                                                  "gemma4/e2b",     "gemma4/moe",     "qwen35/mlx-dense",
                                                  "qwen35/mlx-moe", "gemma4/mlx-ple", "gemma4/mlx-moe"};

// One directory per fixture in /dev/shm, holding a copy of its weights
// (made once per process); config.json is rewritten per input.
std::string fixture_directory(size_t which) {
  static const std::string root = "/dev/shm/brioche_hf_config_fuzz_" + std::to_string(::getpid());
  const std::string dir = root + "/" + std::to_string(which);
  if (!fs::exists(dir + "/model.safetensors")) {
    if (!fs::exists(root)) {
      fs::create_directories(root);
      std::atexit([] { fs::remove_all(root); });  // /dev/shm is memory: leave nothing behind
    }
    fs::create_directories(dir);
    fs::copy_file(std::string(BRIOCHE_SOURCE_DIR) + "/tests/fixtures/" + kFixtures[which] + "/model.safetensors",
                  dir + "/model.safetensors", fs::copy_options::overwrite_existing);
  }
  return dir;
}

// One forward of two tokens (ids 0 and vocab - 1) as one prefilling sequence.
void run_two_tokens(model::Model& m) {
  const model::ModelConfig& c = m.config();
  const int slots = c.state_layers.empty() ? 0 : 1;
  model::KvCache cache(c, {.block_size = 4, .n_blocks = 1, .n_state_slots = slots});
  const int32_t block_table[] = {0};
  model::ForwardBatch batch;
  batch.tokens = {0, c.vocab_size - 1};
  batch.positions = {0, 1};
  batch.wants_logits = {0, 1};
  batch.sequences = {{.first_row = 0, .n_rows = 2, .n_past = 0, .block_table = block_table, .state_slot = 0}};
  Tensor logits;
  m.forward(batch, cache, logits);
  if (logits.dim(0) != 1 || logits.dim(1) != c.vocab_size) std::abort();  // forward promised [1, vocab]
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ThreadPool::configure_global(1);  // tiny forwards; one fuzzing process, one core
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // HF_CONFIG_FUZZ_VERBOSE=1 prints what each input did (checking seeds, triage).
  static const bool verbose = std::getenv("HF_CONFIG_FUZZ_VERBOSE") != nullptr;
  if (size < 1) return 0;
  const std::string dir = fixture_directory(size_t(data[0]) % kFixtures.size());
  std::ofstream(dir + "/config.json", std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data) + 1, std::streamsize(size - 1));
  try {
    std::unique_ptr<model::Model> m = model::Model::load(dir);
    run_two_tokens(*m);
    if (verbose) std::fprintf(stderr, "hf_config_fuzz: loaded and ran %s\n", m->config().architecture.c_str());
  } catch (const Error& e) {
    if (verbose) std::fprintf(stderr, "hf_config_fuzz: %s\n", e.what());
  }
  return 0;
}
