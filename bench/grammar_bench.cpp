// Structured-output engine speed: compile time and per-token mask time on
// the Llama-3 vocabulary (128k tokens), single thread, the schemas of
// tools/oracle/grammar_cases.py (same as bench/grammar_xgrammar.py).
// Compile = schema -> grammar -> token masks (what xgrammar's
// compile_json_schema measures), p50 of 5, in two settings:
//   cold: the process-wide mask cache cleared first (nothing reused);
//   warm: cleared, then prewarm_shared_masks(vocab) (the builtin JSON rules
//         and formats, done once per tokenizer) untimed; the schema's own
//         rules are computed.
// first_us: the first mask of a walk (the grammar's start state).
//
//   ./build/cpu/bench/grammar_bench [tokenizer.json.zst] [walks] [schema name | schema.json]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_io.h"
#include "grammar/compiler.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"

using namespace brioche::grammar;
using Clock = std::chrono::steady_clock;

namespace {

std::vector<int> byte_table() {
  std::vector<int> table(512, -1);
  std::vector<bool> kept(256, false);
  for (int b = 0; b < 256; ++b)
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) {
      kept[b] = true;
      table[b] = b;
    }
  int n = 0;
  for (int b = 0; b < 256; ++b)
    if (!kept[b]) table[256 + n++] = b;
  return table;
}

std::shared_ptr<const Vocabulary> load_llama3(const std::string& path) {
  auto j = nlohmann::json::parse(brioche::bench::read_zstd_file(path));
  int32_t n = 0;
  for (auto& [k, v] : j["model"]["vocab"].items()) n = std::max(n, v.get<int32_t>() + 1);
  for (auto& t : j["added_tokens"]) n = std::max(n, t["id"].get<int32_t>() + 1);
  std::vector<std::string> tokens(n);
  auto table = byte_table();
  for (auto& [k, v] : j["model"]["vocab"].items()) {
    std::string bytes;
    for (size_t i = 0; i < k.size();) {
      unsigned char c = k[i];
      size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : 3;
      uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : (c & 0x0F);
      for (size_t q = 1; q < len; ++q) cp = (cp << 6) | (k[i + q] & 0x3F);
      i += len;
      bytes += static_cast<char>(table[cp]);
    }
    tokens[v.get<int32_t>()] = bytes;
  }
  std::vector<int32_t> special;
  for (auto& t : j["added_tokens"])
    if (t["special"].get<bool>()) {
      tokens[t["id"].get<int32_t>()].clear();
      special.push_back(t["id"].get<int32_t>());
    }
  return std::make_shared<Vocabulary>(std::move(tokens),
                                      VocabularyOptions{.eos_ids = {128001, 128009}, .special_ids = special});
}

// The checkout this file lives in (the bench has no source-dir define).
std::string source_dir() {
  std::string f = __FILE__;
  return f.substr(0, f.rfind("/bench/"));
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

// Seeded random walks (same policy as bench/grammar_xgrammar.py): mask time
// per step; `firsts` gets each walk's first mask.
void run_walks(const std::shared_ptr<const CompiledGrammar>& compiled, const Vocabulary& vocab, int walks,
               std::vector<double>* masks, std::vector<double>* firsts) {
  std::vector<uint32_t> mask(vocab.num_words());
  std::mt19937 rng(1234);
  for (int w = 0; w < walks; ++w) {
    GrammarMatcher m(compiled);
    for (int step = 0; step < 64 && !m.is_terminated(); ++step) {
      auto t0 = Clock::now();
      m.fill_next_token_bitmask(mask.data());
      masks->push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      if (step == 0 && firsts) firsts->push_back(masks->back());
      std::vector<int32_t> allowed, short_allowed;
      for (int32_t id = 0; id < vocab.size(); ++id)
        if (mask[id >> 5] >> (id & 31) & 1) {
          allowed.push_back(id);
          if (id < vocab.num_tokens() && vocab.token(id).size() == 1) short_allowed.push_back(id);
        }
      if (allowed.empty()) break;
      bool eos_ok = (mask[128009 >> 5] >> (128009 & 31)) & 1;
      std::uniform_real_distribution<double> u(0, 1);
      int32_t pick;
      if (eos_ok && u(rng) < 0.4)
        pick = 128009;
      else {
        auto& pool = (!short_allowed.empty() && u(rng) < 0.6) ? short_allowed : allowed;
        pick = pool[rng() % pool.size()];
      }
      m.accept_token(pick);
    }
  }
}

// One schema -> grammar -> compiled grammar, timed in ms.
double timed_compile(const nlohmann::ordered_json& schema, const std::shared_ptr<const Vocabulary>& vocab,
                     std::shared_ptr<const CompiledGrammar>* out) {
  auto t0 = Clock::now();
  Grammar g = Grammar::from_json_schema(schema);
  *out = CompiledGrammar::compile(g, vocab);
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::string tok_path =
      argc > 1 && *argv[1] ? argv[1] : source_dir() + "/tests/fixtures/tokenizers/llama3/tokenizer.json.zst";
  int walks = argc > 2 ? std::atoi(argv[2]) : 10;
  std::string only = argc > 3 ? argv[3] : "";  // run just this schema, or the schema in this .json file
  auto vocab = load_llama3(tok_path);
  // The schemas of tools/oracle/grammar_cases.py, dumped by bench/grammar_xgrammar.py --dump.
  nlohmann::ordered_json cases;
  if (only.ends_with(".json")) {
    cases = nlohmann::ordered_json::array(
        {{{"name", only.substr(only.rfind('/') + 1)},
          {"schema", nlohmann::ordered_json::parse(brioche::bench::read_command("cat '" + only + "'"))}}});
    only.clear();
  } else {
    cases = nlohmann::ordered_json::parse(
        brioche::bench::read_command("python3 " + source_dir() + "/bench/grammar_xgrammar.py --dump"));
  }
  std::printf("%-16s %9s %9s %9s %10s %10s %10s %10s %10s %8s\n", "schema", "cold_ms", "warm_ms", "first_us",
              "mask_p50us", "mask_p99us", "mask_max_us", "steady_p50", "steady_p99", "steps");
  std::vector<double> all_masks, all_steady, all_cold, all_warm, all_first;
  for (auto& c : cases) {
    std::string name = c["name"].get<std::string>();
    if (!only.empty() && name != only) continue;
    std::shared_ptr<const CompiledGrammar> compiled;
    std::vector<double> cold, warm;
    for (int r = 0; r < 5; ++r) {
      // Cold: nothing cached in the process (every mask computed).
      clear_shared_mask_cache();
      cold.push_back(timed_compile(c["schema"], vocab, &compiled));
      // Warm: the vocabulary's builtin JSON rules and formats precomputed
      // (prewarm_shared_masks, as a server does once per tokenizer); the
      // schema's own rules are new.
      clear_shared_mask_cache();
      prewarm_shared_masks(vocab);
      warm.push_back(timed_compile(c["schema"], vocab, &compiled));
    }
    if (getenv("GRAMMAR_BENCH_STATS")) {
      const CompileStats& st = compiled->stats();
      std::printf(
          "  [%s: %d states, %d scannable, %d shared, %d deferred, %d distinct masks, %.2f MB, automaton %.2f ms, "
          "total %.2f ms]\n",
          name.c_str(), st.num_states, st.num_scannable_states, st.num_shared_states, st.num_deferred_states,
          st.num_distinct_masks, st.mask_bytes / 1e6, st.automaton_seconds * 1e3, st.seconds * 1e3);
    }
    // Two passes over the same seeded walks: the first pays for deferred
    // states on first use, the second is the steady state.
    std::vector<double> masks, firsts, steady;
    run_walks(compiled, *vocab, walks, &masks, &firsts);
    run_walks(compiled, *vocab, walks, &steady, nullptr);
    all_cold.push_back(percentile(cold, 0.5));
    all_warm.push_back(percentile(warm, 0.5));
    all_masks.insert(all_masks.end(), masks.begin(), masks.end());
    all_steady.insert(all_steady.end(), steady.begin(), steady.end());
    all_first.insert(all_first.end(), firsts.begin(), firsts.end());
    std::printf("%-16s %9.2f %9.2f %9.2f %10.2f %10.2f %10.2f %10.2f %10.2f %8zu\n", name.c_str(), all_cold.back(),
                all_warm.back(), percentile(firsts, 0.5), percentile(masks, 0.5), percentile(masks, 0.99),
                percentile(masks, 1.0), percentile(steady, 0.5), percentile(steady, 0.99), masks.size());
  }
  std::printf("\ncompile over schemas (each the p50 of 5; schema -> grammar -> masks):\n");
  std::printf("  cold  p50 %.2f ms  p90 %.2f ms  max %.2f ms\n", percentile(all_cold, 0.5), percentile(all_cold, 0.9),
              percentile(all_cold, 1.0));
  std::printf("  warm  p50 %.2f ms  p90 %.2f ms  max %.2f ms\n", percentile(all_warm, 0.5), percentile(all_warm, 0.9),
              percentile(all_warm, 1.0));
  std::printf(
      "mask fill, first pass (deferred states computed on first use), %zu steps: p50 %.2f us  p99 %.2f us  max %.2f "
      "us\n",
      all_masks.size(), percentile(all_masks, 0.5), percentile(all_masks, 0.99), percentile(all_masks, 1.0));
  std::printf("mask fill, steady state (same walks again): p50 %.2f us  p99 %.2f us  max %.2f us\n",
              percentile(all_steady, 0.5), percentile(all_steady, 0.99), percentile(all_steady, 1.0));
  std::printf("first mask of a fresh grammar (start state, incl. its deferred work): p50 %.2f us  max %.2f us\n",
              percentile(all_first, 0.5), percentile(all_first, 1.0));
  return 0;
}
