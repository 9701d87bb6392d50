// The allocation annotation's round trip as a property, over every real topology in
// ../shared/topologies: whatever devices a bind can hold, EncodeAllocation then DecodeAllocation
// against the same topology gives back exactly those devices (every port of a dual-port
// NIC, which once read back as its last port). HAMi's device list, where the node has UUIDs, names the
// same GPUs. The device sets are every single GPU and NIC, every pair of NICs and of GPUs, what
// the engine chooses for every request shape as a node fills up, and seeded random subsets with
// shares.

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "testing/shared_topologies.h"
#include "toposched/agent/discovery.h"
#include "toposched/framework/allocation.h"
#include "toposched/kube/objects.h"
#include "toposched/placement/placement.h"
#include "toposched/topology/synthetic.h"

namespace toposched::kube {
namespace {

namespace fs = std::filesystem;

struct Checker {
  const NodeTopology& t;
  int checked = 0;

  void Check(const framework::AllocationDelta& delta, const std::string& what) {
    state::PodAllocation a;
    a.uid = "uid";
    a.pod_namespace = "default";
    a.pod_name = "p";
    a.node = t.node_name;
    a.delta = delta;
    const AllocationAnnotations encoded = EncodeAllocation(a, t, "toposched");
    Result<framework::AllocationDelta> decoded = DecodeAllocation(encoded.allocation, t);
    ++checked;
    ASSERT_TRUE(decoded.ok()) << what << ": " << decoded.error().message() << "\n" << encoded.allocation;
    ASSERT_EQ(*decoded, delta) << what << "\n" << encoded.allocation;
    // What a held record would keep names at least these devices (DevicesNamedBy is the
    // fail-closed reader: it must never name fewer than the record holds).
    const framework::AllocationDelta named = DevicesNamedBy(encoded.allocation, "", t);
    for (int g : delta.exclusive_gpus) ASSERT_TRUE(std::ranges::count(named.exclusive_gpus, g)) << what;
    for (const auto& [g, usage] : delta.shares)
      ASSERT_TRUE(std::ranges::count(named.exclusive_gpus, g)) << what;
    for (int n : delta.nics) ASSERT_TRUE(std::ranges::count(named.nics, n)) << what;
    if (encoded.hami_devices.empty()) return;
    Result<HamiPodDevices> hami = DecodeHamiDevices(encoded.hami_devices);
    ASSERT_TRUE(hami.ok()) << what << ": " << hami.error().message();
    Result<framework::AllocationDelta> from_hami = DeltaFromHami(*hami, t);
    ASSERT_TRUE(from_hami.ok()) << what << ": " << from_hami.error().message();
    std::set<int> want, got;
    for (int g : delta.exclusive_gpus) want.insert(g);
    for (const auto& [g, usage] : delta.shares) want.insert(g);
    for (int g : from_hami->exclusive_gpus) got.insert(g);
    for (const auto& [g, usage] : from_hami->shares) got.insert(g);
    ASSERT_EQ(got, want) << what << ": HAMi's list names other GPUs: " << encoded.hami_devices;
  }
};

framework::AllocationDelta Devices(std::vector<int> gpus, std::vector<int> nics) {
  framework::AllocationDelta d;
  d.exclusive_gpus = std::move(gpus);
  d.nics = std::move(nics);
  return d;
}

void CheckTopology(const NodeTopology& t, Checker& c) {
  const int ng = static_cast<int>(t.gpus.size());
  const int nn = static_cast<int>(t.nics.size());
  std::vector<int> rdma;
  for (int n = 0; n < nn; ++n) {
    if (t.nics[static_cast<std::size_t>(n)].rdma) rdma.push_back(n);
  }
  for (int g = 0; g < ng; ++g) c.Check(Devices({g}, {}), "GPU " + std::to_string(g));
  for (int n = 0; n < nn; ++n)
    c.Check(Devices({}, {n}), "NIC " + t.nics[static_cast<std::size_t>(n)].DisplayName());
  for (int a = 0; a < nn; ++a) {
    for (int b = 0; b < nn; ++b) {
      if (a != b) c.Check(Devices({}, {a, b}), "NICs " + std::to_string(a) + "," + std::to_string(b));
    }
  }
  for (int a = 0; a < ng; ++a) {
    for (int b = a + 1; b < ng; ++b)
      c.Check(Devices({b, a}, {}), "GPUs " + std::to_string(b) + "," + std::to_string(a));
  }
  // The engine's choices for every whole-GPU shape, filling a node until nothing more fits.
  for (int want_gpus = 1; want_gpus <= std::min(ng, 8); want_gpus *= 2) {
    for (int want_nics = 0; want_nics <= std::min<int>(static_cast<int>(rdma.size()), want_gpus);
         ++want_nics) {
      NodeAllocation allocated;
      PlacementRequest r;
      r.gpus = want_gpus;
      r.rdma_nics = want_nics;
      for (int round = 0; round < 16; ++round) {
        const PlacementOutcome o = PlaceOnNode(t, allocated, r);
        if (!o.ok()) break;
        const framework::AllocationDelta d = framework::DeltaOf(t, r, *o.placement);
        c.Check(d, "engine " + std::to_string(want_gpus) + " GPUs " + std::to_string(want_nics) +
                       " NICs round " + std::to_string(round));
        ASSERT_TRUE(framework::ApplyDelta(t, d, allocated).ok());
      }
    }
  }
  // Random subsets, some GPUs shared (whole-percent cores, as requests carry them).
  std::mt19937 rng(1234);
  for (int i = 0; i < 64 && (ng > 0 || nn > 0); ++i) {
    framework::AllocationDelta d;
    for (int g = 0; g < ng; ++g) {
      switch (rng() % 4) {
        case 0:
          d.exclusive_gpus.push_back(g);
          break;
        case 1:
          d.shares.emplace_back(
              g, GpuShareUsage{1 + static_cast<int>(rng() % 3), static_cast<std::int64_t>(rng() % 40000),
                               static_cast<std::int64_t>(rng() % 101) * 100});
          break;
        default:
          break;
      }
    }
    for (int n = 0; n < nn; ++n) {
      if (rng() % 2 == 0) d.nics.push_back(n);
    }
    std::shuffle(d.nics.begin(), d.nics.end(), rng);
    c.Check(d, "random subset " + std::to_string(i));
  }
}

TEST(AllocationRoundTrip, EveryDeviceSetOnEverySharedTopology) {
  TOPOSCHED_SKIP_WITHOUT_SHARED_TOPOLOGIES();
  int topologies = 0, multi_port = 0, total = 0;
  for (const auto& entry : fs::directory_iterator(testing::SharedTopologiesDir())) {
    if (entry.path().extension() != ".xml") continue;
    SCOPED_TRACE(entry.path().filename().string());
    Result<NodeTopology> t = LoadTopologyFile(entry.path().string());
    ASSERT_TRUE(t.ok()) << t.error().message();
    t->node_name = "node";
    std::set<std::string> buses;
    for (const Nic& n : t->nics) {
      if (!n.pci_bus_id.empty() && !buses.insert(n.pci_bus_id).second) {
        ++multi_port;
        break;
      }
    }
    Checker c{*t};
    CheckTopology(*t, c);
    if (::testing::Test::HasFatalFailure()) return;
    total += c.checked;
    ++topologies;
  }
  EXPECT_EQ(topologies, 40);
  EXPECT_GT(multi_port, 0) << "no topology with NICs that share a bus id: the case issue 13 is about";
  RecordProperty("device_sets", total);
}

// The same on the synthetic presets (shapes the simulator and the docs use).
TEST(AllocationRoundTrip, SyntheticPresets) {
  for (const char* name : {"hgx-h100-8gpu", "inference-4gpu"}) {
    SCOPED_TRACE(name);
    Result<SyntheticSpec> spec = SyntheticPreset(name);
    ASSERT_TRUE(spec.ok());
    Result<NodeTopology> t = GenerateSynthetic(*spec);
    ASSERT_TRUE(t.ok());
    Checker c{*t};
    CheckTopology(*t, c);
  }
}

}  // namespace
}  // namespace toposched::kube
