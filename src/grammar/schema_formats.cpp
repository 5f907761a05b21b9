#include "grammar/schema_formats.h"

#include <cmath>
#include <vector>

#include "core/error.h"

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
    if (!a_excl && (a != 0 || allow_zero)) alts.push_back("\"" + std::to_string(a) + "\" " + (a_below_b ? any_frac : zero_frac));
    else if (a_below_b) alts.push_back("\"" + std::to_string(a) + "\" " + nonzero_frac);
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

std::string format_ebnf(const std::string& f) {
  static const std::string kDate = "[0-9]{4} \"-\" (\"0\" [1-9] | \"1\" [0-2]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01])";
  static const std::string kTime =
      "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" ([0-5] [0-9] | \"60\") (\".\" [0-9]+)? "
      "(\"Z\" | [+\\-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])";
  static const std::string kOctet = "(\"25\" [0-5] | \"2\" [0-4] [0-9] | [01]? [0-9]? [0-9])";
  static const std::string kPct = "\"%\" [0-9A-Fa-f] [0-9A-Fa-f]";
  static const std::string kPchar = "([a-zA-Z0-9_.~!$&'()*+,;=:@\\-] | " + kPct + ")";
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
    std::string quoted = "\"\\\\\\\"\" (\"\\\\\\\\\" ([ -!#-\\[\\]-~] | \"\\\\\\\"\" | \"\\\\\\\\\") | [ !#-\\[\\]-~])* \"\\\\\\\"\"";
    return "(" + atext + "+ (\".\" " + atext + "+)* | " + quoted + ") \"@\" [A-Za-z0-9] ([\\-A-Za-z0-9]* [A-Za-z0-9])? "
           "(\".\" [A-Za-z0-9] [\\-A-Za-z0-9]* [A-Za-z0-9])*";
  }
  if (f == "uri") {
    std::string userinfo = "([a-zA-Z0-9_.~!$&'()*+,;=:\\-] | " + kPct + ")*";
    std::string host = "([a-zA-Z0-9_.~!$&'()*+,;=\\-] | " + kPct + ")*";
    std::string segment = kPchar + "*";
    std::string qf = "([a-zA-Z0-9_.~!$&'()*+,;=:@/?\\-] | " + kPct + ")*";
    return "[a-zA-Z] [a-zA-Z+.\\-]* \":\" (\"//\" (" + userinfo + " \"@\")? " + host + " (\":\" [0-9]*)? (\"/\" " +
           segment + ")* | \"/\"? (" + kPchar + "+ (\"/\" " + segment + ")*)?) (\"?\" " + qf + ")? (\"#\" " + qf + ")?";
  }
  if (f == "hostname")
    return "[a-z0-9] ([a-z0-9\\-]* [a-z0-9])? (\".\" [a-z0-9] ([a-z0-9\\-]* [a-z0-9])?)*";
  return "";
}

std::string supported_formats() { return "date, time, date-time, uuid, email, ipv4, uri, hostname"; }

}  // namespace brioche::grammar
