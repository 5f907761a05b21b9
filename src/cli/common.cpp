#include "cli/common.h"

#include <cstdlib>
#include <filesystem>
#include <thread>

#include "core/thread_pool.h"
#include "core/env_switch.h"
#include "model/model.h"
#include "ops/device.h"

namespace brioche::cli {

std::string default_model_path() {
  if (std::string env = env_text("BRIOCHE_MODEL"); !env.empty()) return env;
  const char* home = std::getenv("HOME");
  std::string base = home ? home : ".";
  return base + "/.cache/brioche/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

std::string resolve_model_path(const std::string& flag_value) {
  std::string path = flag_value.empty() ? default_model_path() : flag_value;
  if (std::filesystem::exists(path)) return path;
  if (flag_value.empty()) {
    throw UsageError{"default model not found at " + path + "; run scripts/setup.sh to fetch it, or pass -m MODEL"};
  }
  throw UsageError{"model not found: " + path + " (expected a .gguf file or a safetensors directory)"};
}

void ModelFlags::add_to(CLI::App& app) {
  app.add_option("-m,--model", model, "GGUF file or safetensors directory (default: SmolLM2-135M-Instruct Q4_1)");
  app.add_option("-t,--threads", threads, "CPU threads (default: all)")->check(CLI::Range(0, 1024));
  app.add_option("--adapter", adapter, "LoRA adapter directory (PEFT layout: ours or peft's), merged into the weights");
  app.add_option("--weights-dtype", weights_dtype,
                 "keep the file's weight types (stored), or convert every weight matrix at load: f32 (full precision, "
                 "e.g. to check a quantized model's arithmetic), f16, bf16")
      ->check(CLI::IsMember({"stored", "f32", "f16", "bf16"}))
      ->capture_default_str();
  app.add_option("--device", device, "cpu, cuda, or auto (CUDA when a GPU is present)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--tensor-parallel", tensor_parallel, "split the model over N GPUs (one process each, NCCL)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  // Hidden: how workers (or hand-started ranks) join; see docs/cuda.md.
  app.add_option("--tp-rank", tp_rank)->group("")->check(CLI::Range(0, 63));
  app.add_option("--tp-master", tp_master)->group("");
}

Device ModelFlags::resolved_device() const {
  if (device == "cpu") return Device::CPU;
  if (device == "cuda") {
    if (!ops::cuda_available())
      throw UsageError{"--device cuda: no CUDA device (or this build has no CUDA backend: cmake --preset cuda)"};
    return Device::CUDA;
  }
  if (!ops::cuda_available()) return Device::CPU;
  // auto: the GPU, unless the model's architecture runs on the CPU only.
  const std::string path = model.empty() ? default_model_path() : model;
  return std::filesystem::exists(path) && !model::Model::has_cuda_kernels(path) ? Device::CPU : Device::CUDA;
}

void ModelFlags::apply() const {
  int n = threads > 0 ? threads : int(std::max(1u, std::thread::hardware_concurrency()));
  ThreadPool::configure_global(n);
}

}  // namespace brioche::cli
