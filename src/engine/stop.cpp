#include "engine/stop.h"

#include <algorithm>

#include "core/error.h"

namespace brioche::engine {

namespace {

// Bytes at the end of `text` that start a UTF-8 sequence not yet complete.
size_t incomplete_utf8_tail(std::string_view text) {
  // A sequence is at most 4 bytes: look back over up to 3 continuation bytes.
  const size_t n = text.size();
  for (size_t back = 1; back <= std::min<size_t>(4, n); ++back) {
    const unsigned char c = static_cast<unsigned char>(text[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    size_t length = 1;
    if ((c & 0xE0) == 0xC0)
      length = 2;
    else if ((c & 0xF0) == 0xE0)
      length = 3;
    else if ((c & 0xF8) == 0xF0)
      length = 4;
    return length > back ? back : 0;
  }
  return 0;  // only continuation bytes (invalid text): nothing to wait for
}

}  // namespace

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (size_t i = 0; i < stops_.size(); ++i) {
    BRIOCHE_CHECK(!stops_[i].empty(), "stop strings: expected non-empty strings, stop #", i, " is empty");
  }
}

StopMatcher::Step StopMatcher::push(std::string_view piece) {
  Step step;
  if (stopped()) {
    step.stopped = true;
    step.stop_index = stop_index_;
    return step;
  }
  pending_.append(piece);
  const std::string_view text = pending_;

  // Earliest match. Nothing matched inside the old pending_ (else we would
  // have stopped), so a match must end inside `piece`; searching all of
  // `text` is still cheap since pending_ is shorter than the longest stop.
  size_t earliest = std::string_view::npos;
  for (size_t i = 0; i < stops_.size(); ++i) {
    const size_t at = text.find(stops_[i]);
    if (at < earliest) {
      earliest = at;
      stop_index_ = int(i);
    }
  }
  if (earliest != std::string_view::npos) {
    step.emit.assign(text.substr(0, earliest));
    step.stopped = true;
    step.stop_index = stop_index_;
    pending_.clear();
    return step;
  }

  // Hold back the longest suffix of `text` that is a proper prefix of a stop.
  size_t hold = 0;
  for (const std::string& stop : stops_) {
    for (size_t len = std::min(stop.size() - 1, text.size()); len > hold; --len) {
      if (text.substr(text.size() - len) == std::string_view(stop).substr(0, len)) {
        hold = len;
        break;
      }
    }
  }
  hold = std::max(hold, incomplete_utf8_tail(text));
  step.emit.assign(text.substr(0, text.size() - hold));
  pending_.erase(0, text.size() - hold);
  return step;
}

std::string StopMatcher::flush() {
  std::string rest;
  rest.swap(pending_);
  return rest;
}

}  // namespace brioche::engine
