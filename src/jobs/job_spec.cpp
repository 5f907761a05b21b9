#include "jobs/job_spec.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "core/error.h"
#include "jobs/jobs_error.h"
#include "train/train_config.h"

namespace brioche::jobs {

namespace {

using json = nlohmann::json;

// OpenAI's hyperparameter names and our short forms -> `brioche train` keys.
const std::map<std::string, std::string>& aliases() {
  static const std::map<std::string, std::string> m = {{"n_epochs", "epochs"},
                                                       {"lambda", "orpo_lambda"},
                                                       {"n_steps", "iters"},
                                                       {"steps", "iters"},
                                                       {"max_length", "max_seq_length"}};
  return m;
}

// Options the server decides: a job may not set them.
const std::set<std::string>& server_owned() {
  static const std::set<std::string> s = {"model",
                                          "data",
                                          "output",
                                          "adapter_path",
                                          "resume",
                                          "resume_adapter",
                                          "warm_start_adapter",
                                          "resume_adapter_file",
                                          "test_file",
                                          "method",
                                          "seed",
                                          "save_checkpoints",
                                          "quiet"};
  return s;
}

const std::map<std::string, std::string>& method_names() {
  static const std::map<std::string, std::string> m = {
      {"supervised", "sft"}, {"dpo", "dpo"}, {"orpo", "orpo"}, {"simpo", "simpo"}, {"ipo", "ipo"}};
  return m;
}

[[noreturn]] void invalid_method(const std::string& param, const std::string& message) {
  throw JobsError(400, "invalid_method", param, message);
}

double default_learning_rate(bool preference) { return preference ? 1e-5 : 2e-4; }

}  // namespace

JobSpec parse_job_spec(const json& body) {
  JobSpec spec;
  json method = body.contains("method") && !body["method"].is_null() ? body["method"] : json::object();
  if (!method.is_object())
    invalid_method("method", std::string("method: expected an object, found ") + method.type_name());
  if (!method.contains("type")) {
    if (!method.empty())
      invalid_method("method.type", "method: missing \"type\" (supervised, dpo, orpo, simpo or ipo)");
    method["type"] = "supervised";
  }
  if (!method["type"].is_string())
    invalid_method("method.type", std::string("method.type: expected a string, found ") + method["type"].type_name());
  spec.method_type = method["type"].get<std::string>();
  auto known = method_names().find(spec.method_type);
  if (known == method_names().end())
    invalid_method("method.type", "method.type: unknown method '" + spec.method_type +
                                      "' (expected supervised, dpo, orpo, simpo or ipo)");
  for (auto it = method.begin(); it != method.end(); ++it)
    if (it.key() != "type" && it.key() != spec.method_type)
      invalid_method("method." + it.key(), "method." + it.key() + ": unexpected for method type '" + spec.method_type +
                                               "' (its settings go under method." + spec.method_type + ")");
  json settings = method.contains(spec.method_type) ? method[spec.method_type] : json::object();
  if (settings.is_null()) settings = json::object();
  if (!settings.is_object())
    invalid_method("method." + spec.method_type,
                   "method." + spec.method_type + ": expected an object, found " + settings.type_name());
  for (auto it = settings.begin(); it != settings.end(); ++it)
    if (it.key() != "hyperparameters")
      throw JobsError(
          400, "unknown_hyperparameter", "method." + spec.method_type + "." + it.key(),
          "method." + spec.method_type + "." + it.key() + ": unknown setting (expected \"hyperparameters\")");
  json hyper = settings.contains("hyperparameters") ? settings["hyperparameters"] : json::object();
  // OpenAI's legacy top-level hyperparameters belong to the supervised method.
  if (body.contains("hyperparameters") && !body["hyperparameters"].is_null() && !settings.contains("hyperparameters"))
    hyper = body["hyperparameters"];
  if (hyper.is_null()) hyper = json::object();
  const std::string where = "method." + spec.method_type + ".hyperparameters";
  if (!hyper.is_object())
    throw JobsError(400, "invalid_hyperparameter", where, where + ": expected an object, found " + hyper.type_name());
  settings["hyperparameters"] = hyper;
  spec.method = {{"type", spec.method_type}, {spec.method_type, settings}};
  spec.preference = spec.method_type != "supervised";

  if (body.contains("seed") && !body["seed"].is_null()) {
    if (!body["seed"].is_number_integer())
      throw JobsError(400, "invalid_hyperparameter", "seed",
                      std::string("seed: expected an integer, found ") + body["seed"].type_name());
    spec.seed = body["seed"].get<int64_t>();
    if (spec.seed < 0 || spec.seed > INT32_MAX)
      throw JobsError(400, "invalid_hyperparameter", "seed",
                      "seed: expected 0 to 2147483647, got " + std::to_string(spec.seed));
  }

  // Each key applied on its own so the error names it.
  train::TrainConfig config;
  config.method = train::parse_method(known->second);
  json options = json::object();
  std::optional<double> lr_multiplier;
  for (auto it = hyper.begin(); it != hyper.end(); ++it) {
    const std::string param = where + "." + it.key();
    if (it.value().is_string() && it.value() == "auto") continue;  // OpenAI's "use the default"
    if (it.key() == "learning_rate_multiplier") {
      if (!it.value().is_number() || it.value().get<double>() <= 0)
        throw JobsError(400, "invalid_hyperparameter", param,
                        param + ": expected a positive number, found " + it.value().dump());
      lr_multiplier = it.value().get<double>();
      continue;
    }
    auto alias = aliases().find(it.key());
    const std::string key = alias != aliases().end() ? alias->second : it.key();
    if (server_owned().count(key))
      throw JobsError(400, "unknown_hyperparameter", param,
                      param + ": not a hyperparameter (the server sets '" + key + "'" +
                          (key == "seed"     ? "; give the job's top-level \"seed\""
                           : key == "method" ? "; give method.type"
                                             : "") +
                          ")");
    try {
      train::apply_config_json(config, json{{key, it.value()}}, param);
    } catch (const Error& e) {
      const bool unknown = std::string(e.what()).find("unknown option") != std::string::npos;
      throw JobsError(400, unknown ? "unknown_hyperparameter" : "invalid_hyperparameter", param,
                      unknown ? param + ": unknown hyperparameter (expected a `brioche train` option, docs/jobs-api.md)"
                              : std::string(e.what()));
    }
    options[key] = it.value();
  }
  if (lr_multiplier) {
    if (options.contains("learning_rate"))
      throw JobsError(400, "invalid_hyperparameter", where + ".learning_rate_multiplier",
                      where + ": give learning_rate or learning_rate_multiplier, not both");
    options["learning_rate"] = *lr_multiplier * default_learning_rate(spec.preference);
    config.learning_rate = float(options["learning_rate"].get<double>());
  }
  // The checks `brioche train` makes once every option is known (ranges, exclusive levers).
  config.data = "data";
  try {
    config.finalize();
  } catch (const Error& e) {
    throw JobsError(400, "invalid_hyperparameter", where, where + ": " + e.what());
  }
  spec.options = options;
  // From the JSON values (doubles), not the config's floats: 1e-4 stays 1e-4 in the summary.
  const double lr = options.contains("learning_rate") && options["learning_rate"].is_number()
                        ? options["learning_rate"].get<double>()
                        : default_learning_rate(spec.preference);
  spec.hyperparameters = {{"n_epochs", config.epochs},
                          {"batch_size", config.batch_size},
                          {"learning_rate_multiplier", lr / default_learning_rate(spec.preference)}};
  if (spec.preference)
    spec.hyperparameters["beta"] =
        options.contains("beta") && options["beta"].is_number() ? options["beta"].get<double>() : 0.1;
  return spec;
}

int64_t total_steps(const json& options, int64_t rows) {
  auto get = [&](const char* key, int64_t fallback) {
    return options.contains(key) && options[key].is_number_integer() ? options[key].get<int64_t>() : fallback;
  };
  // A test split leaves its rows out of training (train::split_off: round(f * rows), at least one).
  if (options.contains("test_split") && options["test_split"].is_number()) {
    const double f = options["test_split"].get<double>();
    if (f > 0 && f < 1 && rows > 1) rows -= std::max<int64_t>(1, std::llround(f * double(rows)));
  }
  const int64_t iters = get("iters", 0);
  if (iters > 0) return iters;
  const int64_t grad_accum = options.contains("grad_accum") ? get("grad_accum", 1) : get("grad_accumulation_steps", 1);
  const int64_t per_step = std::max<int64_t>(
      1, get("batch_size", 1) * std::max<int64_t>(1, grad_accum) * std::max<int64_t>(1, get("gpus", 1)));
  return get("epochs", 1) * std::max<int64_t>(1, (rows + per_step - 1) / per_step);
}

int64_t estimate_memory_bytes(const json& options, const ModelShape& model) {
  train::TrainConfig c;
  c.method = train::Method::SFT;
  if (options.contains("method") && options["method"].is_string())
    c.method = train::parse_method(options["method"].get<std::string>());
  train::apply_config_json(c, options, "options");
  const model::ModelConfig& m = model.config;
  const bool preference = train::is_preference(c.method);
  const int64_t rank = c.rank ? *c.rank : (c.method == train::Method::ORPO ? 16 : 8);
  // LoRA factors A [rank, in] and B [out, rank] per adapted projection.
  int64_t per_layer = 0;
  for (const std::string& module : c.target_modules) {
    int64_t in = m.hidden_size, out = m.hidden_size;
    if (module == "q_proj")
      out = m.q_dim();
    else if (module == "k_proj" || module == "v_proj")
      out = m.kv_dim();
    else if (module == "o_proj")
      in = m.q_dim();
    else if (module == "gate_proj" || module == "up_proj")
      out = m.intermediate_size;
    else if (module == "down_proj")
      in = m.intermediate_size;
    per_layer += rank * (in + out);
  }
  const int64_t adapted_layers = c.num_layers > 0 ? std::min<int64_t>(c.num_layers, m.n_layers) : m.n_layers;
  const int64_t lora_bytes = 16 * per_layer * adapted_layers;
  const int64_t tokens = int64_t(c.batch_size) * c.max_seq_length * (preference ? 2 : 1);
  // Activations a layer keeps for its backward (f32 per token), and, with a
  // segmented backward, only one segment's layers at a time plus the
  // residual stream (hidden_size per token) at each segment boundary.
  const int64_t per_layer_token = 10 * int64_t(m.hidden_size) + 3 * int64_t(m.intermediate_size);
  const int64_t segment = c.grad_checkpoint ? 1 : c.segment_size;
  const int64_t held = segment > 0
                           ? segment * per_layer_token + (m.n_layers + segment - 1) / segment * int64_t(m.hidden_size)
                           : m.n_layers * per_layer_token;
  const int64_t activations = tokens * held * 4;
  const int64_t head =
      tokens * (c.head_chunk_size > 0 ? std::min<int64_t>(c.head_chunk_size, m.vocab_size) : m.vocab_size) * 4;
  return model.weights_bytes + lora_bytes + activations + head + (int64_t(256) << 20);
}

}  // namespace brioche::jobs
