#include "toposched/kube/time.h"

#include <gtest/gtest.h>

namespace toposched::kube {
namespace {

using std::chrono::system_clock;

TEST(KubeTime, FormatsSecondsAndMicros) {
  // 2026-12-02T16:35:41.123456Z = 1796229341 s since the epoch (+ 123456 us).
  const system_clock::time_point t =
      system_clock::time_point(std::chrono::seconds(1796229341)) + std::chrono::microseconds(123456);
  EXPECT_EQ(FormatTime(t), "2026-12-02T16:35:41Z");
  EXPECT_EQ(FormatMicroTime(t), "2026-12-02T16:35:41.123456Z");
}

TEST(KubeTime, ParsesWhatItFormatsAndOffsets) {
  const system_clock::time_point t =
      system_clock::time_point(std::chrono::seconds(1796229341)) + std::chrono::microseconds(123456);
  Result<system_clock::time_point> micro = ParseTime(FormatMicroTime(t));
  ASSERT_TRUE(micro.ok()) << micro.error().message();
  EXPECT_EQ(*micro, t);
  Result<system_clock::time_point> offset = ParseTime("2026-12-02T18:35:41+02:00");
  ASSERT_TRUE(offset.ok());
  EXPECT_EQ(*offset, system_clock::time_point(std::chrono::seconds(1796229341)));
  Result<system_clock::time_point> epoch = ParseTime("1970-01-01T00:00:00Z");
  ASSERT_TRUE(epoch.ok());
  EXPECT_EQ(epoch->time_since_epoch().count(), 0);
}

TEST(KubeTime, RejectsMalformed) {
  for (const char* bad :
       {"", "2026-12-02", "2026-12-02 16:35:41Z", "2026-13-02T16:35:41Z", "2026-12-02T16:35:41",
        "2026-12-02T16:35:41.Z", "2026-12-02T16:35:41Zjunk", "2026-12-02T16:35:41+0200"}) {
    EXPECT_FALSE(ParseTime(bad).ok()) << bad;
  }
}

// Valid RFC 3339, but outside what system_clock holds: an error, not an overflow (UBSan).
TEST(KubeTime, RejectsYearsSystemClockCannotHold) {
  for (const char* far : {"4220-05-01T12:00:00Z", "9999-12-31T23:59:59Z", "0000-01-01T00:00:00Z",
                          "2262-04-12T00:00:00Z", "1677-09-21T00:00:00Z"}) {
    const auto t = ParseTime(far);
    ASSERT_FALSE(t.ok()) << far;
    EXPECT_NE(t.error().message().find("out of range"), std::string::npos) << t.error().message();
  }
  EXPECT_TRUE(ParseTime("2262-04-10T00:00:00Z").ok());
  EXPECT_TRUE(ParseTime("1678-01-02T00:00:00Z").ok());
}

}  // namespace
}  // namespace toposched::kube
