// Hostile templates and values fail with an error that names the limit, and
// the deepest input each limit allows renders on a thread with a 1 MiB stack
// (server and engine threads may be that small): parse nesting, expression
// height, evaluator nesting, macro recursion, value depth, loops, string and
// list blow-ups, and quadratic patterns under the work budget.
#include <gtest/gtest.h>

#include "sanitizer_stack.h"
#include <pthread.h>

#include <functional>
#include <string>

#include "core/error.h"
#include "template/chat_template.h"
#include "template/limits.h"

namespace brioche::tmpl {
namespace {

using json = nlohmann::ordered_json;

// Runs `fn` on a fresh thread whose stack is `stack_bytes`, and returns the
// brioche::Error text it threw ("" when it returned normally). A stack
// overflow kills the test binary, which is the failure these tests look for.
std::string run_on_small_stack(const std::function<void()>& fn, size_t stack_bytes = size_t{1} << 20) {
  struct Job {
    const std::function<void()>* fn;
    std::string error;
  } job{&fn, {}};
  auto body = [](void* arg) -> void* {
    auto* j = static_cast<Job*>(arg);
    try {
      (*j->fn)();
    } catch (const Error& e) {
      j->error = e.what();
      if (j->error.empty()) j->error = "<empty error>";
    } catch (const std::exception& e) {
      j->error = std::string("<not a brioche::Error> ") + e.what();
    }
    return nullptr;
  };
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  EXPECT_EQ(pthread_attr_setstacksize(&attr, brioche::testing::test_stack_bytes(stack_bytes)), 0);
  pthread_t thread;
  EXPECT_EQ(pthread_create(&thread, &attr, body, &job), 0);
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
  return job.error;
}

std::string render(const std::string& source, const json& context = json::object(), RenderLimits limits = {}) {
  return ChatTemplate::parse(source, "t", limits).render(context);
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// ---- parse: blocks, brackets, chains ------------------------------------------------

TEST(TemplateLimits, DeepBracketsAndBlocksAreRefusedWithTheLimit) {
  std::string parens = "{{ " + std::string(3000, '(') + "1" + std::string(3000, ')') + " }}";
  std::string e = error_of([&] { ChatTemplate::parse(parens, "t"); });
  EXPECT_TRUE(contains(e, "t:1:")) << e;
  EXPECT_TRUE(contains(e, "more than 200 deep here; the limit is 200")) << e;

  std::string ifs = repeat("{% if true %}", 3000) + repeat("{% endif %}", 3000);
  e = error_of([&] { ChatTemplate::parse(ifs, "t"); });
  EXPECT_TRUE(contains(e, "the limit is 200")) << e;

  std::string lists = "{{ " + std::string(3000, '[') + std::string(3000, ']') + " }}";
  EXPECT_TRUE(contains(error_of([&] { ChatTemplate::parse(lists, "t"); }), "the limit is 200"));
  std::string minus = "{{ " + std::string(3000, '-') + "1 }}";
  EXPECT_TRUE(contains(error_of([&] { ChatTemplate::parse(minus, "t"); }), "the limit is 200"));
}

// Chains grow the tree without parser recursion; each kind is bounded.
TEST(TemplateLimits, LongChainsAreRefusedWithTheLimit) {
  const int n = 3000;
  const std::vector<std::string> chains = {
      "{{ " + repeat("1 ~ ", n) + "1 }}",  // binary operators
      "{{ " + repeat("1 + ", n) + "1 }}",
      "{{ " + repeat("x or ", n) + "x }}",  // or / and
      "{{ " + repeat("x and ", n) + "x }}",
      "{{ x" + repeat(".a", n) + " }}",            // attributes
      "{{ x" + repeat("[0]", n) + " }}",           // subscripts
      "{{ f" + repeat("()", n) + " }}",            // calls
      "{{ x" + repeat(" | trim", n) + " }}",       // filters
      "{{ x" + repeat(" is defined", n) + " }}",   // tests (an error of its own, or the limit)
      "{{ " + repeat("1 if x else ", n) + "1 }}",  // conditions
      "{% set y %}{% endset %}{% set z | " + repeat("trim | ", n) + "trim %}{% endset %}",
  };
  for (const std::string& source : chains) {
    std::string e = error_of([&] { ChatTemplate::parse(source, "t"); });
    EXPECT_TRUE(contains(e, "the limit is 256") || contains(e, "the limit is 200") || contains(e, "chained"))
        << source.substr(0, 40) << ": " << e;
  }
  std::string e = error_of([&] { ChatTemplate::parse("{{ " + repeat("1 ~ ", n) + "1 }}", "t"); });
  EXPECT_TRUE(contains(e, "the template nests expressions more than 256 deep here")) << e;
}

// The deepest allowed expression parses, renders, validates and is freed on 1 MiB.
TEST(TemplateLimits, DeepestAllowedExpressionRendersOnOneMebibyteStack) {
  std::string chain = "{{ " + repeat("'a' ~ ", kMaxExpressionDepth - 1) + "'a' }}";
  std::string out;
  EXPECT_EQ(run_on_small_stack([&] { out = render(chain); }), "");
  EXPECT_EQ(out, std::string(size_t(kMaxExpressionDepth), 'a'));
  // One more level is refused.
  std::string over = "{{ " + repeat("'a' ~ ", kMaxExpressionDepth) + "'a' }}";
  EXPECT_TRUE(contains(error_of([&] { ChatTemplate::parse(over, "t"); }), "the limit is 256"));

  // The deepest bracket nesting that parses, found by trying.
  int depth = 1;
  while (error_of([&] {
           ChatTemplate::parse(
               "{{ " + std::string(size_t(depth + 1), '(') + "1" + std::string(size_t(depth + 1), ')') + " }}", "t");
         }) == "<no error>")
    ++depth;
  std::string parens = "{{ " + std::string(size_t(depth), '(') + "1" + std::string(size_t(depth), ')') + " }}";
  EXPECT_EQ(run_on_small_stack([&] { out = render(parens); }), "");
  EXPECT_EQ(out, "1");

  // The deepest block nesting that parses.
  int blocks = 1;
  while (error_of([&] {
           ChatTemplate::parse(repeat("{% if true %}", blocks + 1) + "x" + repeat("{% endif %}", blocks + 1), "t");
         }) == "<no error>")
    ++blocks;
  EXPECT_GT(blocks, 100);
  std::string nested =
      repeat("{% for i in [1] %}{% if true %}", blocks / 2) + "x" + repeat("{% endif %}{% endfor %}", blocks / 2);
  EXPECT_EQ(run_on_small_stack([&] { out = render(nested); }), "");
  EXPECT_EQ(out, "x");
}

// ---- render: evaluator nesting and macros ---------------------------------------------

TEST(TemplateLimits, RecursiveMacroFailsWithTheLimitOnOneMebibyteStack) {
  std::string e = run_on_small_stack([] { render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"); });
  EXPECT_TRUE(contains(e, "macro call depth limit exceeded (100 nested calls)")) << e;
  // Each call nests expressions and blocks too: the evaluator's own nesting
  // limit stops it before the call limit, with the 1 MiB stack intact.
  std::string heavy = "{% macro f(n) %}" + repeat("{% if true %}", 40) + "{{ " + repeat("'' ~ ", 40) + "f(n + 1) }}" +
                      repeat("{% endif %}", 40) + "{% endmacro %}{{ f(0) }}";
  e = run_on_small_stack([&] { render(heavy); });
  EXPECT_TRUE(contains(e, "more than 1000 deep while rendering; the limit is 1000")) << e;
  // Mutual recursion through a namespace-held macro, and through map().
  e = run_on_small_stack([] {
    render(
        "{% set ns = namespace() %}{% macro a(n) %}{{ ns.b(n) }}{% endmacro %}{% macro b(n) %}{{ a(n) }}{% endmacro %}"
        "{% set ns.b = b %}{{ a(0) }}");
  });
  EXPECT_TRUE(contains(e, "limit")) << e;
}

TEST(TemplateLimits, NestingLimitIsConfigurableAndLocated) {
  RenderLimits shallow;
  shallow.max_nesting = 10;
  std::string e = error_of(
      [&] { render("\n{{ " + repeat("(1 + ", 12) + "1" + std::string(12, ')') + " }}", json::object(), shallow); });
  EXPECT_TRUE(contains(e, "t:2:")) << e;
  EXPECT_TRUE(contains(e, "the limit is 10")) << e;
  EXPECT_EQ(render("{{ (1 + (2 + 3)) }}", json::object(), shallow), "6");
}

// Filters called by name recurse with no expression per level; calls are
// narrow, so the copies map() makes per item and per level stay small.
TEST(TemplateLimits, FiltersCallingFiltersAreBounded) {
  std::string wide = "{{ 'a' | map(" + repeat("'map', ", 3000) + "'upper') | list }}";
  std::string e = error_of([&] { ChatTemplate::parse(wide, "t"); });
  EXPECT_TRUE(contains(e, "the call passes more than 256 arguments; the limit is 256")) << e;
  std::string deepest = "{{ 'a' | map(" + repeat("'map', ", 254) + "'upper') | list | tojson }}";
  std::string out;
  EXPECT_EQ(run_on_small_stack([&] { out = render(deepest); }), "");
  EXPECT_EQ(out, std::string(255, '[') + "\"A\"" + std::string(255, ']'));
  RenderLimits shallow;
  shallow.max_nesting = 50;
  e = error_of([&] { render(deepest, json::object(), shallow); });
  EXPECT_TRUE(contains(e, "the limit is 50")) << e;
}

// ---- loops, strings, lists ------------------------------------------------------------

TEST(TemplateLimits, HugeRangeAndLoopsFailWithTheLimit) {
  std::string e = error_of([] { render("{% for i in range(10**9) %}{% endfor %}"); });
  EXPECT_TRUE(contains(e, "range() of 1000000000 items exceeds the iteration limit (1000000)")) << e;
  e = error_of([] {
    render(
        "{% for i in range(1000) %}{% for j in range(1000) %}{% for k in range(10) %}{% endfor %}{% endfor %}{% endfor "
        "%}");
  });
  EXPECT_TRUE(contains(e, "loop iteration limit exceeded (1000000 iterations per render)")) << e;
  e = error_of([] { render("{% for i in range(-9223372036854775807, 9223372036854775807, 3) %}{% endfor %}"); });
  EXPECT_TRUE(contains(e, "iteration limit")) << e;
}

TEST(TemplateLimits, StringAndListBlowUpsFailWithTheLimit) {
  EXPECT_TRUE(contains(error_of([] { render("{{ 'a' * 10**12 }}"); }), "output limit"));
  EXPECT_TRUE(contains(error_of([] { render("{{ 'ab' * 9223372036854775807 }}"); }), "output limit"));
  EXPECT_TRUE(contains(error_of([] { render("{{ [1, 2] * 10**12 }}"); }), "size limit"));
  // Doubling: each step is small, the product is not.
  EXPECT_TRUE(contains(
      error_of([] {
        render("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}");
      }),
      "limit"));
  EXPECT_TRUE(contains(
      error_of([] {
        render("{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}");
      }),
      "limit"));
  std::string e =
      error_of([] { render("{{ ('a' * 1000000) | replace('', 'bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb') }}"); });
  EXPECT_TRUE(contains(e, "str.replace() result of")) << e;
  EXPECT_TRUE(contains(e, "exceeds the output limit of 32 MiB")) << e;
  EXPECT_TRUE(contains(error_of([] { render("{{ ('a\\n' * 1000000) | indent('x' * 1000) }}"); }), "output limit"));
  EXPECT_TRUE(contains(error_of([] { render("{{ 'a' | indent(10**12) }}"); }), "output limit"));
  EXPECT_TRUE(contains(error_of([] { render("{{ 'a'.ljust(10**12) }}"); }), "output limit"));
  EXPECT_TRUE(contains(error_of([] { render("{{ 'a'.zfill(10**12) }}"); }), "output limit"));
  EXPECT_TRUE(contains(error_of([] { render("{{ 'a' | center(10**12) }}"); }), "output limit"));
  EXPECT_TRUE(contains(error_of([] { render("{{ [1] | batch(10**12, 0) | list }}"); }), "output limit"));
  EXPECT_TRUE(contains(error_of([] { render("{% set s = 'x' * 1000000 %}{{ [s] * 1000 }}"); }), "output limit"));
  EXPECT_TRUE(
      contains(error_of([] { render("{% set s = 'x' * 1000000 %}{{ ([s] * 1000) | tojson }}"); }), "output limit"));
  EXPECT_TRUE(contains(error_of([] {
                         render(
                             "{% set s = 'x' * 1000000 %}{{ "
                             "'{}{}{}{}{}{}{}{}{}{}{}{}{}{}{}{}{}{}{}{}{}{}{}{}{}{}{}{}{}{}{}{}{}{}'.format(s,s,s,s,s,"
                             "s,s,s,s,s,s,s,s,s,s,s,s,s,s,s,s,s,s,s,s,s,s,s,s,s,s,s,s,s) }}");
                       }),
                       "output limit"));
}

// Quadratic patterns: each step is allowed, the total work is not.
TEST(TemplateLimits, QuadraticWorkFailsWithTheWorkLimit) {
  std::string e = error_of([] {
    render(
        "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = ns.l + [i] %}{% endfor %}{{ ns.l | "
        "length }}");
  });
  EXPECT_TRUE(contains(
      e, "the render built, copied or searched more than 1024 MiB of strings and lists; the limit is 1024 MiB"))
      << e;
  e = error_of([] {
    render("{% set big = range(100000) | list %}{% for i in range(100000) %}{% if -1 in big %}{% endif %}{% endfor %}");
  });
  EXPECT_TRUE(contains(e, "the limit is 1024 MiB")) << e;
  e = error_of([] { render("{% set s = 'x' * 10000000 %}{% for i in range(1000) %}{{ s[5] }}{% endfor %}"); });
  EXPECT_TRUE(contains(e, "the limit is 1024 MiB")) << e;
  e = error_of([] { render("{{ range(100000) | unique | list | length }}"); });
  EXPECT_TRUE(contains(e, "the limit is 1024 MiB")) << e;
  // Ordinary work stays far below: a long conversation through a loop.
  json messages = json::array();
  for (int i = 0; i < 2000; ++i)
    messages.push_back(json{{"role", i % 2 ? "assistant" : "user"}, {"content", std::string(500, 'x')}});
  std::string out = render("{% for m in messages %}{{ '<|' ~ m.role ~ '|>' ~ m.content | trim ~ '\\n' }}{% endfor %}",
                           json{{"messages", messages}});
  EXPECT_GT(out.size(), 2000u * 500u);
}

// ---- values -----------------------------------------------------------------------------

json nested_array(int depth) {
  json v = 1;
  for (int i = 0; i < depth; ++i) v = json::array({v});
  return v;
}

TEST(TemplateLimits, DeepRequestValueFailsWithTheLimit) {
  std::string e = error_of([] { render("{{ v }}", json{{"v", nested_array(3000)}}); });
  EXPECT_TRUE(contains(e, "the value nests 3001 levels of arrays/objects; the limit is 256")) << e;
}

// The deepest allowed value converts, prints, serializes, compares and is freed on 1 MiB.
TEST(TemplateLimits, DeepestAllowedValueRendersOnOneMebibyteStack) {
  json context = json{{"v", nested_array(kMaxValueDepth - 1)}};  // the context object is one more level
  std::string out;
  std::string e = run_on_small_stack([&] {
    out = render("{{ v | tojson }}|{{ v }}|{{ v == v }}|{{ [v] < [v] }}|{{ v | string | length }}", context);
  });
  EXPECT_EQ(e, "");
  std::string brackets =
      std::string(size_t(kMaxValueDepth - 1), '[') + "1" + std::string(size_t(kMaxValueDepth - 1), ']');
  EXPECT_EQ(out, brackets + "|" + brackets + "|True|False|" + std::to_string(brackets.size()));
  e = error_of([] { render("{{ v }}", json{{"v", nested_array(kMaxValueDepth)}}); });
  EXPECT_TRUE(contains(e, "the limit is 256")) << e;
}

TEST(TemplateLimits, ValuesBuiltByTheTemplateAreBoundedToo) {
  // A list wrapped in itself, 10,000 times.
  std::string e = run_on_small_stack([] {
    render("{% set ns = namespace(v=1) %}{% for i in range(10000) %}{% set ns.v = [ns.v] %}{% endfor %}{{ ns.v }}");
  });
  EXPECT_TRUE(contains(e, "the list nests lists and dicts more than 256 deep; the limit is 256")) << e;
  e = run_on_small_stack([] {
    render("{% set ns = namespace(v=1) %}{% for i in range(10000) %}{% set ns.v = {'k': ns.v} %}{% endfor %}");
  });
  EXPECT_TRUE(contains(e, "the dict nests lists and dicts more than 256 deep")) << e;
  // Namespaces inside namespaces: their depth is not tracked, so printing
  // and comparing stop at the limit, and freeing them does not recurse.
  e = run_on_small_stack([] {
    render(
        "{% set ns = namespace(v=1) %}{% for i in range(100000) %}{% set ns.v = namespace(v=ns.v) %}{% endfor %}{{ "
        "ns.v }}");
  });
  EXPECT_TRUE(contains(e, "the value nests lists and dicts more than 256 deep")) << e;
  EXPECT_EQ(run_on_small_stack([] {
              render(
                  "{% set ns = namespace(v=1) %}{% for i in range(100000) %}{% set ns.v = namespace(v=[ns.v]) %}{% "
                  "endfor %}ok");
            }),
            "");
  // A namespace that holds itself prints, compares and serializes to an error.
  for (const char* use : {"{{ ns }}", "{{ ns == ns.me }}", "{{ [ns] | tojson }}", "{{ [ns] == [ns.me] }}"}) {
    e = run_on_small_stack([&] { render(std::string("{% set ns = namespace() %}{% set ns.me = ns %}") + use); });
    EXPECT_TRUE(contains(e, "limit") || contains(e, "not JSON serializable") || e.empty()) << use << ": " << e;
  }
}

}  // namespace
}  // namespace brioche::tmpl
