#include "toposched/kube/time.h"

#include <cctype>
#include <cstdio>
#include <ctime>

namespace toposched::kube {

namespace {

std::string FormatSeconds(std::chrono::system_clock::time_point t) {
  const std::time_t secs = std::chrono::system_clock::to_time_t(std::chrono::floor<std::chrono::seconds>(t));
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];  // room for any int the compiler assumes tm fields may hold
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
  return buf;
}

// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil).
long long DaysFromCivil(long long y, unsigned m, unsigned d) {
  y -= m <= 2;
  const long long era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<long long>(doe) - 719468;
}

bool Digits(std::string_view s, std::size_t pos, std::size_t n, int& out) {
  if (pos + n > s.size()) return false;
  out = 0;
  for (std::size_t i = pos; i < pos + n; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return false;
    out = out * 10 + (s[i] - '0');
  }
  return true;
}

}  // namespace

std::string FormatTime(std::chrono::system_clock::time_point t) {
  return FormatSeconds(t) + "Z";
}

std::string FormatMicroTime(std::chrono::system_clock::time_point t) {
  const auto since = t.time_since_epoch();
  const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(
                          since - std::chrono::floor<std::chrono::seconds>(since))
                          .count();
  char frac[32];
  std::snprintf(frac, sizeof frac, ".%06lld", static_cast<long long>(micros));
  return FormatSeconds(t) + frac + "Z";
}

Result<std::chrono::system_clock::time_point> ParseTime(std::string_view s) {
  const auto bad = [&] { return Error("not an RFC 3339 time: \"" + std::string(s.substr(0, 64)) + "\""); };
  int year, month, day, hour, minute, second;
  if (!Digits(s, 0, 4, year) || s.size() < 20 || s[4] != '-' || !Digits(s, 5, 2, month) || s[7] != '-' ||
      !Digits(s, 8, 2, day) || (s[10] != 'T' && s[10] != 't') || !Digits(s, 11, 2, hour) || s[13] != ':' ||
      !Digits(s, 14, 2, minute) || s[16] != ':' || !Digits(s, 17, 2, second)) {
    return bad();
  }
  if (month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || minute > 59 || second > 60) return bad();
  std::size_t pos = 19;
  long long nanos = 0;
  if (pos < s.size() && s[pos] == '.') {
    ++pos;
    int digits = 0;
    while (pos < s.size() && std::isdigit(static_cast<unsigned char>(s[pos]))) {
      if (digits < 9) nanos = nanos * 10 + (s[pos] - '0');
      ++digits;
      ++pos;
    }
    if (digits == 0) return bad();
    for (int i = digits; i < 9; ++i) nanos *= 10;
  }
  long long offset_seconds = 0;
  if (pos < s.size() && (s[pos] == 'Z' || s[pos] == 'z')) {
    ++pos;
  } else if (pos < s.size() && (s[pos] == '+' || s[pos] == '-')) {
    int oh, om;
    if (!Digits(s, pos + 1, 2, oh) || pos + 3 >= s.size() || s[pos + 3] != ':' ||
        !Digits(s, pos + 4, 2, om) || oh > 23 || om > 59) {
      return bad();
    }
    offset_seconds = (oh * 3600LL + om * 60LL) * (s[pos] == '+' ? 1 : -1);
    pos += 6;
  } else {
    return bad();
  }
  if (pos != s.size()) return bad();
  const long long days = DaysFromCivil(year, static_cast<unsigned>(month), static_cast<unsigned>(day));
  const long long secs = days * 86400 + hour * 3600LL + minute * 60LL + second - offset_seconds;
  // RFC 3339 allows years 0000-9999, system_clock (int64 nanoseconds here) about 1678-2262:
  // outside that the conversion below would overflow (found by fuzz/kube_objects_fuzz.cc).
  using std::chrono::system_clock;
  constexpr long long kMaxSeconds =
      std::chrono::duration_cast<std::chrono::seconds>(system_clock::duration::max()).count() - 1;
  constexpr long long kMinSeconds =
      std::chrono::duration_cast<std::chrono::seconds>(system_clock::duration::min()).count() + 1;
  if (secs > kMaxSeconds || secs < kMinSeconds) {
    return Error("time out of range (years 1678 to 2262): \"" + std::string(s.substr(0, 64)) + "\"");
  }
  return std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::seconds(secs) +
                                                                      std::chrono::nanoseconds(nanos)));
}

}  // namespace toposched::kube
