#pragma once
// The project's hashes, each defined once. Two kinds:
//  - FNV-1a 64 (Fnv1a64, Fnv1aHasher, HashMix): stable across processes, replicas and releases
//    (std::hash is not), so it is the one to use for any value that is persisted (journal,
//    topology fingerprints) or compared between replicas (a node's place in the tie-break order).
//    Changing an encoding here changes those values: the tests pin them.
//  - Mix64 (splitmix64's finalizer): a strong mix of one word, for in-memory keys built from
//    values that are already hashes or small integers.

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace toposched {

// FNV-1a's 64-bit parameters (http://www.isthe.com/chongo/tech/comp/fnv/).
inline constexpr std::uint64_t kFnv1aOffsetBasis = 14695981039346656037ull;  // 0xcbf29ce484222325
inline constexpr std::uint64_t kFnv1aPrime = 1099511628211ull;               // 0x100000001b3

// One FNV-1a step: folds `v` into `h`. Over a byte it is FNV-1a proper; over a wider word it is
// the same combine step (xor, then multiply by the prime), used to fold one hash into another.
constexpr std::uint64_t HashMix(std::uint64_t h, std::uint64_t v) {
  return (h ^ v) * kFnv1aPrime;
}

// FNV-1a 64 of `bytes`, continuing from `h` (the offset basis for a fresh hash).
constexpr std::uint64_t Fnv1a64(std::string_view bytes, std::uint64_t h = kFnv1aOffsetBasis) {
  for (const char c : bytes) h = HashMix(h, static_cast<unsigned char>(c));
  return h;
}

// FNV-1a 64 over a canonical byte encoding of several fields: integers as their 8 bytes, least
// significant first (whatever the machine's byte order), strings prefixed by their length so that
// ("ab", "c") and ("a", "bc") differ.
class Fnv1aHasher {
 public:
  constexpr void Byte(unsigned char b) { hash_ = HashMix(hash_, b); }
  constexpr void Bytes(std::string_view s) { hash_ = Fnv1a64(s, hash_); }
  constexpr void U64(std::uint64_t v) {
    for (int i = 0; i < 8; ++i) Byte(static_cast<unsigned char>(v >> (8 * i)));
  }
  constexpr void I64(std::int64_t v) { U64(static_cast<std::uint64_t>(v)); }
  constexpr void String(std::string_view s) {
    U64(s.size());
    Bytes(s);
  }
  constexpr std::uint64_t value() const { return hash_; }

 private:
  std::uint64_t hash_ = kFnv1aOffsetBasis;
};

// splitmix64's finalizer: a well-mixed 64-bit hash of `x` (note: 0 maps to 0, so a value that
// may be 0 and must count is offset first).
constexpr std::uint64_t Mix64(std::uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace toposched
