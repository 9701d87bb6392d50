#include "toposched/common/quantity.h"

#include <algorithm>
#include <cctype>
#include <limits>

namespace toposched {

namespace {

__extension__ using U128 = unsigned __int128;  // GCC and Clang; -Wpedantic knows no 128-bit type

// The grammar of ParseQuantity; the value times 10^`shift`, rounded up when `round_up`, else
// refused when not whole.
std::variant<Quantity, std::string> Parse(std::string_view s, int shift, bool round_up) {
  if (s.size() > kMaxQuantityLength) return std::string("is not a Kubernetes quantity (too long)");
  std::size_t i = 0;
  bool negative = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
  std::string digits;  // integer and fraction digits together
  int fraction_digits = 0;
  bool any_digit = false;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
    digits += s[i++];
    any_digit = true;
  }
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
      digits += s[i++];
      ++fraction_digits;
      any_digit = true;
    }
  }
  if (!any_digit) return std::string("is not a Kubernetes quantity");

  int exp10 = 0, exp2 = 0;
  const std::string_view suffix = s.substr(i);
  bool binary = false;
  if (suffix.empty()) {
    // A plain number.
  } else if (suffix.size() == 2 && suffix[1] == 'i') {
    const std::string_view units = "KMGTPE";
    const std::size_t u = units.find(suffix[0]);
    if (u == std::string_view::npos) return std::string("is not a Kubernetes quantity (unknown suffix)");
    exp2 = 10 * static_cast<int>(u + 1);
    binary = true;
  } else if ((suffix[0] == 'e' || suffix[0] == 'E') && suffix.size() > 1) {
    std::size_t j = 1;
    bool exp_negative = false;
    if (suffix[j] == '+' || suffix[j] == '-') exp_negative = suffix[j++] == '-';
    if (j == suffix.size()) return std::string("is not a Kubernetes quantity");
    int e = 0;
    for (; j < suffix.size(); ++j) {
      if (!std::isdigit(static_cast<unsigned char>(suffix[j]))) {
        return std::string("is not a Kubernetes quantity");
      }
      e = std::min(e * 10 + (suffix[j] - '0'), 10000);  // far past any int64; stays small
    }
    exp10 = exp_negative ? -e : e;
  } else if (suffix.size() == 1) {
    switch (suffix[0]) {
      case 'n':
        exp10 = -9;
        break;
      case 'u':
        exp10 = -6;
        break;
      case 'm':
        exp10 = -3;
        break;
      case 'k':
        exp10 = 3;
        break;
      case 'M':
        exp10 = 6;
        break;
      case 'G':
        exp10 = 9;
        break;
      case 'T':
        exp10 = 12;
        break;
      case 'P':
        exp10 = 15;
        break;
      case 'E':
        exp10 = 18;
        break;
      default:
        return std::string("is not a Kubernetes quantity (unknown suffix)");
    }
  } else {
    return std::string("is not a Kubernetes quantity (unknown suffix)");
  }

  // digits x 10^(exp10 - fraction_digits) x 2^exp2, exactly.
  digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size()));
  if (digits.empty()) return Quantity{0, binary};  // zero, whatever the sign and suffix
  if (negative) return std::string("is negative");
  int scale = exp10 - fraction_digits + shift;
  while (scale < 0 && digits.back() == '0') {
    digits.pop_back();
    ++scale;
  }
  if (scale < 0 && round_up) {
    // ceil(digits x 2^exp2 / 10^-scale), exactly in 128 bits: at most 10^20 x 2^60 over at most
    // 10^30. A quantity with more significant digits than that is not one anybody wrote.
    if (digits.size() > 20 || -scale > 30)
      return std::string("is not a Kubernetes quantity (too many digits)");
    U128 n = 0;
    for (char c : digits) n = n * 10 + static_cast<unsigned>(c - '0');
    n <<= exp2;
    U128 d = 1;
    for (int k = 0; k < -scale; ++k) d *= 10;
    const U128 q = (n + d - 1) / d;
    if (q > static_cast<U128>(std::numeric_limits<std::int64_t>::max())) {
      return std::string("is too large");
    }
    return Quantity{static_cast<std::int64_t>(q), binary};
  }
  if (scale < 0) return std::string("is not a whole number");
  // 18 digits always fit in int64; more would exceed every bound this parser serves.
  if (digits.size() + static_cast<std::size_t>(scale) > 18) return std::string("is too large");
  std::int64_t v = 0;
  for (char c : digits) v = v * 10 + (c - '0');
  for (int k = 0; k < scale; ++k) v *= 10;
  if (exp2 > 0 && v > (std::numeric_limits<std::int64_t>::max() >> exp2)) {
    return std::string("is too large");
  }
  v <<= exp2;
  return Quantity{v, binary};
}

}  // namespace

std::variant<Quantity, std::string> ParseQuantity(std::string_view s) {
  return Parse(s, 0, false);
}

std::variant<std::int64_t, std::string> ParseMilliQuantity(std::string_view s) {
  auto q = Parse(s, 3, true);
  if (const auto* error = std::get_if<std::string>(&q)) return *error;
  return std::get<Quantity>(q).value;
}

}  // namespace toposched
