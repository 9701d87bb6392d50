#include "toposched/placement/allocation_json.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "toposched/topology/synthetic.h"

namespace toposched {
namespace {

NodeTopology Hgx() {
  auto spec = SyntheticPreset("hgx-h100-8gpu");
  return *GenerateSynthetic(*spec);
}

TEST(AllocationJsonTest, ReadsIndicesBusIdsNamesAndShares) {
  const NodeTopology t = Hgx();
  const std::string doc = R"({"exclusiveGpus": [0, ")" + t.gpus[5].pci_bus_id + R"("],
    "usedNics": ["mlx5_3", ")" +
                          t.nics[6].pci_bus_id + R"("],
    "sharedGpus": [{"gpu": 2, "shares": 2, "memoryMiB": 16000, "coresPercent": 60},
                   {"gpu": 2, "memoryMiB": 1000, "coresPercent": 10}]})";
  auto a = DecodeAllocationJson(doc, t);
  ASSERT_TRUE(a.ok()) << a.error().message();
  EXPECT_EQ(a->gpu_exclusive, (std::vector<bool>{true, false, false, false, false, true, false, false}));
  EXPECT_TRUE(a->nic_used[3]);
  EXPECT_TRUE(a->nic_used[6]);
  EXPECT_EQ(std::count(a->nic_used.begin(), a->nic_used.end(), true), 2);
  // Two entries for GPU2 add up: 2 + 1 shares (a missing count is one share), 17000 MiB,
  // 70% of the cores = 7000 of kFullGpuCores.
  EXPECT_EQ(a->gpu_shares[2], (GpuShareUsage{3, 17000, 7000}));
  EXPECT_EQ(a->gpu_shares[0], GpuShareUsage{});
}

TEST(AllocationJsonTest, EmptyObjectMeansNothingAllocated) {
  const NodeTopology t = Hgx();
  auto a = DecodeAllocationJson("{}", t);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->gpu_exclusive.size(), t.gpus.size());
  EXPECT_EQ(std::count(a->gpu_exclusive.begin(), a->gpu_exclusive.end(), true), 0);
}

TEST(AllocationJsonTest, RejectsWhatWouldSilentlyMeanFree) {
  const NodeTopology t = Hgx();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"not json", "not valid JSON"},
      {"[]", "expected a JSON object"},
      {R"({"exclusiveGPUs": [0]})", "unknown key \"exclusiveGPUs\""},
      {R"({"exclusiveGpus": 0})", "exclusiveGpus: expected an array"},
      {R"({"exclusiveGpus": [8]})", "exclusiveGpus[0]: GPU index 8 out of range (the node has 8 GPUs)"},
      {R"({"exclusiveGpus": [-1]})", "out of range"},
      {R"({"exclusiveGpus": ["0000:ff:00.0"]})", "no GPU with PCI bus id"},
      {R"({"usedNics": ["mlx5_99"]})", "usedNics[0]: no NIC \"mlx5_99\""},
      {R"({"usedNics": [3]})", "expected a NIC name"},
      {R"({"sharedGpus": [{"shares": 1}]})", "sharedGpus[0].gpu: required"},
      {R"({"sharedGpus": [{"gpu": 1, "memory": 5}]})", "unknown key \"memory\""},
      {R"({"sharedGpus": [{"gpu": 1, "coresPercent": 101}]})",
       "coresPercent: expected an integer in [0, 100]"},
      {R"({"sharedGpus": [{"gpu": 1, "coresPercent": 60}, {"gpu": 1, "coresPercent": 50}]})",
       "more than 100%"},
      {R"({"sharedGpus": [{"gpu": 1, "memoryMiB": 90000}]})", "more than its 81559 MiB"},
      {R"({"exclusiveGpus": [1], "sharedGpus": [{"gpu": 1}]})", "exclusive and shared"},
  };
  for (const auto& [doc, expected] : cases) {
    SCOPED_TRACE(doc);
    auto a = DecodeAllocationJson(doc, t);
    ASSERT_FALSE(a.ok());
    EXPECT_NE(a.error().message().find(expected), std::string::npos) << a.error().message();
  }
}

}  // namespace
}  // namespace toposched
