// libFuzzer target: a whole model file through Model::load (config mapping,
// validation, tensor shape checks, model construction) and one forward of
// two tokens on the CPU. Any input must either load or throw
// brioche::Error; a loaded model must run without a crash.
//
// Input: 'G' + the bytes of a GGUF file, or 'S' + config.json text + "\n--\n"
// + the bytes of model.safetensors (the layout of a Hugging Face directory).
// The loader wants paths: a GGUF goes through a memfd (/proc/self/fd/N, a
// regular file that never touches the disk), a directory into /dev/shm.
// Seeds: tests/fuzz/corpus/model_load (tests/fuzz/model_load_seeds.py).
#include <sys/mman.h>
#include <unistd.h>

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

// Writes `bytes` to an anonymous in-memory file; returns its fd (-1 on failure).
int memfd_with(std::string_view bytes) {
  int fd = memfd_create("model_load_fuzz.gguf", MFD_CLOEXEC);
  if (fd < 0) return -1;
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) {
      ::close(fd);
      return -1;
    }
    done += size_t(n);
  }
  return fd;
}

// A safetensors directory in /dev/shm, one per process, rewritten per input.
std::string write_directory(std::string_view config, std::string_view weights) {
  static const std::string dir = "/dev/shm/brioche_model_load_fuzz_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json", std::ios::binary | std::ios::trunc)
      .write(config.data(), std::streamsize(config.size()));
  std::ofstream(dir + "/model.safetensors", std::ios::binary | std::ios::trunc)
      .write(weights.data(), std::streamsize(weights.size()));
  return dir;
}

// One forward of two tokens (ids 0 and vocab - 1) as one prefilling sequence.
void run_two_tokens(model::Model& m) {
  const model::ModelConfig& c = m.config();
  model::KvCache cache(c, {.block_size = 4, .n_blocks = 1});
  const int32_t block_table[] = {0};
  model::ForwardBatch batch;
  batch.tokens = {0, c.vocab_size - 1};
  batch.positions = {0, 1};
  batch.wants_logits = {0, 1};
  batch.sequences = {{.first_row = 0, .n_rows = 2, .n_past = 0, .block_table = block_table}};
  Tensor logits;
  m.forward(batch, cache, logits);
  if (logits.dim(0) != 1 || logits.dim(1) != c.vocab_size) std::abort();  // forward promised [1, vocab]
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // One worker: the forward's tiny matmuls gain nothing from threads, and a
  // fuzzing process should not spawn one per core.
  ThreadPool::configure_global(1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // MODEL_LOAD_FUZZ_VERBOSE=1 prints what each input did (checking seeds, triage).
  static const bool verbose = std::getenv("MODEL_LOAD_FUZZ_VERBOSE") != nullptr;
  if (size < 1) return 0;
  std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  int fd = -1;
  std::string path;
  if (data[0] == 'G') {
    fd = memfd_with(input);
    if (fd < 0) return 0;
    path = "/proc/self/fd/" + std::to_string(fd);
  } else if (data[0] == 'S') {
    size_t split = input.find("\n--\n");
    if (split == std::string_view::npos) return 0;
    path = write_directory(input.substr(0, split), input.substr(split + 4));
  } else {
    return 0;
  }
  try {
    std::unique_ptr<model::Model> m = model::Model::load(path);
    run_two_tokens(*m);
    if (verbose) std::fprintf(stderr, "model_load_fuzz: loaded and ran %s\n", m->config().architecture.c_str());
  } catch (const Error& e) {
    if (verbose) std::fprintf(stderr, "model_load_fuzz: %s\n", e.what());
  }
  if (fd >= 0) ::close(fd);
  return 0;
}
