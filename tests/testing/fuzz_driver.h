#pragma once
// A deterministic mutation fuzzer for the JSON entry points, run as an ordinary GoogleTest so it
// runs in CI under ASan/UBSan (scripts/test.sh's second pass) without a libFuzzer toolchain.
// Each iteration takes a seed, applies 1-4 mutations (byte flip, insert of a JSON-significant
// byte or token, delete, duplicate a slice, truncate, splice from another seed) and calls the
// target. The target must not crash, leak or trip a sanitizer; whatever it returns is fine.
// Same seeds + same iteration count = same inputs (std::mt19937_64 with a fixed seed).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace toposched::testing {

inline std::string MutateOnce(std::string s, std::span<const std::string> seeds, std::mt19937_64& rng) {
  static constexpr std::string_view kTokens[] = {
      "{",    "}",     "[",   "]",           ",",           ":",  "\"", "\\",   "null", "true",
      "-1",   "1e999", "0.5", "\"\\u0000\"", "\"\\ud800\"", "{}", "[]", "\xff", "\x00", "9223372036854775808",
      "\"\"", " "};
  auto pick = [&](std::size_t n) { return n == 0 ? std::size_t{0} : static_cast<std::size_t>(rng() % n); };
  switch (rng() % 6) {
    case 0:  // flip a byte
      if (!s.empty()) s[pick(s.size())] ^= static_cast<char>(1u << (rng() % 8));
      break;
    case 1: {  // insert a JSON-significant token
      const std::string_view t = kTokens[pick(std::size(kTokens))];
      s.insert(pick(s.size() + 1), t.data(), t.size());
      break;
    }
    case 2:  // delete a slice
      if (!s.empty()) {
        const std::size_t at = pick(s.size());
        s.erase(at, 1 + pick(std::min<std::size_t>(16, s.size() - at)));
      }
      break;
    case 3:  // duplicate a slice
      if (!s.empty()) {
        const std::size_t at = pick(s.size());
        const std::string slice = s.substr(at, 1 + pick(64));
        s.insert(pick(s.size() + 1), slice);
      }
      break;
    case 4:  // truncate
      s.resize(pick(s.size() + 1));
      break;
    default: {  // splice the tail of another seed
      if (seeds.empty()) break;
      const std::string& other = seeds[pick(seeds.size())];
      s = s.substr(0, pick(s.size() + 1)) + other.substr(pick(other.size() + 1));
      break;
    }
  }
  return s;
}

// Calls `target` on every seed as is, then `iterations` mutated inputs.
inline void RunFuzz(std::span<const std::string> seeds, const std::function<void(std::string_view)>& target,
                    int iterations, std::uint64_t rng_seed = 0x5eed) {
  for (const std::string& seed : seeds) target(seed);
  std::mt19937_64 rng(rng_seed);
  for (int i = 0; i < iterations; ++i) {
    std::string input = seeds.empty() ? std::string() : seeds[rng() % seeds.size()];
    const int mutations = 1 + static_cast<int>(rng() % 4);
    for (int m = 0; m < mutations; ++m) input = MutateOnce(std::move(input), seeds, rng);
    target(input);
  }
}

}  // namespace toposched::testing
