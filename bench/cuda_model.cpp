// cuda_model_bench: end-to-end model speed on the device (and a CPU-vs-CUDA
// check of the same random model), without tokenizer or sampling overheads
// beyond a greedy argmax on the device.
//
//   cuda_model_bench --shape llama3-8b --dtype bf16 [--decode 128 [--prompt 128]] [--prefill 2048]
//                    [--prefill-reps 3] [--batch 64 --context 1024] [--device cuda|cpu]
//   cuda_model_bench --check --shape smollm2-135m --dtype q4_k
//   cuda_model_bench --gemv --shape llama3-8b --dtype bf16   (decode matmuls alone)
//   cuda_model_bench --tp 2 [--check] ...   tensor parallel over 2 GPUs (model/tensor_parallel.h):
//       forks one process per extra rank before any CUDA work (rank r uses GPU r;
//       TCP rendezvous on --tp-master, default 127.0.0.1:29517). --tp-rank R runs
//       one rank only (start each rank yourself, e.g. one per node). --check
//       compares TP=N with TP=1 on one random checkpoint (shards sliced from it)
//       and both with the checkpoint widened to f32 (see run_tp_check);
//       speed runs generate each rank's shard directly in its shape on the GPU.
//   --layers L overrides the preset's layer count (quick checks of big shapes).
//   --dtype-at WHERE=DTYPE (repeatable) gives the matrices at one position of
//       every layer (qkv, o, gate_up, down) or the lm_head another type: with
//       a type of the same bytes (Q4_0 in a Q4_K model), which launch makes
//       one type's step slower than another's.
//
// Measurements (each after a warm-up, median of repeats):
//   decode b1 : steps of one token after a --prompt-token prompt (128); tokens/s
//   prefill N : one forward over N prompt tokens (logits of the last row)
//   verify b1 k=K (--verify K, for K = 1..K): speculative decoding's verify step
//                 (engine/scheduler.cpp) after the --prompt-token prompt: one
//                 forward over 1 + K rows, every row's logits copied to the
//                 host (as the engine judges drafts there), then K positions
//                 rolled back; ms per step and its cost over decode b1's.
//   decode bB@C : B sequences with C cached positions each, one token each per step;
//                 aggregate tokens/s. Their caches hold zeros (not prefilled:
//                 65k prompt tokens would dominate the run); attention reads
//                 every cached position regardless of its value.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/device_weights.h"
#include "model/llama.h"
#include "model/tensor_parallel.h"
#include "ops/collective.h"
#include "ops/device.h"
#include "ops/matmul.h"
#include "ops/quantize.h"
#include "ops/sample.h"
#include "tools/gen_model_lib.h"

namespace brioche {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Options {
  std::string shape = "smollm2-135m";
  std::string dtype = "bf16";
  std::string device = "cuda";
  int decode = 128, prompt = 128, prefill = 2048, prefill_reps = 3, batch = 64, context = 1024, batch_steps = 32;
  int verify = 0;  // --verify K: verify steps of 1 + k rows, k = 1..K (needs --decode)
  bool check = false, gemv = false;
  int layers = 0;            // 0: the preset's
  int tp = 0, tp_rank = -1;  // tp 0: no tensor parallelism; 1: one rank through the TP path (NCCL of one)
  std::string tp_master = "127.0.0.1:29517";
  std::vector<std::pair<std::string, DType>> dtype_at;  // --dtype-at WHERE=DTYPE
};

// "WHERE=DTYPE" of --dtype-at, checked.
std::pair<std::string, DType> parse_dtype_at(const std::string& arg) {
  const size_t eq = arg.find('=');
  const std::string where = arg.substr(0, eq);
  DType dtype;
  if (eq == std::string::npos || !parse_dtype(arg.substr(eq + 1), &dtype))
    fail("--dtype-at expects WHERE=DTYPE (e.g. qkv=q4_0), got '", arg, "'");
  if (where != "qkv" && where != "o" && where != "gate_up" && where != "down" && where != "lm_head")
    fail("--dtype-at: WHERE is one of qkv, o, gate_up, down, lm_head; got '", where, "'");
  return {where, dtype};
}

// The matrices --dtype-at names, drawn again in their new type (same shapes).
void apply_dtype_at(const Options& o, model::Checkpoint& ck) {
  uint64_t seed = 7777;
  for (const auto& [where, dtype] : o.dtype_at) {
    auto redraw = [&, dtype = dtype](Tensor& w) { w = tools::random_tensor(dtype, w.dim(0), w.dim(1), ++seed); };
    if (where == "lm_head") {
      if (ck.config.tied_embeddings) fail("--dtype-at lm_head: this shape ties the lm_head to the embedding");
      redraw(ck.weights.output);
    }
    for (model::LayerWeights& l : ck.weights.layers) {
      if (where == "qkv") redraw(l.wq), redraw(l.wk), redraw(l.wv);
      if (where == "o") redraw(l.wo);
      if (where == "gate_up") redraw(l.w_gate), redraw(l.w_up);
      if (where == "down") redraw(l.w_down);
    }
  }
}

tools::ShapePreset preset_of(const Options& o) {
  tools::ShapePreset p = tools::find_shape(o.shape);
  if (o.layers > 0) p.layers = o.layers;
  return p;
}

// KV blocks handed out contiguously: sequence s owns [s·per_seq, (s+1)·per_seq).
struct Rig {
  model::Model& model;
  std::unique_ptr<model::KvCache> cache;
  std::vector<std::vector<int32_t>> tables;
  std::vector<int32_t> n_past;
  Tensor logits;

  Rig(model::Model& m, int sequences, int positions) : model(m) {
    const int block = 16, per_seq = (positions + block - 1) / block;
    cache = std::make_unique<model::KvCache>(
        m.config(), model::KvCacheOptions{.block_size = block,
                                          .n_blocks = per_seq * sequences,
                                          .dtype = m.device() == Device::CUDA ? DType::F16 : DType::F32,
                                          .device = m.device()});
    for (int s = 0; s < sequences; ++s) {
      tables.emplace_back();
      for (int b = 0; b < per_seq; ++b) tables.back().push_back(s * per_seq + b);
    }
    n_past.assign(size_t(sequences), 0);
    logits = ops::zeros(DType::F32, {1, m.config().vocab_size}, m.device());
  }

  // tokens[s] appended to sequence s; logits of each sequence's last row.
  void step(const std::vector<std::vector<int32_t>>& tokens) {
    model::ForwardBatch b;
    for (size_t s = 0; s < tokens.size(); ++s) {
      b.sequences.push_back({.first_row = b.n_rows(),
                             .n_rows = int32_t(tokens[s].size()),
                             .n_past = n_past[s],
                             .block_table = tables[s]});
      for (size_t i = 0; i < tokens[s].size(); ++i) {
        b.tokens.push_back(tokens[s][i]);
        b.positions.push_back(n_past[s] + int32_t(i));
        b.wants_logits.push_back(i + 1 == tokens[s].size());
      }
      n_past[s] += int32_t(tokens[s].size());
    }
    model.forward(b, *cache, logits);
  }

  // A decode step of sequence 0 whose token is on the device (the engine's
  // run-ahead step): false, with nothing done, where the model cannot.
  bool step_from_device(const Tensor& token) {
    model::ForwardBatch b;
    b.tokens = {0};
    b.positions = {n_past[0]};
    b.wants_logits = {1};
    b.sequences.push_back({.first_row = 0, .n_rows = 1, .n_past = n_past[0], .block_table = tables[0]});
    if (!model.forward_from_device_tokens(b, token, *cache, logits)) return false;
    ++n_past[0];
    return true;
  }

  std::vector<int32_t> argmax() {
    std::vector<int32_t> ids(size_t(logits.dim(0)));
    ops::argmax_rows(logits, ids);
    return ids;
  }
};

std::vector<int32_t> prompt(int n, int vocab, int salt) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    t[i] = int32_t((uint64_t(i + 1) * 2654435761u + uint64_t(salt) * 40503u) % uint64_t(vocab));
  return t;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::unique_ptr<model::Model> make_model(const Options& o, Device device) {
  DType dtype;
  if (!parse_dtype(o.dtype, &dtype)) fail("unknown dtype '", o.dtype, "'");
  auto t0 = Clock::now();
  model::Checkpoint ck = tools::random_checkpoint(preset_of(o), dtype);
  apply_dtype_at(o, ck);
  double gen_s = seconds_since(t0);
  t0 = Clock::now();
  if (device != Device::CPU) model::move_weights(ck, device);
  std::fprintf(stderr, "model %s: generated in %.1f s, moved to the device in %.1f s\n", ck.source.c_str(), gen_s,
               seconds_since(t0));
  return std::make_unique<model::LlamaModel>(std::move(ck));
}

struct CheckResult {
  double worst_nmse = 0;
  int agree = 0, total = 0;
  bool finite = true;
};

// The two models fed the same tokens: `sequences` (1 or 2) sequences, one
// prefilling 37 tokens and one 20, then 6 greedy decode steps on the CPU's
// choices. One sequence decodes one row a step, where the GPU runs its
// one-row kernels (the streamed GEMVs, the norm handoff).
CheckResult check_sequences(model::Model& cpu, model::Model& gpu, int sequences) {
  const int vocab = cpu.config().vocab_size;
  Rig rc(cpu, sequences, 256), rg(gpu, sequences, 256);
  std::vector<std::vector<int32_t>> tokens = {prompt(37, vocab, 1), prompt(20, vocab, 2)};
  tokens.resize(size_t(sequences));
  CheckResult r;
  for (int step = 0; step < 7; ++step) {
    rc.step(tokens);
    rg.step(tokens);
    Tensor host = ops::to_device(rg.logits, Device::CPU);
    double num = 0, den = 0;
    bool finite = true;
    for (int64_t i = 0; i < host.dim(0) * int64_t(vocab); ++i) {
      double a = host.data_as<float>()[i], b = rc.logits.data_as<float>()[i];
      finite = finite && std::isfinite(a);
      num += (a - b) * (a - b);
      den += b * b;
    }
    double nmse = num / den;
    r.worst_nmse = std::max(r.worst_nmse, nmse);
    std::vector<int32_t> ic = rc.argmax(), ig = rg.argmax();
    std::printf("check %d sequence(s), step %d: logits NMSE %.3g%s, greedy ids cpu", sequences, step, nmse,
                finite ? "" : " NON-FINITE");
    for (int32_t id : ic) std::printf(" %d", id);
    std::printf(", cuda");
    for (int32_t id : ig) std::printf(" %d", id);
    std::printf("\n");
    for (size_t s = 0; s < ic.size(); ++s) r.agree += ic[s] == ig[s];
    r.total += int(ic.size());
    r.finite = finite;
    if (!finite) return r;
    for (size_t s = 0; s < ic.size(); ++s) tokens[s] = {ic[s]};  // follow the CPU's choice
  }
  return r;
}

int run_check(const Options& o) {
  auto cpu = make_model(o, Device::CPU);
  auto gpu = make_model(o, Device::CUDA);
  CheckResult all;
  for (int sequences : {2, 1}) {
    const CheckResult r = check_sequences(*cpu, *gpu, sequences);
    all.worst_nmse = std::max(all.worst_nmse, r.worst_nmse);
    all.agree += r.agree;
    all.total += r.total;
    all.finite = all.finite && r.finite;
  }
  std::printf("check %s %s: worst logits NMSE %.3g, greedy agreement %d/%d\n", o.shape.c_str(), o.dtype.c_str(),
              all.worst_nmse, all.agree, all.total);
  return all.finite && all.worst_nmse < 1e-3 ? 0 : 1;
}

// Each distinct decode matmul of the model (layer 0's and the lm_head) at
// one activation row, 200 launches back to back: the GPU runs them end to end
// (a launch costs less host time than the kernel takes), so the time per
// launch is the kernel's plus the gap between kernels.
int run_gemv(const Options& o) {
  DType dtype;
  if (!parse_dtype(o.dtype, &dtype)) fail("unknown dtype '", o.dtype, "'");
  model::Checkpoint ck = tools::random_checkpoint(tools::find_shape(o.shape), dtype);
  apply_dtype_at(o, ck);
  model::move_weights(ck, Device::CUDA);
  std::printf("| shape | dtype | matmul | rows x cols | us | GB/s |\n|---|---|---|---|---|---|\n");
  auto time = [&](const std::string& name, const Tensor& w) {
    Tensor x = ops::zeros(DType::F32, {1, w.dim(1)}, Device::CUDA);
    Tensor y = ops::zeros(DType::F32, {1, w.dim(0)}, Device::CUDA);
    for (int i = 0; i < 10; ++i) ops::matmul(x, w, y);
    ops::synchronize(Device::CUDA);
    const int reps = 200;
    auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i) ops::matmul(x, w, y);
    ops::synchronize(Device::CUDA);
    const double us = 1e6 * seconds_since(t0) / reps;
    const std::string wtype(dtype_name(w.dtype()));  // (--dtype-at may have changed it)
    std::printf("| %s | %s | %s | %lld x %lld | %.2f | %.0f |\n", o.shape.c_str(), wtype.c_str(), name.c_str(),
                (long long)w.dim(0), (long long)w.dim(1), us, double(w.nbytes()) / us / 1e3);
  };
  const model::LayerWeights& l = ck.weights.layers[0];
  time("q", l.wq);
  time("k", l.wk);
  time("o", l.wo);
  time("gate", l.w_gate);
  time("down", l.w_down);
  time("lm_head", ck.weights.output);
  return 0;
}

// Decode at batch 1 as the engine runs it (engine/scheduler.cpp,
// run_ahead): the greedy pick on the device (the engine's sampling kernel),
// step t + 1 queued from it before the host reads step t's token. Where the
// graph of a step's shape is not recorded yet (its table width grew), that
// step waits for the host's token, as in the engine.
template <class Row>
void bench_decode_run_ahead(const Options& o, model::Model& model, const Row& row) {
  const int vocab = model.config().vocab_size;
  Rig rig(model, 1, o.prompt + o.decode + 16);
  const cuda::SampleRowParams greedy{.logit_row = 0, .greedy = 1};
  const cuda::SampleBatch batch{.vocab = vocab, .rows = std::span<const cuda::SampleRowParams>(&greedy, 1)};
  ops::SampleRun sampling;
  std::vector<cuda::SampleResult> result(1);
  auto next_token = [&] {
    sampling.collect(result);
    return result[0].token;
  };
  rig.step({prompt(o.prompt, vocab, 3)});
  for (int i = 0; i < 8; ++i) {  // warm-up: records the step's graph
    sampling.launch(rig.logits, batch);
    rig.step({{next_token()}});
  }
  sampling.launch(rig.logits, batch);
  int waited = 0;
  const auto t0 = Clock::now();
  for (int i = 0; i < o.decode; ++i) {
    if (rig.step_from_device(sampling.tokens())) {
      next_token();
    } else {
      rig.step({{next_token()}});
      ++waited;
    }
    sampling.launch(rig.logits, batch);
  }
  next_token();
  const double s = seconds_since(t0);
  row("decode b1 run ahead", o.decode / s, 1e3 * s / o.decode);
  std::printf("  (%d of %d steps waited for the host's token: a new graph)\n", waited, o.decode);

  // The floor under it: the same steps queued back to back with no sampling
  // and no wait, each reading the last sampled id (so the ids no longer
  // follow the logits; a step's time does not depend on them).
  const Tensor token = sampling.tokens();
  Rig alone(model, 1, o.prompt + o.decode + 16);
  alone.step({prompt(o.prompt, vocab, 3)});
  for (int i = 0; i < 8; ++i) alone.step({{0}});
  const auto t1 = Clock::now();
  for (int i = 0; i < o.decode; ++i)
    if (!alone.step_from_device(token)) alone.step({{0}});
  ops::synchronize(Device::CUDA);
  const double f = seconds_since(t1);
  row("decode b1 forward alone", o.decode / f, 1e3 * f / o.decode);
}

// Speculative decoding's verify step at batch 1 as the engine runs it: the
// last token and k drafts as one chunk (every row's logits), the rows'
// logits copied to the host, then the k draft positions rolled back (all
// rejected: the next step runs at the same context length). Decode b1
// (a graph, greedy argmax) in the same rig first, for the ratio.
template <class Row>
void bench_verify(const Options& o, model::Model& model, const Row& row) {
  const int vocab = model.config().vocab_size;
  Rig rig(model, 1, o.prompt + o.decode + o.verify + 32);
  rig.step({prompt(o.prompt, vocab, 5)});
  int32_t next = rig.argmax()[0];
  auto decode_ms = [&] {
    for (int i = 0; i < 8; ++i) {  // warm-up (records the graph)
      rig.step({{next}});
      next = rig.argmax()[0];
      --rig.n_past[0];
    }
    const auto t0 = Clock::now();
    for (int i = 0; i < o.decode; ++i) {
      rig.step({{next}});
      next = rig.argmax()[0];
      --rig.n_past[0];
    }
    return 1e3 * seconds_since(t0) / o.decode;
  };
  const double decode = decode_ms();
  row("decode b1 (verify's baseline)", 1e3 / decode, decode);
  Tensor host = ops::pinned_host_zeros(DType::F32, {int64_t(o.verify) + 1, vocab});
  for (int k = 1; k <= o.verify; ++k) {
    model::ForwardBatch b;
    b.sequences.push_back({.first_row = 0, .n_rows = k + 1, .n_past = 0, .block_table = rig.tables[0]});
    for (int r = 0; r <= k; ++r) {
      b.tokens.push_back(int32_t((next + 37 * r) % vocab));
      b.positions.push_back(0);
      b.wants_logits.push_back(1);
    }
    auto verify_step = [&] {
      b.sequences[0].n_past = rig.n_past[0];
      for (int r = 0; r <= k; ++r) b.positions[size_t(r)] = rig.n_past[0] + r;
      model.forward(b, *rig.cache, rig.logits);
      Tensor dst = host.slice(0, 0, k + 1);
      ops::copy(rig.logits, dst);  // waits for the forward
    };
    for (int i = 0; i < 4; ++i) verify_step();  // warm-up (GEMM timings of this row count)
    const auto t0 = Clock::now();
    for (int i = 0; i < o.decode; ++i) verify_step();
    const double ms = 1e3 * seconds_since(t0) / o.decode;
    row("verify b1 k=" + std::to_string(k), 1e3 / ms, ms);  // tokens/s with every draft rejected
    std::printf("  (%.2fx a decode step; all %d drafts accepted would give %.2fx)\n", ms / decode, k,
                (k + 1) * decode / ms);
  }
}

int bench_model(const Options& o, model::Model& m) {
  const Device device = m.device();
  model::Model* model = &m;
  const int vocab = model->config().vocab_size;
  const double weight_gb = double(model->weight_bytes()) / 1e9;
  std::printf("| shape | dtype | device | test | tokens/s | ms/step |\n|---|---|---|---|---|---|\n");
  auto row = [&](const std::string& test, double tps, double ms) {
    const std::string where = o.tp >= 1 ? o.device + " x" + std::to_string(o.tp) + " (TP)" : o.device;
    std::string dtype = o.dtype;
    for (const auto& [at, t] : o.dtype_at) dtype += ", " + at + " " + std::string(dtype_name(t));
    std::printf("| %s | %s | %s | %s | %.1f | %.3f |\n", o.shape.c_str(), dtype.c_str(), where.c_str(), test.c_str(),
                tps, ms);
    std::fflush(stdout);
  };
  if (o.decode > 0) {
    Rig rig(*model, 1, o.prompt + o.decode + 16);
    rig.step({prompt(o.prompt, vocab, 3)});
    int32_t next = rig.argmax()[0];
    for (int i = 0; i < 8; ++i) {  // warm-up
      rig.step({{next}});
      next = rig.argmax()[0];
    }
    auto t0 = Clock::now();
    // The host's time in forward(): the checks, the inputs' upload and the
    // graph's launch, during which the device idles (each step starts once
    // the host has the last step's token), then the logits' copy call.
    double forward_s = 0;
    for (int i = 0; i < o.decode; ++i) {
      const auto called = Clock::now();
      rig.step({{next}});
      forward_s += seconds_since(called);
      next = rig.argmax()[0];
    }
    double s = seconds_since(t0);
    row("decode b1", o.decode / s, 1e3 * s / o.decode);
    std::printf("  (weights %.2f GB%s: %.0f GB/s effective; host %.1f us a step in forward)\n", weight_gb,
                o.tp >= 1 ? " per rank" : "", weight_gb * o.decode / s, 1e6 * forward_s / o.decode);
  }
  if (o.decode > 0 && device == Device::CUDA && o.tp == 0) bench_decode_run_ahead(o, *model, row);
  if (o.decode > 0 && o.verify > 0) bench_verify(o, *model, row);
  if (o.prefill > 0) {
    Rig rig(*model, 1, o.prefill + 16);
    std::vector<double> times, queued;
    for (int rep = 0; rep <= o.prefill_reps; ++rep) {
      rig.n_past[0] = 0;
      ops::synchronize(device);
      auto t0 = Clock::now();
      rig.step({prompt(o.prefill, vocab, rep)});
      const double host_s = seconds_since(t0);
      rig.argmax();
      if (rep > 0) {  // rep 0 warms up (cuBLASLt heuristics)
        times.push_back(seconds_since(t0));
        queued.push_back(host_s);
      }
    }
    double s = median(times);
    row("prefill " + std::to_string(o.prefill), o.prefill / s, 1e3 * s);
    // In order: a long run (--prefill-reps) shows the clocks settling under
    // the card's power cap.
    std::printf("  (ms per run:");
    for (double t : times) std::printf(" %.1f", 1e3 * t);
    std::printf(")\n");
    // When the host needs about as long to queue the prompt's kernels as the
    // device to run them, the device waits on the host.
    std::printf("  (the host queued the prompt's kernels in %.2f ms)\n", 1e3 * median(queued));
  }
  if (o.batch > 0) {
    Rig rig(*model, o.batch, o.context + o.batch_steps + 16);
    for (auto& p : rig.n_past) p = o.context;
    std::vector<std::vector<int32_t>> tokens(size_t(o.batch));
    for (int s = 0; s < o.batch; ++s) tokens[s] = {int32_t((s * 7919) % vocab)};
    rig.logits = ops::zeros(DType::F32, {o.batch, vocab}, device);
    for (int i = 0; i < 3; ++i) {  // warm-up
      rig.step(tokens);
      rig.argmax();
    }
    auto t0 = Clock::now();
    for (int i = 0; i < o.batch_steps; ++i) {
      rig.step(tokens);
      std::vector<int32_t> ids = rig.argmax();
      for (int s = 0; s < o.batch; ++s) tokens[s] = {ids[s]};
    }
    double s = seconds_since(t0);
    row("decode b" + std::to_string(o.batch) + "@" + std::to_string(o.context), o.batch * o.batch_steps / s,
        1e3 * s / o.batch_steps);
  }
  return 0;
}

int run_bench(const Options& o) {
  auto model = make_model(o, o.device == "cpu" ? Device::CPU : Device::CUDA);
  return bench_model(o, *model);
}

// ---------------------------------------------------------------------------
// Tensor parallelism.

double nmse(const Tensor& got, const Tensor& want) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double a = got.data_as<float>()[i], b = want.data_as<float>()[i];
    if (!std::isfinite(a)) return INFINITY;
    num += (a - b) * (a - b);
    den += b * b;
  }
  return num / den;
}

std::unique_ptr<ops::Collective> join(const Options& o) {
  auto t0 = Clock::now();
  auto c = ops::connect_nccl({.rank = o.tp_rank, .size = o.tp, .master = o.tp_master, .timeout_s = 600});
  std::fprintf(stderr, "rank %d of %d: NCCL communicator ready in %.1f s\n", o.tp_rank, o.tp, seconds_since(t0));
  return c;
}

// The checkpoint with every matrix widened to f32 (exact for bf16/f16): on
// the GPU f32 weights run full-f32 GEMMs, so this model's logits are the
// reference without the bf16 rounding of GEMM activations.
model::Checkpoint widened_to_f32(const model::Checkpoint& ck) {
  model::Checkpoint out = ck;
  auto widen = [](Tensor& t) {
    if (t.defined() && t.dtype() != DType::F32) t = ops::convert(t, DType::F32);
  };
  widen(out.weights.token_embd);
  if (ck.config.tied_embeddings)
    out.weights.output = out.weights.token_embd;
  else
    widen(out.weights.output);
  for (model::LayerWeights& l : out.weights.layers)
    for (Tensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) widen(*t);
  return out;
}

// Logits of `m` over the given steps (2 sequences), copied to the host.
std::vector<Tensor> replay(model::Model& m, const std::vector<std::vector<std::vector<int32_t>>>& steps) {
  Rig rig(m, 2, 256);
  std::vector<Tensor> out;
  for (const auto& tokens : steps) {
    rig.step(tokens);
    out.push_back(ops::to_device(rig.logits, Device::CPU));
  }
  return out;
}

// Greedy decode of TP=1 (rank 0, the whole model on GPU 0) against TP=N
// (shards sliced from the same random checkpoint), fed the same tokens.
//
// What TP=N may differ by: sharding only reorders f32 sums (o_proj/down_proj
// add N partial dot products), but the bf16 GEMMs of a prefill round their
// activations to bf16 (relative step 2^-8) and the KV cache is f16, so an
// f32-level change flips some roundings and the two runs end up about as far
// apart as each is from exact arithmetic. The check therefore also runs the
// checkpoint widened to f32 (full-f32 GEMMs, no activation rounding) and
// asks that TP=N be no farther from it than TP=1 is (2x, plus 1e-6 for
// tiny values), and that the TP=N vs TP=1 NMSE stay under 1e-3 (the bar of
// the CPU-vs-CUDA check). A greedy disagreement passes only at a near tie:
// TP=1's logit gap between the two tokens under 4 RMS of that row's TP=N
// vs TP=1 difference.
int run_tp_check(const Options& o) {
  DType dtype;
  if (!parse_dtype(o.dtype, &dtype)) fail("unknown dtype '", o.dtype, "'");
  model::Checkpoint full = tools::random_checkpoint(preset_of(o), dtype);
  model::Checkpoint shard = model::shard_checkpoint(full, {.rank = o.tp_rank, .size = o.tp});
  const int vocab = full.config.vocab_size;
  // Two sequences: one prefilling 37 tokens, one 20; then 6 greedy decode steps.
  std::vector<std::vector<std::vector<int32_t>>> steps;
  std::vector<Tensor> want, exact;
  if (o.tp_rank == 0) {
    model::Checkpoint wide = dtype == DType::F32 ? model::Checkpoint{} : widened_to_f32(full);
    {
      model::move_weights(full, Device::CUDA);
      model::LlamaModel reference(std::move(full));
      Rig rig(reference, 2, 256);
      std::vector<std::vector<int32_t>> tokens = {prompt(37, vocab, 1), prompt(20, vocab, 2)};
      for (int step = 0; step < 7; ++step) {
        rig.step(tokens);
        steps.push_back(tokens);
        want.push_back(ops::to_device(rig.logits, Device::CPU));
        std::vector<int32_t> ids = rig.argmax();
        tokens = {{ids[0]}, {ids[1]}};
      }
    }
    if (dtype != DType::F32) {
      model::move_weights(wide, Device::CUDA);
      model::LlamaModel f32_model(std::move(wide));
      exact = replay(f32_model, steps);
    }
  }
  full = {};
  model::move_weights(shard, Device::CUDA);
  auto model = std::make_unique<model::LlamaModel>(std::move(shard));
  auto collective = join(o);
  if (o.tp_rank != 0) {
    const int64_t n = model::run_tensor_parallel_worker(*model, *collective);
    std::fprintf(stderr, "rank %d: %lld forwards, stopped\n", o.tp_rank, (long long)n);
    return 0;
  }
  double worst = 0, worst_tp1_exact = 0, worst_tpn_exact = 0;
  int agree = 0, near_ties = 0, total = 0;
  size_t graphs = 0;
  {
    model::TensorParallelModel tp(std::move(model), std::move(collective));
    Rig rig(tp, 2, 256);
    for (size_t step = 0; step < steps.size(); ++step) {
      rig.step(steps[step]);
      const Tensor got = ops::to_device(rig.logits, Device::CPU);
      const double e = nmse(got, want[step]);
      worst = std::max(worst, e);
      std::vector<int32_t> ids = rig.argmax(), ref(2);
      ops::argmax_rows(want[step], ref);
      for (size_t s = 0; s < ids.size(); ++s) {
        total += 1;
        if (ids[s] == ref[s]) {
          ++agree;
          continue;
        }
        const float* w = want[step].row_as<float>(int64_t(s));
        const float* g = got.row_as<float>(int64_t(s));
        double sq = 0;
        for (int v = 0; v < vocab; ++v) sq += double(g[v] - w[v]) * (g[v] - w[v]);
        const double gap = double(w[ref[s]]) - w[ids[s]], rms = std::sqrt(sq / vocab);
        const bool tie = gap < 4 * rms;
        near_ties += tie;
        std::printf(
            "  step %zu seq %zu: TP=1 picks %d, TP=%d picks %d; TP=1 logit gap %.4g vs %.4g RMS difference (%s)\n",
            step, s, ref[s], o.tp, ids[s], gap, rms, tie ? "a near tie" : "NOT a near tie");
      }
      double e1 = 0, en = 0;
      if (!exact.empty()) {
        e1 = nmse(want[step], exact[step]);
        en = nmse(got, exact[step]);
        worst_tp1_exact = std::max(worst_tp1_exact, e1);
        worst_tpn_exact = std::max(worst_tpn_exact, en);
      }
      std::printf(
          "tp check step %zu: logits NMSE %.3g (vs f32 activations: TP=1 %.3g, TP=%d %.3g), greedy ids TP=1 "
          "%d/%d TP=%d %d/%d\n",
          step, e, e1, o.tp, en, ref[0], ref[1], o.tp, ids[0], ids[1]);
    }
    graphs = tp.shard().n_decode_graphs();
  }  // the workers stop here; rank 0's graphs are dropped before its communicator
  std::printf(
      "tp check %s %s (%d layers) TP=%d vs TP=1: worst logits NMSE %.3g, greedy agreement %d/%d "
      "(%d near ties), decode graphs recorded %zu\n",
      o.shape.c_str(), o.dtype.c_str(), preset_of(o).layers, o.tp, worst, agree, total, near_ties, graphs);
  bool ok = worst < 1e-3 && agree + near_ties == total;
  if (!exact.empty()) {
    const bool no_worse = worst_tpn_exact <= 2 * worst_tp1_exact + 1e-6;
    std::printf("tp check vs the f32-activation reference: TP=1 worst NMSE %.3g, TP=%d %.3g (%s)\n", worst_tp1_exact,
                o.tp, worst_tpn_exact, no_worse ? "TP is no farther from it" : "TP is FARTHER from it");
    ok = ok && no_worse;
  }
  std::printf("tp check %s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}

// This rank's shard generated directly in its shape, one tensor at a time
// straight to the GPU (a 70B model is never whole in host memory). The
// weights are random: speed does not depend on which shard a rank holds.
model::Checkpoint random_shard_on_device(const Options& o, DType dtype) {
  tools::ShapePreset p = preset_of(o);
  model::ModelConfig full;
  full.n_heads = p.heads;
  full.n_kv_heads = p.kv_heads;
  full.intermediate_size = p.intermediate;
  const model::ModelConfig s = model::shard_config(full, {.rank = o.tp_rank, .size = o.tp});
  p.heads = s.n_heads;
  p.kv_heads = s.n_kv_heads;
  p.intermediate = s.intermediate_size;
  tools::ShapePreset no_layers = p;
  no_layers.layers = 0;
  model::Checkpoint ck = tools::random_checkpoint(no_layers, dtype, 1 + uint64_t(o.tp_rank));
  ck.config.n_layers = p.layers;
  ck.source = "random:" + o.shape + ":" + o.dtype + " shard " + std::to_string(o.tp_rank) + "/" + std::to_string(o.tp);
  model::move_weights(ck, Device::CUDA);
  auto dev = [](const Tensor& t) { return ops::to_device(t, Device::CUDA); };
  uint64_t id = 1000 + 100000 * uint64_t(o.tp_rank);
  for (int l = 0; l < p.layers; ++l) ck.weights.layers.push_back(tools::random_layer(p, dtype, id, dev));
  ops::synchronize(Device::CUDA);
  return ck;
}

int run_tp_bench(const Options& o) {
  DType dtype;
  if (!parse_dtype(o.dtype, &dtype)) fail("unknown dtype '", o.dtype, "'");
  auto t0 = Clock::now();
  auto model = std::make_unique<model::LlamaModel>(random_shard_on_device(o, dtype));
  std::fprintf(stderr, "rank %d: shard of %s (%.2f GB of weights) generated on GPU %d in %.1f s\n", o.tp_rank,
               o.shape.c_str(), double(model->weight_bytes()) / 1e9, o.tp_rank, seconds_since(t0));
  auto collective = join(o);
  if (o.tp_rank != 0) {
    const int64_t n = model::run_tensor_parallel_worker(*model, *collective);
    std::fprintf(stderr, "rank %d: %lld forwards, stopped\n", o.tp_rank, (long long)n);
    return 0;
  }
  std::printf(
      "tensor parallel over %d GPUs: each rank generated its own random shard in its shape (no whole "
      "checkpoint was sliced)\n",
      o.tp);
  model::TensorParallelModel tp(std::move(model), std::move(collective));
  return bench_model(o, tp);
}

// Forks ranks 1..tp−1 (before any CUDA or thread-pool work), runs rank 0
// here, and waits for the others. Returns this process's exit status.
int run_tensor_parallel(Options o) {
  std::vector<pid_t> children;
  if (o.tp_rank < 0) {
    o.tp_rank = 0;
    for (int r = 1; r < o.tp; ++r) {
      std::fflush(nullptr);
      const pid_t pid = ::fork();
      if (pid < 0) fail("fork for tensor-parallel rank ", r, " failed");
      if (pid == 0) {
        o.tp_rank = r;
        children.clear();
        break;
      }
      children.push_back(pid);
    }
  }
  int status = 1;
  try {
    ops::select_device(o.tp_rank);
    status = o.check ? run_tp_check(o) : run_tp_bench(o);
  } catch (const Error& e) {
    std::fprintf(stderr, "cuda_model_bench rank %d: %s\n", o.tp_rank, e.what());
    status = 1;
  }
  std::fflush(nullptr);
  if (o.tp_rank != 0) ::_exit(status);  // a forked rank: no exit-time destructors of CUDA/NCCL state
  // The other ranks stop when rank 0's model is destroyed; one that has not
  // exited a minute later is stuck (e.g. in ncclCommDestroy): say so and end it
  // rather than wait forever.
  const auto t0 = Clock::now();
  for (pid_t pid : children) {
    int ws = 0;
    pid_t got = 0;
    while ((got = ::waitpid(pid, &ws, WNOHANG)) == 0 && seconds_since(t0) < 60) ::usleep(50000);
    if (got == 0) {
      std::fprintf(stderr,
                   "cuda_model_bench: tensor-parallel rank (pid %d) still running 60 s after rank 0 finished; "
                   "killed\n",
                   int(pid));
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &ws, 0);
      status = 1;
    } else if (got < 0 || !WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
      std::fprintf(stderr, "cuda_model_bench: a tensor-parallel rank (pid %d) failed\n", int(pid));
      status = 1;
    }
  }
  return status;
}

}  // namespace
}  // namespace brioche

int main(int argc, char** argv) {
  using namespace brioche;
  // Line by line even into a file or pipe: a run killed by a timeout keeps
  // what it printed.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string f = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) fail("flag ", f, " needs a value");
      return argv[++i];
    };
    try {
      if (f == "--shape")
        o.shape = next();
      else if (f == "--dtype")
        o.dtype = next();
      else if (f == "--device")
        o.device = next();
      else if (f == "--decode")
        o.decode = std::stoi(next());
      else if (f == "--prefill")
        o.prefill = std::stoi(next());
      else if (f == "--prompt")
        o.prompt = std::stoi(next());
      else if (f == "--prefill-reps")
        o.prefill_reps = std::max(1, std::stoi(next()));
      else if (f == "--batch")
        o.batch = std::stoi(next());
      else if (f == "--verify")
        o.verify = std::stoi(next());
      else if (f == "--context")
        o.context = std::stoi(next());
      else if (f == "--batch-steps")
        o.batch_steps = std::stoi(next());
      else if (f == "--check")
        o.check = true;
      else if (f == "--gemv")
        o.gemv = true;
      else if (f == "--layers")
        o.layers = std::stoi(next());
      else if (f == "--dtype-at")
        o.dtype_at.push_back(parse_dtype_at(next()));
      else if (f == "--tp")
        o.tp = std::stoi(next());
      else if (f == "--tp-rank")
        o.tp_rank = std::stoi(next());
      else if (f == "--tp-master")
        o.tp_master = next();
      else
        fail("unknown flag ", f);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "cuda_model_bench: %s\n", e.what());
      return 2;
    }
  }
  if (o.tp >= 1 && !o.dtype_at.empty()) {
    std::fprintf(stderr,
                 "cuda_model_bench: --dtype-at does not apply to --tp runs (their shards are drawn per rank)\n");
    return 2;
  }
  if (o.tp >= 1) return run_tensor_parallel(o);
  try {
    return o.check ? run_check(o) : o.gemv ? run_gemv(o) : run_bench(o);
  } catch (const Error& e) {
    std::fprintf(stderr, "cuda_model_bench: %s\n", e.what());
    return 1;
  }
}
