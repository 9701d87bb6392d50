#include "toposched/common/stats.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace toposched {
namespace {

TEST(Percentile, IsTheNearestRank) {
  const std::vector<double> ten = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  const std::vector<double> hundred = [] {
    std::vector<double> v;
    for (int i = 1; i <= 100; ++i) v.push_back(i);
    return v;
  }();
  struct Case {
    std::string name;
    std::vector<double> sorted;
    double p;
    double want;
  };
  const std::vector<Case> cases = {
      {"empty input is 0", {}, 0.5, 0},
      {"empty input at p=0", {}, 0, 0},
      {"one element at p=0", {7}, 0, 7},
      {"one element at p=0.5", {7}, 0.5, 7},
      {"one element at p=1", {7}, 1, 7},
      {"p=0 is the minimum (rank 1, not rank 0)", ten, 0, 1},
      {"p=1 is the maximum (rank n)", ten, 1, 10},
      {"p50 of 10: ceil(0.5*10)=5th", ten, 0.5, 5},
      {"p99 of 10: ceil(9.9)=10th", ten, 0.99, 10},
      {"p91 of 10: ceil(9.1)=10th, no interpolation", ten, 0.91, 10},
      {"p10 of 10: ceil(1.0)=1st", ten, 0.10, 1},
      {"p11 of 10: ceil(1.1)=2nd", ten, 0.11, 2},
      {"p99 of 100: ceil(99)=99th", hundred, 0.99, 99},
      {"p50 of 2 values: ceil(1)=1st, the lower", {3, 8}, 0.5, 3},
  };
  for (const Case& c : cases) EXPECT_EQ(Percentile(c.sorted, c.p), c.want) << c.name;
}

}  // namespace
}  // namespace toposched
