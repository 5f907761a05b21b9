// A port of the `langdetect` package (Shuyo's language-detection): the IFEval
// reference asks it for the language of a response
// (language:response_language, and 'en' for change_case:english_*).
//
// It is a naive Bayes over character 1-3-grams with 55 language profiles:
// 7 trials, each drawing n-grams of the text at random and multiplying each
// language's probability by (alpha/10000 + P(gram | language)), alpha
// jittered by a Gaussian, normalising every 5 draws until one language
// passes 0.99999 (or 1000 draws); the trials are averaged. The draws come
// from Python's Mersenne Twister seeded with `seed`, reproduced here bit for
// bit, so a fixed seed gives the reference's verdict on every text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace brioche::eval {

// The language code langdetect.detect(text) returns (e.g. "en", "zh-cn",
// or "unknown" when no language passes 0.1), or nullopt where langdetect
// raises LangDetectException ("No features in text": no known n-gram).
std::optional<std::string> detect_language(std::string_view text, uint64_t seed = 0);

}  // namespace brioche::eval
