#include "toposched/common/quantity.h"

#include <gtest/gtest.h>

#include <string>
#include <variant>

namespace toposched {
namespace {

// Values from k8s.io/apimachinery's quantity tests where they are whole, and the refusals the
// pod reader and the size flags rely on.
TEST(QuantityTest, WholeValuesInEverySuffix) {
  struct Case {
    const char* text;
    std::int64_t value;
    bool binary;
  };
  for (const Case& c :
       {Case{"0", 0, false}, Case{"-0", 0, false}, Case{"0m", 0, false}, Case{"1", 1, false},
        Case{"+7", 7, false}, Case{"2000m", 2, false}, Case{"1.5k", 1500, false}, Case{"64k", 64'000, false},
        Case{"1G", 1'000'000'000, false}, Case{"1e3", 1000, false}, Case{"5E2", 500, false},
        Case{"512Ki", 512 * 1024, true}, Case{"16Mi", 16 << 20, true},
        Case{"1Gi", std::int64_t{1} << 30, true}, Case{"2Ei", std::int64_t{2} << 60, true}}) {
    SCOPED_TRACE(c.text);
    const auto q = ParseQuantity(c.text);
    ASSERT_TRUE(std::holds_alternative<Quantity>(q)) << std::get<std::string>(q);
    EXPECT_EQ(std::get<Quantity>(q), (Quantity{c.value, c.binary}));
  }
}

TEST(QuantityTest, RefusalsSayWhy) {
  struct Case {
    const char* text;
    const char* why;
  };
  for (const Case& c :
       {Case{"-1", "is negative"}, Case{"1500m", "is not a whole number"},
        Case{"1.5Gi", "is not a whole number"}, Case{"9999999999Ti", "is too large"},
        Case{"8Ei", "is too large"}, Case{"16MB", "is not a Kubernetes quantity (unknown suffix)"},
        Case{"16 Mi", "is not a Kubernetes quantity (unknown suffix)"},
        Case{"Mi", "is not a Kubernetes quantity"}, Case{"", "is not a Kubernetes quantity"},
        Case{"1e", "is not a Kubernetes quantity (unknown suffix)"},
        Case{"1e+", "is not a Kubernetes quantity"}}) {
    SCOPED_TRACE(c.text);
    const auto q = ParseQuantity(c.text);
    ASSERT_TRUE(std::holds_alternative<std::string>(q));
    EXPECT_EQ(std::get<std::string>(q), c.why);
  }
  EXPECT_EQ(std::get<std::string>(ParseQuantity(std::string(kMaxQuantityLength + 1, '1'))),
            "is not a Kubernetes quantity (too long)");
}

// CPU in thousandths, rounded up as apimachinery's Quantity.MilliValue: a fraction of a
// milli-core counts as one.
TEST(QuantityTest, MilliValuesRoundUp) {
  struct Case {
    const char* text;
    std::int64_t milli;
  };
  for (const Case& c :
       {Case{"0", 0}, Case{"500m", 500}, Case{"2", 2000}, Case{"0.5", 500}, Case{"1.25", 1250},
        Case{"100u", 1}, Case{"1n", 1}, Case{"1500100u", 1501}, Case{"0.0005", 1}, Case{"0.0015", 2},
        Case{"1.0001", 1001}, Case{"64", 64'000}, Case{"1e-3", 1}, Case{"1k", 1'000'000},
        Case{"1Ki", 1'024'000}, Case{"0.5Ki", 512'000}, Case{"1.0001Ki", 1'024'103}, Case{"-0", 0}}) {
    SCOPED_TRACE(c.text);
    const auto q = ParseMilliQuantity(c.text);
    ASSERT_TRUE(std::holds_alternative<std::int64_t>(q)) << std::get<std::string>(q);
    EXPECT_EQ(std::get<std::int64_t>(q), c.milli);
  }
  for (const char* bad : {"-1", "-0.5", "2 cores", "", "9999999999999999999", "1Ei"}) {
    SCOPED_TRACE(bad);
    EXPECT_TRUE(std::holds_alternative<std::string>(ParseMilliQuantity(bad)));
  }
}

}  // namespace
}  // namespace toposched
