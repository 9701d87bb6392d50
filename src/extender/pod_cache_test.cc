#include "pod_cache.h"

#include <gtest/gtest.h>

namespace toposched::extender {
namespace {

using namespace std::chrono_literals;
using TP = PodCache::TimePoint;

std::shared_ptr<PodEntry> Entry(std::string uid, std::string rv) {
  auto e = std::make_shared<PodEntry>();
  e->uid = std::move(uid);
  e->resource_version = std::move(rv);
  return e;
}

TEST(PodCache, FindsByUidAndResourceVersionUntilTheTtl) {
  PodCache cache(100ms, 10);
  const TP t0{};
  cache.Put(Entry("a", "1"), t0);
  EXPECT_NE(cache.Find("a", "1", t0 + 50ms), nullptr);
  EXPECT_NE(cache.Find("a", "", t0 + 60ms), nullptr);   // bind: any version
  EXPECT_EQ(cache.Find("a", "2", t0 + 60ms), nullptr);  // the pod changed
  // Each hit extended the life: 60ms + 100ms.
  EXPECT_NE(cache.Find("a", "1", t0 + 150ms), nullptr);
  EXPECT_EQ(cache.Find("a", "1", t0 + 400ms), nullptr);
  EXPECT_EQ(cache.size(), 0u);  // the expired entry was dropped
}

TEST(PodCache, EntriesWithoutUidAreNotCached) {
  PodCache cache(1s, 10);
  auto e = cache.Put(Entry("", "1"), TP{});
  EXPECT_NE(e, nullptr);
  EXPECT_EQ(cache.size(), 0u);
}

TEST(PodCache, WhenFullExpiredGoFirstThenTheOldest) {
  PodCache cache(100ms, 3);
  const TP t0{};
  cache.Put(Entry("old", "1"), t0);
  cache.Put(Entry("b", "1"), t0 + 90ms);
  cache.Put(Entry("c", "1"), t0 + 95ms);
  cache.Put(Entry("d", "1"), t0 + 150ms);  // "old" expired at 100ms: it goes
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_EQ(cache.Find("old", "", t0 + 150ms), nullptr);
  cache.Put(Entry("e", "1"), t0 + 160ms);  // all live: the closest to expiry ("b") goes
  EXPECT_EQ(cache.Find("b", "", t0 + 160ms), nullptr);
  EXPECT_NE(cache.Find("e", "", t0 + 160ms), nullptr);
  EXPECT_NE(cache.Find("d", "", t0 + 160ms), nullptr);
}

TEST(PodCache, VerdictsKeepTheFirstStoredPerClass) {
  PodEntry e;
  auto v1 = std::make_shared<ClassVerdict>();
  v1->score100 = 10;
  auto v2 = std::make_shared<ClassVerdict>();
  v2->score100 = 20;
  EXPECT_EQ(e.StoreVerdict(7, v1)->score100, 10);
  EXPECT_EQ(e.StoreVerdict(7, v2)->score100, 10);
  EXPECT_EQ(e.FindVerdict(7)->score100, 10);
  EXPECT_EQ(e.FindVerdict(8), nullptr);
  EXPECT_EQ(e.verdict_count(), 1u);
}

// A bounded (shared) table starts afresh when a new class would pass its bound; a stored class
// is still answered at the bound; a pod's own table has no bound.
TEST(PodCache, ABoundedVerdictTableIsClearedWhenFull) {
  VerdictTable shared(2);
  auto v = std::make_shared<ClassVerdict>();
  shared.Store(1, v);
  shared.Store(2, v);
  EXPECT_EQ(shared.Store(2, std::make_shared<ClassVerdict>()), v) << "a class it holds: kept";
  EXPECT_EQ(shared.size(), 2u);
  shared.Store(3, v);
  EXPECT_EQ(shared.size(), 1u);
  EXPECT_EQ(shared.Find(1), nullptr);
  EXPECT_EQ(shared.Find(3), v);

  VerdictTable own;
  for (std::uint64_t k = 0; k < 10000; ++k) own.Store(k, v);
  EXPECT_EQ(own.size(), 10000u);
}

}  // namespace
}  // namespace toposched::extender
