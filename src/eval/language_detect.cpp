#include "eval/language_detect.h"

#include <zstd.h>

#include <array>
#include <cmath>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "eval/embedded_data.h"
#include "eval/python_regex.h"
#include "eval/python_text.h"

namespace brioche::eval {

namespace {

using Gram = std::u32string;

struct Profiles {
  std::vector<std::string> langs;
  // P(gram | language) for the languages that have the gram: freq / n_words[len - 1].
  std::unordered_map<Gram, std::vector<std::pair<int, double>>> gram_probs;
  std::u32string latin1_excluded, vi_to_normalize, vi_dmark;
  std::vector<std::u32string> vi_normalized;       // one per diacritic mark
  std::unordered_map<char32_t, char32_t> cjk_map;  // CJK character -> its class representative
};

std::u32string to_u32(std::string_view s) {
  std::u32string out;
  for (uint32_t cp : codepoints(s)) out.push_back(cp);
  return out;
}

std::string decompress_zstd(std::string_view packed) {
  std::string out;
  ZSTD_DStream* stream = ZSTD_createDStream();
  ZSTD_initDStream(stream);
  ZSTD_inBuffer in{packed.data(), packed.size(), 0};
  std::vector<char> buffer(1 << 20);
  size_t status = 1;
  while (in.pos < in.size || status != 0) {
    ZSTD_outBuffer chunk{buffer.data(), buffer.size(), 0};
    status = ZSTD_decompressStream(stream, &chunk, &in);
    if (ZSTD_isError(status)) {
      ZSTD_freeDStream(stream);
      throw Error(std::string("langdetect profiles") + ": zstd: " + ZSTD_getErrorName(status));
    }
    out.append(buffer.data(), chunk.pos);
    if (chunk.pos == 0 && in.pos == in.size) break;
  }
  ZSTD_freeDStream(stream);
  return out;
}

std::unique_ptr<Profiles> parse_profiles(const std::string& text) {
  auto p = std::make_unique<Profiles>();
  std::unordered_map<std::string, std::array<int64_t, 3>> n_words;
  for (std::string_view line : split_on(text, "\n")) {
    if (line.empty() || line[0] == '#') continue;
    const size_t tab = line.find('\t');
    BRIOCHE_CHECK(tab != std::string_view::npos, "langdetect profiles: line without a tab: '", std::string(line), "'");
    const std::string_view key = line.substr(0, tab), rest = line.substr(tab + 1);
    if (key == "langs") {
      for (std::string_view l : py_split(rest)) p->langs.emplace_back(l);
    } else if (key == "n_words") {
      const size_t t2 = rest.find('\t');
      std::vector<std::string_view> n = py_split(rest.substr(t2 + 1));
      BRIOCHE_CHECK(n.size() == 3, "langdetect profiles: n_words expects 3 counts");
      n_words[std::string(rest.substr(0, t2))] = {std::stoll(std::string(n[0])), std::stoll(std::string(n[1])),
                                                  std::stoll(std::string(n[2]))};
    } else if (key == "latin1_excluded") {
      p->latin1_excluded = to_u32(rest);
    } else if (key == "vi_to_normalize") {
      p->vi_to_normalize = to_u32(rest);
    } else if (key == "vi_dmark") {
      p->vi_dmark = to_u32(rest);
    } else if (key == "vi_normalized") {
      p->vi_normalized.push_back(to_u32(rest));
    } else if (key == "cjk") {
      const std::u32string cls = to_u32(rest);
      for (char32_t c : cls) p->cjk_map[c] = cls[0];
    } else if (key == "gram") {
      const size_t t2 = rest.find('\t');
      const Gram gram = to_u32(rest.substr(0, t2));
      auto& probs = p->gram_probs[gram];
      for (std::string_view entry : split_on(rest.substr(t2 + 1), ",")) {
        const size_t colon = entry.find(':');
        const int lang = std::stoi(std::string(entry.substr(0, colon)));
        const int64_t freq = std::stoll(std::string(entry.substr(colon + 1)));
        BRIOCHE_CHECK(lang >= 0 && size_t(lang) < p->langs.size(), "langdetect profiles: language index ", lang);
        if (gram.size() >= 1 && gram.size() <= 3)
          probs.emplace_back(lang, double(freq) / double(n_words.at(p->langs[lang])[gram.size() - 1]));
      }
    }
  }
  BRIOCHE_CHECK(p->langs.size() >= 2 && !p->gram_probs.empty() && p->vi_normalized.size() == 5,
                "langdetect profiles: incomplete table");
  return p;
}

const Profiles& profiles() {
  static const std::unique_ptr<Profiles> p = parse_profiles(decompress_zstd(embedded_langdetect_profiles()));
  return *p;
}

// Python's random.Random: MT19937 seeded by init_by_array, random(),
// gauss() (Box-Muller with a cached second value) and choice().
class PythonRandom {
 public:
  explicit PythonRandom(uint64_t seed) {
    std::vector<uint32_t> key;
    for (uint64_t n = seed; n; n >>= 32) key.push_back(uint32_t(n));
    if (key.empty()) key.push_back(0);
    init_genrand(19650218u);
    size_t i = 1, j = 0;
    for (size_t k = std::max<size_t>(kN, key.size()); k; --k) {
      mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1664525u)) + key[j] + uint32_t(j);
      if (++i >= kN) {
        mt_[0] = mt_[kN - 1];
        i = 1;
      }
      if (++j >= key.size()) j = 0;
    }
    for (size_t k = kN - 1; k; --k) {
      mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1566083941u)) - uint32_t(i);
      if (++i >= kN) {
        mt_[0] = mt_[kN - 1];
        i = 1;
      }
    }
    mt_[0] = 0x80000000u;
  }

  uint32_t genrand() {
    if (index_ >= kN) twist();
    uint32_t y = mt_[index_++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
  }
  double random() {
    const uint32_t a = genrand() >> 5, b = genrand() >> 6;
    return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
  }
  double gauss() {
    if (has_next_) {
      has_next_ = false;
      return next_;
    }
    const double x2pi = random() * (2.0 * M_PI);  // Python: random() * TWOPI
    const double g2rad = std::sqrt(-2.0 * std::log(1.0 - random()));
    next_ = std::sin(x2pi) * g2rad;
    has_next_ = true;
    return std::cos(x2pi) * g2rad;
  }
  // _randbelow_with_getrandbits(n): k = n.bit_length() bits, rejected until < n.
  size_t below(size_t n) {
    int k = 0;
    while ((size_t(1) << k) <= n) ++k;
    for (;;) {
      const uint32_t r = genrand() >> (32 - k);
      if (r < n) return r;
    }
  }

 private:
  static constexpr size_t kN = 624;
  void init_genrand(uint32_t s) {
    mt_[0] = s;
    for (size_t i = 1; i < kN; ++i) mt_[i] = 1812433253u * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + uint32_t(i);
    index_ = kN;
  }
  void twist() {
    for (size_t i = 0; i < kN; ++i) {
      const uint32_t y = (mt_[i] & 0x80000000u) | (mt_[(i + 1) % kN] & 0x7fffffffu);
      mt_[i] = mt_[(i + 397) % kN] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
    }
    index_ = 0;
  }
  std::array<uint32_t, kN> mt_{};
  size_t index_ = kN;
  bool has_next_ = false;
  double next_ = 0;
};

// NGram.normalize: one character mapped to its class (punctuation and
// digits to space, kana and hangul to one representative, CJK by class).
char32_t normalize_char(const Profiles& p, char32_t ch) {
  if (ch <= 0x7F) return (ch < 'A' || (ch > 'Z' && ch < 'a') || ch > 'z') ? U' ' : ch;
  if (ch <= 0xFF) return p.latin1_excluded.find(ch) != std::u32string::npos ? U' ' : ch;
  if (ch >= 0x180 && ch <= 0x24F) {
    if (ch == 0x219) return 0x15F;  // s with comma below -> with cedilla
    if (ch == 0x21B) return 0x163;  // t with comma below -> with cedilla
    return ch;
  }
  if (ch >= 0x2000 && ch <= 0x206F) return U' ';
  if (ch >= 0x600 && ch <= 0x6FF) return ch == 0x6CC ? 0x64A : ch;  // Farsi yeh -> Arabic yeh
  if (ch >= 0x1E00 && ch <= 0x1EFF) return ch >= 0x1EA0 ? 0x1EC3 : ch;
  if (ch >= 0x3040 && ch <= 0x309F) return 0x3042;
  if (ch >= 0x30A0 && ch <= 0x30FF) return 0x30A2;
  if ((ch >= 0x3100 && ch <= 0x312F) || (ch >= 0x31A0 && ch <= 0x31BF)) return 0x3105;
  if (ch >= 0x4E00 && ch <= 0x9FFF) {
    auto it = p.cjk_map.find(ch);
    return it == p.cjk_map.end() ? ch : it->second;
  }
  if (ch >= 0xAC00 && ch <= 0xD7AF) return 0xAC00;
  return ch;
}

// The text as Detector.append leaves it: URLs and e-mail addresses blanked,
// Vietnamese letter + combining mark composed, runs of spaces collapsed,
// at most 10000 characters.
std::u32string prepared_text(const Profiles& p, std::string_view input) {
  static const PyRegex url(R"(https?://[-_.?&~;+=/#0-9A-Za-z]{1,2076})");
  static const PyRegex mail(R"([-_.0-9A-Za-z]{1,64}@[-_0-9A-Za-z]{1,255}[-_.0-9A-Za-z]{1,255})");
  const std::string cleaned = mail.sub(url.sub(input, " "), " ");
  std::u32string text;
  const std::vector<uint32_t> cps = codepoints(cleaned);
  for (size_t i = 0; i < cps.size(); ++i) {
    const size_t alphabet = p.vi_to_normalize.find(char32_t(cps[i]));
    if (alphabet != std::u32string::npos && i + 1 < cps.size()) {
      const size_t mark = p.vi_dmark.find(char32_t(cps[i + 1]));
      if (mark != std::u32string::npos) {
        text.push_back(p.vi_normalized[mark][alphabet]);
        ++i;
        continue;
      }
    }
    text.push_back(cps[i]);
  }
  std::u32string out;
  char32_t pre = 0;
  for (size_t i = 0; i < std::min<size_t>(text.size(), 10000); ++i) {
    if (text[i] != U' ' || pre != U' ') out.push_back(text[i]);
    pre = text[i];
  }
  return out;
}

// Detector.cleaning_text: mostly non-Latin text loses its Latin letters.
void drop_latin_if_minor(std::u32string& text) {
  size_t latin = 0, non_latin = 0;
  for (char32_t ch : text) {
    if (ch >= U'A' && ch <= U'z') {
      ++latin;
    } else if (ch >= 0x300 && !(ch >= 0x1E00 && ch <= 0x1EFF)) {
      ++non_latin;
    }
  }
  if (latin * 2 >= non_latin) return;
  std::u32string kept;
  for (char32_t ch : text)
    if (ch < U'A' || ch > U'z') kept.push_back(ch);
  text = std::move(kept);
}

std::vector<const std::vector<std::pair<int, double>>*> extract_ngrams(const Profiles& p, const std::u32string& text) {
  std::vector<const std::vector<std::pair<int, double>>*> out;
  std::u32string grams = U" ";
  bool capital_word = false;
  for (char32_t raw : text) {
    const char32_t ch = normalize_char(p, raw);
    const char32_t last = grams.back();
    bool added = true;
    if (last == U' ') {
      grams = U" ";
      capital_word = false;
      if (ch == U' ') added = false;
    } else if (grams.size() >= 3) {
      grams.erase(0, 1);
    }
    if (added) {
      grams.push_back(ch);
      if (py_char_isupper(ch)) {
        if (py_char_isupper(last)) capital_word = true;
      } else {
        capital_word = false;
      }
    }
    if (capital_word) continue;
    for (size_t n = 1; n <= 3 && grams.size() >= n; ++n) {
      const Gram w = grams.substr(grams.size() - n);
      if (w == U" ") continue;
      auto it = p.gram_probs.find(w);
      if (it != p.gram_probs.end()) out.push_back(&it->second);
    }
  }
  return out;
}

}  // namespace

std::optional<std::string> detect_language(std::string_view input, uint64_t seed) {
  const Profiles& p = profiles();
  std::u32string text = prepared_text(p, input);
  drop_latin_if_minor(text);
  const auto ngrams = extract_ngrams(p, text);
  if (ngrams.empty()) return std::nullopt;

  const size_t n_langs = p.langs.size();
  std::vector<double> lang_prob(n_langs, 0.0), prob(n_langs), word(n_langs);
  PythonRandom random(seed);
  constexpr int kTrials = 7;
  for (int t = 0; t < kTrials; ++t) {
    std::fill(prob.begin(), prob.end(), 1.0 / double(n_langs));
    const double alpha = 0.5 + random.gauss() * 0.05;
    for (int i = 0;; ++i) {
      const auto& gram = *ngrams[random.below(ngrams.size())];
      std::fill(word.begin(), word.end(), 0.0);
      for (auto [lang, pr] : gram) word[lang] = pr;
      const double weight = alpha / 10000.0;
      for (size_t l = 0; l < n_langs; ++l) prob[l] *= weight + word[l];
      if (i % 5 == 0) {
        double sum = 0.0, max_p = 0.0;
        for (double v : prob) sum += v;
        for (double& v : prob) {
          v = v / sum;
          if (max_p < v) max_p = v;
        }
        if (max_p > 0.99999 || i >= 1000) break;
      }
    }
    for (size_t l = 0; l < n_langs; ++l) lang_prob[l] += prob[l] / kTrials;
  }
  // The most probable language above 0.1; the first in profile order on a tie.
  int best = -1;
  for (size_t l = 0; l < n_langs; ++l)
    if (lang_prob[l] > 0.1 && (best < 0 || lang_prob[l] > lang_prob[best])) best = int(l);
  return best < 0 ? std::string("unknown") : p.langs[best];
}

}  // namespace brioche::eval
