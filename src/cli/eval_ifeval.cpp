// `brioche eval ifeval`: IFEval's 541 verifiable-instruction prompts through
// the engine (continuous batching, the chat template, greedy), scored
// strict and loose by eval/'s checkers; with --adapter, the base and each
// adapter on the same prompts, compared pairwise. --rescore re-scores a
// saved run without generating.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/common.h"
#include "cli/eval_commands.h"
#include "cli/load_engine.h"
#include "cli/prompt.h"
#include "core/error.h"
#include "eval/ifeval_generate.h"
#include "eval/ifeval_report.h"
#include "eval/ifeval_results.h"
#include "model/model.h"
#include "model/served_adapter.h"
#include "train/adapter_io.h"
#include "train/train_base.h"

namespace brioche::cli {

namespace {

namespace fs = std::filesystem;

struct IfevalFlags {
  ModelFlags model;
  std::vector<std::string> adapters;  // PATH or NAME=PATH
  std::string prompts;                // "" : the built-in IFEval prompts
  int max_tokens = 1280;
  int limit = 0;
  std::string out;
  std::string report;
  std::string rescore;
  float temperature = 0;
  uint64_t seed = 0;
  int parallel = 64;
  int kv_mb = 0;
  int max_batch_tokens = 0;
  std::string command_line;
};

struct NamedAdapter {
  std::string name, path;
};

NamedAdapter parse_adapter_flag(const std::string& spec) {
  const size_t eq = spec.find('=');
  if (eq != std::string::npos && eq > 0 && eq + 1 < spec.size() && !fs::exists(spec))
    return {spec.substr(0, eq), spec.substr(eq + 1)};
  fs::path p(spec);
  std::string name = (p.has_filename() ? p : p.parent_path()).filename().string();
  if (p.extension() == ".gguf") name = p.stem().string();
  if (name.empty() || name == "base") name = "adapter";
  return {name, spec};
}

std::string default_out_dir() {
  const std::time_t now = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "ifeval-%Y%m%d-%H%M%S", std::localtime(&now));
  return buf;
}

std::string read_text_file(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in.good()) throw UsageError{std::string(flag) + " " + path + ": cannot read the file"};
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// "[LABEL] DONE/TOTAL done, TOKENS tokens, RATE tok/s, ELAPSED, about ETA
// left" on a terminal (rewritten in place); elsewhere a line every 10% or 30 s.
class Progress {
 public:
  explicit Progress(std::string label) : label_(std::move(label)), tty_(isatty(STDERR_FILENO)) {}
  void update(int done, int total, int64_t tokens) {
    const double s = std::chrono::duration<double>(Clock::now() - start_).count();
    const int decile = total ? done * 10 / total : 10;
    if (!tty_ && decile == last_decile_ && done != total && s - last_print_s_ < 30) return;
    last_decile_ = decile;
    last_print_s_ = s;
    const double left = done > 0 ? s * (total - done) / done : 0;
    std::fprintf(stderr, "%s[%s] %d/%d prompts done, %lld tokens, %.0f tok/s, %s elapsed%s%s", tty_ ? "\r" : "",
                 label_.c_str(), done, total, (long long)tokens, s > 0 ? tokens / s : 0.0, duration(s).c_str(),
                 done > 0 && done < total ? (", about " + duration(left) + " left").c_str() : "",
                 tty_ ? "\033[K" : "\n");
    if (tty_ && done == total) std::fputc('\n', stderr);
    std::fflush(stderr);
  }
  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

 private:
  using Clock = std::chrono::steady_clock;
  static std::string duration(double s) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%dm%02ds", int(s) / 60, int(s) % 60);
    return buf;
  }
  std::string label_;
  bool tty_;
  int last_decile_ = -1;
  double last_print_s_ = 0;
  Clock::time_point start_ = Clock::now();
};

std::vector<eval::IfevalRun> generate_runs(const IfevalFlags& f, const std::vector<eval::IfevalPrompt>& prompts) {
  std::vector<NamedAdapter> adapters;
  for (const std::string& spec : f.adapters) {
    NamedAdapter a = parse_adapter_flag(spec);
    for (const NamedAdapter& other : adapters)
      if (other.name == a.name)
        throw UsageError{"--adapter: two adapters named '" + a.name + "'; name them: --adapter NAME=PATH"};
    adapters.push_back(std::move(a));
  }
  engine::EngineOptions options;
  const Device device = f.model.resolved_device();
  options.kv.kv_memory_bytes = f.kv_mb > 0 ? size_t(f.kv_mb) << 20 : device == Device::CUDA ? 0 : size_t(1024) << 20;
  options.scheduler.max_running = f.parallel;
  options.scheduler.max_batch_tokens = f.max_batch_tokens > 0   ? f.max_batch_tokens
                                       : device == Device::CUDA ? 2048
                                                                : 512;
  std::fprintf(stderr, "loading %s\n", resolve_model_path(f.model.model).c_str());
  auto engine = load_engine(f.model, options);
  if (!engine->model()) throw UsageError{"the model has no chat template or tokenizer for IFEval prompts"};

  std::vector<std::pair<std::string, std::shared_ptr<const model::ServedAdapter>>> variants = {{"base", nullptr}};
  uint64_t next_id = 1;
  for (const NamedAdapter& a : adapters) {
    std::shared_ptr<model::ServedAdapter> host;
    try {
      const bool permuted = train::has_permuted_qk(*engine->model());
      host = train::serving_adapter(*train::load_adapter(a.path, engine->model()->config(), permuted, 1 << 16,
                                                         train::lora_shapes_of(*engine->model())),
                                    Device::CPU);
    } catch (const Error& e) {
      throw UsageError{"--adapter " + a.name + " (" + a.path + "): " + e.what()};
    }
    host->name = a.name;
    host->path = a.path;
    host->id = 0x9e3779b97f4a7c15ull * next_id++ ^ 0x5bd1e9955bd1e995ull;  // distinct prefix-cache chains
    variants.emplace_back(a.name, device == Device::CPU ? host : model::copy_to_device(*host, device));
  }

  std::vector<eval::IfevalRun> runs;
  for (const auto& [label, adapter] : variants) {
    Progress progress(label);
    eval::IfevalGeneration how;
    how.render_prompt = [&engine](const std::string& user) {
      nlohmann::ordered_json messages = nlohmann::ordered_json::array();
      messages.push_back({{"role", "user"}, {"content", user}});
      return chat_prompt_tokens(*engine, messages);
    };
    how.adapter = adapter;
    how.max_tokens = f.max_tokens;
    how.temperature = f.temperature;
    how.seed = f.seed;
    how.progress = [&progress](int done, int total, int64_t tokens) { progress.update(done, total, tokens); };
    eval::IfevalRun run;
    run.label = label;
    run.prompts = prompts;
    run.responses = eval::generate_ifeval_responses(*engine, prompts, how);
    eval::score_run(run);
    std::fprintf(stderr, "[%s] generated and scored in %.1f s\n", label.c_str(), progress.seconds());
    runs.push_back(std::move(run));
  }
  return runs;
}

nlohmann::ordered_json summary_json(const std::vector<eval::IfevalRun>& runs,
                                    const std::vector<eval::RunComparison>& comparisons) {
  nlohmann::ordered_json j;
  for (const eval::IfevalRun& r : runs) {
    const eval::IfevalAccuracy& a = r.accuracy;
    nlohmann::ordered_json per = nlohmann::ordered_json::object();
    for (const auto& [id, t] : a.per_instruction) per[id] = {{"n", t.total}, {"strict", t.strict}, {"loose", t.loose}};
    j["runs"].push_back({{"label", r.label},
                         {"prompts", a.prompts},
                         {"instructions", a.instructions},
                         {"prompt_level_strict_acc", a.prompt_strict_acc()},
                         {"prompt_level_loose_acc", a.prompt_loose_acc()},
                         {"inst_level_strict_acc", a.inst_strict_acc()},
                         {"inst_level_loose_acc", a.inst_loose_acc()},
                         {"per_instruction", per}});
  }
  for (const eval::RunComparison& c : comparisons) {
    nlohmann::ordered_json cj = {{"base", c.base_label}, {"other", c.other_label}};
    for (const eval::MetricComparison& m : c.metrics) {
      nlohmann::ordered_json mj = {{"metric", m.name},
                                   {"base", m.base},
                                   {"other", m.other},
                                   {"difference", m.interval.difference},
                                   {"ci95", {m.interval.low, m.interval.high}}};
      if (m.has_mcnemar)
        mj["mcnemar"] = {{"gained", m.mcnemar.b_only}, {"lost", m.mcnemar.a_only}, {"p_value", m.mcnemar.p_value}};
      cj["metrics"].push_back(mj);
    }
    for (const eval::FlippedPrompt& fl : c.flips) cj[fl.gained ? "gained_keys" : "lost_keys"].push_back(fl.key);
    j["comparisons"].push_back(cj);
  }
  return j;
}

// The flags that shaped the run, for the report.
std::string command_line(const IfevalFlags& f) {
  std::string c = "brioche eval ifeval";
  if (!f.model.model.empty()) c += " -m " + f.model.model;
  for (const std::string& a : f.adapters) c += " --adapter " + a;
  if (!f.prompts.empty()) c += " --prompts " + f.prompts;
  if (!f.rescore.empty()) return c + " --rescore " + f.rescore;
  c += " --max-tokens " + std::to_string(f.max_tokens);
  if (f.limit) c += " --limit " + std::to_string(f.limit);
  if (f.temperature > 0) c += " --temperature " + std::to_string(f.temperature) + " --seed " + std::to_string(f.seed);
  return c;
}

int run_ifeval(const IfevalFlags& f) {
  if (!f.rescore.empty() && !f.adapters.empty())
    throw UsageError{"--rescore re-scores saved responses; it takes no --adapter (the saved runs are the models)"};
  std::vector<eval::IfevalRun> runs;
  std::string out_dir = f.out;
  if (!f.rescore.empty()) {
    try {
      runs = eval::load_runs(f.rescore);
    } catch (const Error& e) {
      throw UsageError{e.what()};
    }
    for (eval::IfevalRun& r : runs) {
      if (f.limit > 0 && size_t(f.limit) < r.prompts.size()) {
        r.prompts.resize(f.limit);
        r.responses.resize(f.limit);
      }
      eval::score_run(r);
    }
    std::fprintf(stderr, "re-scored %zu saved run(s) from %s\n", runs.size(), f.rescore.c_str());
  } else {
    std::vector<eval::IfevalPrompt> prompts;
    try {
      prompts = f.prompts.empty() ? eval::builtin_ifeval_prompts()
                                  : eval::parse_ifeval_prompts(read_text_file(f.prompts, "--prompts"), f.prompts);
    } catch (const Error& e) {
      throw UsageError{e.what()};
    }
    if (f.limit > 0 && size_t(f.limit) < prompts.size()) prompts.resize(f.limit);
    if (out_dir.empty()) out_dir = default_out_dir();
    runs = generate_runs(f, prompts);
  }

  std::vector<eval::RunComparison> comparisons;
  for (size_t i = 1; i < runs.size(); ++i) comparisons.push_back(eval::compare_runs(runs[0], runs[i]));

  std::printf("IFEval: %d prompts, %d instructions\n\n%s\n%s", runs[0].accuracy.prompts, runs[0].accuracy.instructions,
              eval::accuracy_table(runs).c_str(), eval::per_instruction_table(runs).c_str());
  for (const eval::RunComparison& c : comparisons) std::printf("\n%s", eval::comparison_text(c, runs[0]).c_str());

  if (!out_dir.empty()) {
    for (const eval::IfevalRun& r : runs) eval::save_run(r, out_dir);
    std::ofstream(fs::path(out_dir) / "summary.json") << summary_json(runs, comparisons).dump(1) << "\n";
    std::fprintf(stderr, "responses and verdicts saved in %s/ (re-score with --rescore %s)\n", out_dir.c_str(),
                 out_dir.c_str());
  }
  if (!f.report.empty()) {
    const std::string title = f.rescore.empty() ? resolve_model_path(f.model.model) : f.rescore;
    std::ofstream out(f.report, std::ios::binary);
    if (!out.good()) throw UsageError{"--report " + f.report + ": cannot write the file"};
    out << eval::html_report(
        {.title = title, .command_line = f.command_line, .runs = &runs, .comparisons = &comparisons});
    std::fprintf(stderr, "report written to %s\n", f.report.c_str());
  }
  return kExitOk;
}

}  // namespace

Subcommand add_eval_ifeval_command(CLI::App& eval) {
  auto f = std::make_shared<IfevalFlags>();
  CLI::App* app = eval.add_subcommand(
      "ifeval", "IFEval: 541 prompts with verifiable instructions, strict and loose accuracy; base vs --adapter");
  app->add_option("-m,--model", f->model.model,
                  "GGUF file or safetensors directory (default: SmolLM2-135M-Instruct Q4_1)");
  app->add_option("-t,--threads", f->model.threads, "CPU threads (default: all)")->check(CLI::Range(0, 1024));
  app->add_option("--device", f->model.device, "cpu, cuda, or auto")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  app->add_option("--weights-dtype", f->model.weights_dtype, "stored, or convert weights at load: f32, f16, bf16")
      ->check(CLI::IsMember({"stored", "f32", "f16", "bf16"}))
      ->capture_default_str();
  app->add_option("--adapter", f->adapters,
                  "LoRA adapter to compare with the base (PEFT folder or GGUF LoRA; NAME=PATH names it); repeatable");
  app->add_option("--prompts", f->prompts,
                  "prompts file in IFEval's input_data.jsonl layout (default: the built-in 541)");
  app->add_option("-n,--max-tokens", f->max_tokens, "tokens per response at most")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app->add_option("--limit", f->limit, "only the first N prompts")->check(CLI::Range(1, 1 << 30));
  app->add_option("--out", f->out, "folder for the responses and verdicts (default: ./ifeval-<date>-<time>)");
  app->add_option("--report", f->report, "write a self-contained HTML report here");
  app->add_option("--rescore", f->rescore, "re-score the responses saved in this --out folder; no generation");
  app->add_option("--temp,--temperature", f->temperature, "sampling temperature; 0 = greedy")
      ->check(CLI::Range(0.0f, 100.0f))
      ->capture_default_str();
  app->add_option("--seed", f->seed, "sampling seed (each prompt uses seed + its key)")->capture_default_str();
  app->add_option("--parallel", f->parallel, "sequences generated at once")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app->add_option("--kv-mb", f->kv_mb, "KV cache MiB (0: 1024 on the CPU, fit the GPU)")->check(CLI::Range(0, 1 << 24));
  app->add_option("--max-batch-tokens", f->max_batch_tokens, "rows per engine step (0: 512 CPU, 2048 CUDA)")
      ->check(CLI::Range(0, 1 << 20));
  return {app, [f] {
            f->command_line = command_line(*f);
            return run_ifeval(*f);
          }};
}

}  // namespace brioche::cli
