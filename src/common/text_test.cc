#include "toposched/common/text.h"

#include <gtest/gtest.h>

#include <string_view>
#include <vector>

namespace toposched {
namespace {

TEST(Text, TrimSpaceDropsAsciiWhitespaceAtBothEndsOnly) {
  EXPECT_EQ(TrimSpace(" \t\r\n\v\fA100, H100 \n"), "A100, H100");
  EXPECT_EQ(TrimSpace("   "), "");
  EXPECT_EQ(TrimSpace(""), "");
  EXPECT_EQ(TrimSpace("\xc2\xa0x"), "\xc2\xa0x");  // not ASCII whitespace: kept
}

TEST(Text, AsciiLowerAndContainsIgnoringCaseTouchOnlyAsciiLetters) {
  EXPECT_EQ(AsciiLower("NVIDIA-H100-SXM5-80GB \xc3\x89"), "nvidia-h100-sxm5-80gb \xc3\x89");
  EXPECT_TRUE(ContainsIgnoringCase("NVIDIA H100 80GB HBM3", "h100"));
  EXPECT_TRUE(ContainsIgnoringCase("a100", ""));
  EXPECT_FALSE(ContainsIgnoringCase("A10", "a100"));
  EXPECT_FALSE(ContainsIgnoringCase("", "x"));
}

TEST(Text, SplitKeepsEveryPartEmptyOnesIncluded) {
  using V = std::vector<std::string_view>;
  EXPECT_EQ(Split("a,b,,c", ','), (V{"a", "b", "", "c"}));
  EXPECT_EQ(Split("", ','), (V{""}));
  EXPECT_EQ(Split(",", ','), (V{"", ""}));
  EXPECT_EQ(Split("abc", ':'), (V{"abc"}));
}

TEST(Text, ParseIntTakesAWholeBaseTenIntegerAndNothingElse) {
  EXPECT_EQ(ParseInt("42"), 42);
  EXPECT_EQ(ParseInt("-7"), -7);
  EXPECT_EQ(ParseInt("9223372036854775807"), 9223372036854775807LL);
  for (const char* bad : {"", " 1", "1 ", "+1", "1x", "0x10", "9223372036854775808", "-", "1.0"}) {
    EXPECT_FALSE(ParseInt(bad).has_value()) << bad;
  }
}

}  // namespace
}  // namespace toposched
