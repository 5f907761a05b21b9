#include "train/config_file.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <toml++/toml.h>

#include "core/error.h"

namespace brioche::train {

namespace {

std::string position(const std::string& name, const toml::source_region& at) {
  return name + ":" + std::to_string(at.begin.line) + ":" + std::to_string(at.begin.column);
}

// TOML node -> JSON value: tables become objects, arrays arrays; integers stay
// integers and floats floats, so apply_config_json's strict type checks see
// what the file says. Dates and times have no JSON counterpart and no option
// takes one.
nlohmann::json to_json(const toml::node& node, const std::string& name, const std::string& key) {
  if (auto* t = node.as_table()) {
    nlohmann::json obj = nlohmann::json::object();
    for (auto&& [k, v] : *t) obj[std::string(k.str())] = to_json(v, name, key + "." + std::string(k.str()));
    return obj;
  }
  if (auto* a = node.as_array()) {
    nlohmann::json arr = nlohmann::json::array();
    for (auto&& v : *a) arr.push_back(to_json(v, name, key));
    return arr;
  }
  if (auto* s = node.as_string()) return s->get();
  if (auto* i = node.as_integer()) return i->get();
  if (auto* f = node.as_floating_point()) return f->get();
  if (auto* b = node.as_boolean()) return b->get();
  fail(position(name, node.source()), ": option \"", key, "\": a TOML date/time; no training option takes one");
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  BRIOCHE_CHECK(in.good(), "cannot read config file ", path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

ConfigFile parse_toml_config(const std::string& text, const std::string& name) {
  toml::table table;
  try {
    table = toml::parse(text, name);
  } catch (const toml::parse_error& e) {
    fail(position(name, e.source()), ": invalid TOML: ", e.description());
  }
  ConfigFile file{.options = nlohmann::json::object(), .source = {.name = name, .toml = true}};
  for (auto&& [k, v] : table) {
    const std::string key(k.str());
    file.source.key_locations[key] = position(name, k.source());
    file.options[key] = to_json(v, name, key);
  }
  return file;
}

ConfigFile read_config_file(const std::string& path) {
  const std::string text = read_text(path);
  if (std::filesystem::path(path).extension() == ".toml") return parse_toml_config(text, path);
  ConfigFile file{.source = {.name = path}};
  try {
    file.options = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    fail(path, ": invalid JSON: ", e.what());
  }
  return file;
}

void apply_config_file(TrainConfig& config, const std::string& path) {
  ConfigFile file = read_config_file(path);
  apply_config_json(config, file.options, file.source);
}

}  // namespace brioche::train
