#pragma once
// Helpers shared by the libFuzzer targets in this folder (see fuzz/README.md).

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

// An invariant beyond "no crash": when it does not hold, report and abort, which libFuzzer
// records as a crash with the input that caused it.
#define FUZZ_CHECK(condition)                                                                \
  do {                                                                                       \
    if (!(condition)) {                                                                      \
      std::fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #condition); \
      std::abort();                                                                          \
    }                                                                                        \
  } while (false)

namespace toposched::fuzz {

// The input as text. libFuzzer hands over a buffer of exactly `size` bytes, so a view that a
// parser keeps past the end of it is an ASan report.
inline std::string_view AsText(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Reads every byte of a view a parser returned: a view into freed memory or past the input is
// an ASan report rather than a silent pass. The sum goes to a volatile sink.
inline void Touch(std::string_view s) {
  static volatile std::size_t sink = 0;
  std::size_t sum = s.size();
  for (const char c : s) sum += static_cast<unsigned char>(c);
  sink = sink + sum;
}

}  // namespace toposched::fuzz
