#include "model/config_fields.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/error.h"
#include "model/model_config.h"

namespace brioche::model {

using nlohmann::json;

const json* ConfigFields::find(const std::string& key) const {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

void ConfigFields::wrong(const std::string& key, const std::string& expected, const json& found) const {
  fail(source, ": ", prefix, key, ": expected ", expected, ", found ", found.dump().substr(0, 80));
}

void ConfigFields::absent(const std::string& key, const std::string& expected) const {
  fail(source, ": ", prefix, key, ": expected ", expected, ", found absent");
}

int ConfigFields::count(const std::string& key) const {
  const json* v = find(key);
  if (v == nullptr) absent(key, "an integer");
  if (!v->is_number_integer()) wrong(key, "an integer", *v);
  if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX)) wrong(key, "an integer below 2^63", *v);
  return config_count(v->get<int64_t>(), prefix + key, source);
}

int ConfigFields::count(const std::string& key, int lo, int hi) const {
  const json* v = find(key);
  if (v == nullptr) absent(key, "an integer");
  if (!v->is_number_integer()) wrong(key, "an integer", *v);
  // nlohmann parses every non-negative integer as unsigned: compare as
  // unsigned first (2^64 - 1 must not wrap to -1), then both bounds.
  const bool too_big = v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(hi);
  if (too_big || v->get<int64_t>() < lo || v->get<int64_t>() > hi)
    wrong(key, "an integer in " + std::to_string(lo) + ".." + std::to_string(hi), *v);
  return int(v->get<int64_t>());
}

float ConfigFields::number(const std::string& key, float fallback) const {
  const json* v = find(key);
  if (v == nullptr) return fallback;
  if (!v->is_number()) wrong(key, "a number", *v);
  return config_float(v->get<double>());
}

float ConfigFields::positive(const std::string& key, float fallback, float hi) const {
  const json* v = find(key);
  if (v == nullptr) return fallback;
  if (!v->is_number()) wrong(key, "a number", *v);
  const double d = v->get<double>();
  if (!(std::isfinite(d) && d > 0.0 && d <= double(hi)))
    wrong(key, hi < 1e30f ? "a number in (0, " + json(hi).dump() + "]" : "a finite number > 0", *v);
  return float(d);
}

bool ConfigFields::boolean(const std::string& key, bool fallback) const {
  const json* v = find(key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) wrong(key, "true or false", *v);
  return v->get<bool>();
}

std::string ConfigFields::string(const std::string& key, const std::string& fallback) const {
  const json* v = find(key);
  if (v == nullptr) return fallback;
  if (!v->is_string()) wrong(key, "a string", *v);
  return v->get<std::string>();
}

ConfigFields ConfigFields::object(const std::string& key) const {
  const json* v = find(key);
  if (v == nullptr) absent(key, "an object");
  if (!v->is_object()) wrong(key, "an object", *v);
  return {*v, prefix + key + ".", source};
}

void ConfigFields::only(std::initializer_list<const char*> known) const {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    if (std::none_of(known.begin(), known.end(), [&](const char* k) { return it.key() == k; })) {
      std::string list;
      for (const char* k : known) list += (list.empty() ? "" : ", ") + std::string(k);
      fail(source, ": ", prefix, it.key(), ": unknown key (expected one of ", list, ")");
    }
  }
}

}  // namespace brioche::model
