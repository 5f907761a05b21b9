// `brioche train --config FILE`: training options from a JSON or a TOML file
// (chosen by the extension: .toml is TOML, anything else JSON).
//
// Both formats hold the same flat set of options, under the same names as
// the JSON keys and CLI flags (see train_config.h):
//
//   # train.toml                         // train.json
//   method = "orpo"                      {"method": "orpo",
//   learning_rate = 1e-5                  "learning_rate": 1e-5,
//   target_modules = ["q_proj", "v_proj"] "target_modules": ["q_proj", "v_proj"]}
//
// A TOML document becomes the nlohmann::json object the JSON path parses, so
// one function (apply_config_json) validates both; TOML errors carry the
// file:line:column of the offending key, which toml++ records per node.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "train/train_config.h"

namespace brioche::train {

struct ConfigFile {
  nlohmann::json options;  // the top-level table/object
  ConfigSource source;     // path and, for TOML, each top-level key's position
};

// Reads and parses FILE; a syntax error names file:line:column.
ConfigFile read_config_file(const std::string& path);

// Parses TOML text (`name` is used in error messages and positions).
ConfigFile parse_toml_config(const std::string& text, const std::string& name);

// read_config_file + apply_config_json.
void apply_config_file(TrainConfig& config, const std::string& path);

}  // namespace brioche::train
