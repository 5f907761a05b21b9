#include "data/read_examples.h"

#include "data/source_rows.h"

namespace brioche::data {

void drop_row(RowReport& report, const std::string& path, bool strict, DroppedRow row) {
  if (strict && is_bad_row_reason(row.reason))
    fail(path, ": ", row.at.text(), ": ", row.message, " (--strict stops at the first bad row)");
  report.drop(std::move(row));
}

std::optional<RowKind> read_examples(const std::string& path, const ReadOptions& o, RowReport& report,
                                     const std::function<void(const RowLocation&, Example&)>& visit) {
  std::optional<RowKind> file_kind;
  RowLocation kind_from;
  Layout kind_layout = Layout::Text;
  int64_t rows = 0;
  for_each_row(path, [&](SourceRow& row) {
    if (o.progress && ++rows % 1000 == 0) o.progress(rows);
    auto bad = [&](const std::string& reason, const std::string& message) {
      drop_row(report, path, o.strict, {.at = row.at, .reason = reason, .message = message});
    };
    if (!row.parse_error.empty()) return bad("invalid_json", row.parse_error);
    if (!row.value.is_object())
      return bad("bad_row", std::string("expected a JSON object, found a JSON ") + row.value.type_name());
    if (row.value.contains("dpo") && row.value["dpo"].is_object()) row.value = json(row.value["dpo"]);
    const std::optional<Layout> layout = o.layout ? o.layout : detect_layout(row.value);
    if (!layout)
      return bad("bad_row", "no known layout has " + key_list(row.value) + " (expected one of: " + layout_names() +
                                "; docs/data.md lists their keys)");
    const RowKind kind = row_kind(*layout);
    if (!file_kind) file_kind = kind, kind_from = row.at, kind_layout = *layout;
    if (kind != *file_kind)
      return bad("other_kind", "a row of " + row_kind_name(kind) + " (" + layout_name(*layout) + ") in a file of " +
                                   row_kind_name(*file_kind) + " (" + layout_name(kind_layout) + " at " +
                                   kind_from.text() + ")");
    Example ex;
    try {
      ex = parse_example(row.value, *layout, o.scores);
    } catch (const RowError& e) {
      return bad("bad_row", layout_name(*layout) + " row: " + e.what());
    }
    try {
      visit(row.at, ex);
    } catch (const RowError& e) {  // measuring the row failed (its chat template render): before keep/drop
      return bad("bad_row", layout_name(*layout) + " row: " + e.what());
    }
  });
  if (o.progress) o.progress(-1);
  return file_kind;
}

}  // namespace brioche::data
