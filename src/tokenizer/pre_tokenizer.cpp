#include "tokenizer/pre_tokenizer.h"

#include <algorithm>

#include "tokenizer/unicode.h"

namespace brioche::tokenizer {
namespace {

using Range = std::pair<size_t, size_t>;

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (true) {
    const size_t hit = text.find(from, pos);
    if (hit == std::string_view::npos) break;
    out.append(text.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
  }
  out.append(text.substr(pos));
  return out;
}

// Match ranges of a literal or regex pattern inside text[range].
void find_matches(const PreTokenizerStep& step, std::string_view text, Range range, std::vector<Range>& matches) {
  const std::string_view piece = text.substr(range.first, range.second - range.first);
  if (step.regex) {
    step.regex->find_all(piece, range.first, matches);
    return;
  }
  if (step.literal.empty()) return;
  size_t pos = 0;
  while ((pos = piece.find(step.literal, pos)) != std::string_view::npos) {
    matches.emplace_back(range.first + pos, range.first + pos + step.literal.size());
    pos += step.literal.size();
  }
}

// Splits `range` around `matches` according to `behavior` (Hugging Face's
// SplitDelimiterBehavior), appending non-empty pieces to `out`.
void split_range(Range range, const std::vector<Range>& matches, SplitBehavior behavior, bool invert,
                 std::vector<Range>& out) {
  struct Segment {
    Range range;
    bool is_match;
  };
  thread_local std::vector<Segment> segments;
  segments.clear();
  size_t pos = range.first;
  for (const Range& m : matches) {
    if (m.first > pos) segments.push_back({{pos, m.first}, invert});
    segments.push_back({m, !invert});
    pos = m.second;
  }
  if (pos < range.second) segments.push_back({{pos, range.second}, invert});

  const size_t first_out = out.size();
  switch (behavior) {
    case SplitBehavior::Removed:
      for (const Segment& s : segments)
        if (!s.is_match) out.push_back(s.range);
      break;
    case SplitBehavior::Isolated:
      for (const Segment& s : segments) out.push_back(s.range);
      break;
    case SplitBehavior::Contiguous: {
      bool previous_match = false;
      for (const Segment& s : segments) {
        if (s.is_match && previous_match && out.size() > first_out)
          out.back().second = s.range.second;
        else
          out.push_back(s.range);
        previous_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::MergedWithPrevious: {
      bool previous_match = false;
      for (const Segment& s : segments) {
        if (s.is_match && !previous_match && out.size() > first_out)
          out.back().second = s.range.second;
        else
          out.push_back(s.range);
        previous_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::MergedWithNext: {
      // Mirror image of MergedWithPrevious: walk backwards.
      thread_local std::vector<Range> reversed;
      reversed.clear();
      bool previous_match = false;
      for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
        if (it->is_match && !previous_match && !reversed.empty())
          reversed.back().first = it->range.first;
        else
          reversed.push_back(it->range);
        previous_match = it->is_match;
      }
      out.insert(out.end(), reversed.rbegin(), reversed.rend());
      break;
    }
  }
}

}  // namespace

std::string Normalizer::apply(std::string_view input) const {
  std::string text(input);
  for (const NormalizerStep& step : steps_) {
    switch (step.kind) {
      case NormalizerStep::Kind::Replace:
        if (step.regex) {
          std::vector<Range> matches;
          step.regex->find_all(text, 0, matches);
          std::string out;
          size_t pos = 0;
          for (const Range& m : matches) {
            out.append(text, pos, m.first - pos);
            out.append(step.content);
            pos = m.second;
          }
          out.append(text, pos);
          text = std::move(out);
        } else if (!step.pattern.empty() && text.find(step.pattern) != std::string::npos) {
          text = replace_all(text, step.pattern, step.content);
        }
        break;
      case NormalizerStep::Kind::Prepend:
        if (!text.empty()) text.insert(0, step.content);
        break;
      case NormalizerStep::Kind::Nfc: text = nfc(text); break;
      case NormalizerStep::Kind::Lowercase:
        // ASCII only; tokenizer.json files of the supported families do not
        // lowercase, and the loader rejects Lowercase for non-ASCII-safe use.
        for (char& c : text)
          if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
        break;
      case NormalizerStep::Kind::Strip: {
        auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
        size_t begin = 0, end = text.size();
        if (step.strip_left)
          while (begin < end && is_space(text[begin])) ++begin;
        if (step.strip_right)
          while (end > begin && is_space(text[end - 1])) --end;
        text = text.substr(begin, end - begin);
        break;
      }
    }
  }
  return text;
}

void PreTokenizer::run(std::string_view piece, bool starts_input, Words& words) const {
  words.clear();
  words.text.assign(piece);
  if (!piece.empty()) words.ranges.emplace_back(0, piece.size());
  thread_local std::vector<Range> next, matches;
  for (const PreTokenizerStep& step : steps_) {
    next.clear();
    switch (step.kind) {
      case PreTokenizerStep::Kind::Split:
        for (const Range& r : words.ranges) {
          matches.clear();
          find_matches(step, words.text, r, matches);
          split_range(r, matches, step.behavior, step.invert, next);
        }
        break;
      case PreTokenizerStep::Kind::ByteLevel:
        for (Range r : words.ranges) {
          if (step.add_prefix_space && words.text[r.first] != ' ') {
            // Re-home the word at the end of the buffer with a leading space.
            const size_t begin = words.text.size();
            words.text.push_back(' ');
            words.text.append(words.text, r.first, r.second - r.first);
            r = {begin, words.text.size()};
          }
          if (step.regex) {
            matches.clear();
            find_matches(step, words.text, r, matches);
            split_range(r, matches, SplitBehavior::Isolated, false, next);
          } else {
            next.push_back(r);
          }
        }
        break;
      case PreTokenizerStep::Kind::Metaspace:
        for (size_t i = 0; i < words.ranges.size(); ++i) {
          const Range r = words.ranges[i];
          std::string replaced =
              replace_all(std::string_view(words.text).substr(r.first, r.second - r.first), " ", step.replacement);
          const bool prepend = step.prepend_scheme == PrependScheme::Always ||
                               (step.prepend_scheme == PrependScheme::First && starts_input && i == 0 && r.first == 0);
          if (prepend && replaced.compare(0, step.replacement.size(), step.replacement) != 0)
            replaced.insert(0, step.replacement);
          const size_t begin = words.text.size();
          words.text.append(replaced);
          const Range moved{begin, words.text.size()};
          if (step.split) {
            matches.clear();
            PreTokenizerStep literal_split;
            literal_split.kind = PreTokenizerStep::Kind::Split;
            literal_split.literal = step.replacement;
            find_matches(literal_split, words.text, moved, matches);
            split_range(moved, matches, SplitBehavior::MergedWithNext, false, next);
          } else {
            next.push_back(moved);
          }
        }
        break;
    }
    words.ranges.swap(next);
  }
}

}  // namespace brioche::tokenizer
