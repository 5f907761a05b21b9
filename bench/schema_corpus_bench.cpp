// brioche's side of bench/schema_corpus.py (the real-world schema corpus,
// side by side with xgrammar and llguidance): for each schema, compile it
// (schema -> grammar -> masks, timed; JSON Schema's reading: strict=false,
// oneOf exact or refused, blanks bounded to 20 in a row), then walk every
// instance's tokens: fill the mask (timed), check the token is allowed,
// accept it; at the end the EOS bit decides. One thread. Before each
// schema the process-wide mask cache is cleared and the tokenizer's shared
// rules prewarmed (untimed), as a server does once per tokenizer: no
// schema reuses another's masks.
//
//   schema_corpus_bench tokenizer.json.zst prepared.json out.jsonl
// prepared.json: {"eos": [ids], "schemas": [{"schema": ..., "instances": [{"ids": [...]}]}]}
// out.jsonl, one line per schema: {"compiled", "error", "compile_ms", "compile_cpu_ms", "accepted": [bool],
// "mask_us": [...]}
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_io.h"
#include "core/error.h"
#include "grammar/compiler.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "tokenizer/tokenizer.h"

using namespace brioche;
using Clock = std::chrono::steady_clock;

static double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s tokenizer.json.zst prepared.json out.jsonl\n", argv[0]);
    return 2;
  }
  auto tok = tokenizer::Tokenizer::from_tokenizer_json(bench::read_zstd_file(argv[1]));
  std::ifstream in(argv[2]);
  std::stringstream ss;
  ss << in.rdbuf();
  const auto prepared = nlohmann::ordered_json::parse(ss.str());
  grammar::VocabularyOptions options;
  const int32_t n = tok->vocab_size();
  std::vector<std::string> bytes(static_cast<size_t>(n));
  for (int32_t id = 0; id < n; ++id) {
    bytes[size_t(id)] = tok->token_bytes(id);
    if (tok->is_special(id)) options.special_ids.push_back(id);
  }
  for (const auto& e : prepared["eos"]) options.eos_ids.push_back(e.get<int32_t>());
  auto vocab = std::make_shared<const grammar::Vocabulary>(std::move(bytes), std::move(options));
  const int32_t eos = prepared["eos"][0].get<int32_t>();
  std::ofstream out(argv[3]);
  std::vector<uint32_t> mask(vocab->num_words());
  const grammar::SchemaOptions schema_options{
      .any_whitespace = true, .max_whitespace = 20, .strict = false, .one_of_as_any_of = false};
  size_t index = 0;
  for (const auto& entry : prepared["schemas"]) {
    nlohmann::ordered_json line{{"i", index++}};
    grammar::clear_shared_mask_cache();
    grammar::prewarm_shared_masks(vocab);
    std::shared_ptr<const grammar::CompiledGrammar> compiled;
    const double cpu0 = thread_cpu_ms();
    const auto t0 = Clock::now();
    try {
      compiled =
          grammar::CompiledGrammar::compile(grammar::Grammar::from_json_schema(entry["schema"], schema_options), vocab);
    } catch (const Error& e) {
      line["error"] = std::string(e.what()).substr(0, 300);
    }
    line["compile_ms"] = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    line["compile_cpu_ms"] = thread_cpu_ms() - cpu0;  // this thread's CPU time: less noisy on a shared machine
    line["compiled"] = compiled != nullptr;
    if (compiled) {  // where the compile time went (bench/schema_corpus.py --out keeps these)
      const grammar::CompileStats& st = compiled->stats();
      line["stats"] = {{"states", st.num_states},
                       {"scannable", st.num_scannable_states},
                       {"masks", st.num_distinct_masks},
                       {"shared", st.num_shared_states},
                       {"deferred", st.num_deferred_states},
                       {"work", st.work},
                       {"automaton_ms", st.automaton_seconds * 1e3},
                       {"memory_mb", compiled->memory_bytes() / 1e6}};  // after the compile, before any mask
    }
    std::vector<bool> accepted;
    std::vector<double> mask_us;
    std::vector<std::string> digests;  // per instance: a hash of every mask filled (A/B: masks unchanged)
    if (compiled) {
      for (const auto& inst : entry["instances"]) {
        grammar::GrammarMatcher m(compiled);
        bool ok = true;
        uint64_t digest = 1469598103934665603ull;
        auto allowed = [&](int32_t id) {
          const auto t = Clock::now();
          m.fill_next_token_bitmask(mask.data());
          mask_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t).count());
          for (uint32_t w : mask) digest = (digest ^ w) * 1099511628211ull;
          return (mask[size_t(id) >> 5] >> (id & 31) & 1) != 0;
        };
        for (const auto& id_json : inst["ids"]) {
          const int32_t id = id_json.get<int32_t>();
          if (!allowed(id) || !m.accept_token(id)) {
            ok = false;
            break;
          }
        }
        accepted.push_back(ok && allowed(eos));
        char hex[17];
        std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(digest));
        digests.push_back(hex);
      }
    }
    if (compiled) line["stats"]["memory_after_walks_mb"] = compiled->memory_bytes() / 1e6;  // deferred masks grow it
    line["accepted"] = accepted;
    line["mask_digests"] = digests;
    line["mask_us"] = mask_us;
    out << line.dump() << "\n";
    out.flush();
    std::fprintf(stderr, "\r%zu/%zu", index, prepared["schemas"].size());
  }
  std::fprintf(stderr, "\n");
  return 0;
}
