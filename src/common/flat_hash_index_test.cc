#include "toposched/common/flat_hash_index.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>

namespace toposched {
namespace {

// Against std::map over many inserts, through growth and clear(), including the hash 0 and
// hashes that share their home slot (the low bits), which probe on.
TEST(FlatHashIndex, FindsWhatWasInsertedAndNothingElse) {
  FlatHashIndex<int> index;
  EXPECT_EQ(index.Find(0), nullptr);
  std::map<std::uint64_t, int> want;
  std::mt19937_64 rng(7);
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < 3000; ++i) {
      const std::uint64_t h = i % 3 == 0 ? (rng() << 20) : (i % 3 == 1 ? std::uint64_t(i) << 32 : rng());
      const bool fresh = !want.contains(h);
      EXPECT_EQ(index.Insert(h, i), fresh) << h;
      if (fresh) want[h] = i;
    }
    EXPECT_TRUE(index.Insert(0, -1) || want.contains(0));
    want.try_emplace(0, -1);
    EXPECT_EQ(index.size(), want.size());
    for (const auto& [h, v] : want) {
      ASSERT_NE(index.Find(h), nullptr) << h;
      EXPECT_EQ(*index.Find(h), v);
    }
    for (int i = 0; i < 1000; ++i) {
      const std::uint64_t h = rng();
      if (!want.contains(h)) {
        EXPECT_EQ(index.Find(h), nullptr);
      }
    }
    int* zero = index.Find(0);
    ASSERT_NE(zero, nullptr);
    *zero = 42;  // Find gives the stored value to change
    EXPECT_EQ(*index.Find(std::uint64_t{0}), 42);
    index.clear();
    want.clear();
    EXPECT_EQ(index.size(), 0u);
    EXPECT_EQ(index.Find(0), nullptr);
  }
}

}  // namespace
}  // namespace toposched
