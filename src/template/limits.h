// The fixed bounds of the template layer (docs/template.md lists them with
// RenderLimits'). Templates come from model files and values from requests:
// both can be hostile, and every recursion over them (parsing, evaluating,
// comparing, printing, freeing) spends stack per level, so each kind of
// nesting has a bound that keeps the deepest allowed input inside a 1 MiB
// thread stack (tests/template/template_limits_test.cpp checks that).
#pragma once

namespace brioche::tmpl {

// Parser recursion: nested blocks ({% if %} inside {% for %} ...), brackets
// and unary operators together. Real chat templates stay under 20.
inline constexpr int kMaxParseNesting = 200;

// Height of one expression's tree: evaluating, validating and freeing it
// recurse once per level, and a chain `a ~ b ~ c ~ ...` is one level per
// operator. Real chat templates stay under 30.
inline constexpr int kMaxExpressionDepth = 256;

// Arguments of one call. map() and select() copy the arguments after the
// filter name once per item, and map('map', 'map', ...) passes them down a
// level per name, so a call's width multiplies its cost. Real chat
// templates pass fewer than 10.
inline constexpr int kMaxCallArguments = 256;

// Lists, tuples and dicts nest at most this deep, whether converted from
// request JSON (which the server already bounds at 128) or built by the
// template. A namespace counts as one level (its attributes change after
// construction); walkers that follow namespaces (==, <, repr, tojson) stop
// at the same depth.
inline constexpr int kMaxValueDepth = 256;

}  // namespace brioche::tmpl
