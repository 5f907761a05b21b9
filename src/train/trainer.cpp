#include "train/trainer.h"

#include <algorithm>
#include <functional>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>

#include <unistd.h>

#include "core/error.h"
#include "ops/device.h"
#include "train/adapter_io.h"
#include "train/data_parallel.h"
#include "train/objective.h"
#if BRIOCHE_CUDA
#include "backend/cuda/runtime.h"
#endif

namespace brioche::train {

namespace {

uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t x = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull);
  x = (x ^ (x >> 31)) * 0xBF58476D1CE4E5B9ull;
  return x ^ (x >> 29);
}

}  // namespace

// One data split with its per-example caches.
struct Trainer::Split {
  const Dataset* data;
  std::vector<Tensor> prefix;                                          // frozen-prefix rows per example (lazy)
  std::vector<std::optional<std::array<SequenceLogps, 2>>> reference;  // DPO/IPO, per pair (lazy)
  size_t prefix_bytes = 0;
  int size() const { return int(data->size()); }
};

struct Trainer::MicroBatch {
  TokenBatch batch;
  Tensor prefix;  // [n_rows, hidden] or undefined
  std::vector<SequenceLogps> reference;
};

namespace {

// TRL's preference metrics from a LossValue's sums over n pairs (losses.h
// says how each method defines them).
void add_trl_names(nlohmann::json& j, const LossConfig& loss, const LossValue& sums, double n) {
  const Method method = loss.method;
  if (!is_preference(method) || n <= 0) return;
  j["rewards/chosen"] = sums.reward_chosen_sum / n;
  j["rewards/rejected"] = sums.reward_rejected_sum / n;
  j["rewards/margins"] = (sums.reward_chosen_sum - sums.reward_rejected_sum) / n;
  j["rewards/accuracies"] = sums.correct / n;
  j["logps/chosen"] = sums.trl_logps_chosen_sum / n;
  j["logps/rejected"] = sums.trl_logps_rejected_sum / n;
  if (has_nll_term(loss)) j["nll_loss"] = sums.nll;  // unweighted, as TRL logs it (ORPO; DPO's rpo_alpha)
  if (method == Method::ORPO) {
    j["log_odds_ratio"] = sums.log_odds_ratio_sum / n;
    j["log_odds_chosen"] = sums.log_odds_chosen_sum / n;
  }
}

}  // namespace

nlohmann::json EvalMetrics::to_json(const LossConfig& objective) const {
  nlohmann::json j = {{"loss", loss},
                      {"nll", nll},
                      {"or", or_loss},
                      {"accuracy", accuracy},
                      {"margin", margin},
                      {"chosen_logp", chosen_logp},
                      {"rejected_logp", rejected_logp},
                      {"examples", examples}};
  LossValue means;  // the fields are means already: sums over n = 1
  means.reward_chosen_sum = reward_chosen, means.reward_rejected_sum = reward_rejected, means.correct = accuracy;
  means.trl_logps_chosen_sum = trl_logps_chosen, means.trl_logps_rejected_sum = trl_logps_rejected;
  means.nll = nll, means.log_odds_ratio_sum = log_odds_ratio, means.log_odds_chosen_sum = log_odds_chosen;
  add_trl_names(j, objective, means, 1.0);
  return j;
}

size_t peak_device_bytes() {
#if BRIOCHE_CUDA
  if (ops::cuda_available()) return cuda::allocator_stats().peak_bytes_in_use;
#endif
  return 0;
}

size_t peak_rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return size_t(std::stoull(line.substr(6))) * 1024;
  }
  return 0;
}

Trainer::Trainer(TrainConfig config, const model::Checkpoint& ck, TrainData data)
    : Trainer(std::move(config), llama_train_base(ck), std::move(data)) {}

Trainer::Trainer(TrainConfig config, TrainBase base, TrainData data)
    : config_(std::move(config)), base_(std::move(base)) {
  config_.finalize();
  loss_config_ = {.method = config_.method,
                  .orpo_lambda = config_.orpo_lambda,
                  .beta = config_.beta,
                  .simpo_gamma = config_.simpo_gamma,
                  .rpo_alpha = config_.rpo_alpha};
  auto own = [](Dataset d) { return std::make_unique<Dataset>(std::move(d)); };
  owned_train_ = own(std::move(data.train));
  if (data.valid) owned_valid_ = own(std::move(*data.valid));
  if (data.test) owned_test_ = own(std::move(*data.test));
  const bool pref = is_preference(config_.method);
  auto check = [&](const Dataset& d, const char* name) {
    BRIOCHE_CHECK(pref ? !d.pairs.empty() && d.examples.empty() : !d.examples.empty() && d.pairs.empty(), name,
                  " data does not match method ", method_name(config_.method),
                  pref ? " (needs preference pairs)" : " (needs chat/completion/text examples)");
  };
  check(*owned_train_, "training");
  if (owned_valid_) check(*owned_valid_, "validation");
  if (owned_test_) check(*owned_test_, "test");
  const std::string& start_from = !config_.resume.empty() ? config_.resume : config_.resume_adapter;
  if (!start_from.empty()) {
    adapter_ = base_.load_adapter(start_from);
    adapter_->set_dropout(config_.lora_dropout);
    // The adapter's own shape wins over rank/scale/alpha/target_modules; the
    // config (and so metrics.json) records what is actually trained.
    const LoraConfig& lc = adapter_->config();
    config_.rank = lc.rank;
    config_.alpha = lc.alpha;
    config_.scale.reset();
    config_.rs_lora = lc.rs_lora;
    config_.target_modules.clear();
    for (Module m : lc.targets) config_.target_modules.emplace_back(module_name(m));
    if (config_.resume.empty())
      log("train: warm start from " + config_.resume_adapter + " (its rank " + std::to_string(lc.rank) + ", alpha " +
          std::to_string(lc.alpha) + " and target modules; optimizer and schedule restart)");
  } else {
    adapter_ =
        std::make_unique<LoraAdapter>(*base_.config, config_.lora_config(), uint64_t(config_.seed), base_.shapes);
  }
  const Device device = config_.resolved_device();
  BRIOCHE_CHECK(base_.device == device, "train: device ", config_.device, " but the model's weights are on ",
                device_name(base_.device), " (model::move_weights uploads them; `brioche train` does)");
  adapter_->to_device(device);  // factors, gradients and (in run) the AdamW moments live with the weights
  model_ = base_.make_stack(
      adapter_.get(), TrainModelOptions{.segment_size = config_.segment_size,
                                        .offload_boundaries = config_.offload_boundaries,
                                        .offload_attention = config_.offload_attention,
                                        .boundary_dtype = config_.boundary_dtype == "bf16" ? DType::BF16 : DType::F32,
                                        .device_boundaries = config_.device_boundaries,
                                        .mlp_chunk_rows = config_.mlp_chunk_size});
  if (base_.logit_softcap > 0.0f)  // Gemma: the head's logits are soft-capped
    head_ = std::make_unique<SoftcapLogpHead>(*base_.output, base_.logit_softcap,
                                              config_.head_chunk_size > 0 ? config_.head_chunk_size : 4096);
  else if (config_.head_chunk_size > 0)
    head_ = std::make_unique<FusedLogpHead>(*base_.output, config_.head_chunk_size);
  else
    head_ = std::make_unique<PlainLogpHead>(*base_.output);
  auto split = [](const Dataset* d) {
    auto s = std::make_unique<Split>();
    s->data = d;
    s->prefix.resize(d->size());
    s->reference.resize(d->size());
    return s;
  };
  train_ = split(owned_train_.get());
  if (owned_valid_) valid_ = split(owned_valid_.get());
  if (owned_test_) test_ = split(owned_test_.get());
  // Offloaded activations live in pinned host buffers; pinning the longest
  // batch's size once spares re-pinning (seconds at 8B shapes) at every
  // batch longer than those before it.
  if (config_.offload_boundaries) model_->reserve_offload_rows(longest_batch_rows(*train_));
}

Trainer::~Trainer() = default;

void Trainer::save(const std::string& dir) {
  const AdapterWriteInfo info{
      .base_model_id = config_.base_model_id.empty() ? base_.huggingface_repo_id : config_.base_model_id,
      .base_model_path = config_.model};
  if (adapter_->device() == Device::CPU) return base_.save_adapter(dir, *adapter_, info);
  auto host = adapter_->host_copy();
  base_.save_adapter(dir, *host, info);
}

void Trainer::log(const std::string& line) const {
  if (config_.quiet) return;
  // A live progress bar holds the terminal's last line: clear it first.
  std::fprintf(stderr, "%s%s\n", progress_shown_ ? "\r\033[K" : "", line.c_str());
  progress_shown_ = false;
}

namespace {

std::string duration_text(double seconds) {
  const long s = long(seconds + 0.5);
  char out[32];
  if (s >= 3600)
    std::snprintf(out, sizeof out, "%ldh%02ldm", s / 3600, s / 60 % 60);
  else
    std::snprintf(out, sizeof out, "%ldm%02lds", s / 60, s % 60);
  return out;
}

}  // namespace

void Trainer::show_progress(int done, int total, int first_step, double loss, float lr, double tokens_per_s,
                            double elapsed) const {
  constexpr int kWidth = 24;
  const int filled = total > 0 ? int(int64_t(kWidth) * done / total) : kWidth;
  const double per_step = done > first_step ? elapsed / double(done - first_step) : 0.0;
  std::fprintf(stderr, "\r\033[K[%s%s] %d/%d loss %.4f lr %.2e %.0f tok/s elapsed %s ETA %s",
               std::string(size_t(filled), '#').c_str(), std::string(size_t(kWidth - filled), '.').c_str(), done, total,
               loss, lr, tokens_per_s, duration_text(elapsed).c_str(),
               duration_text(per_step * double(total - done)).c_str());
  std::fflush(stderr);
  progress_shown_ = true;
}

TokenBatch Trainer::layout(const Split& s, const std::vector<int>& indices) const {
  if (is_preference(config_.method)) {
    std::vector<const TokenizedPair*> ptrs;
    for (int i : indices) ptrs.push_back(&s.data->pairs[size_t(i)]);
    return build_preference_batch(
        ptrs,
        {.method = config_.method, .sft_scope = config_.resolved_sft_scope(), .prefix_shared = config_.prefix_shared});
  }
  std::vector<const TokenizedExample*> ptrs;
  for (int i : indices) ptrs.push_back(&s.data->examples[size_t(i)]);
  return build_sft_batch(ptrs, config_.resolved_sft_scope());
}

int64_t Trainer::longest_batch_rows(const Split& s) const {
  std::vector<int64_t> rows;
  for (int i = 0; i < s.size(); ++i) rows.push_back(layout(s, {i}).n_rows());
  const size_t k = std::min(rows.size(), size_t(std::max(1, config_.batch_size)));
  std::partial_sort(rows.begin(), rows.begin() + ptrdiff_t(k), rows.end(), std::greater<>());
  return std::accumulate(rows.begin(), rows.begin() + ptrdiff_t(k), int64_t(0));
}

Trainer::MicroBatch Trainer::make_batch(Split& s, const std::vector<int>& indices, bool with_prefix) {
  auto build = [&](const std::vector<int>& idx) { return layout(s, idx); };
  MicroBatch mb{.batch = build(indices)};
  // Frozen-prefix rows: per example, cached (each example's rows are contiguous in the batch).
  constexpr size_t kPrefixCacheLimit = size_t(1) << 30;
  if (with_prefix && model_->first_trainable_layer() > 0) {
    const int64_t H = base_.config->hidden_size;
    mb.prefix = ops::zeros(DType::F32, {mb.batch.n_rows(), H}, model_->device());
    int64_t row = 0;
    for (int i : indices) {
      Tensor rows = s.prefix[size_t(i)];
      if (!rows.defined()) {
        rows = model_->frozen_prefix(build({i}));
        if (s.prefix_bytes + rows.nbytes() <= kPrefixCacheLimit) {
          s.prefix[size_t(i)] = rows;
          s.prefix_bytes += rows.nbytes();
        }
      }
      Tensor dst = mb.prefix.slice(0, row, row + rows.dim(0));
      ops::copy(rows, dst);
      row += rows.dim(0);
    }
  }
  if (needs_reference(config_.method)) {
    for (int i : indices) {
      auto& ref = s.reference[size_t(i)];
      if (!ref) {
        TokenBatch one = build({i});
        auto lp = batch_logps(*model_, *head_, one, /*adapter_enabled=*/false);
        ref = std::array<SequenceLogps, 2>{lp[0], lp[1]};
      }
      mb.reference.push_back((*ref)[0]);
      mb.reference.push_back((*ref)[1]);
    }
  }
  return mb;
}

EvalMetrics Trainer::evaluate() { return evaluate(valid_ ? *valid_ : *train_, 0); }

EvalMetrics Trainer::evaluate(Split& s, int max_batches) {
  // A cap reads the split's first batches: the same rows at every evaluation, so they compare.
  const int n =
      max_batches > 0 ? int(std::min<int64_t>(s.size(), int64_t(max_batches) * config_.batch_size)) : s.size();
  EvalMetrics m;
  double loss_weighted = 0.0, nll_sum = 0.0;
  int64_t nll_tokens = 0, weight = 0;
  double or_sum = 0, correct = 0, margin = 0, chosen = 0, rejected = 0;
  double reward_w = 0, reward_r = 0, log_odds_ratio = 0, log_odds = 0, trl_logps_w = 0, trl_logps_r = 0;
  for (int b0 = 0; b0 < n; b0 += config_.batch_size) {
    std::vector<int> idx(size_t(std::min(config_.batch_size, n - b0)));
    std::iota(idx.begin(), idx.end(), b0);
    MicroBatch mb = make_batch(s, idx, true);
    LossValue v = run_objective(*model_, *head_, mb.batch, loss_config_, mb.reference,
                                {.backward = false, .prefix_out = mb.prefix.defined() ? &mb.prefix : nullptr});
    const int64_t w = is_preference(config_.method) ? v.n_pairs : v.tokens;
    loss_weighted += v.loss * double(w);
    weight += w;
    nll_sum += v.nll * double(v.tokens);
    nll_tokens += v.tokens;
    or_sum += v.or_loss_sum, correct += v.correct, margin += v.margin_sum;
    chosen += v.chosen_mean_sum, rejected += v.rejected_mean_sum;
    reward_w += v.reward_chosen_sum, reward_r += v.reward_rejected_sum;
    log_odds_ratio += v.log_odds_ratio_sum, log_odds += v.log_odds_chosen_sum;
    trl_logps_w += v.trl_logps_chosen_sum, trl_logps_r += v.trl_logps_rejected_sum;
  }
  m.examples = n;
  m.loss = weight > 0 ? loss_weighted / double(weight) : 0.0;
  m.nll = nll_tokens > 0 ? nll_sum / double(nll_tokens) : 0.0;
  if (is_preference(config_.method)) {
    const double n_pairs = double(n);
    m.or_loss = or_sum / n_pairs, m.accuracy = correct / n_pairs, m.margin = margin / n_pairs;
    m.chosen_logp = chosen / n_pairs, m.rejected_logp = rejected / n_pairs;
    m.reward_chosen = reward_w / n_pairs, m.reward_rejected = reward_r / n_pairs;
    m.log_odds_ratio = log_odds_ratio / n_pairs, m.log_odds_chosen = log_odds / n_pairs;
    m.trl_logps_chosen = trl_logps_w / n_pairs, m.trl_logps_rejected = trl_logps_r / n_pairs;
  }
  return m;
}

std::string Trainer::save_checkpoint(int step, const TrainState& state, const AdamW& optimizer) {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(config_.output) / "checkpoints";
  const std::string dir = (root / ("step_" + std::to_string(step))).string();
  save(dir);
  save_train_state(dir, state, optimizer);
  if (config_.save_total_limit > 0) {
    std::vector<std::pair<int, fs::path>> found;
    for (const fs::directory_entry& e : fs::directory_iterator(root)) {
      const std::string name = e.path().filename().string();
      if (e.is_directory() && name.rfind("step_", 0) == 0 && name.size() > 5 &&
          name.find_first_not_of("0123456789", 5) == std::string::npos)
        found.emplace_back(std::stoi(name.substr(5)), e.path());
    }
    std::sort(found.begin(), found.end());
    for (size_t i = 0; i + size_t(config_.save_total_limit) < found.size(); ++i) fs::remove_all(found[i].second);
  }
  return dir;
}

void Trainer::log_event(const nlohmann::json& event) const {
  std::ofstream out(config_.output + "/log.jsonl", std::ios::app);
  out << event.dump() << "\n";
  out.flush();
}

void Trainer::write_samples(int step) {
  if (config_.eval_samples <= 0 || !sample_decoder_.decode) return;
  const Dataset& d = *(valid_ ? *valid_ : *train_).data;
  const int n = std::min<int>(config_.eval_samples, int(d.size()));
  for (int i = 0; i < n; ++i) {
    const std::vector<int32_t>& prompt = d.pairs.empty() ? d.examples[size_t(i)].prompt : d.pairs[size_t(i)].prompt;
    if (prompt.empty()) continue;  // a plain text row: nothing to answer
    const std::vector<int32_t> completion =
        greedy_completion(*model_, *base_.output, prompt, config_.eval_sample_tokens, sample_decoder_.stop_ids);
    const std::string text = sample_decoder_.decode(completion);
    log_event({{"event", "sample"},
               {"step", step},
               {"index", i},
               {"prompt", sample_decoder_.decode(prompt)},
               {"completion", text},
               {"completion_tokens", completion.size()}});
    log("sample " + std::to_string(i) + " at step " + std::to_string(step) + ": " + text);
  }
}

TrainResult Trainer::run() {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const int n = train_->size();
  const DataParallelShare share{.rank = dp_ ? dp_->rank() : 0,
                                .size = dp_ ? dp_->size() : 1,
                                .grad_accumulation = config_.grad_accumulation_steps};
  const bool lead = share.rank == 0;  // evaluates, logs, writes the adapter and metrics.json
  const int micro_per_step = share.micro_batches_per_step();
  const int per_step = config_.batch_size * micro_per_step;
  const int steps_per_epoch = std::max(1, (n + per_step - 1) / per_step);
  const int total = config_.iters > 0 ? config_.iters : config_.epochs * steps_per_epoch;
  int warmup = config_.warmup;
  if (warmup < 0) warmup = config_.method == Method::ORPO ? std::min(10, total / 10) : 0;
  const ScheduleConfig schedule{
      .learning_rate = *config_.learning_rate, .schedule = config_.lr_schedule, .warmup = warmup, .total_steps = total};
  AdamW optimizer(*adapter_, {.weight_decay = config_.weight_decay, .lora_plus_ratio = config_.lora_plus_ratio});

  if (lead) std::filesystem::create_directories(config_.output);  // log.jsonl is written from the first step
  // Everything a checkpoint must carry for the run to continue exactly.
  TrainState st;
  if (!config_.resume.empty()) {
    st = load_train_state(config_.resume, optimizer, n);
    BRIOCHE_CHECK(st.step <= total, config_.resume, ": the checkpoint is at step ", st.step, ", past this run's ",
                  total, " steps");
  } else {
    st.rng.seed(uint64_t(config_.seed) * 7919 + 17);
    st.order.resize(static_cast<size_t>(n));
    std::iota(st.order.begin(), st.order.end(), 0);
    std::shuffle(st.order.begin(), st.order.end(), st.rng);
  }

  TrainResult result;
  result.best_margin = st.best_margin;
  result.best_margin_step = st.best_margin_step;
  log("train: " + method_name(config_.method) + ", " + std::to_string(n) + " training examples, " +
      std::to_string(total) + " steps of " + std::to_string(per_step) + ", LoRA rank " +
      std::to_string(adapter_->config().rank) + " scale " + std::to_string(adapter_->scale()) + " on layers " +
      std::to_string(adapter_->first_adapted_layer()) + ".." + std::to_string(base_.config->n_layers - 1) + " (" +
      std::to_string(adapter_->parameter_count()) + " parameters)" +
      (share.size > 1 ? ", data parallel over " + std::to_string(share.size) + " GPUs" : ""));
  if (!config_.resume.empty())
    log("train: resuming " + config_.resume + " at step " + std::to_string(st.step) +
        " (optimizer, schedule and data order restored)");
  if (!valid_) log("train: no validation split (DIR/valid.jsonl): evaluations run on the training set");
  const std::string best_key = config_.best_metric_key();
  const bool higher_is_better = config_.resolved_greater_is_better();
  if (st.best_metric_step >= 0 && st.best_metric_name != config_.metric_for_best) {
    log("train: the checkpoint's best evaluation followed " + st.best_metric_name + ", this run " +
        config_.metric_for_best + ": the best and the patience start over");
    st.best_metric_step = -1, st.evals_without_improvement = 0;
  }
  st.best_metric_name = config_.metric_for_best;

  auto next_indices = [&]() {
    std::vector<int> idx;
    while (int(idx.size()) < config_.batch_size) {
      if (st.cursor == st.order.size()) {
        std::shuffle(st.order.begin(), st.order.end(), st.rng);
        st.cursor = 0;
      }
      idx.push_back(st.order[st.cursor++]);
    }
    return idx;
  };
  auto seconds = [&] { return st.seconds + std::chrono::duration<double>(Clock::now() - start).count(); };
  // Training throughput: this process's trained tokens over the time its
  // steps took (evaluations, checkpoints and the start-up are not steps).
  double step_seconds_sum = 0.0;
  int64_t tokens_this_run = 0;
  auto train_tokens_per_s = [&] { return step_seconds_sum > 0 ? double(tokens_this_run) / step_seconds_sum : 0.0; };

  float lr = 0.0f;
  auto do_eval = [&](int step) {
    if (!lead) return;
    const auto t0 = Clock::now();
    EvalMetrics m = evaluate(valid_ ? *valid_ : *train_, config_.eval_batches);
    const double elapsed = seconds();
    nlohmann::json j = m.to_json(loss_config_);
    j["step"] = step;
    j["learning_rate"] = lr;
    j["tokens_per_s"] = train_tokens_per_s();
    j["elapsed_seconds"] = elapsed;
    j["peak_memory_bytes"] = peak_rss_bytes();
    if (model_->device() == Device::CUDA) j["peak_device_memory_bytes"] = peak_device_bytes();
    j["eval_seconds"] = std::chrono::duration<double>(Clock::now() - t0).count();
    if (st.train_loss_n > 0) j["train_loss"] = st.train_loss_sum / st.train_loss_n;
    st.evals.push_back(j);
    nlohmann::json event = j;
    event["event"] = "eval";
    log_event(event);
    if (!result.first_eval) result.first_eval = m;
    result.last_eval = m;
    char line[256];
    if (is_preference(config_.method)) {
      std::snprintf(line, sizeof line,
                    "eval step %d: loss %.4f nll %.4f or %.4f accuracy %.3f margin %.4f "
                    "(chosen %.3f rejected %.3f)",
                    step, m.loss, m.nll, m.or_loss, m.accuracy, m.margin, m.chosen_logp, m.rejected_logp);
      if (st.best_margin_step < 0 || m.margin > st.best_margin) {
        st.best_margin = m.margin;
        st.best_margin_step = step;
      }
    } else {
      std::snprintf(line, sizeof line, "eval step %d: loss %.4f (ppl %.2f)", step, m.loss, std::exp(m.loss));
    }
    log(line);
    write_samples(step);
    // Early stopping and keep-best read metric_for_best of trained adapters (step > 0),
    // as transformers: any strictly better value is the new best; the patience
    // restarts only when it is better by more than early_stopping_threshold.
    if (step == 0) return;
    const double value = j.at(best_key).get<double>();
    const bool first = st.best_metric_step < 0;
    const bool better = first || (higher_is_better ? value > st.best_metric : value < st.best_metric);
    if (first || (better && std::abs(value - st.best_metric) > config_.early_stopping_threshold))
      st.evals_without_improvement = 0;
    else
      ++st.evals_without_improvement;
    if (better) {
      st.best_metric = value;
      st.best_metric_step = step;
      if (config_.keep_best) save(config_.output + "/best");
    }
  };

  if (st.step == 0) do_eval(0);
  // On a terminal one live line with the ETA; elsewhere (a log file, a pipe) a line every steps_per_report.
  const bool live_progress = !config_.quiet && isatty(STDERR_FILENO);
  const int first_step = st.step;
  bool interrupted = false, early_stopped = false;
  for (int step = st.step; step < total && !interrupted && !early_stopped; ++step) {
    const auto step_start = Clock::now();
    const std::clock_t step_cpu_start = std::clock();  // the process's CPU time: all its threads
    adapter_->zero_grads();
    double step_loss = 0.0, step_tokens = 0.0;
    LossValue step_sums;  // the step's preference sums over its micro-batches (this rank's)
    for (int micro = 0; micro < micro_per_step; ++micro) {
      const std::vector<int> indices = next_indices();  // every rank walks the whole step's order
      if (!share.runs(micro)) continue;
      MicroBatch mb = make_batch(*train_, indices, true);
      LossValue v = run_objective(*model_, *head_, mb.batch, loss_config_, mb.reference,
                                  {.dropout_seed = mix(uint64_t(config_.seed), uint64_t(step) * 4096 + micro),
                                   .grad_scale = share.grad_scale(),
                                   .prefix_out = mb.prefix.defined() ? &mb.prefix : nullptr});
      step_loss += v.loss / micro_per_step;
      step_tokens += double(mb.batch.n_rows());
      step_sums.n_pairs += v.n_pairs, step_sums.correct += v.correct, step_sums.nll += v.nll / micro_per_step;
      step_sums.chosen_mean_sum += v.chosen_mean_sum, step_sums.rejected_mean_sum += v.rejected_mean_sum;
      step_sums.reward_chosen_sum += v.reward_chosen_sum, step_sums.reward_rejected_sum += v.reward_rejected_sum;
      step_sums.log_odds_ratio_sum += v.log_odds_ratio_sum, step_sums.log_odds_chosen_sum += v.log_odds_chosen_sum;
      step_sums.trl_logps_chosen_sum += v.trl_logps_chosen_sum;
      step_sums.trl_logps_rejected_sum += v.trl_logps_rejected_sum;
    }
    double stop_votes = stop_ != nullptr && stop_->load() ? 1.0 : 0.0;
    if (dp_ != nullptr) {  // one sum of the gradients (and the loss) over the ranks, before clipping
      all_reduce_gradients(*adapter_, *dp_);
      const double local[3] = {step_loss, step_tokens, stop_votes};
      const std::vector<double> sums = all_reduce_host_sums(local, *dp_, adapter_->device());
      step_loss = sums[0], step_tokens = sums[1], stop_votes = sums[2];
    }
    st.tokens_done += int64_t(step_tokens + 0.5);
    const double norm = grad_norm(*adapter_);
    lr = learning_rate_at(schedule, step);
    optimizer.step(lr, clip_factor(norm, config_.max_grad_norm));  // clipping folded into the update
    const double step_seconds = std::chrono::duration<double>(Clock::now() - step_start).count();
    const double step_cpu_seconds = double(std::clock() - step_cpu_start) / CLOCKS_PER_SEC;
    step_seconds_sum += step_seconds;
    tokens_this_run += int64_t(step_tokens + 0.5);
    st.train_loss_sum += step_loss, ++st.train_loss_n;
    const int done = step + 1;
    st.step = done;
    if (lead) {
      nlohmann::json event = {{"event", "step"},
                              {"step", done},
                              {"loss", step_loss},
                              {"learning_rate", lr},
                              {"grad_norm", norm},
                              {"tokens", st.tokens_done},
                              {"tokens_per_s", train_tokens_per_s()},
                              {"step_seconds", step_seconds},
                              {"step_cpu_seconds", step_cpu_seconds},
                              {"epoch", double(done) / steps_per_epoch}};
      // Rank 0's micro-batches (with --gpus, a share of the step's pairs).
      add_trl_names(event, loss_config_, step_sums, step_sums.n_pairs);
      log_event(event);
    }
    if (lead && live_progress) {
      show_progress(done, total, first_step, st.train_loss_sum / st.train_loss_n, lr, train_tokens_per_s(),
                    std::chrono::duration<double>(Clock::now() - start).count());
    } else if (lead && config_.steps_per_report > 0 && (done % config_.steps_per_report == 0 || done == total)) {
      char line[256];
      std::snprintf(line, sizeof line, "step %d/%d: loss %.4f lr %.2e grad_norm %.3f %.1f tok/s peak %.0f MB%s", done,
                    total, st.train_loss_sum / st.train_loss_n, lr, norm, train_tokens_per_s(),
                    double(peak_rss_bytes()) / 1e6,
                    model_->device() == Device::CUDA
                        ? (" (device " + std::to_string(peak_device_bytes() / 1000000) + " MB)").c_str()
                        : "");
      log(line);
    }
    interrupted = stop_votes > 0 && done < total;
    const bool eval_now = config_.steps_per_eval > 0 && done % config_.steps_per_eval == 0;
    if (eval_now || done == total) {
      do_eval(done);
      st.train_loss_sum = 0.0, st.train_loss_n = 0;
      early_stopped = config_.early_stopping_patience > 0 && done < total && lead &&
                      st.evals_without_improvement >= config_.early_stopping_patience;
      if (dp_ != nullptr && config_.early_stopping_patience > 0) {  // rank 0 evaluated: every rank stops with it
        const double vote[1] = {early_stopped ? 1.0 : 0.0};
        early_stopped = all_reduce_host_sums(vote, *dp_, adapter_->device())[0] > 0;
      }
      if (early_stopped && lead)
        log("train: early stop at step " + std::to_string(done) + ": " + std::to_string(st.evals_without_improvement) +
            " evaluations without a better " + config_.metric_for_best + " than " + std::to_string(st.best_metric) +
            " (step " + std::to_string(st.best_metric_step) + ")");
    }
    const bool save_now = (config_.save_checkpoints && (eval_now || done == total)) ||
                          (config_.save_steps > 0 && done % config_.save_steps == 0) || interrupted;
    if (lead && save_now) {
      st.seconds = seconds();
      result.checkpoint_dir = save_checkpoint(done, st, optimizer);
    }
  }
  result.steps = st.step;
  result.interrupted = interrupted;
  result.best_margin = st.best_margin;
  result.best_margin_step = st.best_margin_step;
  result.seconds = seconds();
  if (!lead) return result;  // the other ranks hold the same factors; rank 0 writes them
  const bool best_is_final = config_.keep_best && st.best_metric_step >= 0;
  if (best_is_final) {  // the best evaluation's adapter, saved when it happened
    namespace fs = std::filesystem;
    for (const char* name : {"adapter_config.json", "adapter_model.safetensors"})
      fs::copy_file(fs::path(config_.output) / "best" / name, fs::path(config_.output) / name,
                    fs::copy_options::overwrite_existing);
  } else {
    save(config_.output);
  }
  result.metrics = {{"config", config_to_json(config_)},
                    {"evals", st.evals},
                    {"steps", st.step},
                    {"total_steps", total},
                    {"interrupted", interrupted},
                    {"eval_split", valid_ ? "valid" : "train"},
                    {"seconds", result.seconds},
                    {"peak_memory_bytes", peak_rss_bytes()}};
  if (model_->device() == Device::CUDA) result.metrics["peak_device_memory_bytes"] = peak_device_bytes();
  result.metrics["early_stopped"] = early_stopped;
  // transformers' trainer_state names: the metric, its direction, the best value and its step.
  result.metrics["metric_for_best"] = config_.metric_for_best;
  result.metrics["greater_is_better"] = higher_is_better;
  if (st.best_metric_step >= 0) {
    result.metrics["best_metric"] = st.best_metric;
    result.metrics["best_metric_step"] = st.best_metric_step;
  }
  // The step whose adapter OUTPUT holds: the best evaluation's with keep_best, else the last.
  const int adapter_step = best_is_final ? st.best_metric_step : st.step;
  result.metrics["adapter_step"] = adapter_step;
  std::string test_line;
  if (test_ && !interrupted) {
    const auto t0 = std::chrono::steady_clock::now();
    result.test_eval = evaluate_test(best_is_final);
    nlohmann::json t = result.test_eval->to_json(loss_config_);
    t["step"] = adapter_step;
    t["eval_seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    result.metrics["test"] = t;
    nlohmann::json event = t;
    event["event"] = "test";
    log_event(event);
    const EvalMetrics& m = *result.test_eval;
    char line[256];
    if (is_preference(config_.method))
      std::snprintf(line, sizeof line,
                    "test (%lld examples, adapter of step %d): loss %.4f accuracy %.3f margin %.4f "
                    "rewards/margins %.4f",
                    (long long)m.examples, adapter_step, m.loss, m.accuracy, m.margin,
                    m.reward_chosen - m.reward_rejected);
    else
      std::snprintf(line, sizeof line, "test (%lld examples, adapter of step %d): loss %.4f (ppl %.2f)",
                    (long long)m.examples, adapter_step, m.loss, std::exp(m.loss));
    test_line = line;
  } else if (test_) {
    result.metrics["test"] = nullptr;  // an interrupted run is not finished: its resume evaluates the test set
  }
  if (is_preference(config_.method)) {
    result.metrics["best_margin"] = st.best_margin;
    result.metrics["best_margin_step"] = st.best_margin_step;
  }
  std::ofstream(config_.output + "/metrics.json") << result.metrics.dump(2) << "\n";
  if (interrupted)
    log("train: interrupted after step " + std::to_string(st.step) + " of " + std::to_string(total) +
        ": adapter and metrics.json written to " + config_.output + ", a resumable checkpoint to " +
        result.checkpoint_dir + "; continue with --resume " + result.checkpoint_dir);
  else if (best_is_final)
    log("adapter of step " + std::to_string(st.best_metric_step) + " (the best " + config_.metric_for_best + ", " +
        std::to_string(st.best_metric) + ") written to " + config_.output + " (" + std::to_string(result.seconds) +
        " s)");
  else
    log("adapter written to " + config_.output + " (" + std::to_string(result.seconds) + " s)");
  if (!test_line.empty()) log(test_line);  // the last line: what the held-out set says of the adapter
  return result;
}

EvalMetrics Trainer::evaluate_test(bool best_is_final) {
  if (best_is_final) {  // the in-memory adapter is the last step's: put the best one's factors in its place
    const std::unique_ptr<LoraAdapter> best = base_.load_adapter(config_.output + "/best");
    for (const LoraAdapter::Entry& e : best->entries()) {
      LoraFactors* to = adapter_->factors(e.layer, e.module);
      BRIOCHE_CHECK(to != nullptr, config_.output, "/best: an adapter on sites this run does not train");
      ops::copy(e.factors->a, to->a);
      ops::copy(e.factors->b, to->b);
    }
  }
  return evaluate(*test_, 0);
}

}  // namespace brioche::train
