#include <algorithm>
#include <map>

#include "core/error.h"
#include "eval/instruction_checker.h"
#include "eval/punkt.h"
#include "eval/python_text.h"

namespace brioche::eval {

namespace {

const std::map<std::string, CheckerFactory>& registry() {
  static const std::map<std::string, CheckerFactory> r = [] {
    std::map<std::string, CheckerFactory> out;
    for (auto family : {keyword_checkers, length_checkers, format_checkers, content_checkers, case_checkers,
                        punctuation_checkers, startend_checkers, combination_checkers, language_checkers})
      for (CheckerRegistration& reg : family()) out.emplace(reg.id, std::move(reg.make));
    return out;
  }();
  return r;
}

// The reference drops kwargs whose value is falsy before building the
// instruction: None, 0, "", [] and {} are all "absent".
const nlohmann::json* present(const nlohmann::json& kwargs, const char* name) {
  if (!kwargs.is_object()) return nullptr;
  auto it = kwargs.find(name);
  if (it == kwargs.end() || it->is_null()) return nullptr;
  if ((it->is_number() && it->get<double>() == 0) || (it->is_string() && it->get<std::string>().empty()) ||
      (it->is_array() && it->empty()) || (it->is_object() && it->empty()) || (it->is_boolean() && !it->get<bool>()))
    return nullptr;
  return &*it;
}

[[noreturn]] void missing(const std::string& id, const char* name, const char* expected, const nlohmann::json* found) {
  throw Error("instruction " + id + ": kwarg '" + name + "': expected " + expected + ", found " +
              (found ? found->dump() : std::string("nothing")));
}

}  // namespace

std::unique_ptr<InstructionChecker> make_checker(const std::string& instruction_id, const nlohmann::json& kwargs) {
  auto it = registry().find(instruction_id);
  if (it == registry().end())
    throw Error("unknown IFEval instruction id '" + instruction_id + "' (expected one of the " +
                std::to_string(registry().size()) + " ids of instruction_following_eval, e.g. punctuation:no_comma)");
  return it->second(kwargs);
}

std::vector<std::string> instruction_ids() {
  std::vector<std::string> ids;
  for (const auto& [id, _] : registry()) ids.push_back(id);
  return ids;
}

namespace checker_args {

int integer(const std::string& id, const nlohmann::json& kwargs, const char* name) {
  const nlohmann::json* v = present(kwargs, name);
  if (!v || !v->is_number_integer() || v->get<int64_t>() < 0) missing(id, name, "a non-negative integer", v);
  return v->get<int>();
}

std::string text(const std::string& id, const nlohmann::json& kwargs, const char* name) {
  const nlohmann::json* v = present(kwargs, name);
  if (!v || !v->is_string()) missing(id, name, "a non-empty string", v);
  return v->get<std::string>();
}

std::vector<std::string> texts(const std::string& id, const nlohmann::json& kwargs, const char* name) {
  const nlohmann::json* v = present(kwargs, name);
  if (!v || !v->is_array()) missing(id, name, "a non-empty list of strings", v);
  std::vector<std::string> out;
  for (const auto& e : *v) {
    if (!e.is_string()) missing(id, name, "a list of strings", v);
    out.push_back(e.get<std::string>());
  }
  return out;
}

bool less_than(const std::string& id, const nlohmann::json& kwargs, const char* name) {
  const std::string relation = text(id, kwargs, name);
  if (relation == "less than") return true;
  if (relation == "at least") return false;
  throw Error("instruction " + id + ": kwarg '" + name + "': expected \"less than\" or \"at least\", found \"" +
              relation + "\"");
}

}  // namespace checker_args

size_t count_words(std::string_view text) {
  size_t words = 0;
  bool in_word = false;
  for (size_t pos = 0; pos < text.size();) {
    const bool word_char = py_char_isword(next_codepoint(text, pos));
    if (word_char && !in_word) ++words;
    in_word = word_char;
  }
  return words;
}

size_t count_sentences(std::string_view text) { return PunktSentenceTokenizer::english().span_tokenize(text).size(); }

}  // namespace brioche::eval
