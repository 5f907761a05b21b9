#include "eval/ifeval_report.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "core/error.h"
#include "eval/python_text.h"

namespace brioche::eval {

namespace {

std::string format(const char* fmt, auto... args) {
  char buf[512];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

std::string pct(double v) { return format("%5.1f%%", 100.0 * v); }
std::string pts(double v) { return format("%+.1f", 100.0 * v); }

// The first line of a prompt, cut to `width` characters.
std::string excerpt(const std::string& text, size_t width) {
  std::string line = text.substr(0, text.find('\n'));
  if (py_len(line) <= width) return line;
  std::string out;
  size_t n = 0;
  for (size_t pos = 0; pos < line.size() && n < width - 1; ++n) {
    const size_t start = pos;
    next_codepoint(line, pos);
    out.append(line, start, pos - start);
  }
  return out + "…";
}

std::string padded(const std::string& s, size_t width) {
  const size_t len = py_len(s);
  return len >= width ? s : s + std::string(width - len, ' ');
}

}  // namespace

RunComparison compare_runs(const IfevalRun& base, const IfevalRun& other) {
  BRIOCHE_CHECK(base.prompts.size() == other.prompts.size(), "compare ", other.label, " with ", base.label, ": ",
                other.prompts.size(), " and ", base.prompts.size(), " prompts");
  for (size_t i = 0; i < base.prompts.size(); ++i)
    BRIOCHE_CHECK(base.prompts[i].key == other.prompts[i].key, "compare ", other.label, " with ", base.label, ": row ",
                  i, " holds prompt ", other.prompts[i].key, " and ", base.prompts[i].key);
  RunComparison c{base.label, other.label, {}, {}};
  const size_t n = base.prompts.size();
  for (int m = 0; m < 4; ++m) {
    const bool prompt_level = m < 2, strict = m % 2 == 0;
    MetricComparison mc{m == 0 ? "prompt strict" : m == 1 ? "prompt loose" : m == 2 ? "inst strict" : "inst loose"};
    PairedUnits units;
    std::vector<bool> a_prompt, b_prompt;
    for (size_t i = 0; i < n; ++i) {
      const ResponseVerdicts& va = base.verdicts[i];
      const ResponseVerdicts& vb = other.verdicts[i];
      if (prompt_level) {
        const bool a = strict ? va.prompt_strict() : va.prompt_loose();
        const bool b = strict ? vb.prompt_strict() : vb.prompt_loose();
        a_prompt.push_back(a);
        b_prompt.push_back(b);
        units.a_followed.push_back(a);
        units.b_followed.push_back(b);
        units.units.push_back(1);
      } else {
        const auto& la = strict ? va.strict : va.loose;
        const auto& lb = strict ? vb.strict : vb.loose;
        units.a_followed.push_back(int(std::count(la.begin(), la.end(), true)));
        units.b_followed.push_back(int(std::count(lb.begin(), lb.end(), true)));
        units.units.push_back(int(la.size()));
      }
    }
    const IfevalAccuracy& aa = base.accuracy;
    const IfevalAccuracy& ab = other.accuracy;
    mc.base = m == 0   ? aa.prompt_strict_acc()
              : m == 1 ? aa.prompt_loose_acc()
              : m == 2 ? aa.inst_strict_acc()
                       : aa.inst_loose_acc();
    mc.other = m == 0   ? ab.prompt_strict_acc()
               : m == 1 ? ab.prompt_loose_acc()
               : m == 2 ? ab.inst_strict_acc()
                        : ab.inst_loose_acc();
    mc.interval = paired_bootstrap(units);
    if (prompt_level) {
      mc.mcnemar = mcnemar_exact(a_prompt, b_prompt);
      mc.has_mcnemar = true;
      if (strict)
        for (size_t i = 0; i < n; ++i)
          if (a_prompt[i] != b_prompt[i]) c.flips.push_back({base.prompts[i].key, i, b_prompt[i]});
    }
    c.metrics.push_back(mc);
  }
  return c;
}

std::string accuracy_table(const std::vector<IfevalRun>& runs) {
  size_t width = 8;
  for (const IfevalRun& r : runs) width = std::max(width, py_len(r.label) + 2);
  std::string out =
      padded("model", width) + "prompt strict  prompt loose  inst strict  inst loose   prompts  instructions\n";
  for (const IfevalRun& r : runs) {
    const IfevalAccuracy& a = r.accuracy;
    out += padded(r.label, width) + format("%-15s%-14s%-13s%-13s%7d  %12d\n", pct(a.prompt_strict_acc()).c_str(),
                                           pct(a.prompt_loose_acc()).c_str(), pct(a.inst_strict_acc()).c_str(),
                                           pct(a.inst_loose_acc()).c_str(), a.prompts, a.instructions);
  }
  return out;
}

std::string per_instruction_table(const std::vector<IfevalRun>& runs) {
  std::set<std::string> ids;
  for (const IfevalRun& r : runs)
    for (const auto& [id, _] : r.accuracy.per_instruction) ids.insert(id);
  std::string out = padded("instruction", 46) + padded("n", 5);
  for (const IfevalRun& r : runs) out += padded(r.label + " strict/loose", std::max<size_t>(18, py_len(r.label) + 14));
  out += "\n";
  for (const std::string& id : ids) {
    int n = 0;
    for (const IfevalRun& r : runs)
      if (auto it = r.accuracy.per_instruction.find(id); it != r.accuracy.per_instruction.end()) n = it->second.total;
    out += padded(id, 46) + padded(std::to_string(n), 5);
    for (const IfevalRun& r : runs) {
      auto it = r.accuracy.per_instruction.find(id);
      std::string cell = "-";
      if (it != r.accuracy.per_instruction.end() && it->second.total)
        cell = format("%5.1f / %5.1f", 100.0 * it->second.strict / it->second.total,
                      100.0 * it->second.loose / it->second.total);
      out += padded(cell, std::max<size_t>(18, py_len(r.label) + 14));
    }
    out += "\n";
  }
  return out;
}

std::string comparison_text(const RunComparison& c, const IfevalRun& base, int max_flips_shown) {
  std::string out = c.other_label + " vs " + c.base_label +
                    " (paired, same prompts; 95% bootstrap interval of the difference, 10000 resamples):\n";
  for (const MetricComparison& m : c.metrics) {
    out += format("  %-14s %s -> %s  %s pts [%s, %s]", m.name, pct(m.base).c_str(), pct(m.other).c_str(),
                  pts(m.interval.difference).c_str(), pts(m.interval.low).c_str(), pts(m.interval.high).c_str());
    if (m.has_mcnemar)
      out += format("  McNemar exact p = %.3g (%d gained, %d lost)", m.mcnemar.p_value, m.mcnemar.b_only,
                    m.mcnemar.a_only);
    out += "\n";
  }
  int gained = 0, lost = 0;
  for (const FlippedPrompt& f : c.flips) (f.gained ? gained : lost)++;
  out += format("  flipped prompts (strict): %d gained, %d lost\n", gained, lost);
  int shown = 0;
  for (const FlippedPrompt& f : c.flips) {
    if (shown++ >= max_flips_shown) {
      out += format("    ... %d more (see the saved responses or --report)\n", int(c.flips.size()) - max_flips_shown);
      break;
    }
    out += format("    %c %-6lld %s\n", f.gained ? '+' : '-', (long long)f.key,
                  excerpt(base.prompts[f.index].prompt, 90).c_str());
  }
  return out;
}

}  // namespace brioche::eval
