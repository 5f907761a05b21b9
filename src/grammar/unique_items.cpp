#include "grammar/unique_items.h"

#include "core/error.h"
#include "grammar/json_canonical.h"

namespace brioche::grammar {
namespace {

uint64_t fnv(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Kind bit of a canonical form (its first byte, json_canonical.h).
uint32_t canonical_kind(char c) {
  switch (c) {
    case 's': return UniqueItems::kind_bit('"');
    case 'o': return UniqueItems::kind_bit('{');
    case 'a': return UniqueItems::kind_bit('[');
    case 't': return UniqueItems::kind_bit('t');
    case 'f': return UniqueItems::kind_bit('f');
    case 'n': return UniqueItems::kind_bit('n');
    default: return UniqueItems::kind_bit('0');  // i, d, I: numbers
  }
}

}  // namespace

uint32_t UniqueItems::kind_bit(char first_byte) {
  switch (first_byte) {
    case '"': return 1;
    case '{': return 2;
    case '[': return 4;
    case 't': return 16;
    case 'f': return 32;
    case 'n': return 64;
    default: return first_byte == '-' || (first_byte >= '0' && first_byte <= '9') ? 8 : 0;
  }
}

UniqueItems::UniqueItems() { reset(); }

void UniqueItems::reset() {
  text_.clear();
  sets_.assign(1, ValueSet{0, "", 0, 0});
  pending_.clear();
  set_ids_.clear();
  pending_ids_.clear();
  last_ok_ = false;
  last_raw_.clear();
}

void UniqueItems::rollback(const Mark& m) {
  while (sets_.size() > m.sets) {
    const ValueSet& s = sets_.back();
    std::string key(reinterpret_cast<const char*>(&s.prev), sizeof s.prev);
    set_ids_.erase(key + s.value);
    sets_.pop_back();
  }
  while (pending_.size() > m.pending) {
    const Pending& p = pending_.back();
    pending_ids_.erase(static_cast<uint64_t>(static_cast<uint32_t>(p.seen)) << 32 | static_cast<uint32_t>(p.start));
    pending_.pop_back();
  }
  if (text_.size() > m.text) text_.resize(m.text);
}

int32_t UniqueItems::item_starts(int32_t seen) {
  BRIOCHE_CHECK(seen >= 0 && static_cast<size_t>(seen) < sets_.size(), "UniqueItems: a call of an item rule from a ",
                "frame whose values are ", seen, " (expected a value set id below ", sets_.size(), ")");
  const int32_t start = text_size();
  const uint64_t key = static_cast<uint64_t>(static_cast<uint32_t>(seen)) << 32 | static_cast<uint32_t>(start);
  auto [it, added] = pending_ids_.try_emplace(key, -static_cast<int32_t>(pending_.size()) - 2);
  if (added) pending_.push_back(Pending{seen, start});
  return it->second;
}

bool UniqueItems::canonical(int32_t start, std::string_view rest) {
  raw_.assign(text_, static_cast<size_t>(start));
  raw_ += rest;
  // A mask computation ends the same item many times (every token that
  // closes a string and goes on): the last text's form is kept.
  if (raw_ == last_raw_) {
    canonical_ = last_canonical_;
    return last_ok_;
  }
  canonical_.clear();
  last_ok_ = canonical_json(raw_, canonical_);
  last_raw_ = raw_;
  last_canonical_ = canonical_;
  return last_ok_;
}

bool UniqueItems::contains(int32_t set, const std::string& value, uint64_t hash) const {
  for (int32_t s = set; s != 0; s = sets_[s].prev)
    if (sets_[s].hash == hash && sets_[s].value == value) return true;
  return false;
}

int32_t UniqueItems::item_ends(int32_t in_progress) {
  const Pending p = pending_[pending_index(in_progress)];
  // The item rule matched it, so it is one JSON value; if not (a grammar
  // written by hand), there is nothing to compare: it counts as new.
  if (!canonical(p.start, {})) canonical_ = "?" + raw_;
  const uint64_t hash = fnv(canonical_);
  if (contains(p.seen, canonical_, hash)) return -1;
  std::string key(reinterpret_cast<const char*>(&p.seen), sizeof p.seen);
  key += canonical_;
  auto [it, added] = set_ids_.try_emplace(std::move(key), static_cast<int32_t>(sets_.size()));
  if (added) sets_.push_back(ValueSet{p.seen, canonical_, hash, sets_[p.seen].kinds | canonical_kind(canonical_[0])});
  return it->second;
}

bool UniqueItems::repeats(int32_t in_progress, std::string_view rest) {
  const Pending p = pending_[pending_index(in_progress)];
  const std::string_view prefix = std::string_view(text_).substr(static_cast<size_t>(p.start));
  // Most tokens that end an item end a string without escapes, whose bytes
  // are its characters: compared in place (a mask tries every such token).
  const bool plain_string = !rest.empty() && rest.back() == '"' && prefix.size() + rest.size() >= 2 &&
                            (prefix.empty() ? rest.front() : prefix.front()) == '"' &&
                            prefix.find('\\') == std::string_view::npos && rest.find('\\') == std::string_view::npos;
  if (plain_string) {
    // The body: prefix and rest without the opening and the closing quote.
    const std::string_view head = prefix.empty() ? std::string_view() : prefix.substr(1);
    const std::string_view tail = prefix.empty() ? rest.substr(1, rest.size() - 2) : rest.substr(0, rest.size() - 1);
    if (head.find('"') != std::string_view::npos || tail.find('"') != std::string_view::npos) return false;
    const size_t n = head.size() + tail.size();
    for (int32_t s = p.seen; s != 0; s = sets_[s].prev) {
      const std::string& v = sets_[s].value;  // 's', 4 bytes of length, the bytes
      if (v.size() == 5 + n && v[0] == 's' && v.compare(5, head.size(), head) == 0 &&
          v.compare(5 + head.size(), tail.size(), tail) == 0)
        return true;
    }
    return false;
  }
  // Integers (a mask after a comma tries every digit token): their form is
  // 'i', the digits, ';' (JSON writes no leading zero; "-0" is 0).
  auto digits = [](std::string_view x) { return x.find_first_not_of("0123456789") == std::string_view::npos; };
  const std::string_view first = prefix.empty() ? rest : prefix;
  if (!rest.empty() && first.front() != '-' && digits(prefix) && digits(rest) &&
      (first.front() != '0' || prefix.size() + rest.size() == 1)) {
    const size_t n = prefix.size() + rest.size();
    for (int32_t s = p.seen; s != 0; s = sets_[s].prev) {
      const std::string& v = sets_[s].value;
      if (v.size() == n + 2 && v[0] == 'i' && v.compare(1, prefix.size(), prefix) == 0 &&
          v.compare(1 + prefix.size(), rest.size(), rest) == 0)
        return true;
    }
    return false;
  }
  if (!canonical(p.start, rest)) return false;
  return contains(p.seen, canonical_, fnv(canonical_));
}

}  // namespace brioche::grammar
