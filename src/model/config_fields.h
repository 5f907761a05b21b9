// Typed reads of one object of a model's config.json, for every loader.
//
// A value of the wrong type is a brioche::Error naming the key as the file
// spells it ("<dir>/config.json: text_config.num_attention_heads: expected
// an integer, found \"8\""), never nlohmann's type_error; counts are
// narrowed to int only after a range check.
#pragma once

#include <initializer_list>
#include <string>

#include <nlohmann/json.hpp>

namespace brioche::model {

struct ConfigFields {
  const nlohmann::json& obj;
  std::string prefix;  // "" at the top, "text_config." or "rope_scaling." inside: key names in messages
  std::string source;  // "<dir>/config.json"

  // The value at `key`; null for a missing key, a JSON null, or when obj is not an object.
  const nlohmann::json* find(const std::string& key) const;
  bool has(const std::string& key) const { return find(key) != nullptr; }
  [[noreturn]] void wrong(const std::string& key, const std::string& expected, const nlohmann::json& found) const;
  [[noreturn]] void absent(const std::string& key, const std::string& expected) const;

  // A required count in 0..2^31-1 (config_count's range and message).
  int count(const std::string& key) const;
  int count(const std::string& key, int fallback) const { return has(key) ? count(key) : fallback; }
  // A required count in [lo, hi]; with a fallback when the key is absent.
  int count(const std::string& key, int lo, int hi) const;
  int count(const std::string& key, int lo, int hi, int fallback) const {
    return has(key) ? count(key, lo, hi) : fallback;
  }
  // A number as config_float reads it (out-of-range doubles become ±inf, for
  // validate_model_config to refuse).
  float number(const std::string& key, float fallback) const;
  // A number that must be finite and in (0, hi].
  float positive(const std::string& key, float fallback, float hi = 1e30f) const;
  bool boolean(const std::string& key, bool fallback) const;
  std::string string(const std::string& key, const std::string& fallback) const;
  // The object at `key` (required), its keys named "<prefix><key>.<name>".
  ConfigFields object(const std::string& key) const;
  // Keys outside `known` are refused: in objects where an ignored key would
  // change the model silently.
  void only(std::initializer_list<const char*> known) const;
};

}  // namespace brioche::model
