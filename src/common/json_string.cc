// JSON string literals (json_string.h).

#include "toposched/common/json_string.h"

#include <cstdint>
#include <cstring>

namespace toposched {
namespace {

// Length of the well-formed UTF-8 sequence starting at s[i] (a byte >= 0x80), or 0 when the
// bytes there are not one (Unicode Table 3-7: no overlong forms, no surrogates, <= U+10FFFF).
std::size_t Utf8SequenceLength(std::string_view s, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const auto in = [&](std::size_t k, unsigned lo, unsigned hi) {
    return k < s.size() && byte(k) >= lo && byte(k) <= hi;
  };
  const unsigned b0 = byte(i);
  if (b0 >= 0xC2 && b0 <= 0xDF) return in(i + 1, 0x80, 0xBF) ? 2 : 0;
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    const unsigned lo = b0 == 0xE0 ? 0xA0 : 0x80;
    const unsigned hi = b0 == 0xED ? 0x9F : 0xBF;
    return in(i + 1, lo, hi) && in(i + 2, 0x80, 0xBF) ? 3 : 0;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    const unsigned lo = b0 == 0xF0 ? 0x90 : 0x80;
    const unsigned hi = b0 == 0xF4 ? 0x8F : 0xBF;
    return in(i + 1, lo, hi) && in(i + 2, 0x80, 0xBF) && in(i + 3, 0x80, 0xBF) ? 4 : 0;
  }
  return 0;
}

// Whether none of the 8 bytes at p needs escaping or UTF-8 checking (each is printable ASCII
// other than '"' and '\\'): the usual bit tricks, exact for "any byte matches" (a false
// positive can only misplace which byte, and the caller then looks byte by byte).
bool PlainWord(const char* p) {
  std::uint64_t w;
  std::memcpy(&w, p, sizeof w);
  constexpr std::uint64_t kOnes = 0x0101010101010101ull, kHigh = 0x8080808080808080ull;
  const auto zero_byte = [&](std::uint64_t x) { return (x - kOnes) & ~x & kHigh; };
  const std::uint64_t control = (w - kOnes * 0x20) & ~w & kHigh;  // a byte < 0x20
  return ((w & kHigh) | control | zero_byte(w ^ (kOnes * '"')) | zero_byte(w ^ (kOnes * '\\'))) == 0;
}

}  // namespace

void AppendJsonString(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.reserve(out.size() + s.size() + 2);
  out.push_back('"');
  std::size_t run = 0;  // start of the bytes not yet copied
  std::size_t i = 0;
  const auto flush = [&] { out.append(s.data() + run, i - run); };
  while (i < s.size()) {
    if (i + 8 <= s.size() && PlainWord(s.data() + i)) {  // node names: mostly whole words
      i += 8;
      continue;
    }
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\' && c < 0x80) {
      ++i;
      continue;
    }
    if (c >= 0x80) {
      if (const std::size_t n = Utf8SequenceLength(s, i); n != 0) {
        i += n;
        continue;
      }
      flush();
      out.append("\\ufffd");  // one per invalid byte, as Go's encoder does
      run = ++i;
      continue;
    }
    flush();
    switch (c) {
      case '"':
        out.append("\\\"");
        break;
      case '\\':
        out.append("\\\\");
        break;
      case '\n':
        out.append("\\n");
        break;
      case '\r':
        out.append("\\r");
        break;
      case '\t':
        out.append("\\t");
        break;
      case '\b':
        out.append("\\b");
        break;
      case '\f':
        out.append("\\f");
        break;
      default:
        out.append("\\u00");
        out.push_back(kHex[c >> 4]);
        out.push_back(kHex[c & 0xF]);
    }
    run = ++i;
  }
  flush();
  out.push_back('"');
}

}  // namespace toposched
