// train_step_bench: LoRA training steps on a random-weight model in a real
// architecture's shape (the trainer's own stack: TrainModel, FusedLogpHead,
// losses, AdamW), timing whole optimizer steps and reporting peak device
// memory (the CUDA allocator's bytes in use, as torch.cuda.max_memory_allocated).
//
//   train_step_bench --shape llama3-8b --dtype bf16 --method orpo --prompt 2048 --response 4096
//                    [--rank 16] [--segment-size 1] [--offload [--offload-attention] [--device-boundaries N]]
//                    [--boundary-dtype bf16] [--mlp-chunk N] [--no-prefix-shared] [--steps 3]
//   train_step_bench --shape llama3-8b --dtype bf16 --method sft --seq 65536 [--longest 65536,131072,...]
//   --layers L overrides the preset's layer count; --device cpu runs the same on the CPU
//   (peak = the process's peak resident memory there).
//   --ballast-gb G holds G GB of device memory for the whole run: with --layers L < the
//   preset's, it stands for the weights of the missing layers, so a memory limit (the
//   longest SFT sequence) is found without the time of the missing layers' compute.
//   (With --offload the missing layers' boundaries would be host memory, not device:
//   --host-ballast-gb H pins H GB of host memory for them.)
//
// The weights are generated one layer at a time straight to the device (the
// model is never whole in host memory). Tokens are random. ORPO uses
// sft_scope full and λ 0.1: every prompt and chosen token goes through the
// head (as TRL's ORPOTrainer), the rejected response for the odds ratio.
// --longest tries SFT lengths in order and reports the longest one whose
// step completed (later lengths are not tried after the first failure).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <sys/resource.h>

#include "core/error.h"
#include "model/device_weights.h"
#include "ops/device.h"
#include "tools/gen_model_lib.h"
#include "train/batch_builder.h"
#include "train/objective.h"
#include "train/optimizer.h"
#if BRIOCHE_CUDA
#include "backend/cuda/runtime.h"
#endif

namespace brioche {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Options {
  std::string shape = "llama3-8b", dtype = "bf16", device = "cuda", method = "orpo";
  int layers = 0, prompt = 2048, response = 4096, seq = 8192, rank = 16, segment_size = 1, steps = 3, mlp_chunk = 0;
  int64_t head_chunk = 4096;
  bool offload = false, offload_attention = false, prefix_shared = true;
  double ballast_gb = 0, host_ballast_gb = 0;
  DType boundary_dtype = DType::F32;
  int device_boundaries = 0;
  std::vector<int> longest;
};

size_t device_in_use() {
#if BRIOCHE_CUDA
  return cuda::allocator_stats().bytes_in_use;
#endif
  return 0;
}
// Peak bytes: the CUDA allocator's on the GPU, the process's resident set on the CPU.
size_t device_peak(Device device) {
#if BRIOCHE_CUDA
  if (device == Device::CUDA) return cuda::allocator_stats().peak_bytes_in_use;
#endif
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return size_t(usage.ru_maxrss) * 1024;
}

DType parse_dtype_name(const std::string& s) {
  for (DType d : {DType::BF16, DType::F16, DType::F32, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q4_K, DType::Q5_K,
                  DType::Q6_K})
    if (s == dtype_name(d)) return d;
  fail("unknown dtype '", s, "'");
}

// The checkpoint on `device`, generated one layer at a time (norms ones, matrices random).
model::Checkpoint random_model(const Options& o, Device device) {
  tools::ShapePreset p = tools::find_shape(o.shape);
  if (o.layers > 0) p.layers = o.layers;
  const DType dtype = parse_dtype_name(o.dtype);
  tools::ShapePreset no_layers = p;
  no_layers.layers = 0;
  model::Checkpoint ck = tools::random_checkpoint(no_layers, dtype);
  ck.config.n_layers = p.layers;
  ck.source = "random:" + p.name + ":" + o.dtype;
  if (device == Device::CUDA) model::move_weights(ck, device);
  auto dev = [device](const Tensor& t) { return ops::to_device(t, device); };
  uint64_t id = 1000;
  for (int l = 0; l < p.layers; ++l) ck.weights.layers.push_back(tools::random_layer(p, dtype, id, dev));
  ops::synchronize(device);
  return ck;
}

std::vector<int32_t> random_tokens(int n, int vocab, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> any(3, vocab - 1);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = any(rng);
  return t;
}

struct Result {
  bool ok = false;
  double ms_per_step = 0;
  double first_loss = 0;
  std::string error;
};

// Builds the stack, runs one warm-up step and o.steps timed steps (median).
Result run_steps(const Options& o, const model::Checkpoint& ck, Device device, const train::TokenBatch& batch,
                 train::Method method) {
  using namespace train;
  Result r;
  try {
    LoraAdapter adapter(ck.config, {.rank = o.rank, .alpha = 2.0f * float(o.rank)}, 7);
    adapter.to_device(device);
    TrainModel model(ck, &adapter,
                     {.segment_size = o.segment_size,
                      .offload_boundaries = o.offload,
                      .offload_attention = o.offload_attention,
                      .boundary_dtype = o.boundary_dtype,
                      .device_boundaries = o.device_boundaries,
                      .mlp_chunk_rows = o.mlp_chunk});
    FusedLogpHead head(ck.weights.output, o.head_chunk);
    AdamW optimizer(adapter, {});
    const LossConfig loss{.method = method, .orpo_lambda = 0.1f};
    std::vector<double> times;
    for (int s = 0; s <= o.steps; ++s) {
      const auto t0 = Clock::now();
      adapter.zero_grads();
      const LossValue v = run_objective(model, head, batch, loss, {}, {.dropout_seed = uint64_t(s)});
      const double norm = grad_norm(adapter);
      optimizer.step(1e-5f, clip_factor(norm, 1.0));
      ops::synchronize(device);
      if (s == 0) r.first_loss = v.loss;
      if (s > 0 || o.steps == 0) times.push_back(seconds_since(t0) * 1e3);  // (--steps 0: the first step's time)
      std::fprintf(stderr, "  step %d: loss %.4f grad_norm %.4f %.0f ms (device in use %.2f GB, peak %.2f GB)\n", s,
                   v.loss, norm, seconds_since(t0) * 1e3, double(device_in_use()) / 1e9,
                   double(device_peak(device)) / 1e9);
    }
    std::sort(times.begin(), times.end());
    r.ms_per_step = times.empty() ? 0 : times[times.size() / 2];
    r.ok = true;
  } catch (const Error& e) {
    r.error = e.what();
  }
#if BRIOCHE_CUDA
  if (device == Device::CUDA) cuda::release_cached_memory();
#endif
  return r;
}

int run(const Options& o) {
  const Device device = o.device == "cuda" ? Device::CUDA : Device::CPU;
  auto t0 = Clock::now();
  model::Checkpoint ck = random_model(o, device);
  const Tensor ballast =
      o.ballast_gb > 0 ? ops::zeros(DType::I32, {int64_t(o.ballast_gb * 1e9 / 4)}, device) : Tensor();
  const Tensor host_ballast =
      o.host_ballast_gb > 0 ? ops::pinned_host_zeros(DType::I32, {int64_t(o.host_ballast_gb * 1e9 / 4)}) : Tensor();
  const double weights_gb = double(device_in_use()) / 1e9;
  std::fprintf(stderr, "model %s (%d layers): generated on %s in %.1f s, %.2f GB on the device\n", ck.source.c_str(),
               ck.config.n_layers, o.device.c_str(), seconds_since(t0), weights_gb);
  std::mt19937 rng(1);
  const int vocab = ck.config.vocab_size;
  std::string levers =
      "rank " + std::to_string(o.rank) + ", seg " + std::to_string(o.segment_size) + (o.offload ? " +offload" : "") +
      (o.offload_attention ? " +attention" : "") + ", head chunk " + std::to_string(o.head_chunk) +
      (o.mlp_chunk > 0 ? ", mlp chunk " + std::to_string(o.mlp_chunk) : "") +
      (o.boundary_dtype != DType::F32 ? ", boundaries " + std::string(dtype_name(o.boundary_dtype)) : "") +
      (o.device_boundaries > 0 ? ", " + std::to_string(o.device_boundaries) + " on the device" : "");
  if (o.method == "orpo") {
    train::TokenizedPair pair{.prompt = random_tokens(o.prompt, vocab, rng),
                              .chosen = random_tokens(o.response, vocab, rng),
                              .rejected = random_tokens(o.response, vocab, rng)};
    const train::TokenizedPair* pairs[] = {&pair};
    const train::TokenBatch batch = train::build_preference_batch(
        pairs, {.method = train::Method::ORPO, .sft_scope = train::SftScope::Full, .prefix_shared = o.prefix_shared});
    std::fprintf(stderr, "orpo: prompt %d, chosen/rejected %d each, %lld rows (%s), %zu scored tokens, %s\n", o.prompt,
                 o.response, (long long)batch.n_rows(), o.prefix_shared ? "prefix-shared" : "two sequences",
                 batch.scored.size(), levers.c_str());
    const Result r = run_steps(o, ck, device, batch, train::Method::ORPO);
    if (!r.ok) {
      std::printf("| %s %s | orpo %d+%d+%d | %s | failed: %s |\n", o.shape.c_str(), o.dtype.c_str(), o.prompt,
                  o.response, o.response, levers.c_str(), r.error.c_str());
      return 1;
    }
    std::printf("| %s %s | orpo P %d, %d per branch%s | %s | %.0f ms/step | peak %.2f GB (weights %.2f GB) |\n",
                o.shape.c_str(), o.dtype.c_str(), o.prompt, o.response, o.prefix_shared ? " (prefix-shared)" : "",
                levers.c_str(), r.ms_per_step, double(device_peak(device)) / 1e9, weights_gb);
    return 0;
  }
  std::vector<int> lengths = o.longest.empty() ? std::vector<int>{o.seq} : o.longest;
  int longest_ok = 0;
  for (int len : lengths) {
    train::TokenizedExample ex{.prompt = {}, .response = random_tokens(len, vocab, rng)};
    const train::TokenizedExample* exs[] = {&ex};
    const train::TokenBatch batch = train::build_sft_batch(exs, train::SftScope::Full);
    std::fprintf(stderr, "sft: %d tokens, %s\n", len, levers.c_str());
    Options one = o;
    if (!o.longest.empty()) one.steps = 0;  // one step per length (its time includes first-use costs)
    const Result r = run_steps(one, ck, device, batch, train::Method::SFT);
    if (!r.ok) {
      std::printf("| %s %s | sft %d | %s | failed: %s |\n", o.shape.c_str(), o.dtype.c_str(), len, levers.c_str(),
                  r.error.substr(0, 200).c_str());
      break;
    }
    longest_ok = len;
    std::printf("| %s %s | sft %d | %s | %.0f ms/step | process peak %.2f GB |\n", o.shape.c_str(), o.dtype.c_str(),
                len, levers.c_str(), r.ms_per_step, double(device_peak(device)) / 1e9);
    std::fflush(stdout);
  }
  if (!o.longest.empty()) std::printf("longest sft sequence trained: %d tokens\n", longest_ok);
  return 0;
}

}  // namespace
}  // namespace brioche

int main(int argc, char** argv) {
  brioche::Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) brioche::fail(a, " needs a value");
      return argv[++i];
    };
    if (a == "--shape")
      o.shape = next();
    else if (a == "--dtype")
      o.dtype = next();
    else if (a == "--device")
      o.device = next();
    else if (a == "--method")
      o.method = next();
    else if (a == "--layers")
      o.layers = std::stoi(next());
    else if (a == "--prompt")
      o.prompt = std::stoi(next());
    else if (a == "--response")
      o.response = std::stoi(next());
    else if (a == "--seq")
      o.seq = std::stoi(next());
    else if (a == "--rank")
      o.rank = std::stoi(next());
    else if (a == "--segment-size")
      o.segment_size = std::stoi(next());
    else if (a == "--steps")
      o.steps = std::stoi(next());
    else if (a == "--head-chunk")
      o.head_chunk = std::stoll(next());
    else if (a == "--offload")
      o.offload = true;
    else if (a == "--offload-attention")
      o.offload_attention = true;
    else if (a == "--mlp-chunk")
      o.mlp_chunk = std::stoi(next());
    else if (a == "--ballast-gb")
      o.ballast_gb = std::stod(next());
    else if (a == "--host-ballast-gb")
      o.host_ballast_gb = std::stod(next());
    else if (a == "--boundary-dtype") {
      const std::string v = next();
      if (v != "f32" && v != "bf16") brioche::fail("--boundary-dtype: expected f32 or bf16, got '", v, "'");
      o.boundary_dtype = v == "bf16" ? brioche::DType::BF16 : brioche::DType::F32;
    } else if (a == "--device-boundaries")
      o.device_boundaries = std::stoi(next());
    else if (a == "--no-prefix-shared")
      o.prefix_shared = false;
    else if (a == "--longest") {
      std::stringstream ss(next());
      for (std::string part; std::getline(ss, part, ',');) o.longest.push_back(std::stoi(part));
    } else {
      std::fprintf(stderr, "unknown option %s (see the comment at the top of bench/train_step.cpp)\n", a.c_str());
      return 2;
    }
  }
  try {
    return brioche::run(o);
  } catch (const brioche::Error& e) {
    std::fprintf(stderr, "train_step_bench: %s\n", e.what());
    return 1;
  }
}
