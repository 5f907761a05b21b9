#include "eval/ifeval_results.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace brioche::eval {

namespace fs = std::filesystem;

namespace {
constexpr const char* kSuffix = ".responses.jsonl";
}

void score_run(IfevalRun& run) {
  BRIOCHE_CHECK(run.prompts.size() == run.responses.size(), "run ", run.label, ": ", run.prompts.size(),
                " prompts but ", run.responses.size(), " responses");
  run.verdicts.clear();
  for (size_t i = 0; i < run.prompts.size(); ++i)
    run.verdicts.push_back(PromptScorer(run.prompts[i]).score(run.responses[i].text));
  run.accuracy = tally(run.prompts, run.verdicts);
}

std::string run_file_name(const std::string& label) { return label + kSuffix; }

void save_run(const IfevalRun& run, const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  BRIOCHE_CHECK(!ec, "--out ", dir, ": cannot create the folder: ", ec.message());
  const fs::path path = fs::path(dir) / run_file_name(run.label);
  const fs::path partial = path.string() + ".partial";
  {
    std::ofstream out(partial, std::ios::binary);
    BRIOCHE_CHECK(out.good(), "cannot write ", partial.string());
    for (size_t i = 0; i < run.prompts.size(); ++i) {
      const IfevalPrompt& p = run.prompts[i];
      nlohmann::ordered_json row;
      row["key"] = p.key;
      row["prompt"] = p.prompt;
      row["instruction_id_list"] = p.instruction_ids;
      row["kwargs"] = p.kwargs;
      row["response"] = run.responses[i].text;
      row["finish_reason"] = run.responses[i].finish_reason;
      row["completion_tokens"] = run.responses[i].completion_tokens;
      if (i < run.verdicts.size()) {
        row["strict"] = run.verdicts[i].strict;
        row["loose"] = run.verdicts[i].loose;
      }
      out << row.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
    }
    BRIOCHE_CHECK(out.good(), "writing ", partial.string(), " failed");
  }
  fs::rename(partial, path, ec);  // a run file is whole or absent
  BRIOCHE_CHECK(!ec, "cannot rename ", partial.string(), " to ", path.string(), ": ", ec.message());
}

IfevalRun load_run(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  BRIOCHE_CHECK(in.good(), "cannot read ", path);
  IfevalRun run;
  std::string name = fs::path(path).filename().string();
  run.label =
      name.size() > std::string(kSuffix).size() ? name.substr(0, name.size() - std::string(kSuffix).size()) : name;
  std::string line;
  size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    const std::string where = path + ":" + std::to_string(line_no);
    nlohmann::json row;
    try {
      row = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw Error(where + ": not a JSON object: " + e.what());
    }
    if (!row.is_object() || !row.contains("response") || !row["response"].is_string())
      throw Error(where + ": expected an object with a string 'response' (a saved IFEval row)");
    // The prompt part of the row is read like a prompts file line.
    std::vector<IfevalPrompt> one = parse_ifeval_prompts(line, where);
    run.prompts.push_back(std::move(one.at(0)));
    GeneratedResponse r;
    r.text = row["response"].get<std::string>();
    r.finish_reason = row.value("finish_reason", std::string());
    r.completion_tokens = row.value("completion_tokens", 0);
    run.responses.push_back(std::move(r));
  }
  BRIOCHE_CHECK(!run.prompts.empty(), path, ": no rows");
  return run;
}

std::vector<IfevalRun> load_runs(const std::string& dir) {
  std::error_code ec;
  BRIOCHE_CHECK(fs::is_directory(dir, ec), "--rescore ", dir, ": not a folder (expected the --out folder of a run)");
  std::vector<std::string> files;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.size() > std::string(kSuffix).size() && name.ends_with(kSuffix)) files.push_back(e.path().string());
  }
  BRIOCHE_CHECK(!files.empty(), "--rescore ", dir, ": no *", kSuffix, " files");
  std::sort(files.begin(), files.end(), [](const std::string& a, const std::string& b) {
    const bool a_base = fs::path(a).filename() == run_file_name("base");
    const bool b_base = fs::path(b).filename() == run_file_name("base");
    return a_base != b_base ? a_base : a < b;
  });
  std::vector<IfevalRun> runs;
  for (const std::string& f : files) runs.push_back(load_run(f));
  return runs;
}

}  // namespace brioche::eval
