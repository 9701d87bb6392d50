// Tests for the Kubernetes object encodings: toposched.io/allocation and friends, HAMi's
// device lists, registration and node lock (exact strings from shared/reference/protocols.md
// §3), the Node/Pod views and the NodeTopology object.

#include "toposched/kube/objects.h"
#include "toposched/topology/gpu_memory.h"

#include <gtest/gtest.h>

#include <chrono>
#include <climits>
#include <limits>
#include <string>
#include <vector>

#include "testing/fuzz_driver.h"
#include "testing/k8s_payloads.h"
#include "testing/shared_topologies.h"
#include "toposched/agent/discovery.h"
#include "toposched/kube/time.h"
#include "toposched/placement/placement.h"
#include "toposched/topology/nccl_xml.h"
#include "toposched/topology/synthetic.h"

namespace toposched::kube {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

// ---- builders ----

NodeTopology Preset(const std::string& name) {
  Result<SyntheticSpec> spec = SyntheticPreset(name);
  EXPECT_TRUE(spec.ok()) << name;
  Result<NodeTopology> t = GenerateSynthetic(*spec);
  EXPECT_TRUE(t.ok()) << t.error().message();
  return std::move(t).value();
}

// HGX H100: GPUs 0-3 and mlx5_0-3 on NUMA 0, GPUs 4-7 and mlx5_4-7 on NUMA 1; each PCIe switch
// holds two GPUs and two NICs (GPU 2k, 2k+1 with mlx5_2k, 2k+1: PIX); all GPU pairs NV18; nic 8 is
// the Ethernet port eno1. The generator gives no UUIDs; these are "GPU-<index>", memory 81559 MiB.
NodeTopology Hgx() {
  NodeTopology t = Preset("hgx-h100-8gpu");
  t.node_name = "gpu-a1";
  for (Gpu& g : t.gpus) g.uuid = "GPU-" + std::to_string(g.index);
  return t;
}

// The HGX layout with AMD cards (an MI300X OAM board has the same shape): no UUIDs until HAMi's
// AMD registration gives them.
NodeTopology AmdBoard() {
  NodeTopology t = Hgx();
  for (Gpu& g : t.gpus) {
    g.vendor = GpuVendor::kAmd;
    g.uuid.clear();
    g.memory_mib = 0;
  }
  return t;
}

// HAMi's AMD registration of every card of `t` with ids "<prefix><index>", as the AMD device
// plugin writes it: "index" is the DRM card number (here index + 1, as on a node whose card0 is
// the BMC's VGA), the PCI address in custominfo.pciBDF.
std::string AmdRegisterJson(const NodeTopology& t, const std::string& prefix, std::int64_t devmem,
                            int devcore, const std::string& type) {
  json reg = json::array();
  for (const Gpu& g : t.gpus) {
    reg.push_back({{"id", prefix + std::to_string(g.index)},
                   {"index", g.index + 1},
                   {"count", 10},
                   {"devmem", devmem},
                   {"devcore", devcore},
                   {"type", type},
                   {"health", true},
                   {"devicevendor", "amd"},
                   {"custominfo", {{"pciBDF", g.pci_bus_id}}}});
  }
  return reg.dump();
}

NodeTopology RegisteredAmdBoard(const std::string& prefix, std::int64_t devmem, int devcore,
                                const std::string& type) {
  NodeTopology t = AmdBoard();
  Result<std::vector<HamiRegisteredGpu>> reg =
      ParseHamiAmdRegister(AmdRegisterJson(t, prefix, devmem, devcore, type));
  EXPECT_TRUE(reg.ok()) << reg.error().message();
  EXPECT_EQ(ApplyHamiAmdRegister(*reg, t), 8);
  return t;
}

state::PodAllocation Alloc(std::vector<int> gpus, std::vector<int> nics,
                           std::vector<std::pair<int, GpuShareUsage>> shares = {},
                           std::vector<int> containers = {}) {
  state::PodAllocation a;
  a.uid = "uid-1";
  a.pod_namespace = "default";
  a.pod_name = "train-0";
  a.node = "gpu-a1";
  a.delta.exclusive_gpus = std::move(gpus);
  a.delta.nics = std::move(nics);
  a.delta.shares = std::move(shares);
  a.container_devices = std::move(containers);
  return a;
}

std::chrono::system_clock::time_point At(std::chrono::sys_days day, std::chrono::seconds time_of_day) {
  return std::chrono::system_clock::time_point(day) + time_of_day;
}

// ---- toposched.io/allocation ----

TEST(EncodeAllocation, WholeGpusAndNicsExactJson) {
  const NodeTopology t = Hgx();
  const AllocationAnnotations a = EncodeAllocation(Alloc({0, 1}, {0, 1}), t, "toposched");
  const std::string& b0 = t.gpus[0].pci_bus_id;
  const std::string& b1 = t.gpus[1].pci_bus_id;
  // GPUs 0, 1 and mlx5_0, mlx5_1 share one switch: every GPU->NIC pair is PIX; both NICs are
  // PIX to GPU 1 as well, and the tie goes to the NIC serving no GPU yet (mlx5_1). NV18 between
  // the GPUs; everything on NUMA 0. Whole GPUs carry no memoryMiB/coresPercent.
  const std::string expected =
      R"({"version":1,"node":"gpu-a1","policy":"toposched","topologyFingerprint":")" + t.Fingerprint() +
      R"(","gpus":[{"index":0,"pciBusId":")" + b0 + R"(","uuid":"GPU-0","numa":0},)" +
      R"({"index":1,"pciBusId":")" + b1 + R"(","uuid":"GPU-1","numa":0}],)" +
      R"("nics":[{"name":"mlx5_0","pciBusId":")" + t.nics[0].pci_bus_id + R"(","numa":0},)" +
      R"({"name":"mlx5_1","pciBusId":")" + t.nics[1].pci_bus_id + R"(","numa":0}],)" +
      R"("numaNodes":[0],"links":{"worstGpuNic":"PIX","worstGpuGpu":"NV18",)" +
      R"("gpuNic":[{"gpu":0,"nic":"mlx5_0","class":"PIX"},{"gpu":1,"nic":"mlx5_1","class":"PIX"}]}})";
  EXPECT_EQ(a.allocation, expected);
  EXPECT_EQ(a.visible_gpus, "GPU-0,GPU-1");
  EXPECT_EQ(a.nccl_ib_hca, "=mlx5_0,mlx5_1");
  // One container with both whole cards: the card's memory and 100 cores each.
  EXPECT_EQ(a.hami_devices, "GPU-0,NVIDIA,81559,100:GPU-1,NVIDIA,81559,100:;");
}

TEST(EncodeAllocation, LinksSummaryTable) {
  struct Case {
    std::string name, preset;
    std::vector<int> gpus, nics;
    json links;       // expected "links"
    json numa_nodes;  // expected "numaNodes"
  };
  const std::vector<Case> cases = {
      // GPU 0 and mlx5_0 under one switch.
      {"one gpu one nic",
       "hgx-h100-8gpu",
       {0},
       {0},
       {{"worstGpuNic", "PIX"}, {"gpuNic", {{{"gpu", 0}, {"nic", "mlx5_0"}, {"class", "PIX"}}}}},
       {0}},
      // GPU 2 sits under the second switch of NUMA 0: to mlx5_0 it is NODE, the worst pair.
      {"gpu on the other switch",
       "hgx-h100-8gpu",
       {0, 2},
       {0},
       {{"worstGpuNic", "NODE"},
        {"worstGpuGpu", "NV18"},
        {"gpuNic",
         {{{"gpu", 0}, {"nic", "mlx5_0"}, {"class", "PIX"}},
          {{"gpu", 2}, {"nic", "mlx5_0"}, {"class", "NODE"}}}}},
       {0}},
      // Each GPU picks its best chosen NIC by class: GPU 4 -> mlx5_4 (PIX), not mlx5_0 (SYS).
      {"two sockets",
       "hgx-h100-8gpu",
       {0, 4},
       {0, 4},
       {{"worstGpuNic", "PIX"},
        {"worstGpuGpu", "NV18"},
        {"gpuNic",
         {{{"gpu", 0}, {"nic", "mlx5_0"}, {"class", "PIX"}},
          {{"gpu", 4}, {"nic", "mlx5_4"}, {"class", "PIX"}}}}},
       {0, 1}},
      // No NICs: no GPU->NIC keys; one GPU: no GPU<->GPU key.
      {"one gpu no nic", "hgx-h100-8gpu", {5}, {}, json::object(), {1}},
      // pcie-4gpu: NVLink bridge pairs (0,1) and (2,3); across the pairs SYS, which is worse.
      {"nvlink pair", "pcie-4gpu", {0, 1}, {}, {{"worstGpuGpu", "NV12"}}, {0}},
      {"across sockets", "pcie-4gpu", {0, 1, 2}, {}, {{"worstGpuGpu", "SYS"}}, {0, 1}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const NodeTopology t = Preset(c.preset);
    const json doc = json::parse(EncodeAllocation(Alloc(c.gpus, c.nics), t, "toposched").allocation);
    EXPECT_EQ(doc["links"], c.links);
    EXPECT_EQ(doc["numaNodes"], c.numa_nodes);
  }
}

TEST(EncodeAllocation, SharedGpuCarriesMemoryAndRoundedUpCores) {
  const NodeTopology t = Hgx();
  // 2550 hundredths = 25.5 % rounds up to 26 (never promise less than was reserved); 1 -> 1 %.
  const AllocationAnnotations a =
      EncodeAllocation(Alloc({}, {}, {{2, {1, 20000, 2550}}, {3, {1, 512, 1}}}), t, "toposched");
  const json doc = json::parse(a.allocation);
  EXPECT_EQ(doc["gpus"][0]["memoryMiB"], 20000);
  EXPECT_EQ(doc["gpus"][0]["coresPercent"], 26);
  EXPECT_EQ(doc["gpus"][1]["coresPercent"], 1);
  EXPECT_FALSE(doc["gpus"][0].contains("shares"));  // written only when not 1
  EXPECT_EQ(a.hami_devices, "GPU-2,NVIDIA,20000,26:GPU-3,NVIDIA,512,1:;");
  // Decoding gives back whole percents: 26 % = 2600 hundredths.
  Result<framework::AllocationDelta> d = DecodeAllocation(a.allocation, t);
  ASSERT_TRUE(d.ok()) << d.error().message();
  ASSERT_EQ(d->shares.size(), 2u);
  EXPECT_EQ(d->shares[0], (std::pair<int, GpuShareUsage>{2, {1, 20000, 2600}}));
  EXPECT_EQ(d->shares[1], (std::pair<int, GpuShareUsage>{3, {1, 512, 100}}));
  // A nonsensical share (more than the card, by far) is clamped, not overflowed.
  const json huge = json::parse(
      EncodeAllocation(Alloc({}, {}, {{0, {1, 1, std::numeric_limits<std::int64_t>::max()}}}), t, "x")
          .allocation);
  EXPECT_EQ(huge["gpus"][0]["coresPercent"], INT_MAX);
}

TEST(EncodeAllocation, RoundTripTable) {
  struct Case {
    std::string name;
    state::PodAllocation allocation;
  };
  // Cores are whole percents here (multiples of 100), which the annotation keeps exactly.
  const std::vector<Case> cases = {
      {"nothing", Alloc({}, {})},
      {"whole gpus and nics", Alloc({0, 1, 2, 3}, {0, 1, 2, 3})},
      {"whole gpus across sockets", Alloc({3, 4}, {3, 4, 8})},  // nic 8: the Ethernet port
      {"shared gpus", Alloc({}, {}, {{2, {1, 20000, 5000}}, {3, {1, 40000, 10000}}})},
      {"mixed with containers", Alloc({4}, {4}, {{5, {1, 1024, 2500}}}, {0, 1, 1})},
      {"two vgpus of one card", Alloc({}, {}, {{6, {2, 2000, 4000}}})},
  };
  const NodeTopology t = Hgx();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const AllocationAnnotations a = EncodeAllocation(c.allocation, t, "toposched");
    Result<framework::AllocationDelta> d = DecodeAllocation(a.allocation, t);
    ASSERT_TRUE(d.ok()) << d.error().message();
    EXPECT_EQ(*d, c.allocation.delta);
  }
}

// The worst GPU->NIC class comes back from links.worstGpuNic (scoring reads it for restored pool
// members); absent or not a link token it is PIX, and the devices still decode.
TEST(EncodeAllocation, WorstGpuNicClassComesBack) {
  const NodeTopology t = Hgx();
  struct Case {
    std::string name;
    state::PodAllocation allocation;
    LinkClass want;
  };
  const std::vector<Case> cases = {
      {"aligned pairs", Alloc({0, 1}, {0, 1}), LinkClass::kPIX},
      {"a NIC across the sockets", Alloc({0}, {7}), LinkClass::kSYS},
      {"no NICs", Alloc({0, 1}, {}), LinkClass::kPIX},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    LinkClass worst = LinkClass::kSelf;
    Result<framework::AllocationDelta> d =
        DecodeAllocation(EncodeAllocation(c.allocation, t, "x").allocation, t, &worst);
    ASSERT_TRUE(d.ok()) << d.error().message();
    EXPECT_EQ(worst, c.want);
  }
  json doc = json::parse(EncodeAllocation(Alloc({0}, {7}), t, "x").allocation);
  doc["links"]["worstGpuNic"] = "WARP";
  LinkClass worst = LinkClass::kSelf;
  Result<framework::AllocationDelta> d = DecodeAllocation(doc.dump(), t, &worst);
  ASSERT_TRUE(d.ok()) << d.error().message();
  EXPECT_EQ(worst, LinkClass::kPIX);
  EXPECT_EQ(*d, Alloc({0}, {7}).delta);
}

TEST(EncodeAllocation, ContainersSplitHamiSegments) {
  NodeTopology t = Hgx();
  t.gpus[2].uuid = "GPU-a";
  t.gpus[3].uuid = "GPU-b";
  struct Case {
    std::string name;
    state::PodAllocation allocation;
    std::string hami;
  };
  const std::vector<Case> cases = {
      // protocols.md §3.4's example: an init container without devices, then one with 2 GPUs
      // of 20000 MiB and 50 % each.
      {"protocols.md example", Alloc({}, {}, {{2, {1, 20000, 5000}}, {3, {1, 20000, 5000}}}, {0, 2}),
       ";GPU-a,NVIDIA,20000,50:GPU-b,NVIDIA,20000,50:;"},
      // Init container first with one GPU, an empty sidecar, then the app with the other.
      {"empty middle segment", Alloc({2, 3}, {}, {}, {1, 0, 1}),
       "GPU-a,NVIDIA,81559,100:;;GPU-b,NVIDIA,81559,100:;"},
      // container_devices accounting for fewer GPUs than chosen: the last container takes the rest.
      {"last container takes the rest", Alloc({2, 3}, {}, {}, {0, 1}),
       ";GPU-a,NVIDIA,81559,100:GPU-b,NVIDIA,81559,100:;"},
      // No split given: one container with everything.
      {"one container", Alloc({3, 2}, {}), "GPU-b,NVIDIA,81559,100:GPU-a,NVIDIA,81559,100:;"},
      // An init container asking 1 GPU runs before the app container asking 2: the pod holds 2
      // GPUs (max(1, 2)); the init container is handed the first of them, the app both.
      {"init container reuses the first devices",
       [] {
         state::PodAllocation a = Alloc({2, 3}, {}, {}, {1, 2});
         a.init_containers = 1;
         return a;
       }(),
       "GPU-a,NVIDIA,81559,100:;GPU-a,NVIDIA,81559,100:GPU-b,NVIDIA,81559,100:;"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const AllocationAnnotations a = EncodeAllocation(c.allocation, t, "toposched");
    EXPECT_EQ(a.hami_devices, c.hami);
    const json doc = json::parse(a.allocation);
    if (c.allocation.container_devices.empty()) {
      EXPECT_FALSE(doc.contains("containers"));
    } else {
      EXPECT_EQ(doc["containers"], json(c.allocation.container_devices));
    }
  }
}

// Issue 15 (7): AMD GPUs get HAMi's AMD records, never NVIDIA's. Exact bytes from HAMi's own
// test expectations: Project-HAMi/amd-device-plugin internal/pkg/utils/utils_test.go
// @10c66d9a03b4 TestPodAllocationTrySuccess, whose pod holds
// "uuid-a,AMDGPU,1024,10:;uuid-b,AMDGPU,1024,10:;" in hami.io/amd-devices-allocated: two
// containers with one card each. Here those are two whole cards registered with devmem 1024
// MiB, devcore 10 CUs and type "AMDGPU", which HAMi's scheduler writes as their whole memory and
// all their compute units (Project-HAMi/HAMi pkg/device/amd/device.go @070101260b7a Fit).
TEST(EncodeAllocation, AmdGpusGetHamisAmdRecordExactly) {
  NodeTopology t = AmdBoard();
  std::string reg = AmdRegisterJson(t, "unused-", 1024, 10, "AMDGPU");
  // Only cards 0 and 1 are named uuid-a and uuid-b.
  json doc = json::parse(reg);
  doc[0]["id"] = "uuid-a";
  doc[1]["id"] = "uuid-b";
  Result<std::vector<HamiRegisteredGpu>> parsed = ParseHamiAmdRegister(doc.dump());
  ASSERT_TRUE(parsed.ok()) << parsed.error().message();
  ASSERT_EQ(ApplyHamiAmdRegister(*parsed, t), 8);
  const AllocationAnnotations a = EncodeAllocation(Alloc({0, 1}, {}, {}, {1, 1}), t, "toposched");
  EXPECT_EQ(a.hami_vendor, GpuVendor::kAmd);
  EXPECT_EQ(a.hami_devices, "uuid-a,AMDGPU,1024,10:;uuid-b,AMDGPU,1024,10:;");
  EXPECT_EQ(HamiDeviceKeysFor(a.hami_vendor).to_allocate, "hami.io/amd-devices-to-allocate");
  EXPECT_EQ(HamiDeviceKeysFor(a.hami_vendor).allocated, "hami.io/amd-devices-allocated");
  EXPECT_EQ(a.visible_gpus, "uuid-a,uuid-b");  // the registration gave the UUIDs
}

TEST(EncodeAllocation, AmdRecordsTable) {
  struct Case {
    std::string name;
    NodeTopology topology;
    state::PodAllocation allocation;
    std::string hami;
    GpuVendor vendor;
  };
  const NodeTopology mi300x = RegisteredAmdBoard("amd-", 196288, 304, "AMD Instinct MI300X");
  NodeTopology mixed = mi300x;
  mixed.gpus[1].vendor = GpuVendor::kNvidia;
  mixed.gpus[1].uuid = "GPU-1";
  NodeTopology empty_type = AmdBoard();
  {
    json reg = json::parse(AmdRegisterJson(empty_type, "amd-", 8192, 64, ""));
    for (json& d : reg) d.erase("type");  // omitempty: no type registered
    Result<std::vector<HamiRegisteredGpu>> parsed = ParseHamiAmdRegister(reg.dump());
    EXPECT_TRUE(parsed.ok());
    ApplyHamiAmdRegister(*parsed, empty_type);
  }
  const std::vector<Case> cases = {
      // Today's code writes nothing for AMD GPUs: this is the record HAMi's AMD device plugin
      // needs to hand the pod the cards toposched chose.
      {"whole cards, one container", mi300x, Alloc({2, 3}, {}),
       "amd-2,AMD Instinct MI300X,196288,304:amd-3,AMD Instinct MI300X,196288,304:;", GpuVendor::kAmd},
      // An init container takes its cards from the start of the set, as for NVIDIA.
      {"init container", mi300x,
       [] {
         state::PodAllocation a = Alloc({4, 5}, {}, {}, {1, 2});
         a.init_containers = 1;
         return a;
       }(),
       "amd-4,AMD Instinct MI300X,196288,304:;amd-4,AMD Instinct MI300X,196288,304:amd-5,AMD Instinct "
       "MI300X,196288,304:;",
       GpuVendor::kAmd},
      // A share: its memory and the compute units HAMi gives 50 % of 304 CUs: 152.
      {"share", mi300x, Alloc({}, {}, {{6, {1, 65536, 5000}}}), "amd-6,AMD Instinct MI300X,65536,152:;",
       GpuVendor::kAmd},
      // No registered type: HAMi's scheduler writes the request's type, "AMD".
      {"no registered type", empty_type, Alloc({0}, {}), "amd-0,AMD,8192,64:;", GpuVendor::kAmd},
      // Cards HAMi's AMD device plugin did not register (no registration at all): no record.
      {"unregistered cards", AmdBoard(), Alloc({0}, {}), "", GpuVendor::kNvidia},
      // One NVIDIA and one AMD card: no one device plugin serves both; no record.
      {"mixed vendors", mixed, Alloc({0, 1}, {}), "", GpuVendor::kNvidia},
      {"nics only", mi300x, Alloc({}, {0}), "", GpuVendor::kNvidia},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const AllocationAnnotations a = EncodeAllocation(c.allocation, c.topology, "toposched");
    EXPECT_EQ(a.hami_devices, c.hami);
    EXPECT_EQ(a.hami_vendor, c.vendor);
    EXPECT_FALSE(a.allocation.empty());  // toposched's own record, always
  }
}

// HAMi's percent-to-compute-units rule, from HAMi's own table (Project-HAMi/HAMi
// pkg/device/amd/device_test.go @015b302b1d1a TestDevices_Fit: "core percentage maps per
// device", "rounds cores up to whole WGPs on RDNA", "clamps a positive percentage to at least
// one CU"); cores in hundredths of a percent.
TEST(AmdComputeUnits, HamisTable) {
  struct Case {
    std::string name;
    int total, cu_per_wgp;
    std::int64_t cores;
    std::optional<int> expected;
  };
  const std::vector<Case> cases = {
      {"core percentage maps per device", 100, 1, 5000, 50},  // 50 % of 100
      {"rdna odd cores", 64, 2, 500, 4},                      // 64 x 5 % = 3, up to 2 WGPs
      {"cdna keeps single cus", 64, 1, 500, 3},
      {"one-wgp apu", 2, 2, 5000, 2},
      {"huge wgp size does not overflow", 4, INT32_MAX, 7500, 4},
      {"clamps a positive percentage to at least one CU", 64, 1, 100, 1},
      {"no limit asked is the whole card", 304, 1, 0, 304},
      // toposched's hundredths round up to HAMi's whole percent: 33.01 % -> 34 % of 304 = 103.
      {"fractions of a percent round up", 304, 1, 3301, 103},
      {"no compute units registered", 0, 1, 5000, std::nullopt},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    HamiAmdCard card;
    card.compute_units = c.total;
    card.cu_per_wgp = c.cu_per_wgp;
    EXPECT_EQ(AmdComputeUnits(c.cores, card), c.expected);
  }
}

TEST(EncodeAllocation, VisibleGpusTable) {
  struct Case {
    std::string name;
    std::vector<int> without_uuid;  // GPUs whose UUID is cleared
    state::PodAllocation allocation;
    std::string visible, hami;
  };
  const std::vector<Case> cases = {
      {"all uuids", {}, Alloc({0, 3}, {}), "GPU-0,GPU-3", "GPU-0,NVIDIA,81559,100:GPU-3,NVIDIA,81559,100:;"},
      {"shares use uuids too", {}, Alloc({}, {}, {{5, {1, 100, 100}}}), "GPU-5", "GPU-5,NVIDIA,100,1:;"},
      // One chosen GPU lacks a UUID: host indices for all (never a mix); HAMi needs UUIDs, so
      // its annotation stays empty.
      {"one without uuid", {3}, Alloc({0, 3}, {}), "0,3", ""},
      // A GPU without UUID that was not chosen does not matter.
      {"unchosen gpu without uuid",
       {7},
       Alloc({0, 3}, {}),
       "GPU-0,GPU-3",
       "GPU-0,NVIDIA,81559,100:GPU-3,NVIDIA,81559,100:;"},
      {"no gpus", {}, Alloc({}, {0}), "", ""},  // nothing for HAMi's device plugin
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    NodeTopology t = Hgx();
    for (int g : c.without_uuid) t.gpus[static_cast<std::size_t>(g)].uuid.clear();
    const AllocationAnnotations a = EncodeAllocation(c.allocation, t, "toposched");
    EXPECT_EQ(a.visible_gpus, c.visible);
    EXPECT_EQ(a.hami_devices, c.hami);
  }
}

TEST(EncodeAllocation, NcclIbHcaTable) {
  struct Case {
    std::string name;
    std::vector<int> nics;
    std::string expected;
  };
  NodeTopology t = Hgx();
  t.nics[5].name.clear();  // a NIC the source knows only by bus address
  const std::vector<Case> cases = {
      {"two nics", {0, 3}, "=mlx5_0,mlx5_3"},  // NCCL's exact-match form
      {"no nics", {}, ""},
      {"nameless nic left out", {4, 5}, "=mlx5_4"},
      {"only a nameless nic", {5}, ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(EncodeAllocation(Alloc({0}, c.nics), t, "toposched").nccl_ib_hca, c.expected);
  }
  // The nameless NIC is written and read back by its bus id.
  const AllocationAnnotations a = EncodeAllocation(Alloc({4}, {5}), t, "toposched");
  Result<framework::AllocationDelta> d = DecodeAllocation(a.allocation, t);
  ASSERT_TRUE(d.ok()) << d.error().message();
  EXPECT_EQ(d->nics, std::vector<int>{5});
}

TEST(DecodeAllocation, AStaleIndexIsAcceptedOnlyWhenTheUuidConfirmsTheBusId) {
  const NodeTopology t = Hgx();
  // The written index (7) is stale (a re-discovery renumbered); bus id and UUID name GPU 2.
  const std::string confirmed =
      R"({"version":1,"gpus":[{"index":7,"pciBusId":")" + t.gpus[2].pci_bus_id + R"(","uuid":"GPU-2"}]})";
  Result<framework::AllocationDelta> d = DecodeAllocation(confirmed, t);
  ASSERT_TRUE(d.ok()) << d.error().message();
  EXPECT_EQ(d->exclusive_gpus, std::vector<int>{2});
  // Without a UUID nothing says which field is stale: an error, not a guess.
  const std::string bare =
      R"({"version":1,"gpus":[{"index":7,"pciBusId":")" + t.gpus[2].pci_bus_id + R"("}]})";
  d = DecodeAllocation(bare, t);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().message().find("gpus[0]: index 7 but the GPU at"), std::string::npos)
      << d.error().message();
  EXPECT_NE(d.error().message().find("names two different GPUs"), std::string::npos);
}

// A ConnectX-7 port pair: mlx5_0 and mlx5_1 are two RDMA devices of one PCI function (the OCI
// H100 exports in ../shared/topologies have this shape).
NodeTopology DualPort() {
  NodeTopology t = Hgx();
  t.nics[1].pci_bus_id = t.nics[0].pci_bus_id;
  return t;
}

TEST(DecodeAllocation, DualPortNicsAreReadBackByName) {
  const NodeTopology t = DualPort();
  struct Case {
    std::string name;
    std::vector<int> gpus, nics;
  };
  const std::vector<Case> cases = {
      {"both ports", {0}, {0, 1}},          {"the second port alone", {0}, {1}},
      {"the first port alone", {1}, {0}},   {"ports in reverse order", {0, 1}, {1, 0}},
      {"a port of another card", {5}, {5}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const AllocationAnnotations a = EncodeAllocation(Alloc(c.gpus, c.nics), t, "toposched");
    Result<framework::AllocationDelta> d = DecodeAllocation(a.allocation, t);
    ASSERT_TRUE(d.ok()) << d.error().message();
    EXPECT_EQ(d->exclusive_gpus, c.gpus);
    EXPECT_EQ(d->nics, c.nics);
  }
}

TEST(DecodeAllocation, IdentityErrorsTable) {
  const NodeTopology t = DualPort();
  const std::string shared_bus = t.nics[0].pci_bus_id;
  struct Case {
    std::string name, text, error;
  };
  const std::vector<Case> cases = {
      {"a shared bus id without a name", R"({"version":1,"nics":[{"pciBusId":")" + shared_bus + R"("}]})",
       R"(is shared by NICs "mlx5_0", "mlx5_1": the record needs the NIC's name)"},
      {"a name at another bus id",
       R"({"version":1,"nics":[{"name":"mlx5_5","pciBusId":")" + shared_bus + R"("}]})",
       R"(nics[0].pciBusId: ")" + shared_bus + R"(" but the node's NIC "mlx5_5" is at)"},
      {"both ports named twice", R"({"version":1,"nics":[{"name":"mlx5_1"},{"name":"mlx5_1"}]})",
       R"(nics[1]: NIC "mlx5_1" is listed twice)"},
      {"a UUID another GPU carries",
       R"({"version":1,"gpus":[{"index":3,"pciBusId":")" + t.gpus[3].pci_bus_id + R"(","uuid":"GPU-4"}]})",
       R"(gpus[0].uuid: "GPU-4" but the node's GPU 3 is "GPU-3")"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Result<framework::AllocationDelta> d = DecodeAllocation(c.text, t);
    ASSERT_FALSE(d.ok());
    EXPECT_NE(d.error().message().find(c.error), std::string::npos) << d.error().message();
  }
  // A UUID the node no longer trusts (cleared as a duplicate) must not sit on another GPU.
  NodeTopology cleared = t;
  cleared.gpus[3].uuid.clear();
  const std::string moved =
      R"({"version":1,"gpus":[{"index":3,"pciBusId":")" + t.gpus[3].pci_bus_id + R"(","uuid":"GPU-4"}]})";
  Result<framework::AllocationDelta> d = DecodeAllocation(moved, cleared);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().message().find(R"("GPU-4" is the node's GPU 4, not GPU 3)"), std::string::npos)
      << d.error().message();
}

TEST(DevicesNamedBy, EveryCandidateOfAnUnreadableRecord) {
  const NodeTopology t = DualPort();
  struct Case {
    std::string name, allocation, hami;
    std::vector<int> gpus, nics;
  };
  const std::vector<Case> cases = {
      {"nothing parsable", "{", "", {}, {}},
      // Index 1 and the bus id of GPU 2 disagree: both are held; the shared bus id holds both ports.
      {"disagreeing fields hold both",
       R"({"version":1,"gpus":[{"index":1,"pciBusId":")" + t.gpus[2].pci_bus_id +
           R"("}],"nics":[{"pciBusId":")" + t.nics[0].pci_bus_id + R"("}]})",
       "",
       {1, 2},
       {0, 1}},
      {"a future version still names its devices",
       R"({"version":9,"gpus":[{"uuid":"GPU-6"}],"nics":[{"name":"mlx5_7"},{"name":"nope"}]})",
       "",
       {6},
       {7}},
      {"HAMi records one by one",
       "",
       "GPU-3,NVIDIA,100,10:garbage:GPU-9,NVIDIA,1,1:;GPU-5,NVIDIA,1,1:;",
       {3, 5},
       {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const framework::AllocationDelta d = DevicesNamedBy(c.allocation, c.hami, t);
    EXPECT_EQ(d.exclusive_gpus, c.gpus);
    EXPECT_EQ(d.nics, c.nics);
    EXPECT_TRUE(d.shares.empty());
  }
}

// AMD cards are named in HAMi's AMD records by their registered id, which may differ from a
// UUID discovery gave the card.
TEST(DevicesNamedBy, AmdRecordsByRegisteredId) {
  NodeTopology t = RegisteredAmdBoard("amd-", 196288, 304, "AMD Instinct MI300X");
  t.gpus[4].uuid = "discovered-4";  // the registered id "amd-4" still names it
  const framework::AllocationDelta d =
      DevicesNamedBy("", "amd-4,AMD Instinct MI300X,1,1:bad;amd-6,AMD,1,1:;", t);
  EXPECT_EQ(d.exclusive_gpus, (std::vector<int>{4, 6}));
}

TEST(DecodeAllocation, SurvivesARenumberingRediscovery) {
  const NodeTopology before = Hgx();
  const AllocationAnnotations a =
      EncodeAllocation(Alloc({3}, {3}, {{6, {1, 1000, 1000}}}), before, "toposched");
  // GPU 0 disappears (fell off the bus): GPU k becomes k-1; NICs are unchanged.
  NodeTopology after = before;
  after.gpus.erase(after.gpus.begin());
  for (std::size_t i = 0; i < after.gpus.size(); ++i) after.gpus[i].index = static_cast<int>(i);
  Result<framework::AllocationDelta> d = DecodeAllocation(a.allocation, after);
  ASSERT_TRUE(d.ok()) << d.error().message();
  EXPECT_EQ(d->exclusive_gpus, std::vector<int>{2});
  EXPECT_EQ(d->shares, (std::vector<std::pair<int, GpuShareUsage>>{{5, {1, 1000, 1000}}}));
  EXPECT_EQ(d->nics, std::vector<int>{3});
}

TEST(DecodeAllocation, FallbacksTable) {
  struct Case {
    std::string name, text;
    framework::AllocationDelta expected;
  };
  const NodeTopology t = Hgx();
  const std::vector<Case> cases = {
      {"gpu by index without bus id", R"({"version":1,"gpus":[{"index":5}]})", {{5}, {}, {}}},
      {"nic by name without bus id", R"({"version":1,"nics":[{"name":"mlx5_3"}]})", {{}, {}, {3}}},
      // NVML writes 8-digit domains and upper case: normalized before matching.
      {"bus id normalized",
       R"({"version":1,"gpus":[{"pciBusId":"00000000:)" + t.gpus[1].pci_bus_id.substr(5) + R"("}]})",
       {{1}, {}, {}}},
      {"coresPercent alone marks a share",
       R"({"version":1,"gpus":[{"index":0,"coresPercent":30}]})",
       {{}, {{0, {1, 0, 3000}}}, {}}},
      {"unknown keys ignored",
       R"({"version":1,"future":{"x":1},"gpus":[{"index":1,"extra":true}]})",
       {{1}, {}, {}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Result<framework::AllocationDelta> d = DecodeAllocation(c.text, t);
    ASSERT_TRUE(d.ok()) << d.error().message();
    EXPECT_EQ(*d, c.expected);
  }
}

TEST(DecodeAllocation, ErrorsTable) {
  struct Case {
    std::string name, text, error;  // error: a substring the message must contain
  };
  const NodeTopology t = Hgx();
  const std::string uuid_mismatch =
      R"({"version":1,"gpus":[{"pciBusId":")" + t.gpus[1].pci_bus_id + R"(","uuid":"GPU-0"}]})";
  const std::vector<Case> cases = {
      {"not json", "{", "not valid JSON"},
      {"not an object", "[]", "top level: expected a JSON object"},
      {"no version", "{}", "version: required"},
      {"future version", R"({"version":2})", "unsupported version 2"},
      {"version a string", R"({"version":"1"})", "version: expected an integer"},
      {"gpus not an array", R"({"version":1,"gpus":{}})", "gpus: expected an array"},
      {"gpu not an object", R"({"version":1,"gpus":[3]})", "gpus[0]: expected an object"},
      {"unknown bus id", R"({"version":1,"gpus":[{"pciBusId":"0000:99:00.0"}]})",
       R"(gpus[0].pciBusId: node has no GPU at "0000:99:00.0")"},
      {"malformed bus id", R"({"version":1,"gpus":[{"pciBusId":"zz"}]})",
       "gpus[0].pciBusId: expected a PCI bus id"},
      {"index out of range", R"({"version":1,"gpus":[{"index":1},{"index":8}]})",
       "gpus[1].index: node has no GPU 8"},
      {"negative index", R"({"version":1,"gpus":[{"index":-1}]})",
       "gpus[0].index: expected a non-negative integer"},
      {"neither bus id nor index", R"({"version":1,"gpus":[{"uuid":"GPU-0"}]})",
       "gpus[0]: needs pciBusId or index"},
      {"uuid of another card", uuid_mismatch, R"(gpus[0].uuid: "GPU-0" but the node's GPU 1 is "GPU-1")"},
      {"gpu twice", R"({"version":1,"gpus":[{"index":1},{"index":1,"memoryMiB":5}]})",
       "gpus[1]: GPU 1 is listed twice"},
      {"cores over 100", R"({"version":1,"gpus":[{"index":1,"coresPercent":101}]})",
       "gpus[0].coresPercent: expected an integer in [0, 100]"},
      {"negative memory", R"({"version":1,"gpus":[{"index":1,"memoryMiB":-1}]})", "gpus[0].memoryMiB"},
      {"unknown nic name", R"({"version":1,"nics":[{"name":"mlx5_9"}]})",
       R"(nics[0].name: node has no NIC "mlx5_9")"},
      {"unknown nic bus id", R"({"version":1,"nics":[{"pciBusId":"0000:99:00.0"}]})",
       R"(nics[0].pciBusId: node has no NIC at "0000:99:00.0")"},
      {"name and bus id of two nics", R"({"version":1,"nics":[{"name":"mlx5_0","pciBusId":"0000:99:00.0"}]})",
       R"(nics[0].pciBusId: "0000:99:00.0" but the node's NIC "mlx5_0" is at)"},
      {"nic twice", R"({"version":1,"nics":[{"name":"mlx5_0"},{"name":"mlx5_0"}]})",
       "nics[1]: NIC \"mlx5_0\" is listed twice"},
      {"nic without identity", R"({"version":1,"nics":[{"numa":0}]})", "nics[0]: needs name or pciBusId"},
      {"negative container", R"({"version":1,"containers":[1,-1]})",
       "containers[1]: expected a device count"},
      {"too deep", std::string(100, '[') + std::string(100, ']'), "nested deeper"},
      {"too large", R"({"version":1,"x":")" + std::string(1u << 20, 'a') + R"("})", "over the limit"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Result<framework::AllocationDelta> d = DecodeAllocation(c.text, t);
    ASSERT_FALSE(d.ok());
    EXPECT_NE(d.error().message().find(c.error), std::string::npos) << d.error().message();
  }
}

// ---- HAMi device lists ----

HamiDevice Dev(std::string uuid, std::int64_t mem, int cores, std::string type = "NVIDIA") {
  return HamiDevice{std::move(uuid), std::move(type), mem, cores};
}

TEST(HamiDevices, EncodeDecodeRoundTripTable) {
  struct Case {
    std::string name;
    HamiPodDevices devices;
    std::string text;
  };
  const std::vector<Case> cases = {
      {"no containers", {}, ""},
      {"one empty container", {{}}, ";"},
      // protocols.md §3.4: one init container without devices, one container with 2 GPUs.
      {"protocols.md example",
       {{}, {Dev("GPU-a", 20000, 50), Dev("GPU-b", 20000, 50)}},
       ";GPU-a,NVIDIA,20000,50:GPU-b,NVIDIA,20000,50:;"},
      {"init container with a device first",
       {{Dev("GPU-a", 81559, 100)}, {}, {Dev("GPU-b", 1024, 10)}},
       "GPU-a,NVIDIA,81559,100:;;GPU-b,NVIDIA,1024,10:;"},
      {"other vendor word", {{Dev("GPU-x", 65536, 100, "AMD")}}, "GPU-x,AMD,65536,100:;"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(EncodeHamiDevices(c.devices), c.text);
    Result<HamiPodDevices> d = DecodeHamiDevices(c.text);
    ASSERT_TRUE(d.ok()) << d.error().message();
    EXPECT_EQ(*d, c.devices);
  }
}

TEST(HamiDevices, DecodeToleratesTable) {
  struct Case {
    std::string name, text;
    HamiPodDevices expected;
  };
  const std::vector<Case> cases = {
      // A hand-written value without the final ';' still names its container.
      {"unterminated last segment", "GPU-a,NVIDIA,1,2:", {{Dev("GPU-a", 1, 2)}}},
      {"record without trailing colon", "GPU-a,NVIDIA,1,2;", {{Dev("GPU-a", 1, 2)}}},
      // HAMi reads the first four fields and ignores the rest.
      {"extra fields ignored", "GPU-a,NVIDIA,1,2,extra:;", {{Dev("GPU-a", 1, 2)}}},
      {"whitespace around records", " GPU-a,NVIDIA,1,2 :\n;", {{Dev("GPU-a", 1, 2)}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Result<HamiPodDevices> d = DecodeHamiDevices(c.text);
    ASSERT_TRUE(d.ok()) << d.error().message();
    EXPECT_EQ(*d, c.expected);
  }
}

TEST(HamiDevices, DecodeErrorsTable) {
  struct Case {
    std::string name, text, error;
  };
  const std::vector<Case> cases = {
      {"too few fields", "GPU-a,NVIDIA,100:;",
       "container 0 device 0: expected UUID,Type,usedMemMiB,usedCores"},
      {"memory not a number", ";GPU-a,NVIDIA,lots,50:;", "container 1 device 0: usedMemMiB"},
      {"negative cores", "GPU-a,NVIDIA,1,50:GPU-b,NVIDIA,1,-5:;", "container 0 device 1: usedCores"},
      {"empty uuid", ",NVIDIA,1,50:;", "empty UUID"},
      {"memory over int32", "GPU-a,NVIDIA,2147483648,50:;",
       "usedMemMiB is not an integer from 0 to 2147483647"},
      {"cores over int", "GPU-a,NVIDIA,1,99999999999:;", "usedCores"},
      {"garbage", "hello;", "expected UUID"},
      {"too large", std::string((1u << 20) + 1, ';'), "over the limit"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Result<HamiPodDevices> d = DecodeHamiDevices(c.text);
    ASSERT_FALSE(d.ok());
    EXPECT_NE(d.error().message().find(c.error), std::string::npos) << d.error().message();
  }
}

TEST(DeltaFromHami, Table) {
  NodeTopology t = Hgx();
  t.gpus[7].memory_mib = 0;  // memory unknown
  struct Case {
    std::string name;
    HamiPodDevices devices;
    framework::AllocationDelta expected;
  };
  const std::vector<Case> cases = {
      {"whole card", {{Dev("GPU-0", 81559, 100)}}, {{0}, {}, {}}},
      // deviceMemoryScaling > 1 registers more memory than the card has: still the whole card.
      {"scaled memory", {{Dev("GPU-0", 163118, 100)}}, {{0}, {}, {}}},
      {"all cores, part of the memory", {{Dev("GPU-1", 40000, 100)}}, {{}, {{1, {1, 40000, 10000}}}, {}}},
      {"half the cores", {{Dev("GPU-2", 81559, 50)}}, {{}, {{2, {1, 81559, 5000}}}, {}}},
      {"card with unknown memory", {{Dev("GPU-7", 0, 100)}}, {{7}, {}, {}}},
      {"containers in order",
       {{}, {Dev("GPU-4", 81559, 100)}, {Dev("GPU-5", 100, 10)}},
       {{4}, {{5, {1, 100, 1000}}}, {}}},
      // Two containers with a vGPU of one card: 2 shares, memory 1000+2000, cores 30+20 %.
      {"two vgpus of one card add up",
       {{Dev("GPU-3", 1000, 30)}, {Dev("GPU-3", 2000, 20)}},
       {{}, {{3, {2, 3000, 5000}}}, {}}},
      {"nothing", {{}, {}}, {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Result<framework::AllocationDelta> d = DeltaFromHami(c.devices, t);
    ASSERT_TRUE(d.ok()) << d.error().message();
    EXPECT_EQ(*d, c.expected);
  }
  Result<framework::AllocationDelta> negative = DeltaFromHami({{Dev("GPU-0", -1, 100)}}, t);
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.error().message().find("container 0 device 0: usedMemMiB or usedCores out of range"),
            std::string::npos)
      << negative.error().message();
  Result<framework::AllocationDelta> unknown =
      DeltaFromHami({{Dev("GPU-0", 1, 1)}, {Dev("GPU-zz", 1, 1)}}, t);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(
      unknown.error().message().find("container 1 device 0: node \"gpu-a1\" has no GPU with UUID \"GPU-zz\""),
      std::string::npos)
      << unknown.error().message();
}

TEST(DeltaFromHami, InvertsEncodeAllocation) {
  const NodeTopology t = Hgx();
  const state::PodAllocation a = Alloc({0, 1}, {}, {{4, {1, 20000, 5000}}}, {1, 0, 2});
  Result<HamiPodDevices> devices = DecodeHamiDevices(EncodeAllocation(a, t, "toposched").hami_devices);
  ASSERT_TRUE(devices.ok()) << devices.error().message();
  ASSERT_EQ(devices->size(), 3u);  // one segment per container, the empty one kept
  EXPECT_TRUE((*devices)[1].empty());
  Result<framework::AllocationDelta> d = DeltaFromHami(*devices, t);
  ASSERT_TRUE(d.ok()) << d.error().message();
  EXPECT_EQ(*d, a.delta);
}

// ---- hami.io/node-nvidia-register ----

HamiRegisteredGpu Reg(std::string uuid, int index, int count, std::int64_t mem, int core, std::string type,
                      int numa, bool health, std::string mode) {
  return HamiRegisteredGpu{std::move(uuid), index,           count, mem, core, std::move(type), numa,
                           health,          std::move(mode), "",    1};
}

TEST(ParseHamiRegister, FormatsTable) {
  struct Case {
    std::string name, text;
    std::vector<HamiRegisteredGpu> expected;
  };
  const std::string h100 = "NVIDIA H100 80GB HBM3";
  const std::string v100 = "NVIDIA-Tesla V100-SXM2-32GB";
  const std::vector<Case> cases = {
      // v2.8+: every key omitempty. GPU 0 has no "index" and no "numa" (zero), GPU 1 no "health"
      // (false); migProfiles and unknown keys are ignored.
      {"json array with omitempty",
       R"([{"id":"GPU-a","count":10,"devmem":81559,"devcore":100,"type":"NVIDIA H100 80GB HBM3","mode":"hami-core","health":true},)"
       R"({"id":"GPU-b","index":1,"count":10,"devmem":81559,"devcore":100,"type":"NVIDIA H100 80GB HBM3","numa":1,"mode":"mig",)"
       R"("migProfiles":[{"name":"1g.10gb","memoryMB":9856,"core":14,"sliceCount":7,"placements":[{"start":0,"size":1}]}],"devicevendor":"NVIDIA"}])",
       {Reg("GPU-a", 0, 10, 81559, 100, h100, 0, true, "hami-core"),
        Reg("GPU-b", 1, 10, 81559, 100, h100, 1, false, "mig")}},
      {"empty json array", "[]", {}},
      {"absent annotation", "", {}},
      // v2.5-2.7: UUID,count,devmem,devcore,type,numa,health,index,mode with trailing ':'.
      {"nine fields",
       "GPU-a,10,32768,100," + v100 + ",0,true,0,hami-core:GPU-b,10,32768,100," + v100 +
           ",1,false,1,hami-core:",
       {Reg("GPU-a", 0, 10, 32768, 100, v100, 0, true, "hami-core"),
        Reg("GPU-b", 1, 10, 32768, 100, v100, 1, false, "hami-core")}},
      // <= v2.4: 7 fields; the index is the record's position, the mode unknown.
      {"seven fields",
       "GPU-a,10,32768,100," + v100 + ",0,true:GPU-b,4,32768,100," + v100 + ",1,true:",
       {Reg("GPU-a", 0, 10, 32768, 100, v100, 0, true, ""),
        Reg("GPU-b", 1, 4, 32768, 100, v100, 1, true, "")}},
      {"whitespace and no trailing colon",
       "  GPU-a,10,32768,100," + v100 + ",0,true :\n GPU-b,4,32768,100," + v100 + ",1,true\n",
       {Reg("GPU-a", 0, 10, 32768, 100, v100, 0, true, ""),
        Reg("GPU-b", 1, 4, 32768, 100, v100, 1, true, "")}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Result<std::vector<HamiRegisteredGpu>> r = ParseHamiRegister(c.text);
    ASSERT_TRUE(r.ok()) << r.error().message();
    EXPECT_EQ(*r, c.expected);
  }
}

TEST(ParseHamiRegister, ErrorsTable) {
  struct Case {
    std::string name, text, error;
  };
  const std::vector<Case> cases = {
      {"id not a string", R"([{"id":5}])", "[0].id: expected a string"},
      {"no id", R"([{"id":"GPU-a"},{"count":1}])", "[1].id: a GPU UUID is required"},
      {"negative index", R"([{"id":"GPU-a","index":-1}])", "[0].index: expected a non-negative integer"},
      {"health as string", R"([{"id":"GPU-a","health":"true"}])", "[0].health: expected true or false"},
      {"element not an object", R"(["GPU-a"])", "[0]: expected an object"},
      {"truncated json", R"([{"id":"GPU-a")", "not valid JSON"},
      {"json object", R"({"id":"GPU-a"})", "top level: expected an array"},
      {"three fields", "GPU-a,10,81559:", R"(record 0 "GPU-a,10,81559": expected 9 fields)"},
      {"count not a number", "GPU-a,ten,32768,100,T,0,true:", R"(count "ten")"},
      {"bad health", "GPU-a,10,32768,100,T,0,true:GPU-b,10,32768,100,T,0,yes:", "record 1"},
      {"bad index", "GPU-a,10,32768,100,T,0,true,x,hami-core:", R"(index "x")"},
      {"garbage", "hello world", "expected 9 fields"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Result<std::vector<HamiRegisteredGpu>> r = ParseHamiRegister(c.text);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message().find(c.error), std::string::npos) << r.error().message();
    EXPECT_EQ(r.error().message().rfind("hami.io/node-nvidia-register: ", 0), 0u) << r.error().message();
  }
}

TEST(ApplyHamiRegister, FillsOnlyWhatIsMissing) {
  NodeTopology t = Hgx();
  t.gpus[0].uuid = "GPU-known";
  t.gpus[1].uuid.clear();
  t.gpus[1].memory_mib = 0;
  t.gpus[2].uuid.clear();
  const NodeTopology before = t;
  const std::vector<HamiRegisteredGpu> reg = {
      Reg("GPU-x0", 0, 10, 40000, 100, "T", 0, true, "hami-core"),  // GPU 0 keeps its UUID and memory
      Reg("GPU-x1", 1, 4, 32768, 100, "T", 0, true, "hami-core"),   // GPU 1 gets both
      Reg("GPU-x99", 99, 2, 1, 100, "T", 0, true, "hami-core"),     // no such GPU: only its count counts
      Reg("GPU-x3", 3, 0, 0, 100, "T", 0, true, "hami-core"),       // count 0 is not a split count
  };
  // Smallest split count of the registration: min(10, 4, 2) = 2.
  EXPECT_EQ(ApplyHamiRegister(reg, t), 2);
  EXPECT_EQ(t.gpus[0].uuid, "GPU-known");
  EXPECT_EQ(t.gpus[0].memory_mib, 81559u);
  EXPECT_EQ(t.gpus[1].uuid, "GPU-x1");
  EXPECT_EQ(t.gpus[1].memory_mib, 32768u);
  EXPECT_EQ(t.gpus[2], before.gpus[2]);  // not registered: untouched
  EXPECT_EQ(t.gpus[3].uuid, "GPU-3");    // already had one
  EXPECT_EQ(ApplyHamiRegister({}, t), 0);
}

// An estimated size (gpu_memory.h: an NCCL file's card, from its PCI id) is replaced by HAMi's
// exact figure; a measured one is kept (above).
TEST(ApplyHamiRegister, ReplacesAnEstimatedCardSize) {
  NodeTopology t = Hgx();
  t.gpus[0].vendor_id = 0x10de;
  t.gpus[0].device_id = 0x2330;  // H100 SXM5 80GB
  t.gpus[0].model.clear();
  t.gpus[0].memory_mib = EstimatedUsableMib(80);
  ASSERT_TRUE(IsMemoryEstimate(t.gpus[0]));
  ApplyHamiRegister({Reg("GPU-e0", 0, 10, 81559, 100, "T", 0, true, "hami-core")}, t);
  EXPECT_EQ(t.gpus[0].memory_mib, 81559u);
}

// Issue 15 (7): cards HAMi reports unhealthy, or in MIG mode, are never placed on.
TEST(ApplyHamiRegister, UnhealthyAndMigCardsAreUnusable) {
  NodeTopology t = Hgx();
  const std::vector<HamiRegisteredGpu> reg = {
      Reg("GPU-0h", 0, 10, 81559, 100, "T", 0, true, "hami-core"),
      Reg("GPU-1h", 1, 10, 81559, 100, "T", 0, false, "hami-core"),  // unhealthy (or health absent)
      Reg("GPU-2h", 2, 10, 81559, 100, "T", 0, true, "mig"),
  };
  ApplyHamiRegister(reg, t);
  EXPECT_EQ(t.gpus[0].unusable, "");
  EXPECT_NE(t.gpus[1].unusable.find("unhealthy"), std::string::npos);
  EXPECT_NE(t.gpus[2].unusable.find("MIG"), std::string::npos);
  EXPECT_NE(t.Fingerprint(), Hgx().Fingerprint()) << "memoized results must not be shared with healthy nodes";
  // The engine counts them as the node's but never places on them, and says why.
  PlacementRequest all;
  all.gpus = 8;
  PlacementOutcome o = PlaceOnNode(t, {}, all);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.failure, FitFailure::kNotEnoughGpus);
  EXPECT_NE(o.detail.find("2 unusable: HAMi's device plugin reports the card unhealthy"), std::string::npos)
      << o.detail;
  PlacementRequest six;
  six.gpus = 6;
  o = PlaceOnNode(t, {}, six);
  ASSERT_TRUE(o.ok()) << o.detail;
  for (int g : o.placement->gpus) EXPECT_TRUE(g != 1 && g != 2) << g;
  PlacementRequest shared;
  shared.shared.count = 7;
  shared.shared.memory_mib = 1000;
  o = PlaceOnNode(t, {}, shared);
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.detail.find("2 unusable"), std::string::npos) << o.detail;
  // Healthy again: usable again.
  const std::vector<HamiRegisteredGpu> healed = {Reg("GPU-1h", 1, 10, 81559, 100, "T", 0, true, "hami-core")};
  ApplyHamiRegister(healed, t);
  EXPECT_EQ(t.gpus[1].unusable, "");
}

// ---- hami.io/node-amd-register ----

TEST(ParseHamiAmdRegister, FormatsTable) {
  struct Case {
    std::string name, text;
    std::vector<HamiRegisteredGpu> expected;
  };
  auto amd = [](HamiRegisteredGpu g, std::string bdf, int cu_per_wgp) {
    g.pci_bus_id = std::move(bdf);
    g.cu_per_wgp = cu_per_wgp;
    return g;
  };
  const std::vector<Case> cases = {
      // HAMi's own test registration (Project-HAMi/HAMi pkg/device/amd/device_test.go
      // @015b302b1d1a Test_GetNodeDevices), verbatim.
      {"hami's test registration",
       R"([{"id":"GPU-0","index":0,"count":1,"devmem":8192,"devcore":100,"type":"amd","numa":0,"health":true}])",
       {Reg("GPU-0", 0, 1, 8192, 100, "amd", 0, true, "")}},
      // The AMD device plugin's documented entry (Project-HAMi/amd-device-plugin README.md
      // @0121aa5d9262), with custominfo; unknown keys (computeQueues) are ignored.
      {"device plugin's entry",
       R"([{"id":"8eff74b5-0000-1000-801b-b56457addd1b","index":0,"count":10,"devmem":196288,"devcore":304,)"
       R"("type":"AMD Instinct MI300X VF","numa":0,"health":true,"devicevendor":"amd",)"
       R"("custominfo":{"pciBDF":"0000:83:00.0","computeQueues":24}}])",
       {amd(Reg("8eff74b5-0000-1000-801b-b56457addd1b", 0, 10, 196288, 304, "AMD Instinct MI300X VF", 0, true,
                ""),
            "0000:83:00.0", 1)}},
      // cuPerWGP as HAMi reads it (device.go cuPerWGP): a whole number above 1, else 1.
      {"rdna wgp size",
       R"([{"id":"a","custominfo":{"pciBDF":"0000:03:00.0","cuPerWGP":2}}])",
       {amd(Reg("a", 0, 0, 0, 0, "", 0, false, ""), "0000:03:00.0", 2)}},
      {"fractional wgp size is ignored",
       R"([{"id":"a","custominfo":{"cuPerWGP":2.5}}])",
       {Reg("a", 0, 0, 0, 0, "", 0, false, "")}},
      {"wgp size not a number is ignored",
       R"([{"id":"a","custominfo":{"cuPerWGP":"2"}}])",
       {Reg("a", 0, 0, 0, 0, "", 0, false, "")}},
      {"bus id normalized",
       R"([{"id":"a","custominfo":{"pciBDF":"83:00.0"}}])",
       {amd(Reg("a", 0, 0, 0, 0, "", 0, false, ""), "0000:83:00.0", 1)}},
      {"empty array", "[]", {}},
      {"absent", "", {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Result<std::vector<HamiRegisteredGpu>> r = ParseHamiAmdRegister(c.text);
    ASSERT_TRUE(r.ok()) << r.error().message();
    EXPECT_EQ(*r, c.expected);
  }
}

TEST(ParseHamiAmdRegister, ErrorsTable) {
  struct Case {
    std::string name, text, error;
  };
  const std::vector<Case> cases = {
      // HAMi never wrote AMD's registration in NVIDIA's old colon format.
      {"colon records", "GPU-a,10,32768,100,T,0,true:", "not valid JSON"},
      {"json object", R"({"id":"a"})", "top level: expected an array"},
      {"no id", R"([{"devmem":1}])", "[0].id: a GPU UUID is required"},
      {"devcore negative", R"([{"id":"a","devcore":-1}])", "[0].devcore: expected a non-negative integer"},
      {"custominfo not an object", R"([{"id":"a","custominfo":[]}])", "[0].custominfo: expected an object"},
      {"bad bus id", R"([{"id":"a","custominfo":{"pciBDF":"card0"}}])",
       "[0].custominfo.pciBDF: expected a PCI address"},
      {"bus id not a string", R"([{"id":"a","custominfo":{"pciBDF":5}}])",
       "[0].custominfo.pciBDF: expected a string"},
      // Written verbatim into HAMi's records, where they would split a record.
      {"id with a separator", R"([{"id":"a:b"}])", "[0].id: expected an id without"},
      {"type with a separator", R"([{"id":"a","type":"MI300X, VF"}])", "[0].type: expected a type without"},
      {"too deep", "[[[[[[[[[[1]]]]]]]]]]", "nested deeper"},
      {"oversized", std::string(2u << 20, ' ') + "[]", "over the limit"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Result<std::vector<HamiRegisteredGpu>> r = ParseHamiAmdRegister(c.text);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message().find(c.error), std::string::npos) << r.error().message();
    EXPECT_EQ(r.error().message().rfind("hami.io/node-amd-register", 0), 0u) << r.error().message();
  }
}

TEST(ApplyHamiAmdRegister, MatchesByPciAddressAndHoldsWhatHamiCannotServe) {
  NodeTopology t = AmdBoard();
  t.gpus[7].vendor = GpuVendor::kNvidia;  // a mixed node: NVIDIA cards are not AMD's to judge
  t.gpus[7].uuid = "GPU-7";
  t.gpus[5].uuid = "amd-uuid-5";  // discovery knew this one's UUID
  json reg = json::parse(AmdRegisterJson(t, "amd-", 196288, 304, "AMD Instinct MI300X"));
  // The registration's "index" is the DRM card number (index + 1 here): never used to match.
  reg[1]["health"] = false;  // unhealthy
  reg[2].erase("health");    // omitempty: absent is false, as HAMi reads it
  reg[3]["devcore"] = 0;     // no compute units: HAMi places nothing on it
  reg.erase(4);              // card 4 not registered (entries shift: reg[4] is now card 5)
  reg[4]["custominfo"].erase("pciBDF");
  reg[4]["id"] = "amd-uuid-5";  // matched by the UUID discovery gave it
  reg.push_back(reg[5]);        // card 6 named twice, under two ids
  reg.back()["id"] = "amd-6b";
  Result<std::vector<HamiRegisteredGpu>> parsed = ParseHamiAmdRegister(reg.dump());
  ASSERT_TRUE(parsed.ok()) << parsed.error().message();
  EXPECT_EQ(ApplyHamiAmdRegister(*parsed, t), 5);  // cards 0, 1, 2, 3 and 5 named once (1-3 unusable)
  EXPECT_EQ(t.gpus[0].hami_amd, (HamiAmdCard{"amd-0", "AMD Instinct MI300X", 196288, 304, 1}));
  EXPECT_EQ(t.gpus[0].uuid, "amd-0");
  EXPECT_EQ(t.gpus[0].memory_mib, 196288u);
  EXPECT_EQ(t.gpus[0].unusable, "");
  EXPECT_NE(t.gpus[1].unusable.find("unhealthy"), std::string::npos);
  EXPECT_NE(t.gpus[2].unusable.find("unhealthy"), std::string::npos);
  EXPECT_NE(t.gpus[3].unusable.find("no compute units"), std::string::npos);
  EXPECT_NE(t.gpus[4].unusable.find("not in HAMi's AMD registration"), std::string::npos);
  EXPECT_FALSE(t.gpus[4].hami_amd.has_value());
  EXPECT_EQ(t.gpus[5].hami_amd->id, "amd-uuid-5");
  EXPECT_EQ(t.gpus[5].unusable, "");
  EXPECT_NE(t.gpus[6].unusable.find("ambiguously"), std::string::npos);
  EXPECT_FALSE(t.gpus[6].hami_amd.has_value());
  EXPECT_EQ(t.gpus[7].unusable, "");
  EXPECT_FALSE(t.gpus[7].hami_amd.has_value());
  EXPECT_EQ(t.gpus[7].uuid, "GPU-7");

  // The engine places whole AMD GPUs only on the usable ones.
  PlacementRequest whole;
  whole.gpus = 2;
  whole.vendor = GpuVendor::kAmd;
  PlacementOutcome o = PlaceOnNode(t, {}, whole);
  ASSERT_TRUE(o.ok()) << o.detail;
  for (int g : o.placement->gpus) EXPECT_TRUE(g == 0 || g == 5) << g;
  whole.gpus = 3;
  EXPECT_FALSE(PlaceOnNode(t, {}, whole).ok());

  // The registration heals: usable again; read again from scratch.
  Result<std::vector<HamiRegisteredGpu>> all =
      ParseHamiAmdRegister(AmdRegisterJson(AmdBoard(), "amd-", 196288, 304, "AMD Instinct MI300X"));
  ASSERT_TRUE(all.ok());
  NodeTopology healed = t;
  for (Gpu& g : healed.gpus) g.vendor = GpuVendor::kAmd;
  ApplyHamiAmdRegister(*all, healed);
  for (const Gpu& g : healed.gpus) EXPECT_EQ(g.unusable, "") << g.index;

  // Unreadable: every AMD card held, the NVIDIA one untouched.
  MarkAmdGpusUnregistered(t, "HAMi's AMD registration cannot be read (x)");
  for (const Gpu& g : t.gpus) {
    if (g.vendor == GpuVendor::kAmd) {
      EXPECT_EQ(g.unusable, "HAMi's AMD registration cannot be read (x)");
      EXPECT_FALSE(g.hami_amd.has_value());
    }
  }
  EXPECT_EQ(t.gpus[7].unusable, "");
}

TEST(DeltaFromHami, AmdRecordsInComputeUnits) {
  const NodeTopology t = RegisteredAmdBoard("amd-", 196288, 304, "AMD Instinct MI300X");
  struct Case {
    std::string name, text;
    framework::AllocationDelta expected;
  };
  const std::vector<Case> cases = {
      {"whole cards",
       "amd-0,AMD Instinct MI300X,196288,304:amd-1,AMD Instinct MI300X,196288,304:;",
       {{0, 1}, {}, {}}},
      // 152 of 304 CUs = 50 %; 100 CUs = 32.89 % -> 32.90 % (rounded up: never less than held).
      {"slices",
       "amd-2,AMD,65536,152:;amd-3,AMD,1024,100:;",
       {{}, {{2, {1, 65536, 5000}}, {3, {1, 1024, 3290}}}, {}}},
      {"two slices of one card add up",
       "amd-4,AMD,1000,152:;amd-4,AMD,1000,152:;",
       {{}, {{4, {2, 2000, 10000}}}, {}}},
      // All CUs but not all memory: a share of the whole compute.
      {"all cus, part of the memory", "amd-5,AMD,1024,304:;", {{}, {{5, {1, 1024, 10000}}}, {}}},
      // The device plugin's own whole-GPU form (no slice asked): every CU, no memory limit.
      {"zeros", "amd-6,AMD,0,0:;", {{}, {{6, {1, 0, 0}}}, {}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Result<HamiPodDevices> devices = DecodeHamiDevices(c.text);
    ASSERT_TRUE(devices.ok()) << devices.error().message();
    Result<framework::AllocationDelta> d = DeltaFromHami(*devices, t, GpuVendor::kAmd);
    ASSERT_TRUE(d.ok()) << d.error().message();
    EXPECT_EQ(*d, c.expected);
  }
  // Never one vendor's record for another's GPUs.
  Result<framework::AllocationDelta> as_nvidia = DeltaFromHami(*DecodeHamiDevices("amd-0,AMD,1,1:;"), t);
  ASSERT_FALSE(as_nvidia.ok());
  EXPECT_NE(as_nvidia.error().message().find("an AMD GPU, in HAMi's NVIDIA record"), std::string::npos)
      << as_nvidia.error().message();
  Result<framework::AllocationDelta> nvidia_in_amd =
      DeltaFromHami(*DecodeHamiDevices("GPU-0,NVIDIA,1,1:;"), Hgx(), GpuVendor::kAmd);
  ASSERT_FALSE(nvidia_in_amd.ok());
  EXPECT_NE(nvidia_in_amd.error().message().find("an NVIDIA GPU, in HAMi's AMD record"), std::string::npos)
      << nvidia_in_amd.error().message();
  Result<framework::AllocationDelta> unknown =
      DeltaFromHami(*DecodeHamiDevices("amd-99,AMD,1,1:;"), t, GpuVendor::kAmd);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message().find("has no GPU with UUID \"amd-99\""), std::string::npos)
      << unknown.error().message();
}

// Round trips: HAMi's own test strings (Project-HAMi/amd-device-plugin
// internal/pkg/utils/utils_test.go @10c66d9a03b4 TestPodDevicesRoundTrip) decode and re-encode
// to themselves; toposched's AMD records read back as the allocation they were written for.
TEST(HamiAmdRecords, RoundTrip) {
  for (const std::string text :
       {";", ";;", "uuid-a,AMDGPU,4096,25:;", ";uuid-a,AMDGPU,4096,25:uuid-b,AMDGPU,1,2:;;"}) {
    SCOPED_TRACE(text);
    Result<HamiPodDevices> devices = DecodeHamiDevices(text);
    ASSERT_TRUE(devices.ok()) << devices.error().message();
    EXPECT_EQ(EncodeHamiDevices(*devices), text);
  }
  const NodeTopology t = RegisteredAmdBoard("amd-", 196288, 304, "AMD Instinct MI300X");
  // Whole cards over three containers (one without devices), and a 50 % share.
  const state::PodAllocation a = Alloc({0, 1}, {}, {{4, {1, 20000, 5000}}}, {1, 0, 2});
  const AllocationAnnotations encoded = EncodeAllocation(a, t, "toposched");
  ASSERT_EQ(encoded.hami_vendor, GpuVendor::kAmd);
  EXPECT_EQ(encoded.hami_devices,
            "amd-0,AMD Instinct MI300X,196288,304:;;amd-1,AMD Instinct MI300X,196288,304:amd-4,AMD Instinct "
            "MI300X,20000,152:;");
  Result<HamiPodDevices> devices = DecodeHamiDevices(encoded.hami_devices);
  ASSERT_TRUE(devices.ok()) << devices.error().message();
  Result<framework::AllocationDelta> d = DeltaFromHami(*devices, t, GpuVendor::kAmd);
  ASSERT_TRUE(d.ok()) << d.error().message();
  EXPECT_EQ(*d, a.delta);
}

// ---- hami.io/mutex.lock ----

TEST(HamiNodeLock, EncodeAndDecode) {
  using std::chrono::December;
  const auto t = At(std::chrono::sys_days{std::chrono::year{2026} / December / 2}, 16h + 35min + 41s);
  EXPECT_EQ(EncodeHamiNodeLock({t, "default", "train-0"}), "2026-12-02T16:35:41Z,default,train-0");
  struct Case {
    std::string name, text;
    std::string ns, pod;
  };
  const std::vector<Case> cases = {
      {"ours", "2026-12-02T16:35:41Z,default,train-0", "default", "train-0"},
      // Go's time.RFC3339 writes the scheduler's local offset: 17:35:41+01:00 = 16:35:41Z.
      {"offset", "2026-12-02T17:35:41+01:00,ml,job-1", "ml", "job-1"},
      {"older HAMi, time only", "2026-12-02T16:35:41Z", "", ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Result<HamiNodeLock> l = DecodeHamiNodeLock(c.text);
    ASSERT_TRUE(l.ok()) << l.error().message();
    EXPECT_EQ(l->time, t);
    EXPECT_EQ(l->pod_namespace, c.ns);
    EXPECT_EQ(l->pod_name, c.pod);
  }
  for (const std::string bad :
       {"", "yesterday,ns,pod", "2026-12-02T16:35:41Z,ns", "2026-12-02T16:35:41Z,a,b,c"}) {
    SCOPED_TRACE(bad);
    Result<HamiNodeLock> l = DecodeHamiNodeLock(bad);
    ASSERT_FALSE(l.ok());
    EXPECT_EQ(l.error().message().rfind("hami.io/mutex.lock", 0), 0u) << l.error().message();
  }
}

// ---- Node and Pod views ----

json PodWithStatus() {
  testing::PodSpec spec;
  spec.name = "train-0";
  spec.ns = "ml";
  spec.uid = "uid-7";
  spec.resource_version = "123";
  spec.gpus = 2;
  spec.annotations = {{"toposched.io/allocation", "{}"},
                      {"hami.io/vgpu-node", "gpu-a1"},
                      {"nvidia.com/use-gputype", "A100"},
                      {"kubectl.kubernetes.io/last-applied-configuration", "{}"}};
  return testing::MakePod(spec);
}

TEST(ReadPod, FieldsTable) {
  using std::chrono::December;
  const auto ready_at = At(std::chrono::sys_days{std::chrono::year{2026} / December / 2}, 10h + 5min);
  struct Case {
    std::string name;
    json pod;
    std::string node, phase;
    bool deleting, ready, active;
    std::optional<std::chrono::system_clock::time_point> ready_since;
  };
  json pending = PodWithStatus();
  json running = PodWithStatus();
  running["spec"]["nodeName"] = "gpu-a1";
  running["status"]["phase"] = "Running";
  running["status"]["conditions"] = {
      {{"type", "Initialized"}, {"status", "True"}, {"lastTransitionTime", "2026-12-02T10:00:00Z"}},
      {{"type", "Ready"}, {"status", "True"}, {"lastTransitionTime", "2026-12-02T10:05:00Z"}}};
  json not_ready = running;
  not_ready["status"]["conditions"][1]["status"] = "False";
  json deleting = running;
  deleting["metadata"]["deletionTimestamp"] = "2026-12-02T11:00:00Z";
  json succeeded = running;
  succeeded["status"]["phase"] = "Succeeded";
  succeeded["status"]["conditions"][1]["status"] = "False";
  const std::vector<Case> cases = {
      {"pending", pending, "", "Pending", false, false, true, std::nullopt},
      {"running and ready", running, "gpu-a1", "Running", false, true, true, ready_at},
      {"not ready", not_ready, "gpu-a1", "Running", false, false, true, std::nullopt},
      // A deleting pod still holds its devices until it is gone.
      {"deleting", deleting, "gpu-a1", "Running", true, true, true, ready_at},
      {"succeeded", succeeded, "gpu-a1", "Succeeded", false, false, false, std::nullopt},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Result<PodView> p = ReadPod(c.pod);
    ASSERT_TRUE(p.ok()) << p.error().message();
    EXPECT_EQ(p->uid, "uid-7");
    EXPECT_EQ(p->pod_namespace, "ml");
    EXPECT_EQ(p->pod_name, "train-0");
    EXPECT_EQ(p->resource_version, "123");
    EXPECT_EQ(p->node_name, c.node);
    EXPECT_EQ(p->phase, c.phase);
    EXPECT_EQ(p->deleting, c.deleting);
    EXPECT_EQ(p->ready, c.ready);
    EXPECT_EQ(p->Active(), c.active);
    EXPECT_EQ(p->ready_since, c.ready_since);
    // Only toposched.io/* and hami.io/* are kept.
    EXPECT_EQ(p->annotations, (std::map<std::string, std::string>{{"hami.io/vgpu-node", "gpu-a1"},
                                                                  {"toposched.io/allocation", "{}"}}));
  }
}

// What a bound pod holds as the kubelet counts it: max(sum of app containers, largest init).
TEST(ReadPod, ExtendedResourcesAsTheKubeletCountsThem) {
  const json pod = json::parse(R"({
    "metadata": {"name": "p", "uid": "u"},
    "spec": {
      "nodeName": "n1",
      "initContainers": [
        {"name": "i1", "resources": {"limits": {"nvidia.com/gpu": "3"}}},
        {"name": "i2", "resources": {"requests": {"rdma/ib": "1"}}}],
      "containers": [
        {"name": "a", "resources": {"limits": {"nvidia.com/gpu": "1", "rdma/ib": 2, "cpu": "4", "memory": "1Gi"}}},
        {"name": "b", "resources": {"limits": {"nvidia.com/gpu": "1", "example.com/weird": "1500m"},
                                    "requests": {"nvidia.com/gpu": "9"}}},
        {"name": "c"}]}})");
  Result<PodView> v = ReadPod(pod);
  ASSERT_TRUE(v.ok()) << v.error().message();
  // GPUs: app 1 + 1 = 2 < init 3 -> 3; rdma: app 2 > init 1 -> 2; limits win over requests;
  // native resources and non-integer quantities are not device counts.
  EXPECT_EQ(v->extended_resources,
            (std::map<std::string, std::int64_t>{{"nvidia.com/gpu", 3}, {"rdma/ib", 2}}));
}

// The CPU kube-scheduler counts for the pod (PodCpuRequestMilli's rule, tested with it); a
// quantity that cannot be read leaves the pod readable, asking none.
TEST(ReadPod, CpuRequestInMilliCores) {
  const json pod = json::parse(R"({
    "metadata": {"name": "p", "uid": "u"},
    "spec": {"nodeName": "n1", "containers": [
      {"name": "a", "resources": {"requests": {"cpu": "1500m"}}},
      {"name": "b", "resources": {"requests": {"cpu": "0.25"}}},
      {"name": "c"}]}})");
  Result<PodView> v = ReadPod(pod);
  ASSERT_TRUE(v.ok()) << v.error().message();
  EXPECT_EQ(v->cpu_request_milli, 1'750);  // 1500 + 250

  json bad = pod;
  bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots";
  Result<PodView> unreadable = ReadPod(bad);
  ASSERT_TRUE(unreadable.ok()) << unreadable.error().message();
  EXPECT_EQ(unreadable->cpu_request_milli, 0);
  EXPECT_EQ(unreadable->node_name, "n1");

  Result<PodView> built = ReadPod(PodWithStatus());
  ASSERT_TRUE(built.ok());
  EXPECT_EQ(built->cpu_request_milli, 4'000);  // the builder's request of "4"
}

TEST(ReadPod, ErrorsTable) {
  struct Case {
    std::string name;
    json pod;
    std::string error;
  };
  auto with = [](const std::string& pointer, json value) {
    json p = PodWithStatus();
    p[json::json_pointer(pointer)] = std::move(value);
    return p;
  };
  json no_uid = PodWithStatus();
  no_uid["metadata"].erase("uid");
  const std::vector<Case> cases = {
      {"not an object", json::array(), "pod: top level: expected an object"},
      {"no metadata", json::object(), "metadata: required"},
      {"no uid", no_uid, "metadata.uid: required"},
      {"name not a string", with("/metadata/name", 5), "metadata.name: expected a string"},
      {"annotation not a string", with("/metadata/annotations/other.io~1x", 1),
       "metadata.annotations.other.io/x: expected a string"},
      {"nodeName not a string", with("/spec/nodeName", json::array()), "spec.nodeName: expected a string"},
      {"conditions not an array", with("/status/conditions", "Ready"),
       "status.conditions: expected an array"},
      {"bad ready time",
       with("/status/conditions", {{{"type", "Ready"}, {"status", "True"}, {"lastTransitionTime", "soon"}}}),
       "status.conditions[0].lastTransitionTime"},
      {"phase not a string", with("/status/phase", true), "status.phase: expected a string"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Result<PodView> p = ReadPod(c.pod);
    ASSERT_FALSE(p.ok());
    EXPECT_NE(p.error().message().find(c.error), std::string::npos) << p.error().message();
  }
}

TEST(ReadNode, Fields) {
  json node = testing::MakeNode("gpu-a1");
  node["metadata"]["resourceVersion"] = "77";
  node["metadata"]["annotations"] = {{std::string(kHamiNodeRegister), "[]"},
                                     {std::string(kHamiAmdNodeRegister), R"([{"id":"a"}])"},
                                     {"other", "x"}};
  node["spec"]["unschedulable"] = true;
  Result<NodeView> n = ReadNode(node);
  ASSERT_TRUE(n.ok()) << n.error().message();
  EXPECT_EQ(n->name, "gpu-a1");
  EXPECT_EQ(n->uid, "node-uid-gpu-a1");
  EXPECT_EQ(n->resource_version, "77");
  EXPECT_EQ(n->labels.at("kubernetes.io/hostname"), "gpu-a1");
  EXPECT_EQ(n->labels.size(), 2u);
  EXPECT_TRUE(n->unschedulable);
  EXPECT_EQ(n->hami_register, "[]");
  EXPECT_EQ(n->hami_amd_register, R"([{"id":"a"}])");

  // A plain node: schedulable, no registration.
  Result<NodeView> plain = ReadNode(testing::MakeNode("cpu-1"));
  ASSERT_TRUE(plain.ok()) << plain.error().message();
  EXPECT_FALSE(plain->unschedulable);
  EXPECT_EQ(plain->hami_register, "");
  EXPECT_EQ(plain->hami_amd_register, "");
}

// status.allocatable.cpu in milli-cores, rounded up; anything else leaves the CPU unknown (-1)
// and the Node readable: only the packing score reads it.
TEST(ReadNode, AllocatableCpuInMilliCores) {
  struct Case {
    std::string name;
    json cpu;  // null: the key is absent
    std::int64_t milli;
  };
  const std::vector<Case> cases = {
      {"whole cores", "64", 64'000},
      {"milli-cores", "63500m", 63'500},
      {"fractional", "0.5", 500},
      {"a fraction of a milli-core rounds up", "1500100u", 1'501},  // 1500.1m
      {"an unquoted number", 96, 96'000},
      {"absent", nullptr, -1},
      {"malformed", "lots", -1},
      {"negative", "-4", -1},
      {"too large", "9999999999999999999", -1},
      {"a fractional JSON number", 0.5, -1},  // not how the API server writes a quantity
      {"an object", json::object(), -1},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    json node = testing::MakeNode("gpu-a1");
    if (c.cpu.is_null()) {
      node["status"]["allocatable"].erase("cpu");
    } else {
      node["status"]["allocatable"]["cpu"] = c.cpu;
    }
    Result<NodeView> n = ReadNode(node);
    ASSERT_TRUE(n.ok()) << n.error().message();
    EXPECT_EQ(n->allocatable_cpu_milli, c.milli);
    EXPECT_EQ(n->labels.size(), 2u);  // the rest of the Node still reads
  }
  // No status, or a status that is not an object (a just-created Node): unknown, readable.
  for (const json& status : {json(nullptr), json("x"), json::object()}) {
    json node = testing::MakeNode("gpu-a1");
    if (status.is_null()) {
      node.erase("status");
    } else {
      node["status"] = status;
    }
    Result<NodeView> n = ReadNode(node);
    ASSERT_TRUE(n.ok()) << n.error().message();
    EXPECT_EQ(n->allocatable_cpu_milli, -1);
  }
  Result<NodeView> plain = ReadNode(testing::MakeNode("gpu-a1"));
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->allocatable_cpu_milli, 220'000);  // the builder's "220"
}

TEST(ReadNode, ErrorsTable) {
  struct Case {
    std::string name, pointer;
    json value;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"no name", "/metadata/name", nullptr, "node: metadata.name: required"},
      {"empty uid", "/metadata/uid", "", "metadata.uid: must not be empty"},
      {"label not a string", "/metadata/labels/zone", 3, "metadata.labels.zone: expected a string"},
      {"unschedulable a string", "/spec/unschedulable", "yes", "spec.unschedulable: expected true or false"},
      {"spec not an object", "/spec", 1, "spec: expected an object"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    json node = testing::MakeNode("gpu-a1");
    node[json::json_pointer(c.pointer)] = c.value;
    Result<NodeView> n = ReadNode(node);
    ASSERT_FALSE(n.ok());
    EXPECT_NE(n.error().message().find(c.error), std::string::npos) << n.error().message();
  }
}

// ---- NodeTopology objects ----

TEST(NodeTopologyObject, ShapeAndRoundTrip) {
  using std::chrono::December;
  NodeTopology t = Hgx();
  t.gpus[0].uuid = "GPU-8c1a";  // "GPU-0" reads as a placeholder (DropUnusableGpuUuids)
  const auto heartbeat = At(std::chrono::sys_days{std::chrono::year{2026} / December / 2}, 16h + 35min + 41s);
  json object = NodeTopologyObject(t, "gpu-a1", "node-uid-1", 3, heartbeat);
  const std::string fingerprint = t.Fingerprint();
  EXPECT_EQ(object["apiVersion"], "toposched.io/v1alpha1");
  EXPECT_EQ(object["kind"], "NodeTopology");
  EXPECT_EQ(object["metadata"]["name"], "gpu-a1");
  EXPECT_EQ(object["metadata"]["labels"], json({{"toposched.io/topology-class", fingerprint.substr(0, 12)}}));
  EXPECT_EQ(object["metadata"]["ownerReferences"],
            json::parse(R"([{"apiVersion":"v1","kind":"Node","name":"gpu-a1","uid":"node-uid-1"}])"));
  const json& status = object["status"];
  EXPECT_EQ(status["schemaVersion"], 1);
  EXPECT_EQ(status["fingerprint"], fingerprint);
  // 8 GPUs, 9 NICs of which 8 RDMA (eno1 is plain Ethernet), 2 NUMA nodes.
  EXPECT_EQ(status["summary"], json::parse(R"({"gpus":8,"nics":9,"rdmaNics":8,"numaNodes":2,)"
                                           R"("gpuModel":"NVIDIA H100 80GB HBM3"})"));
  EXPECT_EQ(status["generation"], 3);
  EXPECT_EQ(status["heartbeatTime"], "2026-12-02T16:35:41Z");

  object["metadata"]["resourceVersion"] = "42";
  Result<NodeTopologyView> v = ReadNodeTopology(object);
  ASSERT_TRUE(v.ok()) << v.error().message();
  EXPECT_EQ(v->name, "gpu-a1");
  EXPECT_EQ(v->resource_version, "42");
  EXPECT_EQ(v->generation, 3);
  EXPECT_EQ(v->heartbeat, heartbeat);
  ASSERT_NE(v->topology, nullptr);
  EXPECT_EQ(*v->topology, t);
}

TEST(NodeTopologyObject, NodeWithoutGpusAndWithoutOwner) {
  NodeTopology t;
  t.node_name = "cpu-1";
  t.numa_nodes = {NumaNode{0, 0, "0-7", 0}};
  DeriveLinks(t);
  const json object = NodeTopologyObject(t, "cpu-1", "", 1, std::chrono::system_clock::time_point{});
  EXPECT_FALSE(object["metadata"].contains("ownerReferences"));
  // It says so: no GPUs, no model.
  EXPECT_EQ(object["status"]["summary"],
            json::parse(R"({"gpus":0,"nics":0,"rdmaNics":0,"numaNodes":1,"gpuModel":""})"));
  Result<NodeTopologyView> v = ReadNodeTopology(object);
  ASSERT_TRUE(v.ok()) << v.error().message();
  ASSERT_NE(v->topology, nullptr);
  EXPECT_EQ(*v->topology, t);
}

TEST(ReadNodeTopology, WithoutStatusHasNoTopology) {
  // Just created (status is a subresource written next): no status, or status null.
  for (const bool null_status : {false, true}) {
    SCOPED_TRACE(null_status ? "status null" : "no status");
    json object = {{"apiVersion", "toposched.io/v1alpha1"},
                   {"kind", "NodeTopology"},
                   {"metadata", {{"name", "gpu-a1"}, {"resourceVersion", "5"}}}};
    if (null_status) object["status"] = nullptr;
    Result<NodeTopologyView> v = ReadNodeTopology(object);
    ASSERT_TRUE(v.ok()) << v.error().message();
    EXPECT_EQ(v->name, "gpu-a1");
    EXPECT_EQ(v->resource_version, "5");
    EXPECT_EQ(v->topology, nullptr);
    EXPECT_EQ(v->generation, 0);
    EXPECT_FALSE(v->heartbeat.has_value());
  }
}

TEST(ReadNodeTopology, ErrorsTable) {
  const json good = NodeTopologyObject(Hgx(), "gpu-a1", "uid", 1, std::chrono::system_clock::time_point{});
  struct Case {
    std::string name, pointer;
    json value;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"wrong kind", "/kind", "Node", "NodeTopology: kind: expected \"NodeTopology\""},
      {"no name", "/metadata/name", nullptr, "metadata.name: required"},
      {"generation a string", "/status/generation", "3",
       "status.generation: expected a non-negative integer"},
      {"bad heartbeat", "/status/heartbeatTime", "noon", "status.heartbeatTime"},
      {"bad gpu bus id", "/status/gpus/0/pciBusId", "zz", "status.gpus[0].pciBusId"},
      {"status not an object", "/status", 7, "status: expected an object"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    json object = good;
    object[json::json_pointer(c.pointer)] = c.value;
    Result<NodeTopologyView> v = ReadNodeTopology(object);
    ASSERT_FALSE(v.ok());
    EXPECT_NE(v.error().message().find(c.error), std::string::npos) << v.error().message();
  }
}

TEST(AgentNodeLabels, Table) {
  struct Case {
    std::string preset, gpus, rdma;
  };
  // hgx: 8 GPUs, 8 RDMA NICs (the Ethernet port is not counted); pcie-4gpu: 4 GPUs, none.
  for (const Case& c : std::vector<Case>{{"hgx-h100-8gpu", "8", "8"}, {"pcie-4gpu", "4", "0"}}) {
    SCOPED_TRACE(c.preset);
    const NodeTopology t = Preset(c.preset);
    const std::map<std::string, std::string> labels = AgentNodeLabels(t);
    const std::string cls = t.Fingerprint().substr(0, 12);
    EXPECT_EQ(labels, (std::map<std::string, std::string>{{"toposched.io/gpu-count", c.gpus},
                                                          {"toposched.io/rdma-nic-count", c.rdma},
                                                          {"toposched.io/topology-class", cls}}));
    // A valid label value: 12 lower-case hex digits, alphanumeric at both ends.
    ASSERT_EQ(cls.size(), 12u);
    EXPECT_EQ(cls.find_first_not_of("0123456789abcdef"), std::string::npos);
  }
  // Equal hardware, equal class; other hardware, another class.
  EXPECT_EQ(AgentNodeLabels(Preset("hgx-h100-8gpu")).at("toposched.io/topology-class"),
            AgentNodeLabels(Preset("hgx-h100-8gpu")).at("toposched.io/topology-class"));
  EXPECT_NE(AgentNodeLabels(Preset("hgx-h100-8gpu")).at("toposched.io/topology-class"),
            AgentNodeLabels(Preset("hgx-a100-8gpu")).at("toposched.io/topology-class"));
}

// ---- robustness ----

// Mutated annotations and objects never crash (ASan/UBSan run); what decodes re-encodes to the
// same value (the encoders are the decoders' inverses on everything the decoders accept).
TEST(ObjectsFuzz, DecodersSurviveMutationsAndRoundTrip) {
  const NodeTopology t = Hgx();
  const NodeTopology amd = RegisteredAmdBoard("amd-", 196288, 304, "AMD Instinct MI300X");
  std::vector<std::string> seeds = {
      EncodeAllocation(Alloc({0, 1}, {0, 1}), t, "toposched").allocation,
      EncodeAllocation(Alloc({4}, {4, 8}, {{5, {1, 1024, 2500}}, {6, {2, 10, 100}}}, {0, 1, 2}), t, "x")
          .allocation,
      ";GPU-a,NVIDIA,20000,50:GPU-b,NVIDIA,20000,50:;",
      "GPU-1,NVIDIA,81559,100:;;GPU-2,NVIDIA,1,1:;",
      R"([{"id":"GPU-a","count":10,"devmem":81559,"devcore":100,"type":"NVIDIA H100","health":true},{"id":"GPU-b","index":1}])",
      "GPU-a,10,32768,100,T,0,true,0,hami-core:GPU-b,10,32768,100,T,1,false,1,hami-core:",
      "GPU-a,10,32768,100,T,0,true:",
      R"([{"id":"8eff74b5","index":1,"count":10,"devmem":196288,"devcore":304,"type":"AMD Instinct MI300X","health":true,)"
      R"("devicevendor":"amd","custominfo":{"pciBDF":"0000:18:00.0","cuPerWGP":2}}])",
      "amd-0,AMD Instinct MI300X,196288,304:;amd-1,AMD,65536,152:;",
      "2026-12-02T17:35:41+01:00,ml,job-1",
      PodWithStatus().dump(),
      testing::MakeNode("gpu-a1").dump(),
      NodeTopologyObject(Preset("pcie-4gpu"), "n", "u", 1, std::chrono::system_clock::time_point{}).dump(),
  };
  int decoded_allocations = 0, decoded_hami = 0;
  testing::RunFuzz(
      seeds,
      [&](std::string_view input) {
        if (Result<framework::AllocationDelta> d = DecodeAllocation(input, t); d.ok()) {
          ++decoded_allocations;
          state::PodAllocation a;
          a.delta = *d;
          Result<framework::AllocationDelta> again =
              DecodeAllocation(EncodeAllocation(a, t, "x").allocation, t);
          ASSERT_TRUE(again.ok()) << input;
          EXPECT_EQ(*again, *d) << input;
        }
        if (Result<HamiPodDevices> h = DecodeHamiDevices(input); h.ok()) {
          ++decoded_hami;
          Result<HamiPodDevices> again = DecodeHamiDevices(EncodeHamiDevices(*h));
          ASSERT_TRUE(again.ok()) << input;
          EXPECT_EQ(*again, *h) << input;
          (void)DeltaFromHami(*h, t);
          (void)DeltaFromHami(*h, amd, GpuVendor::kAmd);
        }
        if (Result<std::vector<HamiRegisteredGpu>> r = ParseHamiRegister(input); r.ok()) {
          NodeTopology copy = t;
          (void)ApplyHamiRegister(*r, copy);
        }
        if (Result<std::vector<HamiRegisteredGpu>> r = ParseHamiAmdRegister(input); r.ok()) {
          NodeTopology copy = AmdBoard();
          (void)ApplyHamiAmdRegister(*r, copy);
          state::PodAllocation a;
          a.delta.exclusive_gpus = {0, 1};
          (void)EncodeAllocation(a, copy, "x");
        }
        (void)DecodeHamiNodeLock(input);
        const json parsed = json::parse(input.begin(), input.end(), nullptr, /*allow_exceptions=*/false);
        if (!parsed.is_discarded()) {
          (void)ReadPod(parsed);
          (void)ReadNode(parsed);
          (void)ReadNodeTopology(parsed);
        }
      },
      3000);
  // The round-trip checks ran on more than the seeds.
  EXPECT_GT(decoded_allocations, 2);
  EXPECT_GT(decoded_hami, 4);
}

// ---- real topologies from ../shared/topologies ----

TEST(RealTopologies, AliyunNcclXmlWithoutUuids) {
  TOPOSCHED_SKIP_WITHOUT_SHARED_TOPOLOGIES();
  Result<NodeTopology> r = ParseNcclXml(
      testing::ReadFile(testing::SharedTopology("aliyun__hgx-a100-80g_8xA100_4xCX6-bond.nccl.xml")));
  ASSERT_TRUE(r.ok()) << r.error().message();
  NodeTopology t = std::move(r).value();
  t.node_name = "aliyun-1";
  ASSERT_EQ(t.nics[1].name, "mlx5_bond_1");
  const AllocationAnnotations a = EncodeAllocation(Alloc({0, 1}, {1}), t, "toposched");
  // The NCCL export gives no UUIDs: host indices, and nothing HAMi could use.
  EXPECT_EQ(a.visible_gpus, "0,1");
  EXPECT_EQ(a.hami_devices, "");
  EXPECT_EQ(a.nccl_ib_hca, "=mlx5_bond_1");
  // GPU 1 shares a switch with mlx5_bond_1 (PIX); GPU 0 is one bridge further (PXB).
  const json doc = json::parse(a.allocation);
  EXPECT_EQ(doc["links"], json::parse(R"({"worstGpuNic":"PXB","worstGpuGpu":"NV12","gpuNic":[)"
                                      R"({"gpu":0,"nic":"mlx5_bond_1","class":"PXB"},)"
                                      R"({"gpu":1,"nic":"mlx5_bond_1","class":"PIX"}]})"));
  EXPECT_EQ(doc["numaNodes"], json({0}));
  Result<framework::AllocationDelta> d = DecodeAllocation(a.allocation, t);
  ASSERT_TRUE(d.ok()) << d.error().message();
  EXPECT_EQ(*d, (framework::AllocationDelta{{0, 1}, {}, {1}}));
}

TEST(RealTopologies, Dgx2HwlocXmlWithUuids) {
  TOPOSCHED_SKIP_WITHOUT_SHARED_TOPOLOGIES();
  Result<NodeTopology> r = ParseHwlocXml(
      testing::ReadFile(testing::SharedTopology("hwloc__nvidia-dgx2h_16xV100_12xNVSwitch.hwloc2.xml")));
  ASSERT_TRUE(r.ok()) << r.error().message();
  NodeTopology t = std::move(r).value();
  t.node_name = "dgx2-1";
  ASSERT_EQ(t.gpus.size(), 16u);
  const std::string u0 = t.gpus[0].uuid, u8 = t.gpus[8].uuid;
  ASSERT_EQ(u0, "GPU-d3977428-7a30-086b-2e20-5c1eeed647c6");
  ASSERT_EQ(t.gpus[0].memory_mib, 0u);  // hwloc's export has no memory size

  const AllocationAnnotations a = EncodeAllocation(Alloc({0, 8}, {}), t, "toposched");
  EXPECT_EQ(a.visible_gpus, u0 + "," + u8);
  // Whole cards of unknown memory: 0 MiB, 100 cores; read back as whole cards.
  EXPECT_EQ(a.hami_devices, u0 + ",NVIDIA,0,100:" + u8 + ",NVIDIA,0,100:;");
  const json doc = json::parse(a.allocation);
  EXPECT_EQ(doc["links"], json::parse(R"({"worstGpuGpu":"NV6"})"));  // NVSwitch, 6 links; no NICs
  EXPECT_EQ(doc["numaNodes"], json({0, 1}));
  Result<HamiPodDevices> devices = DecodeHamiDevices(a.hami_devices);
  ASSERT_TRUE(devices.ok()) << devices.error().message();
  Result<framework::AllocationDelta> from_hami = DeltaFromHami(*devices, t);
  ASSERT_TRUE(from_hami.ok()) << from_hami.error().message();
  EXPECT_EQ(from_hami->exclusive_gpus, (std::vector<int>{0, 8}));

  // HAMi's registration supplies the memory; whole cards are then written with it.
  std::string reg = "[";
  for (const Gpu& g : t.gpus) {
    if (g.index > 0) reg += ",";
    reg += R"({"id":")" + g.uuid + R"(","index":)" + std::to_string(g.index) +
           R"(,"count":10,"devmem":32768,"devcore":100,"type":"Tesla V100-SXM3-32GB-H","health":true})";
  }
  reg += "]";
  Result<std::vector<HamiRegisteredGpu>> parsed = ParseHamiRegister(reg);
  ASSERT_TRUE(parsed.ok()) << parsed.error().message();
  EXPECT_EQ(ApplyHamiRegister(*parsed, t), 10);
  EXPECT_EQ(EncodeAllocation(Alloc({0}, {}), t, "toposched").hami_devices, u0 + ",NVIDIA,32768,100:;");
}

}  // namespace
}  // namespace toposched::kube
