// `brioche data`: build and check training data.
//   curate  INPUT -o OUT   preference pairs from rated completions (UltraFeedback)
//   convert INPUT -o OUT   TRL / HH-RLHF / ShareGPT / Alpaca rows into what `brioche train` reads
//   inspect FILE           layouts, bad rows, lengths, token-length histogram
// The work is in src/data/ (docs/data.md); this file maps flags onto it.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>

#include "cli/common.h"
#include "cli/data_tokens.h"
#include "cli/subcommands.h"
#include "core/error.h"
#include "data/convert.h"
#include "data/curate.h"
#include "data/inspect.h"

namespace brioche::cli {

namespace {

// Flags every `brioche data` subcommand shares.
struct ReadFlags {
  std::string input;
  std::string from = "auto";
  std::string score = "auto";
  bool strict = false;
  std::string model;  // -m: measure token lengths through this model ("" with --max-tokens: the default model)
  bool model_given = false;

  void add_to(CLI::App* app, const char* input_help) {
    app->add_option("input", input, input_help)->required();
    app->add_option("--from", from, "input layout: auto (detected per row) or " + data::layout_names())
        ->capture_default_str();
    app->add_flag("--strict", strict,
                  "fail at the first bad row (invalid JSON, wrong shape, other kind) "
                  "instead of counting it");
    app->add_option_function<std::string>(
        "-m,--model", [this](const std::string& v) { model = v, model_given = true; },
        "measure token lengths with this model's tokenizer and chat template "
        "(GGUF file or safetensors directory)");
  }
  void add_score(CLI::App* app) {
    app->add_option("--score", score,
                    "which rating ranks UltraFeedback completions: auto (overall_score when every "
                    "completion has one, else fine-grained), overall, fine-grained, or an "
                    "annotation aspect (helpfulness, honesty, instruction_following, truthfulness)")
        ->capture_default_str();
  }

  data::ReadOptions read_options() const {
    data::ReadOptions o{.scores = {.source = score}, .strict = strict};
    if (isatty(STDERR_FILENO))
      o.progress = [](int64_t rows) {
        if (rows < 0)
          std::fprintf(stderr, "\r\033[K");
        else
          std::fprintf(stderr, "\r\033[K%lld rows read", (long long)rows);
        std::fflush(stderr);
      };
    if (from != "auto") {
      o.layout = data::parse_layout(from);
      if (!o.layout) throw UsageError{"--from " + from + ": expected auto or one of " + data::layout_names()};
    }
    const bool known = score == "auto" || score == "overall" || score == "fine-grained" || score == "helpfulness" ||
                       score == "honesty" || score == "instruction_following" || score == "truthfulness";
    if (!known)
      throw UsageError{"--score " + score +
                       ": expected auto, overall, fine-grained, helpfulness, honesty, "
                       "instruction_following or truthfulness"};
    if (!std::filesystem::exists(input)) throw UsageError{"input not found: " + input};
    if (std::filesystem::is_directory(input))
      throw UsageError{input + " is a directory: expected a .jsonl or .json file"};
    return o;
  }

  // The token counter when -m was given or a token limit needs one.
  std::unique_ptr<ModelTokenCounter> counter(bool needed) const {
    if (!model_given && !needed) return nullptr;
    const std::string path = resolve_model_path(model);
    try {
      return std::make_unique<ModelTokenCounter>(path);
    } catch (const Error& e) {
      throw UsageError{e.what()};
    }
  }
};

struct OutputFlags {
  data::OutputOptions output;
  double valid_fraction = 0.0;
  uint64_t seed = 0;
  int64_t max_tokens = 0;

  void add_to(CLI::App* app) {
    app->add_option("-o,--output", output.out,
                    "a directory (gets train.jsonl, valid.jsonl, stats.json: what "
                    "`brioche train --data` reads) or FILE.jsonl")
        ->required();
    app->add_option("--valid-fraction", valid_fraction, "share of the kept rows that go to valid.jsonl (default 0)")
        ->check(CLI::Range(0.0, 0.99));
    app->add_option("--seed", seed, "seed of the train/valid split (and of best-vs-random) (default 0)");
    app->add_option("--max-tokens", max_tokens,
                    "drop rows whose prompt + longest reply exceed N tokens (the model's "
                    "tokenizer and chat template, as `brioche train` counts; needs -m or "
                    "the default model)")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 40));
    app->add_flag("--overwrite", output.overwrite, "replace existing output files");
    app->add_option("--stats", output.stats_path,
                    "write the stats JSON here (default: OUT/stats.json for a directory)");
  }
};

// Every flag of `brioche data`, by subcommand.
struct DataFlags {
  ReadFlags curate_read, convert_read, inspect_read;
  OutputFlags curate_out, convert_out;
  std::string pairs = "best-vs-worst";
  double min_gap = 0.0, max_length_ratio = 0.0;
  bool no_dedup = false, convert_dedup = false, inspect_json = false;
};

void print_written(const std::vector<std::string>& files, const data::SplitRows& rows) {
  std::printf("wrote %s (%zu rows)", files[0].c_str(), rows.train.size());
  if (!rows.valid.empty()) std::printf(", %s (%zu rows)", files[1].c_str(), rows.valid.size());
  if (files.size() > (rows.valid.empty() ? 1u : 2u)) std::printf(", %s", files.back().c_str());
  std::printf("\n");
}

int run_curate(const DataFlags& f) {
  const ReadFlags& read = f.curate_read;
  const OutputFlags& out = f.curate_out;
  const std::string& pairs = f.pairs;
  data::CurateOptions o{.seed = out.seed,
                        .min_gap = f.min_gap,
                        .max_length_ratio = f.max_length_ratio,
                        .dedup = !f.no_dedup,
                        .max_tokens = out.max_tokens,
                        .valid_fraction = out.valid_fraction,
                        .read = read.read_options()};
  if (pairs == "best-vs-random")
    o.selection = data::PairSelection::BestVsRandom;
  else if (pairs != "best-vs-worst")
    throw UsageError{"--pairs " + pairs + ": expected best-vs-worst or best-vs-random"};
  try {
    data::check_output(out.output, out.valid_fraction);
  } catch (const Error& e) {
    throw UsageError{e.what()};
  }
  auto counter = read.counter(out.max_tokens > 0);
  o.counter = counter.get();
  data::CurateResult r = data::curate(read.input, o);
  std::printf("%s", r.report.summary().c_str());
  if (r.stats.contains("scores"))
    std::printf("scores: chosen mean %.3f, rejected mean %.3f, gap mean %.3f\n",
                r.stats["scores"]["chosen_mean"].get<double>(), r.stats["scores"]["rejected_mean"].get<double>(),
                r.stats["scores"]["gap_mean"].get<double>());
  if (r.report.kept() == 0) {
    std::fprintf(stderr, "brioche data curate: no pairs kept from %s; nothing written\n", read.input.c_str());
    return kExitFailure;
  }
  print_written(data::write_output(out.output, r.rows, r.stats), r.rows);
  return kExitOk;
}

int run_convert(const ReadFlags& read, const OutputFlags& out, bool dedup) {
  data::ConvertOptions o{.read = read.read_options(),
                         .dedup = dedup,
                         .max_tokens = out.max_tokens,
                         .valid_fraction = out.valid_fraction,
                         .seed = out.seed};
  if (o.read.layout && data::row_kind(*o.read.layout) == data::RowKind::Rated)
    throw UsageError{"--from " + read.from + ": rated completions become pairs with `brioche data curate`"};
  try {
    data::check_output(out.output, out.valid_fraction);
  } catch (const Error& e) {
    throw UsageError{e.what()};
  }
  auto counter = read.counter(out.max_tokens > 0);
  o.counter = counter.get();
  data::ConvertResult r = data::convert(read.input, o);
  std::printf("%s", r.report.summary().c_str());
  std::printf("layouts:");
  for (const auto& [name, n] : r.stats["layouts"].items())
    std::printf(" %s %lld", name.c_str(), (long long)n.get<int64_t>());
  std::printf("\n");
  if (r.report.kept() == 0) {
    std::fprintf(stderr, "brioche data convert: no rows kept from %s; nothing written\n", read.input.c_str());
    return kExitFailure;
  }
  print_written(data::write_output(out.output, r.rows, r.stats), r.rows);
  return kExitOk;
}

int run_inspect(const ReadFlags& read, bool as_json) {
  data::InspectOptions o{.read = read.read_options()};
  auto counter = read.counter(false);
  o.counter = counter.get();
  const data::json stats = data::inspect(read.input, o);
  if (as_json)
    std::printf("%s\n", stats.dump(2, ' ', false, data::json::error_handler_t::replace).c_str());
  else
    std::printf("%s", data::inspect_text(stats).c_str());
  return kExitOk;
}

}  // namespace

Subcommand add_data_command(CLI::App& root) {
  CLI::App* app = root.add_subcommand("data", "build training data: curate preference pairs, convert layouts, inspect");
  app->require_subcommand(1);

  auto s = std::make_shared<DataFlags>();

  CLI::App* curate = app->add_subcommand(
      "curate", "preference pairs {prompt, chosen, rejected} from rated completions (UltraFeedback layouts)");
  s->curate_read.add_to(curate, "JSONL (or JSON array) of UltraFeedback rows");
  s->curate_read.add_score(curate);
  s->curate_out.add_to(curate);
  curate
      ->add_option("--pairs", s->pairs,
                   "best-vs-worst, or best-vs-random (a seeded draw among the completions rated "
                   "below the best)")
      ->capture_default_str();
  curate->add_option("--min-gap", s->min_gap, "least score difference chosen - rejected (ties never pair) (default 0)");
  curate->add_option("--max-length-ratio", s->max_length_ratio,
                     "drop pairs whose longer reply is over R times the shorter, in characters (default 0 = off)");
  curate->add_flag("--no-dedup", s->no_dedup, "keep every row of a repeated prompt (default: the first kept one)");

  CLI::App* convert = app->add_subcommand(
      "convert", "TRL conversational, HH-RLHF, ShareGPT or Alpaca rows into what `brioche train` reads");
  s->convert_read.add_to(convert, "JSONL (or JSON array) file");
  s->convert_out.add_to(convert);
  convert->add_flag("--dedup", s->convert_dedup, "keep only the first row of each prompt");

  CLI::App* inspect = app->add_subcommand("inspect", "a dataset's layout, rows, bad rows, lengths and token histogram");
  s->inspect_read.add_to(inspect, "JSONL (or JSON array) file");
  s->inspect_read.add_score(inspect);
  inspect->add_flag("--json", s->inspect_json, "print the stats as JSON");

  return {app, [s, curate, convert, inspect]() -> int {
            if (curate->parsed()) return run_curate(*s);
            if (convert->parsed()) return run_convert(s->convert_read, s->convert_out, s->convert_dedup);
            if (inspect->parsed()) return run_inspect(s->inspect_read, s->inspect_json);
            throw UsageError{"expected a subcommand: curate, convert or inspect"};
          }};
}

}  // namespace brioche::cli
