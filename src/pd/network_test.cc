#include "toposched/pd/network.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace toposched::pd {
namespace {

TEST(PathKindTest, NamesRoundTrip) {
  const std::vector<std::pair<PathKind, std::string_view>> want = {
      {PathKind::kSameNodeIpc, "same-node-ipc"},
      {PathKind::kSameNodeRdma, "same-node-rdma"},
      {PathKind::kNvlinkDomain, "nvlink-domain"},
      {PathKind::kLeaf, "leaf"},
      {PathKind::kSpine, "spine"},
      {PathKind::kZone, "zone"},
      {PathKind::kBeyond, "beyond"}};
  ASSERT_EQ(want.size(), kPathKinds);
  for (const auto& [kind, name] : want) {
    EXPECT_EQ(ToString(kind), name);
    EXPECT_EQ(ParsePathKind(name), kind);
  }
  EXPECT_EQ(ParsePathKind("Leaf"), std::nullopt);
  EXPECT_EQ(ParsePathKind(""), std::nullopt);
  EXPECT_EQ(ParsePathKind("rack"), std::nullopt);
}

TEST(PathKindTest, OnlyIpcAndNvlinkDomainBypassTheNic) {
  EXPECT_FALSE(UsesNic(PathKind::kSameNodeIpc));
  EXPECT_FALSE(UsesNic(PathKind::kNvlinkDomain));
  for (PathKind p :
       {PathKind::kSameNodeRdma, PathKind::kLeaf, PathKind::kSpine, PathKind::kZone, PathKind::kBeyond}) {
    EXPECT_TRUE(UsesNic(p)) << ToString(p);
  }
}

TEST(NetworkConfigTest, Defaults) {
  const NetworkConfig c;
  const std::vector<Tier> tiers = {{"nvidia.com/gpu.clique", PathKind::kNvlinkDomain},
                                   {"toposched.io/leaf", PathKind::kLeaf},
                                   {"toposched.io/spine", PathKind::kSpine},
                                   {"topology.kubernetes.io/zone", PathKind::kZone}};
  EXPECT_EQ(c.tiers, tiers);
  EXPECT_FALSE(c.hyper_nodes);
  EXPECT_FALSE(c.same_node_ipc);
  EXPECT_EQ(c.transfer_overhead_us, 300);
  // The table in docs/kv-transfer.md.
  EXPECT_EQ(c.Cost(PathKind::kSameNodeIpc), (PathCost{150, 10}));
  EXPECT_EQ(c.Cost(PathKind::kSameNodeRdma), (PathCost{50, 3}));
  EXPECT_EQ(c.Cost(PathKind::kNvlinkDomain), (PathCost{400, 5}));
  EXPECT_EQ(c.Cost(PathKind::kLeaf), (PathCost{50, 5}));
  EXPECT_EQ(c.Cost(PathKind::kSpine), (PathCost{25, 8}));
  EXPECT_EQ(c.Cost(PathKind::kZone), (PathCost{12.5, 100}));
  EXPECT_EQ(c.Cost(PathKind::kBeyond), (PathCost{5, 1000}));
  // Outward along the fabric, bandwidth never rises and latency never falls.
  for (PathKind p : {PathKind::kLeaf, PathKind::kSpine, PathKind::kZone}) {
    const PathCost& inner = c.Cost(p);
    const PathCost& outer = c.Cost(static_cast<PathKind>(static_cast<int>(p) + 1));
    EXPECT_GE(inner.bandwidth_gbps, outer.bandwidth_gbps) << ToString(p);
    EXPECT_LE(inner.latency_us, outer.latency_us) << ToString(p);
  }
  EXPECT_TRUE(Validate(c).ok()) << Validate(c).error().message();
}

TEST(AlignmentFactorsTest, ClassToFactor) {
  const AlignmentFactors f{0.9, 0.8, 0.7, 0.6, 0.5};
  EXPECT_EQ(f.For(LinkClass::kSelf), 0.9);
  EXPECT_EQ(f.For(LinkClass::kNV), 0.9);
  EXPECT_EQ(f.For(LinkClass::kPIX), 0.9);
  EXPECT_EQ(f.For(LinkClass::kPXB), 0.8);
  EXPECT_EQ(f.For(LinkClass::kPHB), 0.7);
  EXPECT_EQ(f.For(LinkClass::kNODE), 0.6);
  EXPECT_EQ(f.For(LinkClass::kSYS), 0.5);
  const AlignmentFactors d;  // 29.20 / 46.59 = 0.627 (DRANET all-gather) for PHB/NODE; SYS assumed
  EXPECT_EQ(d.For(LinkClass::kPXB), 1.0);
  EXPECT_EQ(d.For(LinkClass::kNODE), 0.63);
  EXPECT_EQ(d.For(LinkClass::kSYS), 0.4);
}

TEST(ValidateTest, Errors) {
  struct Case {
    const char* name;
    void (*mutate)(NetworkConfig&);
    std::string want;  // empty: valid
  };
  const Case cases[] = {
      {"defaults", [](NetworkConfig&) {}, ""},
      {"no tiers", [](NetworkConfig& c) { c.tiers.clear(); }, ""},
      {"zero overhead", [](NetworkConfig& c) { c.transfer_overhead_us = 0; }, ""},
      {"factor of one", [](NetworkConfig& c) { c.alignment.sys = 1; }, ""},
      {"negative bandwidth", [](NetworkConfig& c) { c.paths[3].bandwidth_gbps = -1; },
       "network.paths.leaf.bandwidthGBps: -1 must be > 0"},
      {"zero bandwidth", [](NetworkConfig& c) { c.paths[6].bandwidth_gbps = 0; },
       "network.paths.beyond.bandwidthGBps: 0 must be > 0"},
      {"nan bandwidth",
       [](NetworkConfig& c) { c.paths[0].bandwidth_gbps = std::numeric_limits<double>::quiet_NaN(); },
       "network.paths.same-node-ipc.bandwidthGBps: nan must be > 0"},
      {"negative latency", [](NetworkConfig& c) { c.paths[4].latency_us = -0.5; },
       "network.paths.spine.latencyUs: -0.5 must be >= 0"},
      {"factor zero", [](NetworkConfig& c) { c.alignment.phb = 0; },
       "network.alignment.PHB: 0 must be in (0, 1]"},
      {"factor above one", [](NetworkConfig& c) { c.alignment.pix = 1.5; },
       "network.alignment.PIX: 1.5 must be in (0, 1]"},
      {"negative overhead", [](NetworkConfig& c) { c.transfer_overhead_us = -3; },
       "network.transferOverheadUs: -3 must be >= 0"},
      {"empty label", [](NetworkConfig& c) { c.tiers[2].label.clear(); },
       "network.tiers[2].label: must not be empty"},
      {"label twice", [](NetworkConfig& c) { c.tiers[3].label = c.tiers[1].label; },
       "network.tiers[3].label: \"toposched.io/leaf\" is listed twice (first at network.tiers[1])"},
      {"same-node path as tier", [](NetworkConfig& c) { c.tiers[0].path = PathKind::kSameNodeRdma; },
       "network.tiers[0].path: same-node-rdma is not a tier path (nvlink-domain, leaf, spine, zone)"},
      {"beyond as tier", [](NetworkConfig& c) { c.tiers[1].path = PathKind::kBeyond; },
       "network.tiers[1].path: beyond is not a tier path (nvlink-domain, leaf, spine, zone)"},
  };
  for (const Case& tc : cases) {
    SCOPED_TRACE(tc.name);
    NetworkConfig c;
    tc.mutate(c);
    const Status s = Validate(c);
    if (tc.want.empty()) {
      EXPECT_TRUE(s.ok()) << s.error().message();
    } else {
      ASSERT_FALSE(s.ok());
      EXPECT_EQ(s.error().message(), tc.want);
    }
  }
}

TEST(LocationTest, LocateByLabelsReadsTheConfiguredLabels) {
  const NetworkConfig c;
  const Location loc = LocateByLabels(
      c, "gpu-1",
      {{"toposched.io/leaf", "leaf-a"}, {"topology.kubernetes.io/zone", "z1"}, {"unrelated", "x"}});
  EXPECT_EQ(loc, (Location{"gpu-1", {"", "leaf-a", "", "z1"}}));
}

TEST(LocationTest, DistanceTable) {
  // Tiers: clique, leaf, spine, zone. Distance = 1 + index of the first shared tier.
  struct Case {
    const char* name;
    Location a, b;
    int want;
  };
  const Case cases[] = {
      {"same node", {"n1", {"c1", "l1", "s1", "z1"}}, {"n1", {"c1", "l1", "s1", "z1"}}, 0},
      {"same node without labels", {"n1", {"", "", "", ""}}, {"n1", {"", "", "", ""}}, 0},
      {"same clique", {"n1", {"c1", "l1", "s1", "z1"}}, {"n2", {"c1", "l2", "s1", "z1"}}, 1},
      {"same leaf", {"n1", {"c1", "l1", "s1", "z1"}}, {"n2", {"c2", "l1", "s1", "z1"}}, 2},
      {"same spine", {"n1", {"", "l1", "s1", "z1"}}, {"n2", {"", "l2", "s1", "z1"}}, 3},
      {"same zone", {"n1", {"", "l1", "s1", "z1"}}, {"n2", {"", "l2", "s2", "z1"}}, 4},
      {"different zones", {"n1", {"", "l1", "s1", "z1"}}, {"n2", {"", "l2", "s2", "z2"}}, 5},
      // "" is "no such label": two unlabelled nodes share nothing.
      {"no labels", {"n1", {"", "", "", ""}}, {"n2", {"", "", "", ""}}, 5},
      {"empty domain never matches", {"n1", {"", "", "", "z1"}}, {"n2", {"", "", "", "z1"}}, 4},
      // A shorter list counts its missing tiers as "".
      {"short list", {"n1", {"", "l1"}}, {"n2", {"", "l9", "s1", "z1"}}, 5},
      {"short list shares", {"n1", {"", "l1"}}, {"n2", {"", "l1", "s1", "z1"}}, 2},
      // An empty node name is no node: it is never "the same node".
      {"empty names", {"", {"", "l1"}}, {"", {"", "l1"}}, 2},
  };
  for (const Case& tc : cases) {
    SCOPED_TRACE(tc.name);
    EXPECT_EQ(Distance(tc.a, tc.b), tc.want);
    EXPECT_EQ(Distance(tc.b, tc.a), tc.want);
  }
}

TEST(LocationTest, PathBetween) {
  NetworkConfig rdma;
  NetworkConfig ipc;
  ipc.same_node_ipc = true;
  const Location n1{"n1", {"c1", "l1", "s1", "z1"}};
  const Location n1_again{"n1", {"c1", "l1", "s1", "z1"}};
  const Location same_clique{"n2", {"c1", "l2", "s2", "z1"}};
  const Location same_leaf{"n3", {"", "l1", "s1", "z1"}};
  const Location same_spine{"n4", {"", "l2", "s1", "z1"}};
  const Location same_zone{"n5", {"", "l3", "s3", "z1"}};
  const Location elsewhere{"n6", {"", "l4", "s4", "z2"}};
  struct Case {
    const char* name;
    const NetworkConfig& config;
    const Location& b;
    bool ipc_allowed;
    PathKind want;
  };
  const Case cases[] = {
      {"same node, ipc off", rdma, n1_again, true, PathKind::kSameNodeRdma},
      {"same node, ipc on", ipc, n1_again, true, PathKind::kSameNodeIpc},
      {"same node, ipc on but a pod forbids it", ipc, n1_again, false, PathKind::kSameNodeRdma},
      {"clique", rdma, same_clique, true, PathKind::kNvlinkDomain},
      {"clique, ipc config irrelevant", ipc, same_clique, false, PathKind::kNvlinkDomain},
      {"leaf", rdma, same_leaf, true, PathKind::kLeaf},
      {"spine", rdma, same_spine, true, PathKind::kSpine},
      {"zone", rdma, same_zone, true, PathKind::kZone},
      {"beyond", rdma, elsewhere, true, PathKind::kBeyond},
  };
  for (const Case& tc : cases) {
    SCOPED_TRACE(tc.name);
    EXPECT_EQ(PathBetween(tc.config, n1, tc.b, tc.ipc_allowed), tc.want);
  }

  // A custom tier list: the first shared tier's path, whatever its position.
  NetworkConfig two;
  two.tiers = {{"rack", PathKind::kLeaf}, {"row", PathKind::kZone}};
  EXPECT_EQ(PathBetween(two, {"a", {"r1", "w1"}}, {"b", {"r1", "w1"}}), PathKind::kLeaf);
  EXPECT_EQ(PathBetween(two, {"a", {"r1", "w1"}}, {"b", {"r2", "w1"}}), PathKind::kZone);
  EXPECT_EQ(PathBetween(two, {"a", {"r1", "w1"}}, {"b", {"r2", "w2"}}), PathKind::kBeyond);
  // Locations longer than the tier list share nothing past it.
  EXPECT_EQ(PathBetween(two, {"a", {"", "", "x"}}, {"b", {"", "", "x"}}), PathKind::kBeyond);
}

// ------------------------------------------------------------------------------------------
// Estimate and TransferSeconds. Llama-3-70B: 2 * 80 layers * 8 KV heads * 128 * 2 B
// = 327,680 B per token; a 2048-token prompt = 671,088,640 B. Default overhead 300 us.

constexpr double kPrompt70b = 671'088'640;

TEST(EstimateTest, HandComputed) {
  const NetworkConfig c;
  const Endpoint pix1{.gpus = 4, .rdma_nics = 1, .worst_class = LinkClass::kPIX};
  const Endpoint pix4{.gpus = 4, .rdma_nics = 4, .worst_class = LinkClass::kPIX};
  const Endpoint sys1{.gpus = 4, .rdma_nics = 1, .worst_class = LinkClass::kSYS};
  const Endpoint sys4{.gpus = 4, .rdma_nics = 4, .worst_class = LinkClass::kSYS};
  const Endpoint phb2{.gpus = 2, .rdma_nics = 2, .worst_class = LinkClass::kPHB};
  const Endpoint none{.gpus = 8, .rdma_nics = 0, .worst_class = LinkClass::kPIX};
  const Endpoint slow_nic{.gpus = 4, .rdma_nics = 4, .worst_class = LinkClass::kPIX, .nic_gbps = 25};
  const Endpoint fast_nic{.gpus = 4, .rdma_nics = 4, .worst_class = LinkClass::kPIX, .nic_gbps = 100};
  struct Case {
    const char* name;
    PathKind path;
    Endpoint p, d;
    double bandwidth_gbps, alignment;
    int lanes;
    double latency_us, seconds;
  };
  const Case cases[] = {
      // 671,088,640 / 50e9 = 13.4217728 ms; + 5 us leaf + 300 us = 13.7267728 ms.
      {"leaf, one aligned lane", PathKind::kLeaf, pix1, pix1, 50, 1.0, 1, 305, 0.0137267728},
      // The same with a SYS end: 50 * 0.4 = 20 GB/s -> 33.554432 ms + 0.305 ms = 33.859432 ms.
      {"leaf, one SYS end", PathKind::kLeaf, pix1, sys1, 20, 0.4, 1, 305, 0.033859432},
      // SYS end, 4 lanes: 20 x 4 = 80 GB/s -> 8.388608 ms + 0.305 ms = 8.693608 ms.
      {"leaf, SYS end, 4 lanes", PathKind::kLeaf, pix4, sys4, 80, 0.4, 4, 305, 0.008693608},
      // 4 lanes of 50: 200 GB/s -> 3.3554432 ms + 0.305 ms = 3.6604432 ms.
      {"leaf, 4 lanes", PathKind::kLeaf, pix4, pix4, 200, 1.0, 4, 305, 0.0036604432},
      // Spine: 25 GB/s per lane -> 26.8435456 ms + 8 us + 300 us = 27.1515456 ms.
      {"spine, one lane", PathKind::kSpine, pix1, pix1, 25, 1.0, 1, 308, 0.0271515456},
      // min(4, 2) = 2 lanes, PHB 0.63: 50 * 0.63 * 2 = 63 GB/s -> 10.652200635 ms + 0.305 ms.
      {"leaf, PHB end, 2 lanes", PathKind::kLeaf, pix4, phb2, 63, 0.63, 2, 305, 0.010957200635},
      // An end without its own NIC: one lane. 50 GB/s, as the first case.
      {"leaf, no NIC at one end", PathKind::kLeaf, none, pix4, 50, 1.0, 1, 305, 0.0137267728},
      // The slower NIC caps the lane: min(50, 25, 100) = 25 GB/s x 4 = 100 GB/s -> 6.7108864 ms + 0.305.
      {"leaf, 200G NIC at one end", PathKind::kLeaf, slow_nic, fast_nic, 100, 1.0, 4, 305, 0.0070158864},
      // A faster NIC does not raise the path: min(50, 100) = 50 x 4 = 200 GB/s.
      {"leaf, 800G NICs", PathKind::kLeaf, fast_nic, fast_nic, 200, 1.0, 4, 305, 0.0036604432},
      // Zone: 12.5 x 4 = 50 GB/s -> 13.4217728 ms + 100 us + 300 us = 13.8217728 ms.
      {"zone, 4 lanes", PathKind::kZone, pix4, pix4, 50, 1.0, 4, 400, 0.0138217728},
      // Beyond: 5 GB/s, 1 lane -> 134.217728 ms + 1000 us + 300 us = 135.517728 ms.
      {"beyond", PathKind::kBeyond, pix1, pix1, 5, 1.0, 1, 1300, 0.135517728},
      // RDMA loopback: 50 GB/s x 4 NICs, 3 us.
      {"same-node rdma", PathKind::kSameNodeRdma, pix4, pix4, 200, 1.0, 4, 303, 0.0036584432},
      // IPC: per GPU, min(4, 2) = 2 lanes x 150 = 300 GB/s, alignment ignored even for SYS.
      // 671,088,640 / 300e9 = 2.2369621333 ms + 10 us + 300 us.
      {"same-node ipc", PathKind::kSameNodeIpc, sys4, phb2, 300, 1.0, 2, 310, 0.0025469621333},
      // NVLink domain: 4 GPUs x 400 = 1600 GB/s -> 0.4194304 ms + 5 us + 300 us; NICs ignored.
      {"nvlink domain", PathKind::kNvlinkDomain, sys4, none, 1600, 1.0, 4, 305, 0.0007244304},
  };
  for (const Case& tc : cases) {
    SCOPED_TRACE(tc.name);
    const PathEstimate e = Estimate(c, tc.path, tc.p, tc.d);
    EXPECT_EQ(e.path, tc.path);
    EXPECT_NEAR(e.bandwidth_gbps, tc.bandwidth_gbps, 1e-9);
    EXPECT_NEAR(e.alignment, tc.alignment, 1e-12);
    EXPECT_EQ(e.lanes, tc.lanes);
    EXPECT_NEAR(e.latency_us, tc.latency_us, 1e-9);
    EXPECT_NEAR(TransferSeconds(e, kPrompt70b), tc.seconds, 1e-12);
    // Symmetric in its two ends.
    const PathEstimate r = Estimate(c, tc.path, tc.d, tc.p);
    EXPECT_NEAR(r.bandwidth_gbps, e.bandwidth_gbps, 1e-9);
  }
}

TEST(EstimateTest, ConfigOverridesApply) {
  NetworkConfig c;
  c.paths[static_cast<std::size_t>(PathKind::kLeaf)] = {40, 2};
  c.alignment.sys = 0.5;
  c.transfer_overhead_us = 0;
  const Endpoint sys{.gpus = 1, .rdma_nics = 1, .worst_class = LinkClass::kSYS};
  const PathEstimate e = Estimate(c, PathKind::kLeaf, sys, sys);
  // 40 x 0.5 = 20 GB/s; 1e9 B -> 50 ms + 2 us.
  EXPECT_DOUBLE_EQ(e.bandwidth_gbps, 20);
  EXPECT_DOUBLE_EQ(e.latency_us, 2);
  EXPECT_NEAR(TransferSeconds(e, 1e9), 0.050002, 1e-12);
}

TEST(EstimateTest, TransferSecondsEdges) {
  const PathEstimate e{PathKind::kLeaf, 50, 305, 1.0, 1};
  EXPECT_DOUBLE_EQ(TransferSeconds(e, 0), 305e-6);   // latency alone
  EXPECT_DOUBLE_EQ(TransferSeconds(e, -5), 305e-6);  // nonsense bytes move nothing
  const PathEstimate broken{};                       // zero bandwidth never finishes
  EXPECT_TRUE(std::isinf(TransferSeconds(broken, 1)));
}

// ------------------------------------------------------------------------------------------

TEST(ModelTest, PresetsAndKvBytes) {
  struct Case {
    const char* name;
    int layers, kv_heads, head_dim;
    double params;
    std::int64_t kv_bytes;  // 2 * layers * kv_heads * head_dim * 2 B
  };
  const Case cases[] = {
      {"llama-3-8b", 32, 8, 128, 8.03, 131'072},    // 2*32*8*128*2
      {"llama-3-70b", 80, 8, 128, 70.6, 327'680},   // 2*80*8*128*2
      {"llama-3-405b", 126, 8, 128, 405, 516'096},  // 2*126*8*128*2
      {"qwen2.5-7b", 28, 4, 128, 7.6, 57'344},      // 2*28*4*128*2
      {"qwen2.5-72b", 80, 8, 128, 72.7, 327'680},   // 2*80*8*128*2
      {"mistral-7b", 32, 8, 128, 7.2, 131'072},     // 2*32*8*128*2
  };
  ASSERT_EQ(ModelPresets().size(), std::size(cases));
  for (const Case& tc : cases) {
    SCOPED_TRACE(tc.name);
    Result<ModelSpec> m = FindModel(tc.name);
    ASSERT_TRUE(m.ok()) << m.error().message();
    EXPECT_EQ(m->name, tc.name);
    EXPECT_EQ(m->layers, tc.layers);
    EXPECT_EQ(m->kv_heads, tc.kv_heads);
    EXPECT_EQ(m->head_dim, tc.head_dim);
    EXPECT_EQ(m->dtype_bytes, 2);
    EXPECT_DOUBLE_EQ(m->params_billion, tc.params);
    EXPECT_EQ(KvBytesPerToken(*m), tc.kv_bytes);
  }
  // Mooncake's anchor: 128k tokens of Llama-3-70B = 128 * 1024 * 320 KiB = 40 GiB.
  EXPECT_EQ(KvBytesPerToken(*FindModel("llama-3-70b")) * 128 * 1024, std::int64_t{40} << 30);
}

TEST(ModelTest, FindModel) {
  Result<ModelSpec> upper = FindModel("Llama-3-70B");
  ASSERT_TRUE(upper.ok());
  EXPECT_EQ(upper->name, "llama-3-70b");
  Result<ModelSpec> missing = FindModel("gpt-5");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().message(),
            "unknown model \"gpt-5\" (presets: llama-3-8b, llama-3-70b, llama-3-405b, qwen2.5-7b, "
            "qwen2.5-72b, mistral-7b)");
}

TEST(ModelTest, KvBytesDoesNotOverflowInt) {
  // 2 * 10000 * 128 * 256 * 4 = 2,621,440,000 > 2^31: the product must be taken in 64 bits.
  const ModelSpec big{"big", 10000, 128, 256, 4, 0};
  EXPECT_EQ(KvBytesPerToken(big), std::int64_t{2'621'440'000});
  EXPECT_GT(KvBytesPerToken(big), std::int64_t{1} << 31);
}

}  // namespace
}  // namespace toposched::pd
