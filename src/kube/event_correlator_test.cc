// EventCorrelator: the figures are client-go's defaults (tools/record/events_cache.go).

#include "toposched/kube/event_correlator.h"

#include <gtest/gtest.h>

namespace toposched::kube {
namespace {

using std::chrono::minutes;
using std::chrono::seconds;
using TimePoint = EventCorrelator::TimePoint;

const TimePoint kStart = TimePoint(std::chrono::hours(500'000));

EventCorrelator::Occurrence Unschedulable(std::string message, std::string uid = "u1") {
  return {"ns", "pod-" + uid, uid, "FailedScheduling", std::move(message), "Warning"};
}

TEST(EventCorrelatorTest, FirstOccurrenceIsCreatedThenRepeatsPatchTheCount) {
  EventCorrelator c;
  ASSERT_TRUE(c.Observe(Unschedulable("0/3 nodes fit: 3 nodes: cordoned"), kStart));
  std::vector<EventCorrelator::Write> due = c.Due();
  ASSERT_EQ(due.size(), 1u);
  EXPECT_TRUE(due[0].create);
  EXPECT_EQ(due[0].count, 1);
  EXPECT_EQ(due[0].message, "0/3 nodes fit: 3 nodes: cordoned");
  EXPECT_EQ(due[0].name.rfind("pod-u1.", 0), 0u);
  const std::string name = due[0].name;
  c.Written(due[0], true);
  EXPECT_TRUE(c.Due().empty());  // nothing new: nothing to write

  // Two more identical occurrences between flushes: one patch with count 3, same object.
  c.Observe(Unschedulable("0/3 nodes fit: 3 nodes: cordoned"), kStart + seconds(10));
  c.Observe(Unschedulable("0/3 nodes fit: 3 nodes: cordoned"), kStart + seconds(20));
  due = c.Due();
  ASSERT_EQ(due.size(), 1u);
  EXPECT_FALSE(due[0].create);
  EXPECT_EQ(due[0].name, name);
  EXPECT_EQ(due[0].count, 3);
  EXPECT_EQ(due[0].first, kStart);
  EXPECT_EQ(due[0].last, kStart + seconds(20));
}

// The flush writes outside the lock: a repeat observed between the create and its Written()
// must still be patched (it was lost, and KubeE2E.NoNodeFitsIsOne... flaked under load).
TEST(EventCorrelatorTest, ARepeatDuringTheWriteStaysDue) {
  EventCorrelator c;
  c.Observe(Unschedulable("m"), kStart);
  const std::vector<EventCorrelator::Write> due = c.Due();
  ASSERT_EQ(due.size(), 1u);
  c.Observe(Unschedulable("m"), kStart + seconds(1));  // while the create is in flight
  c.Written(due[0], true);
  const std::vector<EventCorrelator::Write> next = c.Due();
  ASSERT_EQ(next.size(), 1u);
  EXPECT_FALSE(next[0].create);
  EXPECT_EQ(next[0].count, 2);
  c.Written(next[0], true);
  EXPECT_TRUE(c.Due().empty());
}

TEST(EventCorrelatorTest, ADifferentMessageIsAnotherEvent) {
  EventCorrelator c;
  c.Observe(Unschedulable("0/3 nodes fit: 3 nodes: cordoned"), kStart);
  c.Observe(Unschedulable("0/3 nodes fit: 2 nodes: cordoned; 1 node: fewer than 4 free GPUs"), kStart);
  EXPECT_EQ(c.Due().size(), 2u);
}

TEST(EventCorrelatorTest, AFailedWriteIsForgottenSoTheNextOccurrenceCreatesAgain) {
  EventCorrelator c;
  c.Observe(Unschedulable("m"), kStart);
  auto due = c.Due();
  c.Written(due[0], true);
  c.Observe(Unschedulable("m"), kStart + seconds(5));
  due = c.Due();
  ASSERT_FALSE(due[0].create);
  c.Written(due[0], false);  // e.g. 404: the Event expired (the API server's --event-ttl)
  EXPECT_TRUE(c.Due().empty());
  c.Observe(Unschedulable("m"), kStart + seconds(10));
  due = c.Due();
  ASSERT_EQ(due.size(), 1u);
  EXPECT_TRUE(due[0].create);
  EXPECT_EQ(due[0].count, 1);
}

TEST(EventCorrelatorTest, SpamFilterAllowsABurstOf25ThenOnePerFiveMinutes) {
  EventCorrelator c;
  int kept = 0;
  for (int i = 0; i < 30; ++i) kept += c.Observe(Unschedulable("m"), kStart + seconds(i)) ? 1 : 0;
  EXPECT_EQ(kept, 25);  // defaultSpamBurst
  EXPECT_EQ(c.dropped(), 5u);
  // 5 minutes after the last try one token is back (defaultSpamQPS = 1/300): 300 s / 300 s = 1.
  EXPECT_TRUE(c.Observe(Unschedulable("m"), kStart + seconds(29) + minutes(5)));
  EXPECT_FALSE(c.Observe(Unschedulable("m"), kStart + seconds(30) + minutes(5)));
  // Another pod has its own bucket.
  EXPECT_TRUE(c.Observe(Unschedulable("m", "u2"), kStart + seconds(30) + minutes(5)));
}

TEST(EventCorrelatorTest, TenDifferentMessagesWithinTenMinutesAreCombined) {
  EventCorrelator c;
  for (int i = 0; i < 9; ++i) c.Observe(Unschedulable("msg " + std::to_string(i)), kStart + seconds(i));
  EXPECT_EQ(c.Due().size(), 9u);
  // The 10th distinct message (defaultAggregateMaxEvents) goes into one combined event, and so
  // does the 11th: the combined event's count is 2 with the latest message.
  c.Observe(Unschedulable("msg 9"), kStart + seconds(9));
  c.Observe(Unschedulable("msg 10"), kStart + seconds(10));
  const auto due = c.Due();
  ASSERT_EQ(due.size(), 10u);
  int combined = 0;
  for (const auto& w : due) {
    if (w.message.rfind("(combined from similar events): ", 0) == 0) {
      ++combined;
      EXPECT_EQ(w.message, "(combined from similar events): msg 10");
      EXPECT_EQ(w.count, 2);
    }
  }
  EXPECT_EQ(combined, 1);
}

TEST(EventCorrelatorTest, AQuietGapLongerThanTheWindowStartsAggregationOver) {
  EventCorrelator c;
  for (int i = 0; i < 9; ++i) c.Observe(Unschedulable("msg " + std::to_string(i)), kStart + seconds(i));
  // 10 min + 1 s after the last similar event (defaultAggregateIntervalInSeconds): a fresh record.
  c.Observe(Unschedulable("msg 9"), kStart + seconds(8) + minutes(10) + seconds(1));
  for (const auto& w : c.Due()) EXPECT_EQ(w.message.find("combined"), std::string::npos) << w.message;
}

TEST(EventCorrelatorTest, APodPlacedAfterAllDropsWhatWasNotWrittenYet) {
  EventCorrelator c;
  c.Observe(Unschedulable("written"), kStart);
  c.Written(c.Due()[0], true);
  c.Observe(Unschedulable("written"), kStart + seconds(1));  // a patch would raise the count to 2
  c.Observe(Unschedulable("never written"), kStart + seconds(2));
  c.Observe(Unschedulable("other pod", "u2"), kStart + seconds(2));
  c.DropUnwritten("u1");
  const auto due = c.Due();
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].pod_uid, "u2");
}

TEST(EventCorrelatorTest, RemembersAtMostMaxEventsDroppingTheLeastRecentlySeen) {
  EventCorrelator c({.max_events = 3});
  c.Observe(Unschedulable("a", "u1"), kStart);
  c.Observe(Unschedulable("b", "u2"), kStart + seconds(1));
  c.Observe(Unschedulable("c", "u3"), kStart + seconds(2));
  c.Observe(Unschedulable("a", "u1"), kStart + seconds(3));  // u1 seen again: u2 is the oldest now
  c.Observe(Unschedulable("d", "u4"), kStart + seconds(4));
  EXPECT_EQ(c.size(), 3u);
  std::set<std::string> pods;
  for (const auto& w : c.Due()) pods.insert(w.pod_uid);
  EXPECT_EQ(pods, (std::set<std::string>{"u1", "u3", "u4"}));
}

}  // namespace
}  // namespace toposched::kube
