// The self-contained HTML report of `brioche eval ifeval --report`: inline
// CSS, inline SVG bar charts, no script and no external resource, so it
// opens anywhere (and offline) and can be attached to a ticket as one file.
#include <algorithm>
#include <cstdio>
#include <set>

#include "eval/ifeval_report.h"

namespace brioche::eval {

namespace {

std::string escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string fmt(const char* f, auto... args) {
  char buf[512];
  std::snprintf(buf, sizeof buf, f, args...);
  return buf;
}

const char* kColors[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7"};

// Horizontal grouped bars: one group per row label, one bar per series.
std::string bar_chart(const std::vector<std::string>& rows, const std::vector<std::string>& series,
                      const std::vector<std::vector<double>>& values /* [series][row] in 0..1 */) {
  const int label_w = 300, bar_h = 12, gap = 8, chart_w = 420;
  const int group_h = int(series.size()) * bar_h + gap;
  const int height = int(rows.size()) * group_h + 40;
  std::string svg =
      fmt("<svg width='%d' height='%d' font-family='sans-serif' font-size='12'>", label_w + chart_w + 60, height);
  for (int t = 0; t <= 100; t += 25) {
    const int x = label_w + chart_w * t / 100;
    svg +=
        fmt("<line x1='%d' y1='0' x2='%d' y2='%d' stroke='#ddd'/><text x='%d' y='%d' text-anchor='middle' "
            "fill='#666'>%d%%</text>",
            x, x, height - 30, x, height - 16, t);
  }
  for (size_t r = 0; r < rows.size(); ++r) {
    const int y0 = int(r) * group_h;
    svg +=
        fmt("<text x='%d' y='%d' text-anchor='end'>", label_w - 6, y0 + group_h / 2 + 2) + escape(rows[r]) + "</text>";
    for (size_t s = 0; s < series.size(); ++s) {
      const double v = values[s][r];
      const int w = std::max(0, int(v * chart_w + 0.5));
      const int y = y0 + int(s) * bar_h;
      svg += fmt("<rect x='%d' y='%d' width='%d' height='%d' fill='%s'><title>", label_w, y, w, bar_h - 2,
                 kColors[s % 8]) +
             escape(series[s] + ": " + fmt("%.1f%%", 100 * v)) + "</title></rect>";
      svg += fmt("<text x='%d' y='%d' font-size='10' fill='#333'>%.1f</text>", label_w + w + 3, y + bar_h - 3, 100 * v);
    }
  }
  svg += "</svg>";
  return svg;
}

std::string legend(const std::vector<std::string>& series) {
  std::string out = "<p class='legend'>";
  for (size_t s = 0; s < series.size(); ++s)
    out += fmt("<span><i style='background:%s'></i>", kColors[s % 8]) + escape(series[s]) + "</span>";
  return out + "</p>";
}

}  // namespace

std::string html_report(const HtmlReportInput& in) {
  const std::vector<IfevalRun>& runs = *in.runs;
  std::vector<std::string> labels;
  for (const IfevalRun& r : runs) labels.push_back(r.label);

  std::string h =
      "<!doctype html><html><head><meta charset='utf-8'><title>IFEval: " + escape(in.title) +
      "</title><style>"
      "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
      "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}"
      "td:first-child,th:first-child{text-align:left}.pos{color:#1a7f37}.neg{color:#c62828}"
      ".legend span{margin-right:1.5em}.legend i{display:inline-block;width:12px;height:12px;margin-right:4px}"
      "pre{white-space:pre-wrap;background:#f6f6f6;padding:6px;max-height:20em;overflow:auto}"
      "details{margin:.3em 0}code{background:#f0f0f0}</style></head><body>";
  h += "<h1>IFEval: " + escape(in.title) + "</h1>";
  h += fmt("<p>%d prompts with verifiable instructions (IFEval, Zhou et al. 2023), ",
           runs.empty() ? 0 : runs[0].accuracy.prompts) +
       "scored by brioche's C++ port of the reference checkers. Strict: the response as generated; loose: the best of "
       "the response and seven relaxed "
       "variants (without markdown <code>*</code>, without the first and/or last line).</p>";
  if (!in.command_line.empty()) h += "<p>Command: <code>" + escape(in.command_line) + "</code></p>";

  // Summary.
  h += "<h2>Accuracy</h2><table><tr><th>model</th><th>prompt strict</th><th>prompt loose</th><th>inst strict</th>"
       "<th>inst loose</th><th>prompts</th><th>instructions</th></tr>";
  std::vector<std::vector<double>> summary(runs.size());
  for (size_t i = 0; i < runs.size(); ++i) {
    const IfevalAccuracy& a = runs[i].accuracy;
    summary[i] = {a.prompt_strict_acc(), a.prompt_loose_acc(), a.inst_strict_acc(), a.inst_loose_acc()};
    h += "<tr><td>" + escape(runs[i].label) + "</td>" +
         fmt("<td>%.1f%%</td><td>%.1f%%</td><td>%.1f%%</td><td>%.1f%%</td><td>%d</td><td>%d</td></tr>",
             100 * summary[i][0], 100 * summary[i][1], 100 * summary[i][2], 100 * summary[i][3], a.prompts,
             a.instructions);
  }
  h += "</table>" + legend(labels) +
       bar_chart({"prompt strict", "prompt loose", "instruction strict", "instruction loose"}, labels, summary);

  // Comparisons.
  for (const RunComparison& c : *in.comparisons) {
    h += "<h2>" + escape(c.other_label) + " vs " + escape(c.base_label) + "</h2>";
    h += "<table><tr><th>metric</th><th>" + escape(c.base_label) + "</th><th>" + escape(c.other_label) +
         "</th><th>difference</th><th>95% bootstrap interval</th><th>McNemar exact p</th><th>gained / lost</th></tr>";
    for (const MetricComparison& m : c.metrics) {
      const char* cls = m.interval.low > 0 ? "pos" : m.interval.high < 0 ? "neg" : "";
      h += fmt("<tr><td>%s</td><td>%.1f%%</td><td>%.1f%%</td><td class='%s'>%+.1f pts</td><td>[%+.1f, %+.1f]</td>",
               m.name, 100 * m.base, 100 * m.other, cls, 100 * m.interval.difference, 100 * m.interval.low,
               100 * m.interval.high);
      h += m.has_mcnemar
               ? fmt("<td>%.3g</td><td>%d / %d</td></tr>", m.mcnemar.p_value, m.mcnemar.b_only, m.mcnemar.a_only)
               : std::string("<td>–</td><td>–</td></tr>");
    }
    h += "</table>";
    const IfevalRun* base = nullptr;
    const IfevalRun* other = nullptr;
    for (const IfevalRun& r : runs) {
      if (r.label == c.base_label) base = &r;
      if (r.label == c.other_label) other = &r;
    }
    if (!base || !other) continue;
    h += fmt("<h3>Flipped prompts (prompt-level strict): %zu</h3>", c.flips.size());
    for (const FlippedPrompt& f : c.flips) {
      const IfevalPrompt& p = base->prompts[f.index];
      std::string ids;
      for (const std::string& id : p.instruction_ids) ids += (ids.empty() ? "" : ", ") + id;
      h += std::string("<details><summary><b class='") + (f.gained ? "pos'>+ gained" : "neg'>− lost") +
           fmt("</b> %lld: ", (long long)f.key) + escape(p.prompt.substr(0, 140)) + (p.prompt.size() > 140 ? "…" : "") +
           "</summary><p>Instructions: " + escape(ids) + "</p><p>" + escape(c.base_label) + ":</p><pre>" +
           escape(base->responses[f.index].text) + "</pre><p>" + escape(c.other_label) + ":</p><pre>" +
           escape(other->responses[f.index].text) + "</pre></details>";
    }
  }

  // Per instruction.
  std::set<std::string> ids;
  for (const IfevalRun& r : runs)
    for (const auto& [id, _] : r.accuracy.per_instruction) ids.insert(id);
  std::vector<std::string> rows(ids.begin(), ids.end());
  std::vector<std::vector<double>> strict(runs.size(), std::vector<double>(rows.size(), 0));
  h += "<h2>Per instruction</h2><table><tr><th>instruction</th><th>n</th>";
  for (const IfevalRun& r : runs) h += "<th>" + escape(r.label) + " strict</th><th>" + escape(r.label) + " loose</th>";
  h += "</tr>";
  for (size_t k = 0; k < rows.size(); ++k) {
    int n = 0;
    std::string cells;
    for (size_t i = 0; i < runs.size(); ++i) {
      auto it = runs[i].accuracy.per_instruction.find(rows[k]);
      if (it == runs[i].accuracy.per_instruction.end() || it->second.total == 0) {
        cells += "<td>–</td><td>–</td>";
        continue;
      }
      n = it->second.total;
      strict[i][k] = double(it->second.strict) / it->second.total;
      cells += fmt("<td>%.1f%%</td><td>%.1f%%</td>", 100.0 * it->second.strict / it->second.total,
                   100.0 * it->second.loose / it->second.total);
    }
    h += "<tr><td>" + escape(rows[k]) + fmt("</td><td>%d</td>", n) + cells + "</tr>";
  }
  h += "</table><h3>Strict accuracy per instruction</h3>" + legend(labels) + bar_chart(rows, labels, strict);
  h += "</body></html>\n";
  return h;
}

}  // namespace brioche::eval
