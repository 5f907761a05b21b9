// Random walks to termination over schemas of real-world shape on the
// Llama-3 vocabulary: every finished output must parse as JSON and
// validate against its schema (a small validator for the keywords used).
#include <gtest/gtest.h>

#include <random>
#include <regex>

#include "fixture_vocab.h"
#include "grammar/compiler.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"

namespace brioche::grammar {
namespace {

using Json = nlohmann::ordered_json;

// "YYYY-MM-DD..." names a day that exists (year >= 1, Gregorian leap years).
bool real_calendar_date(const std::string& s) {
  const int y = std::stoi(s.substr(0, 4)), m = std::stoi(s.substr(5, 2)), d = std::stoi(s.substr(8, 2));
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  static const int kDays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const int days = m == 2 && leap ? 29 : kDays[m - 1];
  return y >= 1 && d >= 1 && d <= days;
}

// Validates `v` against the subset of JSON Schema the test schemas use.
class Validator {
 public:
  explicit Validator(const Json& root) : root_(root) {}
  bool valid(const Json& v) { return check(v, root_); }

 private:
  const Json& root_;

  const Json& resolve(const std::string& ref) {
    const Json* cur = &root_;
    size_t pos = 2;
    while (pos <= ref.size()) {
      size_t next = ref.find('/', pos);
      std::string key = ref.substr(pos, next == std::string::npos ? std::string::npos : next - pos);
      cur = &(*cur)[key];
      if (next == std::string::npos) break;
      pos = next + 1;
    }
    return *cur;
  }

  static size_t codepoints(const std::string& s) {
    size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
  }

  bool type_ok(const Json& v, const std::string& t) {
    if (t == "object") return v.is_object();
    if (t == "array") return v.is_array();
    if (t == "string") return v.is_string();
    if (t == "integer")
      return v.is_number_integer() || (v.is_number_float() && v.get<double>() == std::floor(v.get<double>()));
    if (t == "number") return v.is_number();
    if (t == "boolean") return v.is_boolean();
    if (t == "null") return v.is_null();
    return false;
  }

  bool check(const Json& v, const Json& s) {
    if (s.is_boolean()) return s.get<bool>();
    if (s.contains("$ref")) return check(v, resolve(s["$ref"].get<std::string>()));
    if (s.contains(
            "allOf")) {  // branches' properties merged: exact for the schemas below (no additionalProperties in a branch)
      Json merged = s;
      merged.erase("allOf");
      for (auto& part : s["allOf"])
        for (auto& [k, x] : part.items()) {
          if (k == "properties")
            for (auto& [pk, pv] : x.items()) merged["properties"][pk] = pv;
          else if (k == "required")
            for (auto& r : x) merged["required"].push_back(r);
          else
            merged[k] = x;
        }
      return check(v, merged);
    }
    if (s.contains("const") && v != s["const"]) return false;
    if (s.contains("enum") && std::find(s["enum"].begin(), s["enum"].end(), v) == s["enum"].end()) return false;
    if (s.contains("anyOf") || s.contains("oneOf")) {
      const Json& alts = s.contains("anyOf") ? s["anyOf"] : s["oneOf"];
      int matches = 0;
      for (auto& a : alts) matches += check(v, a);
      if (s.contains("oneOf") ? matches != 1 : matches == 0) return false;
    }
    if (s.contains("type")) {
      bool ok = false;
      if (s["type"].is_string())
        ok = type_ok(v, s["type"].get<std::string>());
      else
        for (auto& t : s["type"]) ok |= type_ok(v, t.get<std::string>());
      if (!ok) return false;
    }
    if (v.is_number()) {
      double x = v.get<double>();
      if (s.contains("minimum") && x < s["minimum"].get<double>()) return false;
      if (s.contains("maximum") && x > s["maximum"].get<double>()) return false;
    }
    if (v.is_string()) {
      std::string str = v.get<std::string>();
      if (s.contains("minLength") && codepoints(str) < s["minLength"].get<size_t>()) return false;
      if (s.contains("maxLength") && codepoints(str) > s["maxLength"].get<size_t>()) return false;
      if (s.contains("pattern") && !std::regex_search(str, std::regex(s["pattern"].get<std::string>()))) return false;
      if (s.contains("format")) {
        static const std::map<std::string, std::string> kFormats = {
            {"date", R"(^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$)"},
            {"date-time", R"(^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$)"},
            {"uuid", R"(^[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$)"},
            {"ipv4", R"(^((25[0-5]|2[0-4]\d|[01]?\d?\d)\.){3}(25[0-5]|2[0-4]\d|[01]?\d?\d)$)"},
            {"email", R"(^[^@\s]+@[A-Za-z0-9.-]+$)"}};
        const std::string format = s["format"].get<std::string>();
        auto it = kFormats.find(format);
        if (it != kFormats.end() && !std::regex_search(str, std::regex(it->second))) return false;
        if ((format == "date" || format == "date-time") && !real_calendar_date(str)) return false;
      }
    }
    if (v.is_array()) {
      if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
      if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
      size_t k = 0;
      if (s.contains("prefixItems")) {
        for (; k < s["prefixItems"].size() && k < v.size(); ++k)
          if (!check(v[k], s["prefixItems"][k])) return false;
        if (!s.contains("items") && v.size() > k) return false;  // strict
      }
      if (s.contains("items"))
        for (size_t i = k; i < v.size(); ++i)
          if (!check(v[i], s["items"])) return false;
    }
    if (v.is_object() && (s.contains("properties") || s.contains("required") || s.contains("additionalProperties"))) {
      for (auto& r : s.value("required", Json::array()))
        if (!v.contains(r.get<std::string>())) return false;
      const Json props = s.value("properties", Json::object());
      for (auto& [k, x] : v.items()) {
        if (props.contains(k)) {
          if (!check(x, props[k])) return false;
        } else if (s.contains("additionalProperties")) {
          if (!check(x, s["additionalProperties"])) return false;
        } else if (!props.empty()) {
          return false;  // strict: undeclared keys are not allowed
        }
      }
    }
    return true;
  }
};

const char* kSchemas[] = {
    // OpenAI-style tool call with nested arguments.
    R"({"type":"object","properties":{"name":{"enum":["get_weather","search_flights"]},
        "arguments":{"type":"object","properties":{"city":{"type":"string","minLength":1,"maxLength":20},
        "date":{"type":"string","format":"date"},"passengers":{"type":"integer","minimum":1,"maximum":9},
        "cabin":{"enum":["economy","business"]},"flexible":{"type":"boolean"}},"required":["city","date"],
        "additionalProperties":false}},"required":["name","arguments"]})",
    // API payload: order with an array of line items and nullable fields.
    R"({"type":"object","properties":{"id":{"type":"string","format":"uuid"},
        "customer":{"type":"object","properties":{"email":{"type":"string","format":"email"},
        "phone":{"type":["string","null"]}},"required":["email"]},
        "items":{"type":"array","minItems":1,"maxItems":3,"items":{"type":"object",
        "properties":{"sku":{"type":"string","pattern":"^[A-Z]{3}-[0-9]{4}$"},"qty":{"type":"integer","minimum":1,"maximum":99},
        "price":{"type":"number","minimum":0,"maximum":1000}},"required":["sku","qty","price"]}},
        "status":{"oneOf":[{"const":"open"},{"const":"closed"},{"type":"null"}]}},"required":["id","items","status"]})",
    // Recursive tree.
    R"({"$defs":{"node":{"type":"object","properties":{"label":{"type":"string","maxLength":8},
        "children":{"type":"array","maxItems":2,"items":{"$ref":"#/$defs/node"}}},"required":["label"]}},
        "$ref":"#/$defs/node"})",
    // Mixed: prefixItems tuple, additionalProperties schema, allOf, ipv4, date-time.
    // (additionalProperties beside allOf applies to every key the schema
    // itself does not declare, so the branches' keys are declared here too.)
    R"({"allOf":[{"type":"object","properties":{"host":{"type":"string","format":"ipv4"}},"required":["host"]},
        {"properties":{"seen":{"type":"string","format":"date-time"},
        "point":{"type":"array","prefixItems":[{"type":"integer"},{"type":"integer"}]}}}],
        "properties":{"host":{},"seen":{},"point":{}},
        "additionalProperties":{"type":"integer","minimum":-5,"maximum":5}})",
    // Anything JSON.
    R"({})",
};

TEST(Validity, RandomWalksProduceValidJson) {
  auto vocab = testing::fixture_vocabulary("llama3");
  const int32_t eos = 128009;
  std::vector<uint32_t> mask(vocab->num_words());
  int finished = 0, total = 0;
  for (int si = 0; si < static_cast<int>(std::size(kSchemas)); ++si) {
    Json schema = Json::parse(kSchemas[si]);
    for (bool any_ws : {true, false}) {
      auto compiled = CompiledGrammar::compile(
          Grammar::from_json_schema(schema, SchemaOptions{.any_whitespace = any_ws, .max_whitespace = 4}), vocab);
      Validator validator(schema);
      for (int walk = 0; walk < 6; ++walk) {
        std::mt19937 rng(100 * si + walk + (any_ws ? 50 : 0));
        GrammarMatcher m(compiled);
        std::string text;
        for (int step = 0; step < 600 && !m.is_terminated(); ++step) {
          m.fill_next_token_bitmask(mask.data());
          std::vector<int32_t> allowed, closers;
          for (int32_t id = 0; id < vocab->size(); ++id)
            if (mask[id >> 5] >> (id & 31) & 1) {
              allowed.push_back(id);
              if (id != eos && id < vocab->num_tokens()) {
                std::string_view t = vocab->token(id);
                if (t.size() <= 2 && t.find_first_of("\"}],") != std::string_view::npos) closers.push_back(id);
              }
            }
          ASSERT_FALSE(allowed.empty()) << "dead end after '" << text << "'";
          bool eos_ok = mask[eos >> 5] >> (eos & 31) & 1;
          int32_t pick;
          double r = std::uniform_real_distribution<double>(0, 1)(rng);
          if (eos_ok && r < 0.5)
            pick = eos;
          else if (!closers.empty() && r < 0.8)
            pick = closers[rng() % closers.size()];
          else
            pick = allowed[rng() % allowed.size()];
          ASSERT_TRUE(m.accept_token(pick)) << "masked-in token rejected: " << pick;
          if (pick != eos) text += vocab->token(pick);
        }
        ++total;
        if (!m.is_terminated()) continue;  // step cap reached (long free text); nothing to judge
        ++finished;
        Json value;
        ASSERT_NO_THROW(value = Json::parse(text)) << "not JSON: " << text;
        EXPECT_TRUE(validator.valid(value)) << "schema " << si << " rejects: " << text;
      }
    }
  }
  std::printf("[validity] %d of %d walks finished; all finished outputs parsed and validated\n", finished, total);
  EXPECT_GE(finished, total * 3 / 4);
}

}  // namespace
}  // namespace brioche::grammar
