#include "grammar/schema_formats.h"

#include <charconv>
#include <cmath>
#include <map>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "grammar/grammar.h"

namespace brioche::grammar {
namespace {

std::string digit_class(char lo, char hi) {
  if (lo == hi) return std::string("\"") + lo + "\"";
  return std::string("[") + lo + "-" + hi + "]";
}

// Same-length decimal strings L <= H: all strings of that length in between.
std::string same_length(const std::string& L, const std::string& H) {
  size_t n = L.size();
  if (n == 0) return "\"\"";
  if (n == 1) return digit_class(L[0], H[0]);
  if (L[0] == H[0]) return digit_class(L[0], L[0]) + " " + same_length(L.substr(1), H.substr(1));
  std::string zeros(n - 1, '0'), nines(n - 1, '9');
  if (L.substr(1) == zeros && H.substr(1) == nines)
    return digit_class(L[0], H[0]) + " [0-9]{" + std::to_string(n - 1) + "}";
  std::vector<std::string> alts;
  alts.push_back(digit_class(L[0], L[0]) + " " + same_length(L.substr(1), nines));
  if (H[0] - L[0] > 1)
    alts.push_back(digit_class(static_cast<char>(L[0] + 1), static_cast<char>(H[0] - 1)) + " [0-9]{" +
                   std::to_string(n - 1) + "}");
  alts.push_back(digit_class(H[0], H[0]) + " " + same_length(zeros, H.substr(1)));
  std::string out;
  for (auto& a : alts) out += (out.empty() ? "(" : " | ") + a;
  return out + ")";
}

int num_digits(int64_t v) { return static_cast<int>(std::to_string(v).size()); }
int64_t pow10(int d) {
  int64_t p = 1;
  while (d-- > 0) p *= 10;
  return p;
}

// Non-negative integers in [a, b] (b < 0: unbounded), canonical decimal.
std::string unsigned_range(int64_t a, int64_t b) {
  std::vector<std::string> alts;
  int da = num_digits(a);
  int db = b >= 0 ? num_digits(b) : da;
  for (int d = da; d <= db; ++d) {
    int64_t lo = std::max<int64_t>(a, d == 1 ? 0 : pow10(d - 1));
    int64_t hi = (b >= 0 && d == db) ? b : pow10(d) - 1;
    if (lo > hi) continue;
    alts.push_back(same_length(std::to_string(lo), std::to_string(hi)));
  }
  if (b < 0) alts.push_back("[1-9] [0-9]{" + std::to_string(da) + ",}");
  std::string out;
  for (auto& x : alts) out += (out.empty() ? "" : " | ") + x;
  return "(" + out + ")";
}

}  // namespace

std::string integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  std::vector<std::string> alts;
  // Negative part: -m for m in [max(1, -hi), -lo] (upper end open without lo).
  if (!lo || *lo < 0) {
    int64_t m_lo = hi ? std::max<int64_t>(1, -*hi) : 1;
    int64_t m_hi = lo ? -*lo : -1;
    if (m_hi < 0 || m_lo <= m_hi) alts.push_back("\"-\" " + unsigned_range(m_lo, m_hi));
  }
  // Non-negative part.
  if (!hi || *hi >= 0) {
    int64_t a = lo ? std::max<int64_t>(0, *lo) : 0;
    int64_t b = hi ? *hi : -1;
    alts.push_back(unsigned_range(a, b));
  }
  BRIOCHE_CHECK(!alts.empty(), "integer range: empty");
  std::string out;
  for (auto& x : alts) out += (out.empty() ? "" : " | ") + x;
  return "(" + out + ")";
}

std::string number_range(const NumberBound& lo, const NumberBound& hi) {
  // v = sign * (I + 0.F). With integer bounds the fraction only matters at
  // the bound itself: I strictly inside the integer range takes any
  // fraction; I equal to a bound takes a zero fraction (inclusive) or, at
  // the lower bound of magnitudes, a non-zero one.
  const std::string any_frac = "(\".\" [0-9]+)?";
  const std::string zero_frac = "(\".\" \"0\"+)?";
  const std::string nonzero_frac = "\".\" [0-9]* [1-9] [0-9]*";
  // Magnitude in [a, b] (b < 0: unbounded) with exclusivity flags, a >= 0.
  auto magnitude = [&](int64_t a, bool a_excl, int64_t b, bool b_excl, bool allow_zero) {
    std::vector<std::string> alts;
    // Integer part strictly between: I in [a+1, b-1] (or a.. if a is exclusive at fraction level)
    int64_t in_lo = a + 1, in_hi = b >= 0 ? b - 1 : -1;
    if (b < 0 || in_lo <= in_hi) alts.push_back(unsigned_range(in_lo, in_hi) + " " + any_frac);
    // I == a: fraction zero allowed if a inclusive (and zero allowed), non-zero fraction if below b.
    bool a_below_b = b < 0 || a < b;
    if (!a_excl && (a != 0 || allow_zero))
      alts.push_back("\"" + std::to_string(a) + "\" " + (a_below_b ? any_frac : zero_frac));
    else if (a_below_b)
      alts.push_back("\"" + std::to_string(a) + "\" " + nonzero_frac);
    // I == b (> a): only a zero fraction, if inclusive.
    if (b >= 0 && b > a && !b_excl) alts.push_back("\"" + std::to_string(b) + "\" " + zero_frac);
    std::string out;
    for (auto& x : alts) out += (out.empty() ? "" : " | ") + x;
    return out.empty() ? std::string() : "(" + out + ")";
  };
  std::vector<std::string> alts;
  const bool has_lo = lo.present, has_hi = hi.present;
  const int64_t L = has_lo ? static_cast<int64_t>(lo.value) : 0;
  const int64_t H = has_hi ? static_cast<int64_t>(hi.value) : 0;
  // Non-negative values: v in [max(L,0), H].
  if (!has_hi || H > 0 || (H == 0 && !hi.exclusive)) {
    int64_t a = has_lo && L > 0 ? L : 0;
    bool a_excl = has_lo && L >= 0 ? lo.exclusive : false;
    std::string m = magnitude(a, a_excl, has_hi ? H : -1, has_hi && hi.exclusive, true);
    if (!m.empty()) alts.push_back(m);
  }
  // Negative values: |v| in (max(-H,0) ..., -L], never zero.
  if (!has_lo || L < 0) {
    int64_t a = has_hi && H < 0 ? -H : 0;
    bool a_excl = has_hi && H < 0 ? hi.exclusive : true;  // |v| > 0
    int64_t b = has_lo ? -L : -1;
    std::string m = magnitude(a, a_excl, b, has_lo && lo.exclusive, false);
    if (!m.empty()) alts.push_back("\"-\" " + m);
  }
  BRIOCHE_CHECK(!alts.empty(), "number range: empty");
  std::string out;
  for (auto& x : alts) out += (out.empty() ? "" : " | ") + x;
  return "(" + out + ")";
}

DecimalBound decimal_bound(double value, bool exclusive) {
  char buf[512];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, std::fabs(value), std::chars_format::fixed);
  BRIOCHE_CHECK(ec == std::errc(), "decimal bound: cannot format ", value);
  std::string text(buf, end);
  DecimalBound b{true, exclusive, value < 0, text, ""};
  size_t dot = text.find('.');
  if (dot != std::string::npos) {
    b.int_digits = text.substr(0, dot);
    b.frac_digits = text.substr(dot + 1);
    while (!b.frac_digits.empty() && b.frac_digits.back() == '0') b.frac_digits.pop_back();
  }
  if (b.int_digits == "0" && b.frac_digits.empty()) b.negative = false;
  return b;
}

namespace {

// Scanner state for a number text compared against up to two bounds.
// phase: 0 start, 1 after '-', 2 integer part "0", 3 integer part [1-9][0-9]*,
// 4 after '.', 5 fraction digits. Per bound: the comparison of the
// magnitude read so far (-1, 0, 1) -- in the integer part of the digits
// aligned with the bound's (meaningful only if the lengths end up equal),
// in the fraction the final one -- and how many fraction digits were compared.
struct NumberScan {
  int phase = 0;
  bool negative = false, nonzero = false;
  int int_len = 0;  // capped at cap (longer than every bound)
  int cmp[2] = {0, 0};
  int frac_pos[2] = {0, 0};
  auto key() const {
    return std::make_tuple(phase, negative, nonzero, int_len, cmp[0], cmp[1], frac_pos[0], frac_pos[1]);
  }
};

}  // namespace

std::vector<std::string> decimal_range_rules(const DecimalBound& lo, const DecimalBound& hi) {
  const DecimalBound* bounds[2] = {&lo, &hi};
  int cap = 1;
  for (const DecimalBound* b : bounds)
    if (b->present) cap = std::max<int>(cap, static_cast<int>(b->int_digits.size()) + 1);
  // Magnitude comparison once the integer part is over.
  auto int_done = [&](NumberScan& st) {
    for (int i = 0; i < 2; ++i) {
      if (!bounds[i]->present) continue;
      const int n = static_cast<int>(bounds[i]->int_digits.size());
      const int len = st.phase == 2 ? 1 : st.int_len;
      if (len < n)
        st.cmp[i] = -1;
      else if (len > n)
        st.cmp[i] = 1;
    }
  };
  auto step = [&](const NumberScan& from, char c) -> std::optional<NumberScan> {
    NumberScan st = from;
    const bool digit = c >= '0' && c <= '9';
    switch (st.phase) {
      case 0:
      case 1:
        if (c == '-' && st.phase == 0) {
          st.phase = 1;
          st.negative = true;
          return st;
        }
        if (!digit) return std::nullopt;
        st.phase = c == '0' ? 2 : 3;
        st.nonzero = c != '0';
        st.int_len = 1;
        for (int i = 0; i < 2; ++i)
          if (bounds[i]->present) {
            const char d = bounds[i]->int_digits[0];
            st.cmp[i] = c < d ? -1 : c > d ? 1 : 0;
          }
        return st;
      case 2:
      case 3:
        if (c == '.') {
          int_done(st);
          st.phase = 4;
          return st;
        }
        if (!digit || st.phase == 2) return std::nullopt;
        for (int i = 0; i < 2; ++i)
          if (bounds[i]->present && st.cmp[i] == 0 && st.int_len < static_cast<int>(bounds[i]->int_digits.size())) {
            const char d = bounds[i]->int_digits[st.int_len];
            st.cmp[i] = c < d ? -1 : c > d ? 1 : 0;
          }
        st.int_len = std::min(st.int_len + 1, cap);
        return st;
      case 4:
      case 5:
        if (!digit) return std::nullopt;
        st.phase = 5;
        st.nonzero |= c != '0';
        for (int i = 0; i < 2; ++i) {
          if (!bounds[i]->present || st.cmp[i] != 0) continue;
          const std::string& f = bounds[i]->frac_digits;
          const char d = st.frac_pos[i] < static_cast<int>(f.size()) ? f[st.frac_pos[i]] : '0';
          st.cmp[i] = c < d ? -1 : c > d ? 1 : 0;
          st.frac_pos[i] = std::min<int>(st.frac_pos[i] + 1, static_cast<int>(f.size()));
        }
        return st;
    }
    return std::nullopt;
  };
  auto accepting = [&](NumberScan st) {
    if (st.phase != 2 && st.phase != 3 && st.phase != 5) return false;
    if (st.phase != 5) int_done(st);
    for (int i = 0; i < 2; ++i) {
      const DecimalBound& b = *bounds[i];
      if (!b.present) continue;
      // Magnitude left in the bound's fraction (the number stopped early).
      int mag = st.cmp[i];
      if (mag == 0 && st.frac_pos[i] < static_cast<int>(b.frac_digits.size())) mag = -1;
      const int sv = !st.nonzero ? 0 : st.negative ? -1 : 1;
      const bool bound_zero = b.int_digits == "0" && b.frac_digits.empty();
      const int sb = bound_zero ? 0 : b.negative ? -1 : 1;
      int c;  // value vs bound
      if (sv != sb)
        c = sv < sb ? -1 : 1;
      else if (sv == 0)
        c = 0;
      else
        c = sv > 0 ? mag : -mag;
      const int want = i == 0 ? 1 : -1;  // above the minimum, below the maximum
      if (c != want && !(c == 0 && !b.exclusive)) return false;
    }
    return true;
  };
  // Explore, then keep the states that can reach an accepting one.
  std::map<decltype(NumberScan().key()), int> index;
  std::vector<NumberScan> states{NumberScan{}};
  index[states[0].key()] = 0;
  std::vector<std::vector<std::pair<char, int>>> edges(1);
  const std::string alphabet = "-.0123456789";
  for (size_t s = 0; s < states.size(); ++s)
    for (char c : alphabet) {
      auto next = step(states[s], c);
      if (!next) continue;
      auto [it, fresh] = index.emplace(next->key(), static_cast<int>(states.size()));
      if (fresh) {
        BRIOCHE_CHECK(states.size() < 20000, "number range: too many states");
        states.push_back(*next);
        edges.emplace_back();
      }
      edges[s].emplace_back(c, it->second);
    }
  std::vector<char> live(states.size(), 0);
  for (size_t s = 0; s < states.size(); ++s) live[s] = accepting(states[s]);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t s = 0; s < states.size(); ++s)
      if (!live[s])
        for (auto [c, t] : edges[s])
          if (live[t]) {
            live[s] = changed = true;
            break;
          }
  }
  BRIOCHE_CHECK(live[0], "number range: no number lies within the bounds");
  std::vector<int> rule_of(states.size(), -1);
  int num_rules = 0;
  for (size_t s = 0; s < states.size(); ++s)
    if (live[s]) rule_of[s] = num_rules++;
  std::vector<std::string> bodies(num_rules);
  for (size_t s = 0; s < states.size(); ++s) {
    if (!live[s]) continue;
    std::map<int, std::string> by_target;  // characters leading to each live state
    for (auto [c, t] : edges[s])
      if (live[t]) by_target[rule_of[t]] += c;
    std::string body = accepting(states[s]) ? "\"\"" : "";
    for (auto& [t, chars] : by_target) {
      std::string cls = "[";
      for (char c : chars) cls += c == '-' ? std::string("\\-") : std::string(1, c);
      cls += "]";
      body += (body.empty() ? "" : " | ") + cls + " {R" + std::to_string(t) + "}";
    }
    bodies[rule_of[s]] = body;
  }
  return bodies;
}

namespace {

// ISO 8601 durations as jsonschema's checker (2019-09 and 2020-12 only)
// reads them: isoduration's parse_duration must succeed and the string must
// end with one of D M Y W H S. That parser reads, after an optional sign and
// "P", numbers (Python Decimal text of [+-0-9.eE], ',' as the decimal
// point) each followed by its designator, in the order Y M D W, then after
// "T" in the order H M S; W only where every date value before it is zero
// (P0Y1W); characters before "T" that follow the last designator are
// dropped unread (P1D2T1H); "T" after numbers and no designator is read
// as a date-time, which never ends with a designator. Exponents have at
// most 5 digits: Decimal's multiplication by the sign overflows (an error
// the checker does not catch) from 10^1000000 on.
std::string duration_ebnf() {
  const std::string exponent = "([eE] [+\\-]? [0-9]{1,5})?";
  const std::string number = "[+\\-]? ([0-9]+ ([.,] [0-9]*)? | [.,] [0-9]+) " + exponent;
  const std::string zero = "[+\\-]? (\"0\"+ ([.,] \"0\"*)? | [.,] \"0\"+) " + exponent;
  auto designated = [&](const std::string& value, char d) { return "(" + value + " \"" + d + "\")"; };
  // The date part with at least one designator.
  const std::string ymd = "(" + designated(number, 'Y') + " " + designated(number, 'M') + "? " +
                          designated(number, 'D') + "? | " + designated(number, 'M') + " " + designated(number, 'D') +
                          "? | " + designated(number, 'D') + ")";
  const std::string weeks = designated(zero, 'Y') + "? " + designated(zero, 'M') + "? " + designated(zero, 'D') + "? " +
                            designated(number, 'W');
  const std::string time = "(" + designated(number, 'H') + " " + designated(number, 'M') + "? " +
                           designated(number, 'S') + "? | " + designated(number, 'M') + " " + designated(number, 'S') +
                           "? | " + designated(number, 'S') + ")";
  const std::string dropped = "[+\\-0-9.,eE]*";
  const std::string dropped_with_comma = "[+\\-0-9.eE]* \",\" [+\\-0-9.,eE]*";
  return "[+\\-]? \"P\" ((" + ymd + " | " + weeks + ") (" + dropped + " \"T\" " + time + ")? | (" + dropped_with_comma +
         ")? \"T\" " + time + ")";
}

// RFC 3986's URI-reference (URI / relative-ref), as the validators that
// jsonschema's format checker asks write it (rfc3987 and rfc3986-validator:
// the same regexes), as a regex over the string's characters. host is
// IP-literal / reg-name (reg-name admits every IPv4address). The IP literal
// (an IPv6 address or IPvFuture in brackets) is written once: the two kinds
// of reference share the authority, `(scheme ":")? ("//" authority ... |
// absolute path)?`, beside scheme ":" rootless and a relative path. A
// dec-octet inside an IPv6 address may have leading zeros ("01"), as both
// validators' regexes allow.
// RFC 4291's text form of an IPv6 address (RFC 3986's IPv6address rule):
// eight groups of 1-4 hex digits, one run of them written `::`, the last
// two maybe an IPv4 address whose octets are `octet`.
std::string ipv6_regex(const std::string& octet) {
  const std::string h16 = "[0-9A-Fa-f]{1,4}";
  const std::string ls32 = "(" + h16 + ":" + h16 + "|(" + octet + "\\.){3}" + octet + ")";
  auto before = [&](int n) { return "((" + h16 + ":){0," + std::to_string(n) + "}" + h16 + ")?"; };
  return "((" + h16 + ":){6}" + ls32 + "|::(" + h16 + ":){5}" + ls32 + "|" + before(0) + "::(" + h16 + ":){4}" + ls32 +
         "|" + before(1) + "::(" + h16 + ":){3}" + ls32 + "|" + before(2) + "::(" + h16 + ":){2}" + ls32 + "|" +
         before(3) + "::" + h16 + ":" + ls32 + "|" + before(4) + "::" + ls32 + "|" + before(5) + "::" + h16 + "|" +
         before(6) + "::)";
}

// A dec-octet without a leading zero ("01" is refused by Python's
// ipaddress, which validators use: an octal reading would differ).
const char* const kOctetRegex = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])";

std::string uri_reference_regex() {
  const std::string pct = "%[0-9A-Fa-f][0-9A-Fa-f]";
  const std::string pchar = "([a-zA-Z0-9_.~!$&'()*+,;=:@\\-]|" + pct + ")";
  const std::string segment_nz_nc = "([a-zA-Z0-9_.~!$&'()*+,;=@\\-]|" + pct + ")";
  const std::string ipv6 = ipv6_regex("(25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)");
  const std::string ip_literal = "\\[(" + ipv6 + "|v[0-9A-Fa-f]+\\.[a-zA-Z0-9_.~!$&'()*+,;=:\\-]+)\\]";
  const std::string host = "(" + ip_literal + "|([a-zA-Z0-9_.~!$&'()*+,;=\\-]|" + pct + ")*)";
  const std::string authority = "(([a-zA-Z0-9_.~!$&'()*+,;=:\\-]|" + pct + ")*@)?" + host + "(:[0-9]*)?";
  const std::string abempty = "//" + authority + "(/" + pchar + "*)*";
  const std::string absolute = "/(" + pchar + "+(/" + pchar + "*)*)?";
  const std::string rootless = pchar + "+(/" + pchar + "*)*";
  const std::string noscheme = segment_nz_nc + "+(/" + pchar + "*)*";
  const std::string query = "([a-zA-Z0-9_.~!$&'()*+,;=:@/?\\-]|" + pct + ")*";
  const std::string scheme = "[a-zA-Z][a-zA-Z0-9+.\\-]*:";
  return "((" + scheme + ")?(" + abempty + "|" + absolute + ")?|" + scheme + rootless + "|" + noscheme + ")(\\?" +
         query + ")?(#" + query + ")?";
}

}  // namespace

std::string format_ebnf(const std::string& f) {
  // Real calendar dates (what validators check: Python's date.fromisoformat,
  // rfc3339-validator): years 0001-9999, month lengths, Feb 29 only in leap
  // years. A year is leap when its last two digits YY are a multiple of 4
  // other than 00 (two digits: even tens with 0/4/8, odd tens with 2/6), or
  // when YY = 00 and the century CC is such a multiple (2000, not 1900).
  // xgrammar admits any day 01-31 of any month: a documented difference
  // (tools/oracle/grammar_goldens.py gives it this language as a pattern).
  static const std::string kMultipleOf4 = "(\"0\" [48] | [2468] [048] | [13579] [26])";
  static const std::string kDate =
      "((\"000\" [1-9] | \"00\" [1-9] [0-9] | \"0\" [1-9] [0-9]{2} | [1-9] [0-9]{3}) \"-\" "
      "((\"0\" [13578] | \"1\" [02]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01]) | "
      "(\"0\" [469] | \"11\") \"-\" (\"0\" [1-9] | [12] [0-9] | \"30\") | "
      "\"02-\" (\"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8])) | "
      "([0-9]{2} " +
      kMultipleOf4 + " | " + kMultipleOf4 + " \"00\") \"-02-29\")";
  // Seconds stop at 59: RFC 3339's leap second 60 is valid only at 23:59:60
  // UTC on the few days that have one, and validators (Python's jsonschema)
  // reject it, so a constrained answer never uses it. xgrammar allows 60:
  // a documented difference (tools/oracle/grammar_goldens.py).
  static const std::string kTime =
      "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]+)? "
      "(\"Z\" | [+\\-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])";
  // No leading zero ("01" is refused by Python's ipaddress, which
  // validators use: an octal reading would differ).
  static const std::string kOctet = "(\"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9] [0-9] | [0-9])";
  if (f == "date") return kDate;
  if (f == "time") return kTime;
  if (f == "date-time") return kDate + " \"T\" " + kTime;
  if (f == "uuid")
    return "[0-9A-Fa-f]{8} \"-\" [0-9A-Fa-f]{4} \"-\" [0-9A-Fa-f]{4} \"-\" [0-9A-Fa-f]{4} \"-\" [0-9A-Fa-f]{12}";
  if (f == "ipv4") return "(" + kOctet + " \".\"){3} " + kOctet;
  if (f == "email") {
    // dot-atom local part, or a quoted local part (its quotes JSON-escaped);
    // domain labels of letters/digits/hyphens.
    std::string atext = "[a-zA-Z0-9_!#$%&'*+/=?^`{|}~\\-]";
    std::string quoted =
        "\"\\\\\\\"\" (\"\\\\\\\\\" ([ -!#-\\[\\]-~] | \"\\\\\\\"\" | \"\\\\\\\\\") | [ !#-\\[\\]-~])* \"\\\\\\\"\"";
    return "(" + atext + "+ (\".\" " + atext + "+)* | " + quoted +
           ") \"@\" [A-Za-z0-9] ([\\-A-Za-z0-9]* [A-Za-z0-9])? "
           "(\".\" [A-Za-z0-9] [\\-A-Za-z0-9]* [A-Za-z0-9])*";
  }
  // Written once, as a regex (format_regex), and read into EBNF here.
  if (f == "uri" || f == "uri-reference" || f == "ipv6" || f == "json-pointer")
    return regex_to_ebnf_expr(format_regex(f), /*inside_json_string=*/true);
  if (f == "hostname") return "[a-z0-9] ([a-z0-9\\-]* [a-z0-9])? (\".\" [a-z0-9] ([a-z0-9\\-]* [a-z0-9])?)*";
  if (f == "duration") return duration_ebnf();
  return "";
}

std::string format_regex(const std::string& f) {
  // The languages of format_ebnf (a test compares the two), in regex syntax
  // (regex_dfa.h reads it) so that a format can meet a `pattern`.
  static const std::string kLeapYear = "(0[48]|[2468][048]|[13579][26])";
  static const std::string kDate =
      "(000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-9][0-9]{3})-"
      "((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]))|"
      "([0-9]{2}" +
      kLeapYear + "|" + kLeapYear + "00)-02-29";
  static const std::string kTime =
      "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]+)?(Z|[+\\-]([01][0-9]|2[0-3]):[0-5][0-9])";
  static const std::string kOctet = kOctetRegex;
  if (f == "date") return "(" + kDate + ")";
  if (f == "time") return "(" + kTime + ")";
  if (f == "date-time") return "(" + kDate + ")T" + kTime;
  if (f == "uuid") return "[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}";
  if (f == "ipv4") return "(" + kOctet + "\\.){3}" + kOctet;
  if (f == "uri") {
    // A part of RFC 3986's URI: no IP literal, no digit in the scheme (the
    // language xgrammar writes; tests/grammar/golden_walks_test.cpp).
    const std::string pct = "%[0-9A-Fa-f][0-9A-Fa-f]";
    const std::string pchar = "([a-zA-Z0-9_.~!$&'()*+,;=:@\\-]|" + pct + ")";
    const std::string userinfo = "([a-zA-Z0-9_.~!$&'()*+,;=:\\-]|" + pct + ")*";
    const std::string host = "([a-zA-Z0-9_.~!$&'()*+,;=\\-]|" + pct + ")*";
    const std::string qf = "([a-zA-Z0-9_.~!$&'()*+,;=:@/?\\-]|" + pct + ")*";
    return "[a-zA-Z][a-zA-Z+.\\-]*:(//(" + userinfo + "@)?" + host + "(:[0-9]*)?(/" + pchar + "*)*|/?(" + pchar +
           "+(/" + pchar + "*)*)?)(\\?" + qf + ")?(#" + qf + ")?";
  }
  if (f == "hostname") return "[a-z0-9]([a-z0-9\\-]*[a-z0-9])?(\\.[a-z0-9]([a-z0-9\\-]*[a-z0-9])?)*";
  if (f == "uri-reference") return uri_reference_regex();
  // What Python's ipaddress.IPv6Address reads (jsonschema's checker), no
  // scope id (`%eth0`: the checker refuses it).
  if (f == "ipv6") return ipv6_regex(kOctetRegex);
  // RFC 6901: "" or "/"-prefixed reference tokens, `~` only as ~0 or ~1.
  if (f == "json-pointer") return "(/([^/~]|~[01])*)*";
  return "";
}

std::string supported_formats() {
  return "date, time, date-time, uuid, email, ipv4, ipv6, uri, uri-reference, hostname, json-pointer, duration";
}

}  // namespace brioche::grammar
