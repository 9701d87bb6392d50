// The placement engine: hand cases with their cost arithmetic, and the exact engine against the
// brute-force reference on every shared topology and synthetic preset in random states.

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "brute_force.h"
#include "testing/shared_topologies.h"
#include "toposched/agent/discovery.h"
#include "toposched/placement/packing.h"
#include "toposched/placement/placement.h"
#include "toposched/topology/synthetic.h"

namespace toposched {
namespace {

NodeTopology Preset(const std::string& name) {
  auto spec = SyntheticPreset(name);
  EXPECT_TRUE(spec.ok()) << name;
  auto t = GenerateSynthetic(*spec);
  EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.error().message());
  return t.ok() ? *t : NodeTopology{};
}

std::string Show(const std::vector<int>& v) {
  std::string out = "{";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + std::to_string(v[i]);
  return out + "}";
}

std::string Show(const PlacementCost& c) {
  std::ostringstream out;
  out << "{" << c.worst_gpu_nic << "," << c.sum_gpu_nic << "," << c.worst_gpu_gpu << "," << c.neg_nvlinks
      << "," << c.neg_intact_groups << "," << c.pack << "}";
  return out.str();
}

std::string Show(const PlacementOutcome& o) {
  if (!o.ok()) return std::string(ToString(o.failure)) + ": " + o.detail;
  const Placement& p = *o.placement;
  std::string out = "gpus " + Show(p.gpus) + " nics " + Show(p.nics) + " pairs";
  for (const GpuNicPair& pair : p.pairs) {
    out += " " + std::to_string(pair.gpu) + ">" + std::to_string(pair.nic) + ":" +
           std::string(ToString(pair.cls));
  }
  out += " worst " + std::string(ToString(p.worst_class)) + " sum " + std::to_string(p.class_sum) + " cost " +
         Show(p.cost) + " best " + std::to_string(p.best_possible_worst);
  for (const std::string& r : p.reasons) out += "\n    " + r;
  return out;
}

::testing::AssertionResult SameOutcome(const PlacementOutcome& engine, const PlacementOutcome& reference) {
  if (engine.ok() == reference.ok() && engine.failure == reference.failure &&
      engine.detail == reference.detail && engine.placement == reference.placement) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "engine: " << Show(engine) << "\nreference: " << Show(reference);
}

PlacementRequest Whole(int gpus, int nics, std::optional<LinkClass> bound = std::nullopt) {
  PlacementRequest r;
  r.gpus = gpus;
  r.rdma_nics = nics;
  r.max_gpu_nic_class = bound;
  return r;
}

PlacementRequest Shared(int count, std::int64_t memory_mib, PackPolicy policy = PackPolicy::kDefault) {
  PlacementRequest r;
  r.shared.count = count;
  r.shared.memory_mib = memory_mib;
  r.shared.gpu_policy = policy;
  return r;
}

// Allocation builder: whole GPUs, used NICs, vGPUs (gpu, memory MiB).
NodeAllocation Alloc(std::vector<int> exclusive, std::vector<int> used_nics,
                     std::vector<std::pair<int, std::int64_t>> vgpus = {}) {
  NodeAllocation a;
  for (int g : exclusive) {
    if (a.gpu_exclusive.size() <= static_cast<std::size_t>(g))
      a.gpu_exclusive.resize(static_cast<std::size_t>(g) + 1);
    a.gpu_exclusive[static_cast<std::size_t>(g)] = true;
  }
  for (int n : used_nics) {
    if (a.nic_used.size() <= static_cast<std::size_t>(n)) a.nic_used.resize(static_cast<std::size_t>(n) + 1);
    a.nic_used[static_cast<std::size_t>(n)] = true;
  }
  for (const auto& [g, mib] : vgpus) {
    if (a.gpu_shares.size() <= static_cast<std::size_t>(g))
      a.gpu_shares.resize(static_cast<std::size_t>(g) + 1);
    GpuShareUsage& s = a.gpu_shares[static_cast<std::size_t>(g)];
    ++s.shares;
    s.memory_mib += mib;
  }
  return a;
}

TEST(PlacementEngineTest, LinkRankOrdersClassesAndSplitsSys) {
  EXPECT_EQ(LinkRank(LinkClass::kNV, 0, 1), 0);
  EXPECT_EQ(LinkRank(LinkClass::kPIX, 0, 0), 1);
  EXPECT_EQ(LinkRank(LinkClass::kPXB, 0, 0), 2);
  EXPECT_EQ(LinkRank(LinkClass::kPHB, 0, 0), 3);
  EXPECT_EQ(LinkRank(LinkClass::kNODE, 0, 0), 4);
  EXPECT_EQ(LinkRank(LinkClass::kSYS, 1, 1), 5);    // sub-NUMA clusters of one package
  EXPECT_EQ(LinkRank(LinkClass::kSYS, 0, 1), 6);    // across packages
  EXPECT_EQ(LinkRank(LinkClass::kSYS, -1, -1), 6);  // unknown packages are not "one package"
}

TEST(PlacementEngineTest, FitFailureNames) {
  EXPECT_EQ(ToString(FitFailure::kNone), "none");
  EXPECT_EQ(ToString(FitFailure::kNotEnoughGpus), "not-enough-gpus");
  EXPECT_EQ(ToString(FitFailure::kNotEnoughNics), "not-enough-nics");
  EXPECT_EQ(ToString(FitFailure::kAlignmentUnsatisfiable), "alignment-unsatisfiable");
  EXPECT_EQ(ToString(FitFailure::kNotEnoughShareCapacity), "not-enough-share-capacity");
  EXPECT_EQ(ToString(FitFailure::kRequestTooLarge), "request-too-large");
}

// hgx-h100-8gpu: four PCIe switches (groups) S0..S3, switch k holds GPU 2k, 2k+1 and mlx5_2k,
// mlx5_2k+1; S0, S1 on socket 0, S2, S3 on socket 1; NV18 between every GPU pair. Ranks: PIX 1
// inside a switch, NODE 4 to the other switch of the socket, SYS 6 across sockets.
struct WholeCase {
  std::string name;
  NodeAllocation alloc;
  PlacementRequest request;
  std::vector<int> gpus, nics;
  std::vector<int> nic_of_gpu;  // topology NIC per chosen GPU
  PlacementCost cost;
  LinkClass worst;
  int best_possible_worst;
};

TEST(PlacementEngineTest, HgxWholeRequests) {
  const NodeTopology hgx = Preset("hgx-h100-8gpu");
  const std::vector<WholeCase> cases = {
      // One switch gives two PIX pairs: worst 1, sum 1+1 = 2; one GPU pair NV18 -> -18; S0
      // broken, 3 of 4 groups left -> -3; binpack touched 1 intact group -> +1.
      {"2+2 empty node", {}, Whole(2, 2), {0, 1}, {0, 1}, {0, 1}, {1, 2, 0, -18, -3, 1}, LinkClass::kPIX, 1},
      // Every GPU on its switch's NIC: sum 8 x 1; 28 pairs x NV18 = -504; no group left; 4 touched.
      {"8+8 empty node",
       {},
       Whole(8, 8),
       {0, 1, 2, 3, 4, 5, 6, 7},
       {0, 1, 2, 3, 4, 5, 6, 7},
       {0, 1, 2, 3, 4, 5, 6, 7},
       {1, 8, 0, -504, 0, 4},
       LinkClass::kPIX,
       1},
      // GPU0 and mlx5_0 taken: S0 is already broken, so GPU1+mlx5_1 (PIX) costs no intact group:
      // 3 groups stay intact -> -3, pack 0. GPU2+mlx5_2 would leave 2 -> -2.
      {"1+1 picks the broken group",
       Alloc({0}, {0}),
       Whole(1, 1),
       {1},
       {1},
       {1},
       {1, 1, 0, 0, -3, 0},
       LinkClass::kPIX,
       1},
      // 4 GPUs on 2 NICs, capacity 2 each: S0's GPUs on its NICs; mlx5_0 serves GPU0 and GPU2?
      // No: S0 and S1 are one socket, so GPU0,1 -> mlx5_0/1 (PIX) would leave S1's GPUs NODE
      // (rank 4). Best is two GPUs per NIC within a switch: GPU0,1 -> mlx5_0 and GPU2,3 ->
      // mlx5_2: worst 1, sum 4; 6 pairs x 18 = -108; S0, S1 broken -> -2; pack 2.
      {"4 GPUs on 2 NICs share each NIC within a switch",
       {},
       Whole(4, 2),
       {0, 1, 2, 3},
       {0, 2},
       {0, 0, 2, 2},
       {1, 4, 0, -108, -2, 2},
       LinkClass::kPIX,
       1},
      // Only S0's GPUs and S1's NICs are free: NODE (4) is all there is; without a bound it fits.
      {"misaligned node without a bound",
       Alloc({2, 3, 4, 5, 6, 7}, {0, 1, 4, 5, 6, 7}),
       Whole(1, 1),
       {0},
       {2},
       {2},
       {4, 4, 0, 0, 0, 0},
       LinkClass::kNODE,
       1},
      // The same under a NODE bound: allowed (NODE <= NODE).
      {"misaligned node within a NODE bound",
       Alloc({2, 3, 4, 5, 6, 7}, {0, 1, 4, 5, 6, 7}),
       Whole(1, 1, LinkClass::kNODE),
       {0},
       {2},
       {2},
       {4, 4, 0, 0, 0, 0},
       LinkClass::kNODE,
       1},
      // GPU-only: any two GPUs are NV18; S0 broken by GPU0 already, so GPU1 and... GPU1 is S0's
      // only free GPU, the second breaks one more group: GPU1 + GPU2 -> -2 intact, pack 1.
      {"2 GPUs, no NICs",
       Alloc({0}, {}),
       Whole(2, 0),
       {1, 2},
       {},
       {},
       {0, 0, 0, -18, -2, 1},
       LinkClass::kPIX,
       0},
      // NIC-only pod: two NICs of one switch; S0 broken by GPU0 so mlx5_0, mlx5_1 cost nothing.
      {"NIC-only pod", Alloc({0}, {}), Whole(0, 2), {}, {0, 1}, {}, {0, 0, 0, 0, -3, 0}, LinkClass::kPIX, 0},
      // 1 GPU with 2 NICs: GPU0 -> mlx5_0, the extra mlx5_1 is PIX to GPU0 in the same group.
      {"extra NIC stays in the group",
       {},
       Whole(1, 2),
       {0},
       {0, 1},
       {0},
       {1, 1, 0, 0, -3, 1},
       LinkClass::kPIX,
       1},
      // Spread is only the sign of pack for whole GPUs: the same choice, pack -1.
      {"spread flips pack only",
       {},
       [] {
         PlacementRequest r = Whole(2, 2);
         r.shared.gpu_policy = PackPolicy::kSpread;
         return r;
       }(),
       {0, 1},
       {0, 1},
       {0, 1},
       {1, 2, 0, -18, -3, -1},
       LinkClass::kPIX,
       1},
  };
  for (const WholeCase& c : cases) {
    SCOPED_TRACE(c.name);
    const PlacementOutcome o = PlaceOnNode(hgx, c.alloc, c.request);
    ASSERT_TRUE(o.ok()) << Show(o);
    const Placement& p = *o.placement;
    EXPECT_EQ(p.gpus, c.gpus) << Show(o);
    EXPECT_EQ(p.nics, c.nics) << Show(o);
    std::vector<int> nic_of_gpu;
    for (const GpuNicPair& pair : p.pairs) nic_of_gpu.push_back(pair.nic);
    EXPECT_EQ(nic_of_gpu, c.nic_of_gpu) << Show(o);
    EXPECT_EQ(p.cost, c.cost) << Show(p.cost);
    EXPECT_EQ(p.worst_class, c.worst);
    EXPECT_EQ(p.class_sum, c.cost.sum_gpu_nic);
    EXPECT_EQ(p.best_possible_worst, c.best_possible_worst);
    EXPECT_EQ(p.reasons.size(), p.gpus.size() + p.nics.size());
    EXPECT_TRUE(SameOutcome(o, PlaceByBruteForce(hgx, c.alloc, c.request)));
  }
}

TEST(PlacementEngineTest, ReasonsNameClassesSwitchesAndLinks) {
  const NodeTopology hgx = Preset("hgx-h100-8gpu");
  const PlacementOutcome o = PlaceOnNode(hgx, {}, Whole(2, 2));
  ASSERT_TRUE(o.ok());
  const std::string sw = hgx.pcie[static_cast<std::size_t>(hgx.SwitchOf(hgx.gpus[0].parent))].id;
  const std::vector<std::string> expected = {
      "GPU0 (" + hgx.gpus[0].pci_bus_id + "): PIX to mlx5_0 through switch " + sw +
          "; NV18 to GPU1; opens switch group " + sw,
      "GPU1 (" + hgx.gpus[1].pci_bus_id + "): PIX to mlx5_1 through switch " + sw +
          "; NV18 to GPU0; opens switch group " + sw,
      "mlx5_0: serves GPU0",
      "mlx5_1: serves GPU1",
  };
  EXPECT_EQ(o.placement->reasons, expected);
  const PlacementOutcome eight = PlaceOnNode(hgx, {}, Whole(8, 8));
  ASSERT_TRUE(eight.ok());
  EXPECT_NE(eight.placement->reasons[3].find("NV18 to the other 7 chosen GPUs"), std::string::npos)
      << eight.placement->reasons[3];
  const PlacementOutcome broken = PlaceOnNode(hgx, Alloc({0}, {0}), Whole(1, 1));
  ASSERT_TRUE(broken.ok());
  EXPECT_NE(broken.placement->reasons[0].find("switch group " + sw + " already in use"), std::string::npos)
      << broken.placement->reasons[0];
}

struct FailureCase {
  std::string name;
  NodeAllocation alloc;
  PlacementRequest request;
  FitFailure failure;
  std::string detail;
};

TEST(PlacementEngineTest, HgxFailuresInOrder) {
  const NodeTopology hgx = Preset("hgx-h100-8gpu");
  PlacementRequest amd = Whole(1, 0);
  amd.vendor = GpuVendor::kAmd;
  const std::vector<FailureCase> cases = {
      {"more GPUs than the node has",
       {},
       Whole(9, 0),
       FitFailure::kRequestTooLarge,
       "needs 9 NVIDIA GPUs, the node has 8"},
      {"more NICs than the node has",
       {},
       Whole(1, 9),
       FitFailure::kRequestTooLarge,
       "needs 9 RDMA NICs, the node has 8"},
      {"wrong vendor", {}, amd, FitFailure::kRequestTooLarge, "needs 1 AMD GPU, the node has 0"},
      // Too large wins over not enough free: 9 > 8 even with every GPU taken.
      {"too large before busy", Alloc({0, 1, 2, 3, 4, 5, 6, 7}, {}), Whole(9, 0),
       FitFailure::kRequestTooLarge, "needs 9 NVIDIA GPUs, the node has 8"},
      {"not enough GPUs", Alloc({0, 1, 2, 3, 4}, {}, {{5, 1000}}), Whole(4, 0), FitFailure::kNotEnoughGpus,
       "needs 4 NVIDIA GPUs, 2 are free (5 held whole by pods, 1 carrying vGPUs)"},
      // GPUs are checked before NICs.
      {"GPUs before NICs", Alloc({0, 1, 2, 3, 4, 5, 6}, {0, 1, 2, 3, 4, 5, 6}), Whole(2, 2),
       FitFailure::kNotEnoughGpus, "needs 2 NVIDIA GPUs, 1 is free (7 held whole by pods)"},
      {"not enough NICs", Alloc({}, {0, 1, 2, 3, 4, 5, 6}), Whole(2, 2), FitFailure::kNotEnoughNics,
       "needs 2 RDMA NICs, 1 is free (7 held by pods)"},
      // S0's GPUs, S1's NICs: NODE is the best now, PIX is required.
      {"alignment", Alloc({2, 3, 4, 5, 6, 7}, {0, 1, 4, 5, 6, 7}), Whole(1, 1, LinkClass::kPIX),
       FitFailure::kAlignmentUnsatisfiable,
       "needs every GPU within PIX of its NIC (toposched.io/gpu-nic-alignment); the best this node offers "
       "now is "
       "NODE (GPU0 to mlx5_2)"},
  };
  for (const FailureCase& c : cases) {
    SCOPED_TRACE(c.name);
    const PlacementOutcome o = PlaceOnNode(hgx, c.alloc, c.request);
    EXPECT_FALSE(o.ok());
    EXPECT_EQ(o.failure, c.failure) << Show(o);
    EXPECT_EQ(o.detail, c.detail);
    EXPECT_TRUE(SameOutcome(o, PlaceByBruteForce(hgx, c.alloc, c.request)));
  }
}

TEST(PlacementEngineTest, EmptyRequestFitsWithNothing) {
  const NodeTopology hgx = Preset("hgx-h100-8gpu");
  const PlacementOutcome o = PlaceOnNode(hgx, Alloc({0}, {}), Whole(0, 0));
  ASSERT_TRUE(o.ok());
  EXPECT_TRUE(o.placement->gpus.empty());
  EXPECT_TRUE(o.placement->nics.empty());
  EXPECT_EQ(o.placement->cost, (PlacementCost{0, 0, 0, 0, -3, 0}));  // S1..S3 intact
}

struct SharedCase {
  std::string name;
  NodeAllocation alloc;
  PlacementRequest request;
  EngineOptions options;
  std::vector<int> gpus;
  int neg_intact, pack;
};

TEST(PlacementEngineTest, SharedRequests) {
  const NodeTopology hgx = Preset("hgx-h100-8gpu");  // 81559 MiB per GPU
  PlacementRequest percent = Shared(1, 0);
  percent.shared.memory_percent = 50;  // 81559 * 50 / 100 = 40779 MiB (HAMi's rounding down)
  PlacementRequest bound = Shared(2, 1000);
  bound.shared.numa_bind = true;
  PlacementRequest h100 = Shared(1, 1000);
  h100.shared.use_types = {"h100"};
  PlacementRequest cores = Shared(1, 0);
  cores.shared.cores = 6000;
  NodeAllocation busy_cores = Alloc({}, {}, {{0, 100}});
  busy_cores.gpu_shares[0].cores = 5000;  // 5000 + 6000 > 10000
  // HAMi orders cards by slots, compute and memory used together (gpu_policy.go ComputeScore),
  // not by memory alone. With a 1000 MiB, 10% vGPU added (split 10): GPU0 (one vGPU, 10000 MiB,
  // 60% compute) scores 0.2 + 0.7 + 11000/81559 = 1.03; GPU1 (two vGPUs, 12000 MiB, 20%
  // compute) 0.3 + 0.3 + 13000/81559 = 0.76. By memory alone GPU1 would be the fuller.
  NodeAllocation mixed_use = Alloc({}, {}, {{0, 10000}, {1, 6000}, {1, 6000}});
  mixed_use.gpu_shares[0].cores = 6000;
  mixed_use.gpu_shares[1].cores = 2000;
  PlacementRequest tenth_binpack = Shared(1, 1000, PackPolicy::kBinpack);
  tenth_binpack.shared.cores = 1000;
  PlacementRequest tenth_spread = tenth_binpack;
  tenth_spread.shared.gpu_policy = PackPolicy::kSpread;
  const std::vector<SharedCase> cases = {
      // Nothing allocated: all groups intact, spread, lowest index: GPU0 opens S0 (-3, spread -1).
      {"first GPU on an empty node", {}, Shared(1, 1000), {}, {0}, -3, -1},
      // GPU0 held whole breaks S0: the fragmentation rule puts the vGPU on GPU1, S1..S3 stay.
      {"fragmentation rule", Alloc({0}, {}), Shared(1, 1000), {}, {1}, -3, 0},
      // GPU0 and GPU1 carry vGPUs (20000 and 10000 MiB): both in broken S0, ahead of intact groups;
      // binpack takes the fuller GPU0, spread the emptier GPU1.
      {"binpack",
       Alloc({}, {}, {{0, 20000}, {1, 10000}}),
       Shared(1, 1000, PackPolicy::kBinpack),
       {},
       {0},
       -3,
       0},
      {"spread",
       Alloc({}, {}, {{0, 20000}, {1, 10000}}),
       Shared(1, 1000, PackPolicy::kSpread),
       {},
       {1},
       -3,
       0},
      {"binpack by HAMi's device score", mixed_use, tenth_binpack, {}, {0}, -3, 0},
      {"spread by HAMi's device score", mixed_use, tenth_spread, {}, {1}, -3, 0},
      // The node default applies when the pod says nothing.
      {"node default binpack",
       Alloc({}, {}, {{0, 20000}, {1, 10000}}),
       Shared(1, 1000),
       EngineOptions{PackPolicy::kBinpack, 10},
       {0},
       -3,
       0},
      // GPU0-2 held whole: NUMA 0 has only GPU3 free. Unbound: GPU3 (broken S1) then GPU4 (opens
      // S2) -> 1 group left. numa_bind: both on NUMA 1, GPU4 and GPU5 (S2) -> S3 left.
      {"two vGPUs without numa-bind", Alloc({0, 1, 2}, {}), Shared(2, 1000), {}, {3, 4}, -1, -1},
      {"numa-bind", Alloc({0, 1, 2}, {}), bound, {}, {4, 5}, -1, -1},
      // 50% needs 40779 MiB (HAMi rounds down): GPU0 has 40778 free after 40781 used, GPU1 has
      // 40779 free.
      {"memory percent rounds down, as HAMi",
       Alloc({}, {}, {{0, 40781}, {1, 40780}}),
       percent,
       {},
       {1},
       -3,
       0},
      {"type filter", {}, h100, {}, {0}, -3, -1},
      // GPU0 has 5000 of 10000 cores used: 6000 more do not fit; GPU1 (same broken S0) takes it.
      {"cores", busy_cores, cores, {}, {1}, -3, 0},
      // GPU0 at the share limit (2 vGPUs, limit 2): GPU1.
      {"share limit",
       Alloc({}, {}, {{0, 10}, {0, 10}}),
       Shared(1, 1000),
       EngineOptions{PackPolicy::kSpread, 2},
       {1},
       -3,
       0},
  };
  for (const SharedCase& c : cases) {
    SCOPED_TRACE(c.name);
    const PlacementOutcome o = PlaceOnNode(hgx, c.alloc, c.request, c.options);
    ASSERT_TRUE(o.ok()) << Show(o);
    EXPECT_EQ(o.placement->gpus, c.gpus) << Show(o);
    EXPECT_TRUE(o.placement->nics.empty());
    EXPECT_EQ(o.placement->cost.neg_intact_groups, c.neg_intact);
    EXPECT_EQ(o.placement->cost.pack, c.pack);
    EXPECT_EQ(o.placement->reasons.size(), c.gpus.size());
    EXPECT_TRUE(SameOutcome(o, PlaceByBruteForce(hgx, c.alloc, c.request, c.options)));
  }
}

// Capacity first inside the node (SharePacking): a single vGPU takes the card that leaves the
// node's expected fragmentation lowest for the typical pods, whatever HAMi's policy would pick.
// GPU0 (45 % used) and GPU1 (20 %) share switch group S0; the typical pod is a half card. A 50 %
// vGPU on GPU0 strands its last 5 % (binpack's pick), on GPU1 its last 30 % (spread's pick); on a
// free card (GPU2, the first of intact S1) it strands nothing.
TEST(PlacementEngineTest, OneVgpuTakesTheCardThatStrandsLeastForTheTypicalPods) {
  const NodeTopology hgx = Preset("hgx-h100-8gpu");
  NodeAllocation used = Alloc({}, {}, {{0, 0}, {1, 0}});
  used.gpu_shares[0].cores = 4500;
  used.gpu_shares[1].cores = 2000;
  PlacementRequest half = Shared(1, 0);
  half.shared.cores = 5000;
  packing::ShapeMix mix;
  mix.shapes.push_back({packing::Shape{.gpus = 1, .milli = 500}, 1.0});
  const SharePacking packs{&mix, packing::MixKey(mix)};
  auto gpus_of = [&](const PlacementRequest& r, const EngineOptions& o, SharePacking p) {
    const PlacementOutcome out = PlaceOnNode(hgx, used, r, o, p);
    EXPECT_TRUE(out.ok()) << Show(out);
    EXPECT_TRUE(SameOutcome(out, PlaceByBruteForce(hgx, used, r, o, p)));
    return out.ok() ? out.placement->gpus : std::vector<int>{};
  };
  EXPECT_EQ(gpus_of(half, EngineOptions{PackPolicy::kSpread, 10}, {}), std::vector<int>{1});
  EXPECT_EQ(gpus_of(half, EngineOptions{PackPolicy::kBinpack, 10}, {}), std::vector<int>{0});
  EXPECT_EQ(gpus_of(half, EngineOptions{PackPolicy::kSpread, 10}, packs), std::vector<int>{2});
  EXPECT_EQ(gpus_of(half, EngineOptions{PackPolicy::kBinpack, 10}, packs), std::vector<int>{2});
  const PlacementOutcome said = PlaceOnNode(hgx, used, half, {}, packs);
  ASSERT_TRUE(said.ok());
  ASSERT_EQ(said.placement->reasons.size(), 1u);
  EXPECT_NE(said.placement->reasons[0].find(
                "strands least of the typical pods' GPU (0 milli-GPU of the node after; "
                "capacity first)"),
            std::string::npos)
      << said.placement->reasons[0];
  EXPECT_NE(said.placement->reasons[0].find("binpack: 0 of 81559 MiB and 0% of compute"), std::string::npos)
      << said.placement->reasons[0];
  // Among cards that strand alike, the fuller (HAMi's binpack score), whatever the default: with
  // a typical pod of a tenth, every card strands nothing and GPU0 is the fullest that fits.
  packing::ShapeMix tenth;
  tenth.shapes.push_back({packing::Shape{.gpus = 1, .milli = 50}, 1.0});
  EXPECT_EQ(gpus_of(half, EngineOptions{PackPolicy::kSpread, 10}, {&tenth, packing::MixKey(tenth)}),
            std::vector<int>{0});
  // A pod that names its policy keeps it.
  PlacementRequest named = half;
  named.shared.gpu_policy = PackPolicy::kSpread;
  EXPECT_EQ(gpus_of(named, {}, packs), std::vector<int>{1});
  // Two vGPUs are placed by the policy alone (FGD's rule is for one share).
  PlacementRequest two = half;
  two.shared.count = 2;
  EXPECT_EQ(gpus_of(two, EngineOptions{PackPolicy::kSpread, 10}, packs), (std::vector<int>{0, 1}));
}

TEST(PlacementEngineTest, SharedReasonsStateTheRule) {
  const NodeTopology hgx = Preset("hgx-h100-8gpu");
  const PlacementOutcome o =
      PlaceOnNode(hgx, Alloc({0}, {}, {{1, 2048}}), Shared(1, 1000, PackPolicy::kBinpack));
  ASSERT_TRUE(o.ok());
  const std::string sw = hgx.pcie[static_cast<std::size_t>(hgx.SwitchOf(hgx.gpus[1].parent))].id;
  EXPECT_EQ(o.placement->reasons,
            std::vector<std::string>{"GPU1 (" + hgx.gpus[1].pci_bus_id + "): switch group " + sw +
                                     " already in use (fragmentation rule); binpack: 2048 of "
                                     "81559 MiB and 0% of compute already used; vGPU 2 of at most 10"});
}

TEST(PlacementEngineTest, SharedFailures) {
  const NodeTopology hgx = Preset("hgx-h100-8gpu");
  PlacementRequest a100 = Shared(1, 1000);
  a100.shared.avoid_types = {"H100"};  // case-insensitive: every GPU is excluded
  PlacementRequest bound = Shared(3, 1000);
  bound.shared.numa_bind = true;
  PlacementRequest nine = Shared(9, 1000);
  PlacementRequest uuid = Shared(1, 1000);
  uuid.shared.use_uuids = {"GPU-not-here"};
  const std::vector<FailureCase> cases = {
      {"more vGPUs than GPUs",
       {},
       nine,
       FitFailure::kRequestTooLarge,
       "needs 9 vGPUs on distinct NVIDIA GPUs, the node has 8"},
      {"filtered out",
       {},
       a100,
       FitFailure::kNotEnoughShareCapacity,
       "needs 1 vGPU (1000 MiB each) on distinct NVIDIA GPUs; 0 of 8 can take one (8 excluded by the "
       "type/UUID filters)"},
      {"unknown uuid",
       {},
       uuid,
       FitFailure::kNotEnoughShareCapacity,
       "needs 1 vGPU (1000 MiB each) on distinct NVIDIA GPUs; 0 of 8 can take one (8 excluded by the "
       "type/UUID filters)"},
      // 4 GPUs fit, 2 per NUMA node: no NUMA node has 3.
      {"numa-bind", Alloc({0, 1, 4, 5}, {}), bound, FitFailure::kNotEnoughShareCapacity,
       "needs 3 vGPUs (1000 MiB each) on distinct NVIDIA GPUs of one NUMA node (numa-bind); 4 GPUs can take "
       "one, but "
       "no NUMA node has 3 of them"},
      {"memory", Alloc({0, 1, 2, 3, 4, 5}, {}, {{6, 81000}, {7, 80000}}), Shared(1, 2000),
       FitFailure::kNotEnoughShareCapacity,
       "needs 1 vGPU (2000 MiB each) on distinct NVIDIA GPUs; 0 of 8 can take one (6 held whole, 2 short of "
       "memory)"},
  };
  for (const FailureCase& c : cases) {
    SCOPED_TRACE(c.name);
    const PlacementOutcome o = PlaceOnNode(hgx, c.alloc, c.request);
    EXPECT_FALSE(o.ok());
    EXPECT_EQ(o.failure, c.failure) << Show(o);
    EXPECT_EQ(o.detail, c.detail);
    EXPECT_TRUE(SameOutcome(o, PlaceByBruteForce(hgx, c.alloc, c.request)));
  }
}

// A card whose memory no source gives is shared by count: a vGPU that asks memory takes it alone
// and nothing joins one that asked memory there; compute-only vGPUs share it as usual.
TEST(PlacementEngineTest, UnknownMemoryTakesAMemoryRequestOnlyAlone) {
  NodeTopology t = Preset("inference-4gpu");
  for (Gpu& g : t.gpus) g.memory_mib = 0;
  EXPECT_TRUE(PlaceOnNode(t, {}, Shared(1, 1000)).ok());
  PlacementRequest percent = Shared(1, 0);
  percent.shared.memory_percent = 10;
  EXPECT_TRUE(PlaceOnNode(t, {}, percent).ok());
  PlacementRequest compute = Shared(1, 0);
  compute.shared.cores = 2500;
  EXPECT_TRUE(PlaceOnNode(t, {}, compute).ok());

  // Every card holds a compute-only vGPU: a memory request finds none alone.
  NodeAllocation computing;
  computing.gpu_shares.assign(t.gpus.size(), GpuShareUsage{.shares = 1, .memory_mib = 0, .cores = 2500});
  const PlacementOutcome refused = PlaceOnNode(t, computing, Shared(1, 1000));
  EXPECT_EQ(refused.failure, FitFailure::kNotEnoughShareCapacity);
  EXPECT_NE(refused.detail.find("4 of unknown memory size and already shared"), std::string::npos)
      << refused.detail;
  EXPECT_TRUE(PlaceOnNode(t, computing, compute).ok());

  // Every card holds a vGPU that asked memory: nothing joins, not even compute only.
  NodeAllocation remembering;
  remembering.gpu_shares.assign(t.gpus.size(), GpuShareUsage{.shares = 1, .memory_mib = 1000, .cores = 0});
  EXPECT_EQ(PlaceOnNode(t, remembering, compute).failure, FitFailure::kNotEnoughShareCapacity);
  EXPECT_EQ(PlaceOnNode(t, remembering, percent).failure, FitFailure::kNotEnoughShareCapacity);
  // One card left alone takes it.
  remembering.gpu_shares[2] = {};
  const PlacementOutcome alone = PlaceOnNode(t, remembering, Shared(1, 1000));
  ASSERT_TRUE(alone.ok()) << alone.detail;
  EXPECT_EQ(alone.placement->gpus, std::vector<int>{2});
}

// ---- The engine against the reference --------------------------------------------------------

#ifdef NDEBUG
constexpr int kCasesPerTopology = 300;
constexpr int kMaxFree = 8;
constexpr double kLeafBudget = 5e5;
#else
constexpr int kCasesPerTopology = 60;  // Debug and sanitizer builds: the reference is slow there
constexpr int kMaxFree = 6;
constexpr double kLeafBudget = 5e4;
#endif

double Choose(int n, int k) {
  if (k < 0 || k > n) return 0;
  double c = 1;
  for (int i = 0; i < k; ++i) c = c * (n - i) / (i + 1);
  return c;
}

// Leaves of the reference's enumeration: GPU subsets x NIC subsets x assignments (bounded).
double ReferenceLeaves(int free_gpus, int free_nics, int g, int n) {
  double assignments = 1;
  if (g > 0 && n > 0) {
    if (n >= g) {
      for (int i = 0; i < g; ++i) assignments *= n - i;
    } else {
      assignments = std::pow(static_cast<double>(n), g);
    }
  }
  return Choose(free_gpus, g) * Choose(free_nics, n) * assignments;
}

struct RandomCase {
  NodeAllocation alloc;
  PlacementRequest request;
  EngineOptions options;
};

std::string Describe(const RandomCase& c) {
  std::ostringstream out;
  out << "request gpus=" << c.request.gpus << " vendor=" << ToString(c.request.vendor)
      << " nics=" << c.request.rdma_nics
      << " bound=" << (c.request.max_gpu_nic_class ? ToString(*c.request.max_gpu_nic_class) : "-")
      << " shared=" << c.request.ShapeKey() << " default=" << static_cast<int>(c.options.default_gpu_policy)
      << " max_shares=" << c.options.max_shares_per_gpu << "\nexclusive";
  for (bool b : c.alloc.gpu_exclusive) out << (b ? " x" : " -");
  out << "\nshares";
  for (const GpuShareUsage& s : c.alloc.gpu_shares)
    out << " " << s.shares << "/" << s.memory_mib << "/" << s.cores;
  out << "\nnic_used";
  for (bool b : c.alloc.nic_used) out << (b ? " u" : " -");
  return out.str();
}

class RandomCases {
 public:
  RandomCases(const NodeTopology& t, int max_free) : t_(t), max_free_(max_free) {}

  RandomCase Next(std::mt19937& rng) {
    RandomCase c;
    const int ngpu = static_cast<int>(t_.gpus.size());
    const int rdma = t_.RdmaNicCount();
    auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    auto chance = [&](double p) { return std::bernoulli_distribution(p)(rng); };

    // Allocation: at most max_free_ wholly free GPUs and free NICs, the rest held whole,
    // carrying vGPUs or used.
    std::vector<int> order(static_cast<std::size_t>(ngpu));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    const int free_gpus = chance(0.1) ? 0 : uniform(1, std::min(max_free_, ngpu));
    c.alloc.gpu_exclusive.assign(static_cast<std::size_t>(ngpu), false);
    c.alloc.gpu_shares.assign(static_cast<std::size_t>(ngpu), {});
    for (int k = free_gpus; k < ngpu; ++k) {
      const auto g = static_cast<std::size_t>(order[static_cast<std::size_t>(k)]);
      if (chance(0.5)) {
        c.alloc.gpu_exclusive[g] = true;
      } else {
        GpuShareUsage& s = c.alloc.gpu_shares[g];
        s.shares = uniform(1, 4);
        const auto mem = static_cast<int>(t_.gpus[g].memory_mib);
        s.memory_mib = mem > 0 ? uniform(0, mem / 1024) * 1024 : 0;
        s.cores = uniform(0, 20) * 500;
      }
    }
    std::vector<int> nics(static_cast<std::size_t>(rdma));
    std::iota(nics.begin(), nics.end(), 0);
    std::shuffle(nics.begin(), nics.end(), rng);
    const int free_nics = chance(0.1) || rdma == 0 ? 0 : uniform(1, std::min(max_free_, rdma));
    c.alloc.nic_used.assign(t_.nics.size(), false);
    for (int k = free_nics; k < rdma; ++k)
      c.alloc.nic_used[static_cast<std::size_t>(nics[static_cast<std::size_t>(k)])] = true;
    if (chance(0.1)) {  // short vectors mean "free" for the devices past their end
      while (!c.alloc.gpu_exclusive.empty() && !c.alloc.gpu_exclusive.back())
        c.alloc.gpu_exclusive.pop_back();
      while (!c.alloc.gpu_shares.empty() && c.alloc.gpu_shares.back() == GpuShareUsage{})
        c.alloc.gpu_shares.pop_back();
      while (!c.alloc.nic_used.empty() && !c.alloc.nic_used.back()) c.alloc.nic_used.pop_back();
    }

    c.options.default_gpu_policy = std::array{PackPolicy::kDefault, PackPolicy::kBinpack,
                                              PackPolicy::kSpread}[static_cast<std::size_t>(uniform(0, 2))];
    c.options.max_shares_per_gpu = std::array{2, 4, 10}[static_cast<std::size_t>(uniform(0, 2))];
    PlacementRequest& r = c.request;
    r.vendor = t_.gpus[static_cast<std::size_t>(uniform(0, ngpu - 1))].vendor;
    if (chance(0.05)) r.vendor = r.vendor == GpuVendor::kAmd ? GpuVendor::kNvidia : GpuVendor::kAmd;
    r.shared.gpu_policy = std::array{PackPolicy::kDefault, PackPolicy::kBinpack,
                                     PackPolicy::kSpread}[static_cast<std::size_t>(uniform(0, 2))];
    if (chance(0.25)) {
      SharedGpuRequest& s = r.shared;
      s.count = uniform(1, 4);
      // Files without memory sizes fit no memory request: ask mostly compute there.
      const bool memory_known = t_.gpus.front().memory_mib > 0;
      if (!memory_known && chance(0.7)) {
        s.cores = uniform(1, 20) * 500;
      } else if (chance(0.6)) {
        s.memory_mib = std::array{1024, 8192, 20000, 40000,
                                  80000}[static_cast<std::size_t>(uniform(0, chance(0.9) ? 3 : 4))];
      } else if (chance(0.7)) {
        s.memory_percent =
            std::array{10, 25, 50, 100}[static_cast<std::size_t>(uniform(0, chance(0.9) ? 2 : 3))];
      }
      if (s.cores == 0 && chance(0.5)) s.cores = uniform(1, 20) * 500;
      s.numa_bind = chance(0.3);
      if (chance(0.15)) {
        const Gpu& any = t_.gpus[static_cast<std::size_t>(uniform(0, ngpu - 1))];
        switch (uniform(0, 3)) {
          case 0:
            s.use_types = {any.model.substr(0, std::min<std::size_t>(any.model.size(), 8))};
            break;
          case 1:
            s.avoid_types = {"a100"};
            break;
          case 2:
            s.use_uuids = {any.uuid};
            break;
          default:
            s.avoid_uuids = {any.uuid};
            break;
        }
      }
      return c;
    }
    // Whole: sometimes one more than is free, to reach every failure.
    const int vendor_free = CountFree(c.alloc, r.vendor);
    const int min_gpus = vendor_free > 0 && !chance(0.15) ? 1 : 0;
    const int min_nics = free_nics > 0 && !chance(0.15) ? 1 : 0;
    r.gpus = chance(0.1) ? vendor_free + 1 : uniform(min_gpus, std::min(vendor_free, 8));
    r.rdma_nics = chance(0.1) ? free_nics + 1 : uniform(min_nics, std::min(free_nics, 8));
    if (chance(0.5))
      r.max_gpu_nic_class = static_cast<LinkClass>(
          uniform(static_cast<int>(LinkClass::kPIX), static_cast<int>(LinkClass::kSYS)));
    while (ReferenceLeaves(vendor_free, free_nics, r.gpus, r.rdma_nics) > kLeafBudget) {
      if (r.rdma_nics > 1) {
        --r.rdma_nics;
      } else {
        --r.gpus;
      }
    }
    return c;
  }

 private:
  int CountFree(const NodeAllocation& a, GpuVendor vendor) const {
    int n = 0;
    for (std::size_t i = 0; i < t_.gpus.size(); ++i) {
      const bool exclusive = i < a.gpu_exclusive.size() && a.gpu_exclusive[i];
      const bool shared = i < a.gpu_shares.size() && a.gpu_shares[i].shares > 0;
      n += t_.gpus[i].vendor == vendor && !exclusive && !shared ? 1 : 0;
    }
    return n;
  }

  const NodeTopology& t_;
  int max_free_;
};

// What the random cases reached, so that a generator that stopped covering a path fails.
struct Coverage {
  int cases = 0, whole_with_nics = 0, extra_nics = 0, gpu_only = 0, nic_only = 0, shared = 0, bounded_fit = 0;
  int by_failure[6] = {};
};

void CompareOnTopology(const std::string& name, const NodeTopology& t, std::mt19937& rng, Coverage& cov,
                       int max_free = kMaxFree, int cases = kCasesPerTopology) {
  SCOPED_TRACE(name);
  RandomCases gen(t, max_free);
  for (int k = 0; k < cases; ++k) {
    const RandomCase c = gen.Next(rng);
    const PlacementOutcome fast = PlaceOnNode(t, c.alloc, c.request, c.options);
    const PlacementOutcome slow = PlaceByBruteForce(t, c.alloc, c.request, c.options);
    ASSERT_EQ(fast.ok(), slow.ok()) << Describe(c) << "\nengine: " << Show(fast)
                                    << "\nreference: " << Show(slow);
    ASSERT_EQ(fast.failure, slow.failure) << Describe(c);
    ASSERT_EQ(fast.detail, slow.detail) << Describe(c);
    if (fast.ok()) {
      ASSERT_EQ(*fast.placement, *slow.placement)
          << Describe(c) << "\nengine: " << Show(fast) << "\nreference: " << Show(slow);
    }
    ++cov.cases;
    ++cov.by_failure[static_cast<int>(fast.failure)];
    if (!fast.ok()) continue;
    const PlacementRequest& r = c.request;
    if (r.IsShared()) {
      ++cov.shared;
    } else if (r.gpus > 0 && r.rdma_nics > 0) {
      ++cov.whole_with_nics;
      cov.extra_nics += r.rdma_nics > r.gpus ? 1 : 0;
      cov.bounded_fit += r.max_gpu_nic_class ? 1 : 0;
    } else if (r.gpus > 0) {
      ++cov.gpu_only;
    } else if (r.rdma_nics > 0) {
      ++cov.nic_only;
    }
  }
}

// Floors well below what the generator reaches (about 20% fits with NICs, 5% with extra NICs,
// 5% within a bound, 15% GPU-only, 5% NIC-only, 10% shared).
void ExpectCovered(const Coverage& cov) {
  EXPECT_GE(cov.whole_with_nics, cov.cases / 10);
  EXPECT_GE(cov.extra_nics, cov.cases / 100);
  EXPECT_GE(cov.bounded_fit, cov.cases / 100);
  EXPECT_GE(cov.gpu_only, cov.cases / 50);
  EXPECT_GE(cov.nic_only, cov.cases / 100);
  EXPECT_GE(cov.shared, cov.cases / 50);
  for (FitFailure f :
       {FitFailure::kNotEnoughGpus, FitFailure::kNotEnoughNics, FitFailure::kAlignmentUnsatisfiable,
        FitFailure::kNotEnoughShareCapacity, FitFailure::kRequestTooLarge}) {
    EXPECT_GE(cov.by_failure[static_cast<int>(f)], 1) << ToString(f);
  }
}

TEST(PlacementEngineTest, EqualsBruteForceOnSyntheticPresets) {
  std::mt19937 rng(20240611);
  Coverage cov;
  for (const std::string& name : SyntheticPresetNames()) CompareOnTopology(name, Preset(name), rng, cov);
  ExpectCovered(cov);
}

TEST(PlacementEngineTest, EqualsBruteForceOnSharedTopologies) {
  TOPOSCHED_SKIP_WITHOUT_SHARED_TOPOLOGIES();
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(testing::SharedTopologiesDir())) {
    if (entry.path().extension() == ".xml") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());  // a fixed order keeps the random stream reproducible
  std::mt19937 rng(7);
  Coverage cov;
  int with_gpus = 0;
  for (const auto& path : files) {
    auto t = LoadTopologyFile(path.string());
    ASSERT_TRUE(t.ok()) << t.error().message();
    if (t->gpus.empty()) continue;
    ++with_gpus;
    CompareOnTopology(path.filename().string(), *t, rng, cov);
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_GE(with_gpus, 25);
  ExpectCovered(cov);
}

// The 16-device machines with up to all their devices free: the shapes the engine's bounds are
// tuned for. The reference's budget keeps the requests small there.
TEST(PlacementEngineTest, EqualsBruteForceWithSixteenFreeDevices) {
  TOPOSCHED_SKIP_WITHOUT_SHARED_TOPOLOGIES();
  std::mt19937 rng(16);
  Coverage cov;
  for (const char* name :
       {"oci__bm.gpu.h100.8_kubernetes-variant.nccl.xml", "rccl__mi250x_16xGCD_8nics.nccl.xml",
        "hwloc__nvidia-dgx2h_16xV100_12xNVSwitch.hwloc2.xml"}) {
    auto t = LoadTopologyFile(testing::SharedTopology(name).string());
    ASSERT_TRUE(t.ok()) << t.error().message();
    CompareOnTopology(name, *t, rng, cov, /*max_free=*/16, kCasesPerTopology / 2);
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_GE(cov.whole_with_nics, kCasesPerTopology / 10);
}

}  // namespace
}  // namespace toposched
