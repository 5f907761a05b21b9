#include "engine/device_sampler.h"

#include <algorithm>
#include <cmath>

#include "core/env_switch.h"
#include "core/error.h"
#include "ops/device.h"
#include "ops/sample.h"

namespace brioche::engine {

DeviceSampler::DeviceSampler(int32_t vocab_size) : vocab_(vocab_size) {
  BRIOCHE_CHECK(vocab_size > 0, "DeviceSampler: expected vocab_size > 0, got ", vocab_size);
}

bool DeviceSampler::enabled_by_environment() { return env_switch_on("BRIOCHE_CUDA_SAMPLING"); }

void DeviceSampler::PenaltyEntries::clear() {
  for (const cuda::SamplePenaltyEntry& e : entries) index[size_t(e.token)] = -1;
  entries.clear();
  n_prompt = n_output = 0;
}

void DeviceSampler::update_penalties(const Row& row, PenaltyEntries& cache) const {
  const SamplingParams& sp = row.sampler->params();
  const bool repetition = sp.repetition_penalty != 1.0f;
  const bool counts = sp.presence_penalty != 0.0f || sp.frequency_penalty != 0.0f;
  const bool rebuild = cache.n_prompt != row.prompt.size() || cache.n_output > row.output.size();
  const std::span<const int32_t> new_prompt = row.prompt.subspan(rebuild ? 0 : cache.n_prompt);
  const std::span<const int32_t> new_output = row.output.subspan(rebuild ? 0 : cache.n_output);
  auto check = [&](std::span<const int32_t> tokens, const char* where) {
    for (const int32_t token : tokens)
      BRIOCHE_CHECK(token >= 0 && token < vocab_, "Sampler: ", where, " token ", token,
                    " is outside the vocabulary [0, ", vocab_, ")");
  };
  if (repetition) check(new_prompt, "prompt");
  if (repetition || counts) check(new_output, "output");
  if (rebuild) cache.clear();
  if ((repetition || counts) && cache.index.empty()) cache.index.assign(size_t(vocab_), -1);
  auto entry_for = [&](int32_t token) -> cuda::SamplePenaltyEntry& {
    int32_t& slot = cache.index[size_t(token)];
    if (slot < 0) {
      slot = int32_t(cache.entries.size());
      cache.entries.push_back({.token = token});
    }
    return cache.entries[size_t(slot)];
  };
  if (repetition)
    for (const int32_t token : new_prompt) entry_for(token).repeated = 1;
  for (const int32_t token : new_output) {
    if (repetition) entry_for(token).repeated = 1;
    if (counts) entry_for(token).output_count += 1.0f;
  }
  cache.n_prompt = row.prompt.size();
  cache.n_output = row.output.size();
}

void DeviceSampler::add_entries(const Row& row, cuda::SampleRowParams& params) {
  const SamplingParams& sp = row.sampler->params();
  params.entry_begin = int32_t(entries_.size());
  PenaltyEntries* cache = row.penalties;
  if (cache == nullptr) {
    fresh_.clear();
    cache = &fresh_;
  }
  update_penalties(row, *cache);
  entries_.insert(entries_.end(), cache->entries.begin(), cache->entries.end());
  if (!sp.logit_bias.empty()) {
    // A token's biases added in their order (the host adds them one by one),
    // onto its penalty entry when it has one.
    sorted_bias_.assign(sp.logit_bias.begin(), sp.logit_bias.end());
    std::stable_sort(sorted_bias_.begin(), sorted_bias_.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (size_t i = 0; i < sorted_bias_.size();) {
      const int32_t token = sorted_bias_[i].first;
      BRIOCHE_CHECK(token >= 0 && token < vocab_, "Sampler: logit_bias token ", token,
                    " is outside the vocabulary [0, ", vocab_, ")");
      const int32_t slot = cache->entry_of(token);
      if (slot < 0) entries_.push_back({.token = token});
      cuda::SamplePenaltyEntry& entry = slot < 0 ? entries_.back() : entries_[size_t(params.entry_begin + slot)];
      entry.bias_begin = int32_t(biases_.size());
      for (; i < sorted_bias_.size() && sorted_bias_[i].first == token; ++i) biases_.push_back(sorted_bias_[i].second);
      entry.bias_end = int32_t(biases_.size());
    }
  }
  params.entry_end = int32_t(entries_.size());
}

const cuda::SampleBatch& DeviceSampler::prepare(std::span<const Row> rows) {
  params_.clear();
  entries_.clear();
  biases_.clear();
  masks_.clear();
  const size_t mask_words = (size_t(vocab_) + 31) / 32;
  for (const Row& row : rows) {
    BRIOCHE_CHECK(row.sampler != nullptr && row.sampler->vocab_size() == vocab_,
                  "DeviceSampler: expected a Sampler over ", vocab_, " tokens, got ",
                  row.sampler ? row.sampler->vocab_size() : 0);
    const SamplingParams& sp = row.sampler->params();
    cuda::SampleRowParams p;
    p.logit_row = row.logit_row;
    if (sp.top_logprobs > cuda::kMaxDeviceTopLogprobs) {
      p.skip = 1;  // sampled on the host below
      params_.push_back(p);
      continue;
    }
    p.greedy = row.sampler->is_greedy() ? 1 : 0;
    p.temperature = sp.temperature;
    p.top_k = sp.top_k;
    p.top_p = sp.top_p;
    p.use_min_p = sp.min_p > 0.0f ? 1 : 0;
    p.log_min_p = p.use_min_p ? std::log(sp.min_p) : 0.0f;  // float log, as the host's bound
    p.repetition_penalty = sp.repetition_penalty;
    p.presence_penalty = sp.presence_penalty;
    p.frequency_penalty = sp.frequency_penalty;
    add_entries(row, p);
    if (row.allowed_mask != nullptr) {
      p.mask_index = int32_t(masks_.size() / mask_words);
      masks_.insert(masks_.end(), row.allowed_mask, row.allowed_mask + mask_words);
    }
    p.want_logprobs = sp.logprobs || sp.top_logprobs > 0 ? 1 : 0;
    p.top_logprobs = sp.top_logprobs;
    p.u = p.greedy ? 0.0 : row.sampler->draw_unit();
    params_.push_back(p);
  }

  batch_ = {.vocab = vocab_, .rows = params_, .entries = entries_, .biases = biases_, .masks = masks_};
  return batch_;
}

std::vector<Sampler::Result> DeviceSampler::sample(const Tensor& logits, std::span<const Row> rows) {
  if (rows.empty()) return {};
  launch(logits, rows);
  return collect();
}

void DeviceSampler::launch(const Tensor& logits, std::span<const Row> rows) {
  BRIOCHE_CHECK(!rows.empty(), "DeviceSampler::launch: expected at least one row");
  launched_.clear();
  const cuda::SampleBatch& batch = prepare(rows);
  run_.launch(logits, batch);
  launched_.assign(rows.begin(), rows.end());
  logits_ = logits;
}

bool DeviceSampler::all_on_device() const {
  return std::none_of(params_.begin(), params_.end(), [](const cuda::SampleRowParams& p) { return p.skip != 0; });
}

std::vector<Sampler::Result> DeviceSampler::collect() {
  BRIOCHE_CHECK(!launched_.empty(), "DeviceSampler::collect: nothing was launched since the last collect");
  const std::vector<Row> rows = std::move(launched_);
  const Tensor logits = std::move(logits_);
  launched_.clear();
  logits_ = Tensor();
  results_.resize(rows.size());
  run_.collect(results_);

  std::vector<Sampler::Result> out(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& row = rows[i];
    if (params_[i].skip) {
      // Too many alternatives for the device: this row's logits come back.
      Tensor host_row = ops::to_device(logits.slice(0, row.logit_row, row.logit_row + 1), Device::CPU);
      out[i] = row.sampler->sample({.logits = std::span<float>(host_row.data_as<float>(), size_t(vocab_)),
                                    .prompt = row.prompt,
                                    .output = row.output,
                                    .allowed_mask = row.allowed_mask});
      continue;
    }
    const cuda::SampleResult& r = results_[i];
    if (r.status == cuda::SampleStatus::BadLogit) {
      fail("Sampler: expected finite or -inf logits, found ", r.bad_value, " at token ", r.bad_index);
    }
    if (r.status == cuda::SampleStatus::NothingAllowed) {
      fail("Sampler: no token is allowed (grammar mask and logit bias exclude all ", vocab_, ")");
    }
    Sampler::Result& result = out[i];
    result.token = r.token;
    result.logprob = r.logprob;
    result.top.reserve(size_t(r.n_top));
    for (int32_t k = 0; k < r.n_top; ++k) result.top.emplace_back(r.top_tokens[k], r.top_logprobs[k]);
  }
  return out;
}

}  // namespace brioche::engine
