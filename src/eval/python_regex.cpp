#include "eval/python_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.h"

namespace brioche::eval {

namespace {

pcre2_code* as_code(void* p) { return static_cast<pcre2_code*>(p); }

// Python's `$` (without MULTILINE) also matches before a final "\n", and so
// does PCRE2's by default; `.` does not match "\n" in either.
uint32_t compile_options(const RegexFlags& flags) {
  uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF;
  if (flags.ignore_case) options |= PCRE2_CASELESS;
  if (flags.multiline) options |= PCRE2_MULTILINE;
  if (flags.verbose) options |= PCRE2_EXTENDED;
  return options;
}

}  // namespace

std::string_view RegexMatch::group(std::string_view text, size_t index) const {
  if (index >= groups.size() || groups[index].first == std::string::npos) return {};
  return text.substr(groups[index].first, groups[index].second - groups[index].first);
}

PyRegex::PyRegex(std::string pattern, RegexFlags flags) : pattern_(std::move(pattern)) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern_.data()), pattern_.size(), compile_options(flags), &error,
                        &offset, nullptr);
  if (!code_) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    throw Error("regex '" + pattern_ + "': " + reinterpret_cast<const char*>(message) + " at offset " +
                std::to_string(offset));
  }
  pcre2_jit_compile(as_code(code_), PCRE2_JIT_COMPLETE);  // an interpreter fallback when JIT is unavailable
}

PyRegex::~PyRegex() {
  if (code_) pcre2_code_free(as_code(code_));
}

PyRegex::PyRegex(PyRegex&& other) noexcept : pattern_(std::move(other.pattern_)), code_(other.code_) {
  other.code_ = nullptr;
}

bool PyRegex::run(std::string_view text, size_t start, uint32_t options, RegexMatch* match) const {
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(as_code(code_), nullptr);
  const int rc = pcre2_match(as_code(code_), reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), start, options,
                             data, nullptr);
  if (rc < 0) {
    pcre2_match_data_free(data);
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(rc, message, sizeof message);
    throw Error("regex '" + pattern_ + "': matching failed: " + reinterpret_cast<const char*>(message));
  }
  if (match) {
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
    const uint32_t pairs = pcre2_get_ovector_count(data);
    match->groups.assign(pairs, {std::string::npos, std::string::npos});
    for (uint32_t i = 0; i < pairs; ++i)
      if (ovector[2 * i] != PCRE2_UNSET) match->groups[i] = {ovector[2 * i], ovector[2 * i + 1]};
    match->begin = ovector[0];
    match->end = ovector[1];
  }
  pcre2_match_data_free(data);
  return true;
}

bool PyRegex::search(std::string_view text, RegexMatch* match, size_t start) const {
  return run(text, start, 0, match);
}

bool PyRegex::match(std::string_view text, RegexMatch* match) const { return run(text, 0, PCRE2_ANCHORED, match); }

std::vector<RegexMatch> PyRegex::find_all(std::string_view text) const {
  std::vector<RegexMatch> out;
  size_t pos = 0;
  bool last_empty_at_pos = false;  // the previous match was empty and ended at pos
  while (pos <= text.size()) {
    RegexMatch m;
    if (!run(text, pos, last_empty_at_pos ? PCRE2_NOTEMPTY_ATSTART : 0, &m)) break;
    last_empty_at_pos = m.begin == m.end;
    pos = m.end;
    out.push_back(std::move(m));
  }
  return out;
}

std::vector<std::string_view> PyRegex::split(std::string_view text) const {
  std::vector<std::string_view> out;
  size_t last = 0;
  for (const RegexMatch& m : find_all(text)) {
    out.push_back(text.substr(last, m.begin - last));
    last = m.end;
  }
  out.push_back(text.substr(last));
  return out;
}

std::string PyRegex::sub(std::string_view text, std::string_view replacement) const {
  std::string out;
  size_t last = 0;
  for (const RegexMatch& m : find_all(text)) {
    out.append(text.substr(last, m.begin - last));
    for (size_t i = 0; i < replacement.size(); ++i) {
      const char c = replacement[i];
      if (c != '\\' || i + 1 == replacement.size()) {
        out += c;
        continue;
      }
      const char next = replacement[i + 1];
      if (next >= '0' && next <= '9') {
        out.append(m.group(text, size_t(next - '0')));
        ++i;
      } else if (next == 'g' && i + 2 < replacement.size() && replacement[i + 2] == '<') {
        const size_t close = replacement.find('>', i + 3);
        BRIOCHE_CHECK(close != std::string_view::npos, "regex replacement '", std::string(replacement),
                      "': \\g< without >");
        out.append(m.group(text, std::stoul(std::string(replacement.substr(i + 3, close - i - 3)))));
        i = close;
      } else {
        out += next == 'n' ? '\n' : next;
        ++i;
      }
    }
    last = m.end;
  }
  out.append(text.substr(last));
  return out;
}

std::string regex_escape(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}-#&~ \t\n\r\v\f").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

}  // namespace brioche::eval
