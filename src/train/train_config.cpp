#include "train/train_config.h"

#include <algorithm>
#include <climits>
#include <cmath>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "ops/device.h"

namespace brioche::train {

void TrainConfig::finalize() {
  const bool orpo = method == Method::ORPO;
  if (!learning_rate) learning_rate = is_preference(method) ? 1e-5f : 2e-4f;
  sft_scope = resolved_sft_scope();
  if (!rank) rank = orpo ? 16 : 8;
  BRIOCHE_CHECK(!(scale && alpha), "set either scale or alpha, not both");
  if (rpo_alpha) {
    // TRL has rpo_alpha on DPOTrainer only (every DPO loss type); ORPO and CPO/SimPO have their own NLL weights.
    BRIOCHE_CHECK(needs_reference(method), "rpo_alpha adds an NLL term to dpo or ipo, not to ", method_name(method),
                  method == Method::ORPO ? " (ORPO's loss already has its NLL term)" : "");
    BRIOCHE_CHECK(std::isfinite(*rpo_alpha) && *rpo_alpha >= 0, "rpo_alpha must be a finite number >= 0, got ",
                  *rpo_alpha);
  }
  if (!scale && !alpha) scale = orpo ? 2.0f : 1.0f;
  BRIOCHE_CHECK(*rank > 0, "rank must be positive, got ", *rank);
  BRIOCHE_CHECK(*learning_rate > 0, "learning_rate must be positive, got ", *learning_rate);
  BRIOCHE_CHECK(batch_size > 0, "batch_size must be positive, got ", batch_size);
  BRIOCHE_CHECK(gpus >= 1 && gpus <= 64, "gpus must be between 1 and 64, got ", gpus);
  BRIOCHE_CHECK(grad_accumulation_steps > 0, "grad_accumulation_steps must be positive, got ", grad_accumulation_steps);
  BRIOCHE_CHECK(iters >= 0 && epochs > 0, "iters must be >= 0 and epochs > 0");
  BRIOCHE_CHECK(save_steps >= 0 && save_total_limit >= 0, "save_steps and save_total_limit must be >= 0, got ",
                save_steps, " and ", save_total_limit);
  BRIOCHE_CHECK(eval_samples >= 0 && eval_sample_tokens > 0,
                "eval_samples must be >= 0 and eval_sample_tokens > 0, got ", eval_samples, " and ",
                eval_sample_tokens);
  BRIOCHE_CHECK(early_stopping_patience >= 0, "early_stopping_patience must be >= 0, got ", early_stopping_patience);
  BRIOCHE_CHECK(early_stopping_threshold >= 0, "early_stopping_threshold must be >= 0, got ", early_stopping_threshold);
  BRIOCHE_CHECK((early_stopping_patience == 0 && !keep_best) || steps_per_eval > 0,
                "early_stopping_patience and keep_best compare evaluations: set steps_per_eval > 0");
  {
    const std::vector<std::string>& names = eval_metric_names(method, rpo_alpha.has_value());
    if (std::find(names.begin(), names.end(), best_metric_key()) == names.end()) {
      std::string known;
      for (const std::string& n : names) known += (known.empty() ? "" : ", ") + n;
      fail("metric_for_best: ", method_name(method), " evaluations log no '", metric_for_best, "' (expected one of ",
           known, ", each also with the eval_ prefix)");
    }
  }
  BRIOCHE_CHECK(eval_batches >= 0, "eval_batches must be >= 0, got ", eval_batches);
  BRIOCHE_CHECK(test_split >= 0 && test_split < 1, "test_split must be in [0, 1), got ", test_split);
  BRIOCHE_CHECK(test_file.empty() || test_split == 0,
                "set either test_file (a JSONL file) or test_split (a fraction of the training rows), not both");
  BRIOCHE_CHECK(resume.empty() || resume_adapter.empty(),
                "set either resume (a checkpoint) or resume_adapter (a warm start)");
  BRIOCHE_CHECK(lora_dropout >= 0 && lora_dropout < 1, "lora_dropout must be in [0, 1), got ", lora_dropout);
  BRIOCHE_CHECK(segment_size >= 0, "segment_size must be >= 0, got ", segment_size);
  BRIOCHE_CHECK(head_chunk_size >= 0, "head_chunk_size must be >= 0, got ", head_chunk_size);
  BRIOCHE_CHECK(mlp_chunk_size >= 0, "mlp_chunk_size must be >= 0, got ", mlp_chunk_size);
  BRIOCHE_CHECK(!prefix_shared || is_preference(method), "prefix_shared needs a preference method");
  BRIOCHE_CHECK(lora_plus_ratio > 0, "lora_plus_ratio must be positive, got ", lora_plus_ratio);
  for (const auto& m : target_modules)
    BRIOCHE_CHECK(parse_module(m), "target_modules: unknown module '", m,
                  "' (expected q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, Qwen 3.5's ",
                  "in_proj_qkv, in_proj_z, in_proj_b, in_proj_a, out_proj, the MoE experts' experts.gate_up_proj, ",
                  "experts.down_proj, or Qwen 3.5's shared_expert_gate)");
  BRIOCHE_CHECK(!data.empty(), "no data directory (--data DIR with train.jsonl)");
  BRIOCHE_CHECK(device == "cpu" || device == "cuda" || device == "auto", "device: expected cpu, cuda or auto, got '",
                device, "'");
  if (fused_head) {
    // orpo_fused_ce / orpo_flash_ce: both name our one fused head (vocab-tiled online
    // log-sum-exp, one kernel family on CUDA); false asks for full logits.
    if (!*fused_head)
      head_chunk_size = 0;
    else if (head_chunk_size == 0)
      head_chunk_size = 4096;
    fused_head.reset();
  }
  if (grad_checkpoint) {
    BRIOCHE_CHECK(segment_size == 0 || segment_size == 1, "grad_checkpoint and segment_size ", segment_size,
                  " are exclusive (grad_checkpoint is segment_size 1: every layer recomputed in the backward)");
    segment_size = 1;
    grad_checkpoint = false;
  }
  BRIOCHE_CHECK(!mlp_split,
                "mlp_split is not supported: the reference splits Gemma4's MLP only; brioche's "
                "segmented backward (segment_size, grad_checkpoint) recomputes whole layers");
  BRIOCHE_CHECK(!offload_boundaries || segment_size > 0,
                "offload_boundaries needs segment_size > 0 (or grad_checkpoint): the segment boundaries are what "
                "is offloaded");
  BRIOCHE_CHECK(!offload_attention || offload_boundaries,
                "offload_attention needs offload_boundaries: the attention outputs travel with the boundaries");
  BRIOCHE_CHECK(boundary_dtype == "f32" || boundary_dtype == "bf16", "boundary_dtype: expected f32 or bf16, got '",
                boundary_dtype, "'");
  BRIOCHE_CHECK(device_boundaries >= 0, "device_boundaries must be >= 0, got ", device_boundaries);
  BRIOCHE_CHECK(device_boundaries == 0 || offload_boundaries,
                "device_boundaries needs offload_boundaries: it keeps some boundaries on the device instead of the "
                "host");
}

std::string TrainConfig::best_metric_key() const {
  return metric_for_best.rfind("eval_", 0) == 0 ? metric_for_best.substr(5) : metric_for_best;
}

bool TrainConfig::resolved_greater_is_better() const {
  const std::string& m = metric_for_best;
  return greater_is_better.value_or(!(m.size() >= 4 && m.compare(m.size() - 4, 4, "loss") == 0));
}

const std::vector<std::string>& eval_metric_names(Method method, bool nll_term) {
  static const std::vector<std::string> sft = {"loss", "nll"};
  static const std::vector<std::string> preference = {"loss",
                                                      "nll",
                                                      "or",
                                                      "accuracy",
                                                      "margin",
                                                      "chosen_logp",
                                                      "rejected_logp",
                                                      "rewards/chosen",
                                                      "rewards/rejected",
                                                      "rewards/margins",
                                                      "rewards/accuracies",
                                                      "logps/chosen",
                                                      "logps/rejected"};
  static const std::vector<std::string> orpo = [] {
    std::vector<std::string> names = preference;
    for (const char* n : {"nll_loss", "log_odds_ratio", "log_odds_chosen"}) names.emplace_back(n);
    return names;
  }();
  static const std::vector<std::string> with_nll = [] {
    std::vector<std::string> names = preference;
    names.emplace_back("nll_loss");
    return names;
  }();
  return method == Method::ORPO ? orpo : !is_preference(method) ? sft : nll_term ? with_nll : preference;
}

Device TrainConfig::resolved_device() const {
  if (device == "cuda") return Device::CUDA;
  if (device == "auto") return ops::cuda_available() ? Device::CUDA : Device::CPU;
  return Device::CPU;
}

LoraConfig TrainConfig::lora_config() const {
  LoraConfig c;
  c.rank = *rank;
  c.rs_lora = rs_lora;
  c.alpha = alpha ? *alpha : (rs_lora ? *scale * std::sqrt(float(*rank)) : *scale * float(*rank));
  c.dropout = lora_dropout;
  c.num_layers = num_layers;
  c.targets.clear();
  for (const auto& m : target_modules) c.targets.push_back(*parse_module(m));
  return c;
}

namespace {

using json = nlohmann::json;

// The JSON type an option takes; checked strictly (3.5 is not an integer,
// 1 is a number), so a typo in a config file is an error, not a truncation.
enum class Kind { String, Integer, Number, Boolean, StringList };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::String: return "a string";
    case Kind::Integer: return "an integer";
    case Kind::Number: return "a number";
    case Kind::Boolean: return "true or false";
    case Kind::StringList: return "an array of strings";
  }
  return "?";
}

bool has_kind(const json& v, Kind k) {
  switch (k) {
    case Kind::String: return v.is_string();
    case Kind::Integer: return v.is_number_integer();
    case Kind::Number: return v.is_number();
    case Kind::Boolean: return v.is_boolean();
    case Kind::StringList:
      return v.is_array() && std::all_of(v.begin(), v.end(), [](const json& e) { return e.is_string(); });
  }
  return false;
}

struct OptionSpec {
  std::vector<const char*> names;  // the first is the canonical name; the rest are the reference's aliases
  Kind kind;
  void (*set)(TrainConfig&, const json&);
};

int to_int(const json& v) {
  const int64_t i = v.get<int64_t>();
  BRIOCHE_CHECK(i >= INT32_MIN && i <= INT32_MAX, "integer out of range: ", i);
  return int(i);
}
float to_float(const json& v) { return v.get<float>(); }

// Every option of `brioche train` (CLI flags are the names with '-' for '_').
// Aliases are the reference trainer's job-submit names (orpo_* knobs,
// warm_start_adapter) and PEFT's (lora_alpha).
const std::vector<OptionSpec>& option_specs() {
  static const std::vector<OptionSpec> specs = {
      {{"model"}, Kind::String, [](TrainConfig& c, const json& v) { c.model = v.get<std::string>(); }},
      {{"base_model_id"}, Kind::String, [](TrainConfig& c, const json& v) { c.base_model_id = v.get<std::string>(); }},
      {{"data"}, Kind::String, [](TrainConfig& c, const json& v) { c.data = v.get<std::string>(); }},
      {{"output", "adapter_path"},
       Kind::String,
       [](TrainConfig& c, const json& v) { c.output = v.get<std::string>(); }},
      {{"resume_adapter", "warm_start_adapter", "resume_adapter_file"},
       Kind::String,
       [](TrainConfig& c, const json& v) { c.resume_adapter = v.get<std::string>(); }},
      {{"method"}, Kind::String, [](TrainConfig& c, const json& v) { c.method = parse_method(v.get<std::string>()); }},
      {{"sft_scope"},
       Kind::String,
       [](TrainConfig& c, const json& v) { c.sft_scope = parse_sft_scope(v.get<std::string>()); }},
      {{"orpo_lambda"}, Kind::Number, [](TrainConfig& c, const json& v) { c.orpo_lambda = to_float(v); }},
      {{"beta", "dpo_beta"}, Kind::Number, [](TrainConfig& c, const json& v) { c.beta = to_float(v); }},
      {{"simpo_gamma"}, Kind::Number, [](TrainConfig& c, const json& v) { c.simpo_gamma = to_float(v); }},
      {{"rpo_alpha"}, Kind::Number, [](TrainConfig& c, const json& v) { c.rpo_alpha = to_float(v); }},
      {{"learning_rate"}, Kind::Number, [](TrainConfig& c, const json& v) { c.learning_rate = to_float(v); }},
      {{"lr_schedule", "orpo_lr_schedule"},
       Kind::String,
       [](TrainConfig& c, const json& v) { c.lr_schedule = parse_lr_schedule(v.get<std::string>()); }},
      {{"warmup", "orpo_warmup_iters"}, Kind::Integer, [](TrainConfig& c, const json& v) { c.warmup = to_int(v); }},
      {{"iters"}, Kind::Integer, [](TrainConfig& c, const json& v) { c.iters = to_int(v); }},
      {{"epochs"}, Kind::Integer, [](TrainConfig& c, const json& v) { c.epochs = to_int(v); }},
      {{"batch_size"}, Kind::Integer, [](TrainConfig& c, const json& v) { c.batch_size = to_int(v); }},
      {{"grad_accumulation_steps", "grad_accum"},
       Kind::Integer,
       [](TrainConfig& c, const json& v) { c.grad_accumulation_steps = to_int(v); }},
      {{"max_seq_length"}, Kind::Integer, [](TrainConfig& c, const json& v) { c.max_seq_length = to_int(v); }},
      {{"max_grad_norm"}, Kind::Number, [](TrainConfig& c, const json& v) { c.max_grad_norm = to_float(v); }},
      {{"weight_decay"}, Kind::Number, [](TrainConfig& c, const json& v) { c.weight_decay = to_float(v); }},
      {{"rank"}, Kind::Integer, [](TrainConfig& c, const json& v) { c.rank = to_int(v); }},
      {{"scale"}, Kind::Number, [](TrainConfig& c, const json& v) { c.scale = to_float(v); }},
      {{"alpha", "lora_alpha"}, Kind::Number, [](TrainConfig& c, const json& v) { c.alpha = to_float(v); }},
      {{"rs_lora"}, Kind::Boolean, [](TrainConfig& c, const json& v) { c.rs_lora = v.get<bool>(); }},
      {{"lora_plus_ratio"}, Kind::Number, [](TrainConfig& c, const json& v) { c.lora_plus_ratio = to_float(v); }},
      {{"lora_dropout"}, Kind::Number, [](TrainConfig& c, const json& v) { c.lora_dropout = to_float(v); }},
      {{"target_modules"},
       Kind::StringList,
       [](TrainConfig& c, const json& v) { c.target_modules = v.get<std::vector<std::string>>(); }},
      {{"num_layers"}, Kind::Integer, [](TrainConfig& c, const json& v) { c.num_layers = to_int(v); }},
      {{"segment_size"}, Kind::Integer, [](TrainConfig& c, const json& v) { c.segment_size = to_int(v); }},
      {{"device"}, Kind::String, [](TrainConfig& c, const json& v) { c.device = v.get<std::string>(); }},
      {{"gpus"}, Kind::Integer, [](TrainConfig& c, const json& v) { c.gpus = to_int(v); }},
      {{"offload_boundaries"},
       Kind::Boolean,
       [](TrainConfig& c, const json& v) { c.offload_boundaries = v.get<bool>(); }},
      {{"offload_attention"},
       Kind::Boolean,
       [](TrainConfig& c, const json& v) { c.offload_attention = v.get<bool>(); }},
      {{"boundary_dtype"},
       Kind::String,
       [](TrainConfig& c, const json& v) { c.boundary_dtype = v.get<std::string>(); }},
      {{"device_boundaries"}, Kind::Integer, [](TrainConfig& c, const json& v) { c.device_boundaries = to_int(v); }},
      {{"orpo_fused_ce", "orpo_flash_ce", "fused_ce"},
       Kind::Boolean,
       [](TrainConfig& c, const json& v) { c.fused_head = v.get<bool>(); }},
      {{"grad_checkpoint"}, Kind::Boolean, [](TrainConfig& c, const json& v) { c.grad_checkpoint = v.get<bool>(); }},
      {{"mlp_split"}, Kind::Boolean, [](TrainConfig& c, const json& v) { c.mlp_split = v.get<bool>(); }},
      {{"prefix_shared", "orpo_prefix_shared"},
       Kind::Boolean,
       [](TrainConfig& c, const json& v) { c.prefix_shared = v.get<bool>(); }},
      {{"head_chunk_size", "chunk_size", "orpo_chunk_size"},
       Kind::Integer,
       [](TrainConfig& c, const json& v) { c.head_chunk_size = to_int(v); }},
      {{"mlp_chunk_size"}, Kind::Integer, [](TrainConfig& c, const json& v) { c.mlp_chunk_size = to_int(v); }},
      {{"steps_per_eval"}, Kind::Integer, [](TrainConfig& c, const json& v) { c.steps_per_eval = to_int(v); }},
      {{"steps_per_report"}, Kind::Integer, [](TrainConfig& c, const json& v) { c.steps_per_report = to_int(v); }},
      {{"save_checkpoints"}, Kind::Boolean, [](TrainConfig& c, const json& v) { c.save_checkpoints = v.get<bool>(); }},
      {{"save_steps"}, Kind::Integer, [](TrainConfig& c, const json& v) { c.save_steps = to_int(v); }},
      {{"save_total_limit"}, Kind::Integer, [](TrainConfig& c, const json& v) { c.save_total_limit = to_int(v); }},
      {{"early_stopping_patience"},
       Kind::Integer,
       [](TrainConfig& c, const json& v) { c.early_stopping_patience = to_int(v); }},
      {{"early_stopping_threshold"},
       Kind::Number,
       [](TrainConfig& c, const json& v) { c.early_stopping_threshold = to_float(v); }},
      {{"metric_for_best", "metric_for_best_model"},
       Kind::String,
       [](TrainConfig& c, const json& v) { c.metric_for_best = v.get<std::string>(); }},
      {{"greater_is_better"},
       Kind::Boolean,
       [](TrainConfig& c, const json& v) { c.greater_is_better = v.get<bool>(); }},
      {{"eval_batches", "val_batches"},
       Kind::Integer,
       [](TrainConfig& c, const json& v) { c.eval_batches = to_int(v); }},
      {{"test_file"}, Kind::String, [](TrainConfig& c, const json& v) { c.test_file = v.get<std::string>(); }},
      {{"test_split"}, Kind::Number, [](TrainConfig& c, const json& v) { c.test_split = to_float(v); }},
      {{"eval_samples"}, Kind::Integer, [](TrainConfig& c, const json& v) { c.eval_samples = to_int(v); }},
      {{"eval_sample_tokens"}, Kind::Integer, [](TrainConfig& c, const json& v) { c.eval_sample_tokens = to_int(v); }},
      {{"keep_best", "load_best_model_at_end"},
       Kind::Boolean,
       [](TrainConfig& c, const json& v) { c.keep_best = v.get<bool>(); }},
      {{"resume"}, Kind::String, [](TrainConfig& c, const json& v) { c.resume = v.get<std::string>(); }},
      {{"seed"}, Kind::Integer, [](TrainConfig& c, const json& v) { c.seed = to_int(v); }},
      {{"threads"}, Kind::Integer, [](TrainConfig& c, const json& v) { c.threads = to_int(v); }},
  };
  return specs;
}

const OptionSpec* find_option(const std::string& key) {
  for (const auto& spec : option_specs())
    for (const char* name : spec.names)
      if (key == name) return &spec;
  return nullptr;
}

}  // namespace

void apply_config_json(TrainConfig& c, const nlohmann::json& j, const std::string& source) {
  apply_config_json(c, j, ConfigSource{.name = source});
}

void apply_config_json(TrainConfig& c, const nlohmann::json& j, const ConfigSource& source) {
  BRIOCHE_CHECK(j.is_object(), source.name, ": expected an object of training options, got ", j.type_name());
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    auto loc = source.key_locations.find(k);
    const std::string where = loc != source.key_locations.end() ? loc->second : source.name;
    const OptionSpec* spec = find_option(k);
    if (!spec) {
      fail(where, ": option \"", k, "\": unknown option",
           v.is_object() ? " (options are top-level keys; no sections)" : "");
    }
    if (!has_kind(v, spec->kind))
      fail(where, ": option \"", k, "\": wrong type: expected ", kind_name(spec->kind), ", found ", source.type_of(v));
    try {
      spec->set(c, v);
    } catch (const Error& e) {
      fail(where, ": option \"", k, "\": ", e.what());
    }
  }
}

std::string ConfigSource::type_of(const nlohmann::json& v) const {
  switch (v.type()) {
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a floating-point number";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return toml ? "a table" : "an object";
    case json::value_t::null: return "null";
    default: return v.type_name();
  }
}

nlohmann::json config_to_json(const TrainConfig& c) {
  nlohmann::json j;
  j["model"] = c.model;
  if (!c.base_model_id.empty()) j["base_model_id"] = c.base_model_id;
  j["data"] = c.data;
  j["output"] = c.output;
  j["method"] = method_name(c.method);
  j["sft_scope"] = c.resolved_sft_scope() == SftScope::Full ? "full" : "response";
  j["orpo_lambda"] = c.orpo_lambda;
  j["beta"] = c.beta;
  j["simpo_gamma"] = c.simpo_gamma;
  if (c.rpo_alpha) j["rpo_alpha"] = *c.rpo_alpha;
  if (c.learning_rate) j["learning_rate"] = *c.learning_rate;
  j["lr_schedule"] = lr_schedule_name(c.lr_schedule);
  j["warmup"] = c.warmup;
  j["iters"] = c.iters;
  j["epochs"] = c.epochs;
  j["batch_size"] = c.batch_size;
  j["grad_accumulation_steps"] = c.grad_accumulation_steps;
  j["max_seq_length"] = c.max_seq_length;
  j["max_grad_norm"] = c.max_grad_norm;
  j["weight_decay"] = c.weight_decay;
  if (c.rank) j["rank"] = *c.rank;
  if (c.scale) j["scale"] = *c.scale;
  if (c.alpha) j["alpha"] = *c.alpha;
  j["rs_lora"] = c.rs_lora;
  j["lora_plus_ratio"] = c.lora_plus_ratio;
  j["lora_dropout"] = c.lora_dropout;
  j["target_modules"] = c.target_modules;
  j["num_layers"] = c.num_layers;
  j["device"] = c.device;
  j["gpus"] = c.gpus;
  j["segment_size"] = c.segment_size;
  j["offload_boundaries"] = c.offload_boundaries;
  j["offload_attention"] = c.offload_attention;
  j["boundary_dtype"] = c.boundary_dtype;
  j["device_boundaries"] = c.device_boundaries;
  j["prefix_shared"] = c.prefix_shared;
  j["head_chunk_size"] = c.head_chunk_size;
  j["mlp_chunk_size"] = c.mlp_chunk_size;
  j["steps_per_eval"] = c.steps_per_eval;
  j["save_checkpoints"] = c.save_checkpoints;
  j["save_steps"] = c.save_steps;
  j["save_total_limit"] = c.save_total_limit;
  j["early_stopping_patience"] = c.early_stopping_patience;
  j["early_stopping_threshold"] = c.early_stopping_threshold;
  j["keep_best"] = c.keep_best;
  j["metric_for_best"] = c.metric_for_best;
  j["greater_is_better"] = c.resolved_greater_is_better();
  j["eval_batches"] = c.eval_batches;
  if (!c.test_file.empty()) j["test_file"] = c.test_file;
  j["test_split"] = c.test_split;
  j["eval_samples"] = c.eval_samples;
  j["eval_sample_tokens"] = c.eval_sample_tokens;
  if (!c.resume.empty()) j["resume"] = c.resume;
  j["seed"] = c.seed;
  if (!c.resume_adapter.empty()) j["resume_adapter"] = c.resume_adapter;
  return j;
}

}  // namespace brioche::train
