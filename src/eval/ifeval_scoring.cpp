#include "eval/ifeval_scoring.h"

#include <algorithm>

#include "core/error.h"
#include "eval/embedded_data.h"
#include "eval/python_text.h"

namespace brioche::eval {

std::vector<IfevalPrompt> parse_ifeval_prompts(std::string_view jsonl, const std::string& source) {
  std::vector<IfevalPrompt> prompts;
  size_t line_no = 0;
  for (std::string_view line : split_on(jsonl, "\n")) {
    ++line_no;
    if (py_strip(line).empty()) continue;
    const std::string where = source + ":" + std::to_string(line_no);
    nlohmann::json row;
    try {
      row = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw Error(where + ": not a JSON object: " + e.what());
    }
    IfevalPrompt p;
    try {
      BRIOCHE_CHECK(row.is_object(), "expected a JSON object, found ", row.type_name());
      BRIOCHE_CHECK(row.contains("prompt") && row["prompt"].is_string(), "expected a string 'prompt'");
      BRIOCHE_CHECK(row.contains("instruction_id_list") && row["instruction_id_list"].is_array(),
                    "expected a list 'instruction_id_list'");
      BRIOCHE_CHECK(row.contains("kwargs") && row["kwargs"].is_array() &&
                        row["kwargs"].size() == row["instruction_id_list"].size(),
                    "expected a list 'kwargs' with one object per instruction (", row["instruction_id_list"].size(),
                    "), found ", row.contains("kwargs") ? row["kwargs"].dump() : "none");
      p.key = row.contains("key") && row["key"].is_number_integer() ? row["key"].get<int64_t>() : int64_t(line_no);
      p.prompt = row["prompt"].get<std::string>();
      for (const auto& id : row["instruction_id_list"]) {
        BRIOCHE_CHECK(id.is_string(), "instruction ids are strings, found ", id.dump());
        p.instruction_ids.push_back(id.get<std::string>());
      }
      for (const auto& kw : row["kwargs"]) p.kwargs.push_back(kw);
      PromptScorer check_arguments(p);
    } catch (const Error& e) {
      throw Error(where + ": " + e.what());
    }
    prompts.push_back(std::move(p));
  }
  BRIOCHE_CHECK(!prompts.empty(), source,
                ": no prompts (expected JSON lines with prompt, instruction_id_list, kwargs)");
  return prompts;
}

const std::vector<IfevalPrompt>& builtin_ifeval_prompts() {
  static const std::vector<IfevalPrompt> prompts =
      parse_ifeval_prompts(embedded_ifeval_prompts(), "built-in IFEval prompts");
  return prompts;
}

std::array<std::string, kLooseVariants> loose_variants(std::string_view response) {
  const std::vector<std::string_view> lines = split_on(response, "\n");
  auto join = [&](size_t from, size_t to) {  // lines[from:to] joined, Python slice bounds
    std::string out;
    for (size_t i = from; i < to && i < lines.size(); ++i) {
      if (i > from) out += '\n';
      out.append(lines[i]);
    }
    return std::string(py_strip(out));
  };
  const size_t n = lines.size();
  const std::string first = join(1, n), last = join(0, n - 1), both = n >= 2 ? join(1, n - 1) : std::string();
  auto no_stars = [](std::string_view s) { return replace_all(s, "*", ""); };
  return {std::string(response), no_stars(response), first,         last, both,
          no_stars(first),       no_stars(last),     no_stars(both)};
}

bool ResponseVerdicts::prompt_strict() const {
  return std::all_of(strict.begin(), strict.end(), [](bool b) { return b; });
}
bool ResponseVerdicts::prompt_loose() const {
  return std::all_of(loose.begin(), loose.end(), [](bool b) { return b; });
}

PromptScorer::PromptScorer(const IfevalPrompt& prompt) {
  for (size_t i = 0; i < prompt.instruction_ids.size(); ++i)
    checkers_.push_back(make_checker(prompt.instruction_ids[i], prompt.kwargs[i]));
}

std::vector<std::array<bool, kLooseVariants>> PromptScorer::variant_verdicts(std::string_view response) const {
  const auto variants = loose_variants(response);
  std::vector<std::array<bool, kLooseVariants>> out(checkers_.size());
  for (size_t i = 0; i < checkers_.size(); ++i)
    for (int v = 0; v < kLooseVariants; ++v)
      out[i][v] = !py_strip(variants[v]).empty() && checkers_[i]->follows(variants[v]);
  return out;
}

ResponseVerdicts PromptScorer::score(std::string_view response) const {
  const auto variants = loose_variants(response);
  ResponseVerdicts out;
  for (const auto& checker : checkers_) {
    out.strict.push_back(!py_strip(response).empty() && checker->follows(response));
    bool loose = false;
    for (int v = 0; v < kLooseVariants && !loose; ++v)
      loose = !py_strip(variants[v]).empty() && checker->follows(variants[v]);
    out.loose.push_back(loose);
  }
  return out;
}

IfevalAccuracy tally(const std::vector<IfevalPrompt>& prompts, const std::vector<ResponseVerdicts>& verdicts) {
  BRIOCHE_CHECK(prompts.size() == verdicts.size(), "tally: ", prompts.size(), " prompts but ", verdicts.size(),
                " scored responses");
  IfevalAccuracy acc;
  for (size_t p = 0; p < prompts.size(); ++p) {
    const ResponseVerdicts& v = verdicts[p];
    ++acc.prompts;
    acc.prompt_strict += v.prompt_strict();
    acc.prompt_loose += v.prompt_loose();
    for (size_t i = 0; i < v.strict.size(); ++i) {
      ++acc.instructions;
      acc.inst_strict += v.strict[i];
      acc.inst_loose += v.loose[i];
      InstructionTally& t = acc.per_instruction[prompts[p].instruction_ids[i]];
      ++t.total;
      t.strict += v.strict[i];
      t.loose += v.loose[i];
    }
  }
  return acc;
}

}  // namespace brioche::eval
