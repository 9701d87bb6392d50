#include "toposched/common/hash.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string_view>

namespace toposched {
namespace {

// FNV-1a 64's published test vectors: these values are persisted (fingerprints, the journal) and
// compared between replicas (NodeOrderKey), so they must never change.
static_assert(Fnv1a64("") == 0xcbf29ce484222325ull, "the offset basis");
static_assert(Fnv1a64("a") == 0xaf63dc4c8601ec8cull);
static_assert(Fnv1a64("foobar") == 0x85944171f73967e8ull);

TEST(Fnv1a64, ContinuesFromAGivenHash) {
  EXPECT_EQ(Fnv1a64("bar", Fnv1a64("foo")), Fnv1a64("foobar"));
  EXPECT_EQ(HashMix(Fnv1a64("fooba"), 'r'), Fnv1a64("foobar"));
}

TEST(Fnv1aHasher, EncodesIntegersLittleEndianAndStringsLengthPrefixed) {
  Fnv1aHasher word;
  word.U64(0x0102030405060708ull);
  EXPECT_EQ(word.value(), Fnv1a64(std::string_view("\x08\x07\x06\x05\x04\x03\x02\x01", 8)));

  Fnv1aHasher negative;
  negative.I64(-1);
  EXPECT_EQ(negative.value(), Fnv1a64(std::string_view("\xff\xff\xff\xff\xff\xff\xff\xff", 8)));

  Fnv1aHasher text;
  text.String("ab");
  EXPECT_EQ(text.value(), Fnv1a64("ab", Fnv1a64(std::string_view("\x02\0\0\0\0\0\0\0", 8))));

  Fnv1aHasher ab_c;  // ("ab", "c") and ("a", "bc") differ only because of the length prefix
  ab_c.String("ab");
  ab_c.String("c");
  Fnv1aHasher a_bc;
  a_bc.String("a");
  a_bc.String("bc");
  EXPECT_NE(ab_c.value(), a_bc.value());
}

TEST(Mix64, IsSplitmix64sFinalizer) {
  EXPECT_EQ(Mix64(0), 0u);
  EXPECT_EQ(Mix64(1), 0x5692161d100b05e5ull);  // splitmix64's finalizer of 1
}

}  // namespace
}  // namespace toposched
