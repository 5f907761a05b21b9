// JSON Schema numbers: integer and number ranges (minimum/maximum, exclusive
// bounds of every draft), multipleOf.

#include <cmath>

#include "grammar/schema_converter.h"

namespace brioche::grammar::schema {

SchemaConverter::Bound SchemaConverter::bound(const Json& s, const char* inclusive, const char* exclusive,
                                              const std::string& ptr) {
  Bound b;
  if (s.contains(inclusive)) {
    if (!s[inclusive].is_number()) unsupported(inclusive, ptr, "expected a number");
    b = Bound{true, s[inclusive].get<double>(), false};
  }
  if (s.contains(exclusive)) {
    const Json& e = s[exclusive];
    if (e.is_boolean()) {  // draft 4: a flag on minimum/maximum
      b.exclusive = e.get<bool>();
    } else if (e.is_number()) {
      double v = e.get<double>();
      if (!b.present || (std::string(exclusive) == "exclusiveMinimum" ? v >= b.value : v <= b.value))
        b = Bound{true, v, true};
    } else {
      unsupported(exclusive, ptr, "expected a number or boolean");
    }
  }
  return b;
}

// multipleOf as (k, p): the value times 10^p must be a multiple of the
// integer k; only k = 1 (at most p fraction digits) or p = 0 are expressible.
std::optional<int64_t> SchemaConverter::integer_multiple(const Json& s, const std::string& ptr, bool integer_type,
                                                         int* decimals) {
  *decimals = 0;
  if (!s.contains("multipleOf")) return std::nullopt;
  const Json& m = s["multipleOf"];
  if (!m.is_number() || m.get<double>() <= 0) unsupported("multipleOf", ptr, "expected a positive number");
  if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
      s.contains("exclusiveMaximum"))
    unsupported("multipleOf", ptr,
                "expected multipleOf without minimum/maximum/exclusiveMinimum/exclusiveMaximum, found both "
                "(a divisor and a range are each a grammar, their intersection is not one the compiler builds)");
  const double v = m.get<double>();
  if (v == std::floor(v)) {
    if (v > 1000)
      unsupported(
          "multipleOf", ptr,
          "expected an integer divisor of at most 1000 (the grammar has one rule per remainder), found " + m.dump());
    return static_cast<int64_t>(v);
  }
  for (int p = 1; p <= 9 && !integer_type; ++p)
    if (std::fabs(v * std::pow(10.0, p) - 1.0) < 1e-9) {
      *decimals = p;
      return 1;
    }
  unsupported("multipleOf", ptr,
              (integer_type ? "expected an integer divisor for an integer, found "
                            : "expected an integer divisor or a power of ten (0.1, 0.01, ...), found ") +
                  m.dump());
}

// Canonical decimal integers (no leading zeros, no "-0") divisible by k:
// a DFA over the value mod k, one rule per remainder.
std::string SchemaConverter::multiple_of_integer(int64_t k, const std::string& hint) {
  if (k == 1) return basic("json_integer");
  std::vector<std::string> name(k);
  for (int64_t r = 0; r < k; ++r) name[r] = fresh(hint + "_mod" + std::to_string(k) + "_" + std::to_string(r));
  // Digits grouped by the remainder they lead to, as a class.
  auto steps = [&](int64_t r, int first_digit) {
    std::map<int64_t, std::string> by_next;
    for (int d = first_digit; d <= 9; ++d) by_next[(10 * r + d) % k] += static_cast<char>('0' + d);
    std::vector<std::string> alts;
    for (auto& [next, digits] : by_next) alts.push_back("[" + digits + "] " + name[next]);
    return alts;
  };
  for (int64_t r = 0; r < k; ++r) {
    std::vector<std::string> alts = steps(r, 0);
    if (r == 0) alts.insert(alts.begin(), "\"\"");
    std::string body;
    for (auto& a : alts) body += (body.empty() ? "" : " | ") + a;
    rules_.emplace_back(name[r], body);
  }
  std::string lead;
  for (auto& a : steps(0, 1)) lead += (lead.empty() ? "" : " | ") + a;
  return add_rule(hint + "_multiple", "\"0\" | \"-\"? (" + lead + ")");
}

std::string SchemaConverter::visit_integer(const Json& s, const std::string& ptr, const std::string& hint) {
  int decimals = 0;
  if (auto k = integer_multiple(s, ptr, /*integer_type=*/true, &decimals)) return multiple_of_integer(*k, hint);
  Bound lo = bound(s, "minimum", "exclusiveMinimum", ptr), hi = bound(s, "maximum", "exclusiveMaximum", ptr);
  if (!lo.present && !hi.present) return basic("json_integer");
  constexpr double kLimit = 9e15;
  std::optional<int64_t> a, b;
  if (lo.present) {
    if (std::fabs(lo.value) > kLimit) unsupported("minimum", ptr, "bound beyond +-9e15");
    double v = lo.exclusive ? std::floor(lo.value) + 1 : std::ceil(lo.value);
    a = static_cast<int64_t>(v);
  }
  if (hi.present) {
    if (std::fabs(hi.value) > kLimit) unsupported("maximum", ptr, "bound beyond +-9e15");
    double v = hi.exclusive ? std::ceil(hi.value) - 1 : std::floor(hi.value);
    b = static_cast<int64_t>(v);
  }
  if (a && b && *a > *b) unsupported("minimum", ptr, "minimum is greater than maximum: no integer fits");
  return add_rule(hint + "_int", integer_range(a, b));
}

std::string SchemaConverter::visit_number(const Json& s, const std::string& ptr, const std::string& hint) {
  int decimals = 0;
  if (auto k = integer_multiple(s, ptr, /*integer_type=*/false, &decimals)) {
    // No exponent form (like the bounded numbers): the value is written out.
    if (decimals == 0) return add_rule(hint + "_num", multiple_of_integer(*k, hint) + " (\".\" \"0\"+)?");
    return add_rule(hint + "_num",
                    "\"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]{1," + std::to_string(decimals) + "} \"0\"*)?");
  }
  Bound lo = bound(s, "minimum", "exclusiveMinimum", ptr), hi = bound(s, "maximum", "exclusiveMaximum", ptr);
  if (!lo.present && !hi.present) return basic("json_number");
  for (const Bound* b : {&lo, &hi})
    if (b->present && std::fabs(b->value) > 9e15)
      unsupported(b == &lo ? "minimum" : "maximum", ptr, "bound beyond +-9e15");
  if ((lo.present && lo.value != std::floor(lo.value)) || (hi.present && hi.value != std::floor(hi.value))) {
    // Fractional bounds: a DFA over the number's text, one rule per state.
    if (lo.present && hi.present && (lo.value > hi.value || (lo.value == hi.value && (lo.exclusive || hi.exclusive))))
      unsupported("minimum", ptr, "the range is empty");
    DecimalBound dlo, dhi;
    if (lo.present) dlo = decimal_bound(lo.value, lo.exclusive);
    if (hi.present) dhi = decimal_bound(hi.value, hi.exclusive);
    std::vector<std::string> bodies = decimal_range_rules(dlo, dhi);
    std::vector<std::string> names;
    for (size_t i = 0; i < bodies.size(); ++i) names.push_back(fresh(hint + "_dec"));
    for (size_t i = 0; i < bodies.size(); ++i) {
      std::string body;
      for (size_t pos = 0; pos < bodies[i].size();) {
        size_t open_at = bodies[i].find("{R", pos);
        if (open_at == std::string::npos) {
          body += bodies[i].substr(pos);
          break;
        }
        size_t close_at = bodies[i].find('}', open_at);
        body += bodies[i].substr(pos, open_at - pos) +
                names[std::stoul(bodies[i].substr(open_at + 2, close_at - open_at - 2))];
        pos = close_at + 1;
      }
      rules_.emplace_back(names[i], body);
    }
    return names[0];
  }
  if (lo.present && hi.present && (lo.value > hi.value || (lo.value == hi.value && (lo.exclusive || hi.exclusive))))
    unsupported("minimum", ptr, "the range is empty");
  return add_rule(hint + "_num", number_range(lo, hi));
}

}  // namespace brioche::grammar::schema
