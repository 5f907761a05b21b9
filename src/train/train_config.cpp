#include "train/train_config.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace brioche::train {

void TrainConfig::finalize() {
  const bool orpo = method == Method::ORPO;
  if (!learning_rate) learning_rate = is_preference(method) ? 1e-5f : 2e-4f;
  if (!rank) rank = orpo ? 16 : 8;
  BRIOCHE_CHECK(!(scale && alpha), "set either scale or alpha, not both");
  if (!scale && !alpha) scale = orpo ? 2.0f : 1.0f;
  BRIOCHE_CHECK(*rank > 0, "rank must be positive, got ", *rank);
  BRIOCHE_CHECK(*learning_rate > 0, "learning_rate must be positive, got ", *learning_rate);
  BRIOCHE_CHECK(batch_size > 0, "batch_size must be positive, got ", batch_size);
  BRIOCHE_CHECK(grad_accumulation_steps > 0, "grad_accumulation_steps must be positive, got ", grad_accumulation_steps);
  BRIOCHE_CHECK(iters >= 0 && epochs > 0, "iters must be >= 0 and epochs > 0");
  BRIOCHE_CHECK(lora_dropout >= 0 && lora_dropout < 1, "lora_dropout must be in [0, 1), got ", lora_dropout);
  BRIOCHE_CHECK(segment_size >= 0, "segment_size must be >= 0, got ", segment_size);
  BRIOCHE_CHECK(head_chunk_size >= 0, "head_chunk_size must be >= 0, got ", head_chunk_size);
  BRIOCHE_CHECK(!prefix_shared || is_preference(method), "prefix_shared needs a preference method");
  BRIOCHE_CHECK(lora_plus_ratio > 0, "lora_plus_ratio must be positive, got ", lora_plus_ratio);
  for (const auto& m : target_modules)
    BRIOCHE_CHECK(parse_module(m), "target_modules: unknown module '", m,
                  "' (expected q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)");
  BRIOCHE_CHECK(!data.empty(), "no data directory (--data DIR with train.jsonl)");
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

void apply_config_json(TrainConfig& c, const nlohmann::json& j, const std::string& source) {
  BRIOCHE_CHECK(j.is_object(), source, ": expected a JSON object of training options");
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const nlohmann::json& v = it.value();
    try {
      if (k == "model") c.model = v.get<std::string>();
      else if (k == "data") c.data = v.get<std::string>();
      else if (k == "output" || k == "adapter_path") c.output = v.get<std::string>();
      else if (k == "resume_adapter" || k == "warm_start_adapter" || k == "resume_adapter_file") c.resume_adapter = v.get<std::string>();
      else if (k == "method") c.method = parse_method(v.get<std::string>());
      else if (k == "sft_scope") c.sft_scope = parse_sft_scope(v.get<std::string>());
      else if (k == "orpo_lambda") c.orpo_lambda = v.get<float>();
      else if (k == "beta") c.beta = v.get<float>();
      else if (k == "simpo_gamma") c.simpo_gamma = v.get<float>();
      else if (k == "learning_rate") c.learning_rate = v.get<float>();
      else if (k == "lr_schedule") c.lr_schedule = parse_lr_schedule(v.get<std::string>());
      else if (k == "warmup") c.warmup = v.get<int>();
      else if (k == "iters") c.iters = v.get<int>();
      else if (k == "epochs") c.epochs = v.get<int>();
      else if (k == "batch_size") c.batch_size = v.get<int>();
      else if (k == "grad_accumulation_steps") c.grad_accumulation_steps = v.get<int>();
      else if (k == "max_seq_length") c.max_seq_length = v.get<int>();
      else if (k == "max_grad_norm") c.max_grad_norm = v.get<float>();
      else if (k == "weight_decay") c.weight_decay = v.get<float>();
      else if (k == "rank") c.rank = v.get<int>();
      else if (k == "scale") c.scale = v.get<float>();
      else if (k == "alpha" || k == "lora_alpha") c.alpha = v.get<float>();
      else if (k == "rs_lora") c.rs_lora = v.get<bool>();
      else if (k == "lora_plus_ratio") c.lora_plus_ratio = v.get<float>();
      else if (k == "lora_dropout") c.lora_dropout = v.get<float>();
      else if (k == "target_modules") c.target_modules = v.get<std::vector<std::string>>();
      else if (k == "num_layers") c.num_layers = v.get<int>();
      else if (k == "segment_size") c.segment_size = v.get<int>();
      else if (k == "prefix_shared") c.prefix_shared = v.get<bool>();
      else if (k == "head_chunk_size" || k == "chunk_size") c.head_chunk_size = v.get<int>();
      else if (k == "steps_per_eval") c.steps_per_eval = v.get<int>();
      else if (k == "steps_per_report") c.steps_per_report = v.get<int>();
      else if (k == "save_checkpoints") c.save_checkpoints = v.get<bool>();
      else if (k == "seed") c.seed = v.get<int>();
      else if (k == "threads") c.threads = v.get<int>();
      else fail("unknown option");
    } catch (const nlohmann::json::exception& e) {
      fail(source, ": option \"", k, "\": wrong type (", v.type_name(), ")");
    } catch (const Error& e) {
      fail(source, ": option \"", k, "\": ", e.what());
    }
  }
}

nlohmann::json config_to_json(const TrainConfig& c) {
  nlohmann::json j;
  j["model"] = c.model;
  j["data"] = c.data;
  j["output"] = c.output;
  j["method"] = method_name(c.method);
  j["sft_scope"] = c.sft_scope == SftScope::Full ? "full" : "response";
  j["orpo_lambda"] = c.orpo_lambda;
  j["beta"] = c.beta;
  j["simpo_gamma"] = c.simpo_gamma;
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
  j["segment_size"] = c.segment_size;
  j["prefix_shared"] = c.prefix_shared;
  j["head_chunk_size"] = c.head_chunk_size;
  j["steps_per_eval"] = c.steps_per_eval;
  j["save_checkpoints"] = c.save_checkpoints;
  j["seed"] = c.seed;
  if (!c.resume_adapter.empty()) j["resume_adapter"] = c.resume_adapter;
  return j;
}

}  // namespace brioche::train
