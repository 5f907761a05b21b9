// --config files: TOML and JSON give the same TrainConfig through one
// validation path; errors name the file, the line (TOML) and the key.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "train/config_file.h"

namespace brioche::train {
namespace {

using ::testing::HasSubstr;

std::string write(const std::string& name, const std::string& text) {
  const std::string dir = std::string(BRIOCHE_BINARY_DIR) + "/train_config_file_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/" + name) << text;
  return dir + "/" + name;
}

std::string error_of(const std::string& path) {
  try {
    TrainConfig c;
    apply_config_file(c, path);
    c.finalize();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ConfigFile, TomlAndJsonGiveTheSameConfig) {
  const std::string toml = write("same.toml", R"(# every option, none at its default
model = "m.gguf"
data = "data/run1"
output = "adapters/run1"
resume_adapter = "adapters/run0"
method = "orpo"
sft_scope = "full"
orpo_lambda = 0.25
beta = 0.2
simpo_gamma = 0.75
learning_rate = 2e-5
lr_schedule = "linear"
warmup = 3
iters = 120
epochs = 2
batch_size = 2
grad_accumulation_steps = 4
max_seq_length = 1024
max_grad_norm = 0.5
weight_decay = 0.01
rank = 32
alpha = 64          # an integer where a number is expected is fine
rs_lora = true
lora_plus_ratio = 16.0
lora_dropout = 0.05
target_modules = ["q_proj", "v_proj", "down_proj"]
num_layers = 12
segment_size = 2
device = "auto"
gpus = 2
offload_boundaries = true
offload_attention = true
boundary_dtype = "bf16"
device_boundaries = 3
prefix_shared = true
head_chunk_size = 2048
mlp_chunk_size = 1024
steps_per_eval = 25
steps_per_report = 5
save_checkpoints = true
save_steps = 50
save_total_limit = 3
early_stopping_patience = 2
early_stopping_threshold = 0.01
keep_best = true
metric_for_best = "nll_loss"
greater_is_better = true
eval_batches = 4
test_split = 0.1
eval_samples = 3
eval_sample_tokens = 16
seed = 42
threads = 3
)");
  const std::string json = write("same.json", R"({"model": "m.gguf", "data": "data/run1", "output": "adapters/run1",
    "resume_adapter": "adapters/run0", "method": "orpo", "sft_scope": "full", "orpo_lambda": 0.25, "beta": 0.2,
    "simpo_gamma": 0.75, "learning_rate": 2e-5, "lr_schedule": "linear", "warmup": 3, "iters": 120, "epochs": 2,
    "batch_size": 2, "grad_accumulation_steps": 4, "max_seq_length": 1024, "max_grad_norm": 0.5,
    "weight_decay": 0.01, "rank": 32, "alpha": 64, "rs_lora": true, "lora_plus_ratio": 16.0, "lora_dropout": 0.05,
    "target_modules": ["q_proj", "v_proj", "down_proj"], "num_layers": 12, "segment_size": 2,
    "device": "auto", "gpus": 2, "offload_boundaries": true, "offload_attention": true, "boundary_dtype": "bf16", "device_boundaries": 3,
    "prefix_shared": true, "head_chunk_size": 2048,
    "mlp_chunk_size": 1024, "steps_per_eval": 25, "steps_per_report": 5,
    "save_checkpoints": true, "save_steps": 50, "save_total_limit": 3, "early_stopping_patience": 2,
    "early_stopping_threshold": 0.01, "keep_best": true, "metric_for_best": "nll_loss",
    "greater_is_better": true, "eval_batches": 4, "test_split": 0.1, "eval_samples": 3, "eval_sample_tokens": 16, "seed": 42, "threads": 3})");
  TrainConfig from_toml, from_json, defaults;
  apply_config_file(from_toml, toml);
  apply_config_file(from_json, json);
  from_toml.finalize();
  from_json.finalize();
  const nlohmann::json a = config_to_json(from_toml), b = config_to_json(from_json);
  EXPECT_EQ(a, b);
  EXPECT_EQ(from_toml.steps_per_report, 5);
  EXPECT_EQ(from_toml.threads, 3);
  // The file really set every field (none left at its default).
  defaults.data = "d";
  defaults.finalize();
  const nlohmann::json d = config_to_json(defaults);
  for (auto it = a.begin(); it != a.end(); ++it)
    EXPECT_NE(it.value(), d.value(it.key(), nlohmann::json())) << it.key() << " kept its default";
  EXPECT_EQ(from_toml.method, Method::ORPO);
  EXPECT_FLOAT_EQ(*from_toml.alpha, 64.0f);
  EXPECT_EQ(from_toml.target_modules, (std::vector<std::string>{"q_proj", "v_proj", "down_proj"}));
}

TEST(ConfigFile, ReferenceAliases) {
  const std::string path = write("aliases.toml", R"(
method = "orpo"
data = "d"
orpo_prefix_shared = true
orpo_chunk_size = 512
orpo_lr_schedule = "constant"
orpo_warmup_iters = 7
warm_start_adapter = "adapters/prev"
lora_alpha = 32
)");
  TrainConfig c;
  apply_config_file(c, path);
  EXPECT_TRUE(c.prefix_shared);
  EXPECT_EQ(c.head_chunk_size, 512);
  EXPECT_EQ(c.lr_schedule, LrSchedule::Constant);
  EXPECT_EQ(c.warmup, 7);
  EXPECT_EQ(c.resume_adapter, "adapters/prev");
  EXPECT_FLOAT_EQ(*c.alpha, 32.0f);
}

// The reference's remaining switches map onto our levers or say what is not supported.
TEST(ConfigFile, ReferenceSwitchesMapToLevers) {
  auto finalized = [](const std::string& name, const std::string& body) {
    TrainConfig c;
    apply_config_file(c, write(name, "data = \"d\"\nmethod = \"orpo\"\n" + body));
    c.finalize();
    return c;
  };
  EXPECT_EQ(finalized("flash.toml", "orpo_flash_ce = true\nhead_chunk_size = 0\n").head_chunk_size, 4096);
  EXPECT_EQ(finalized("fused.toml", "orpo_fused_ce = true\norpo_chunk_size = 512\n").head_chunk_size, 512);
  EXPECT_EQ(finalized("plain.toml", "orpo_fused_ce = false\n").head_chunk_size, 0);
  const TrainConfig ckpt = finalized("ckpt.toml", "grad_checkpoint = true\noffload_boundaries = true\n");
  EXPECT_EQ(ckpt.segment_size, 1);
  EXPECT_TRUE(ckpt.offload_boundaries);
  TrainConfig again = ckpt;
  again.finalize();  // idempotent (the CLI and the trainer both finalize)
  EXPECT_EQ(again.segment_size, 1);
  EXPECT_EQ(finalized("accum.toml", "grad_accum = 3\n").grad_accumulation_steps, 3);
  auto error = [&](const std::string& name, const std::string& body) {
    try {
      finalized(name, body);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(error("both.toml", "grad_checkpoint = true\nsegment_size = 4\n"), HasSubstr("exclusive"));
  EXPECT_THAT(error("mlp.toml", "mlp_split = true\n"), HasSubstr("mlp_split is not supported"));
  EXPECT_THAT(error("offload.toml", "offload_boundaries = true\n"), HasSubstr("needs segment_size > 0"));
  EXPECT_THAT(error("attention.toml", "segment_size = 1\noffload_attention = true\n"),
              HasSubstr("offload_attention needs offload_boundaries"));
  EXPECT_THAT(error("dtype.toml", "boundary_dtype = \"f16\"\n"),
              HasSubstr("boundary_dtype: expected f32 or bf16, got 'f16'"));
  EXPECT_THAT(error("device.toml", "segment_size = 1\ndevice_boundaries = 2\n"),
              HasSubstr("device_boundaries needs offload_boundaries"));
  EXPECT_THAT(error("device.toml", "device = \"tpu\"\n"), HasSubstr("expected cpu, cuda or auto, got 'tpu'"));
}

TEST(ConfigFile, RpoAlphaOnDpoAndIpoOnly) {
  // TRL's rpo_alpha: a DPOTrainer option (any of its loss types), recorded in metrics.json's config.
  const std::string toml = write("rpo.toml", "method = \"dpo\"\ndata = \"d\"\nrpo_alpha = 1.0\n");
  const std::string json = write("rpo.json", R"({"method": "ipo", "data": "d", "rpo_alpha": 0.5})");
  TrainConfig dpo, ipo, plain;
  apply_config_file(dpo, toml);
  apply_config_file(ipo, json);
  dpo.finalize(), ipo.finalize();
  EXPECT_EQ(config_to_json(dpo).at("rpo_alpha"), 1.0);
  EXPECT_EQ(config_to_json(ipo).at("rpo_alpha"), 0.5);
  plain.data = "d", plain.method = Method::DPO;
  plain.finalize();
  EXPECT_FALSE(config_to_json(plain).contains("rpo_alpha")) << "unset is TRL's None: no NLL term";
  // ORPOTrainer and CPOTrainer have no rpo_alpha (their configs refuse the field), nor does SFTTrainer.
  for (const char* method : {"sft", "orpo", "simpo"}) {
    const std::string other = write(std::string("rpo_") + method + ".json",
                                    std::string(R"({"data": "d", "rpo_alpha": 1.0, "method": ")") + method + "\"}");
    EXPECT_THAT(error_of(other), HasSubstr(std::string("rpo_alpha adds an NLL term to dpo or ipo, not to ") + method));
  }
  EXPECT_THAT(error_of(write("rpo_neg.json", R"({"data": "d", "method": "dpo", "rpo_alpha": -1})")),
              HasSubstr("rpo_alpha must be a finite number >= 0, got -1"));
  // nll_loss is an evaluation metric of DPO only with the term.
  EXPECT_EQ(error_of(write("rpo_best.json", R"({"data": "d", "method": "dpo", "rpo_alpha": 1, "steps_per_eval": 5,
    "keep_best": true, "metric_for_best": "eval_nll_loss"})")),
            "");
  EXPECT_THAT(error_of(write("rpo_best_off.json", R"({"data": "d", "method": "dpo", "steps_per_eval": 5,
    "keep_best": true, "metric_for_best": "eval_nll_loss"})")),
              HasSubstr("evaluations log no 'eval_nll_loss'"));
}

TEST(ConfigFile, MalformedTomlNamesFileAndLine) {
  const std::string path = write("broken.toml", "method = \"orpo\"\nrank = 16\nlearning_rate = = 1e-5\n");
  EXPECT_THAT(error_of(path), HasSubstr(path + ":3:"));
  EXPECT_THAT(error_of(path), HasSubstr("invalid TOML"));
  const std::string dup = write("duplicate.toml", "rank = 16\nrank = 8\n");
  EXPECT_THAT(error_of(dup), HasSubstr(dup + ":2:"));
}

TEST(ConfigFile, WrongTypesNameKeyFileAndLine) {
  const std::string path = write("types.toml", "data = \"d\"\n\nrank = \"sixteen\"\n");
  EXPECT_THAT(error_of(path),
              HasSubstr(path + ":3:1: option \"rank\": wrong type: expected an integer, found a string"));
  const std::string fractional = write("fractional.toml", "data = \"d\"\nrank = 8.5\n");
  EXPECT_THAT(error_of(fractional), HasSubstr(fractional + ":2:1: option \"rank\": wrong type: expected an integer, "
                                                           "found a floating-point number"));
  const std::string list = write("list.toml", "data = \"d\"\ntarget_modules = [\"q_proj\", 3]\n");
  EXPECT_THAT(error_of(list),
              HasSubstr(list + ":2:1: option \"target_modules\": wrong type: expected an array of strings"));
  const std::string value = write("value.toml", "data = \"d\"\n  method = \"ppo\"\n");
  EXPECT_THAT(error_of(value), HasSubstr(value + ":2:3: option \"method\": "));
  EXPECT_THAT(error_of(value), HasSubstr("expected sft, dpo, orpo, simpo or ipo, got 'ppo'"));
  const std::string date = write("date.toml", "data = \"d\"\nseed = 2026-11-29\n");
  EXPECT_THAT(error_of(date), HasSubstr(date + ":2:8: option \"seed\": a TOML date/time"));
  // JSON has no positions from the parser: the error names the file and key.
  const std::string json = write("types.json", R"({"data": "d", "rank": 8.5})");
  EXPECT_THAT(error_of(json), HasSubstr(json + ": option \"rank\": wrong type: expected an integer"));
}

TEST(ConfigFile, UnknownKeysAndSectionsAreErrorsInBothFormats) {
  const std::string toml = write("unknown.toml", "data = \"d\"\nlerning_rate = 1e-4\n");
  EXPECT_THAT(error_of(toml), HasSubstr(toml + ":2:1: option \"lerning_rate\": unknown option"));
  const std::string json = write("unknown.json", R"({"data": "d", "lerning_rate": 1e-4})");
  EXPECT_THAT(error_of(json), HasSubstr(json + ": option \"lerning_rate\": unknown option"));
  const std::string section = write("section.toml", "data = \"d\"\n\n[lora]\nrank = 8\n");
  EXPECT_THAT(error_of(section),
              HasSubstr(section + ":3:2: option \"lora\": unknown option (options are top-level keys"));
  const std::string not_object = write("array.json", "[1, 2]");
  EXPECT_THAT(error_of(not_object), HasSubstr("expected an object of training options"));
  EXPECT_THAT(error_of(write("bad.json", "{\"rank\": }")), HasSubstr("invalid JSON"));
  EXPECT_THAT(error_of(std::string(BRIOCHE_BINARY_DIR) + "/no_such_config.toml"), HasSubstr("cannot read config file"));
}

}  // namespace
}  // namespace brioche::train
