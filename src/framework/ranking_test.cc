// The ranking step (ranking.h): each rule, and the agreement the simulators and the extender's
// wire rely on: the node RankBestFirst puts first is the node PreferOneOfTheBest keeps at the
// top score.

#include "toposched/framework/ranking.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "testing/fake_plugins.h"
#include "toposched/framework/framework.h"

namespace toposched::framework {
namespace {

using toposched::testing::FakeFactory;
using toposched::testing::FakeFilter;
using toposched::testing::FakeReserve;

NodeScore Score(int total, int capacity, bool reserved = false) {
  NodeScore s;
  s.total = total;
  s.capacity = capacity;
  s.reserved = reserved;
  return s;
}

// A framework with a filter and a reserve plugin (Create needs both) and `capacity`'s rules.
Framework MakeFramework(CapacityConfig capacity) {
  Registry registry;
  EXPECT_TRUE(
      registry.Register("Ok", FakeFactory<FakeFilter>(std::string("Ok"), PluginStatus::Success())).ok());
  EXPECT_TRUE(registry
                  .Register("R1", FakeFactory<FakeReserve>(std::string("R1"), PluginStatus::Success(),
                                                           std::make_shared<std::vector<std::string>>()))
                  .ok());
  SchedulerConfig config;
  config.plugins = {{"Ok", 1, {}}, {"R1", 1, {}}};
  config.capacity = std::move(capacity);
  Result<Framework> f = Framework::Create(config, registry);
  EXPECT_TRUE(f.ok()) << f.error().message();
  return std::move(f).value();
}

PlacementRequest OneVgpu(int percent) {
  PlacementRequest r;
  r.shared.count = 1;
  r.shared.memory_percent = percent;
  r.shared.cores = percent;
  return r;
}

// Capacity first (SchedulerConfig::capacity): the capacity plugin ranks whatever its weight;
// nodes outside the band rank after every node inside it, whatever their totals.
TEST(CapacityBandTest, InBandNodesRankFirstThenByTotal) {
  NodeScore packs;  // fills a used node: capacity 60, alignment poor
  packs.total = 40;
  packs.capacity = 60;
  NodeScore near;  // capacity 57: within 5 of the best
  near.total = 70;
  near.capacity = 57;
  NodeScore strands;  // breaks a whole node: capacity 41, alignment perfect
  strands.total = 100;
  strands.capacity = 41;
  CapacityBand band(5);
  for (const NodeScore* s : {&packs, &near, &strands}) band.Offer(*s);
  EXPECT_EQ(band.best(), 60);
  EXPECT_TRUE(band.In(packs));
  EXPECT_TRUE(band.In(near));
  EXPECT_FALSE(band.In(strands));
  EXPECT_TRUE(band.Ahead(near, packs)) << "inside the band the total decides";
  EXPECT_TRUE(band.Ahead(packs, strands)) << "outside the band ranks last, whatever its total";
  EXPECT_FALSE(band.Ahead(strands, near));
  EXPECT_FALSE(band.Ahead(near, near));
  // The extender's one number per node: in band 10 for the best in-band total (70, not the
  // out-of-band 100) and one less per total point below it, down to 1; out of band 0.
  EXPECT_EQ(band.ExtenderScore(near), 10);
  EXPECT_EQ(band.ExtenderScore(packs), 1);  // 30 points below
  NodeScore close;
  close.total = 67;
  close.capacity = 60;
  EXPECT_EQ(band.ExtenderScore(close), 7) << "3 points below the best: 3 steps";
  EXPECT_EQ(band.ExtenderScore(strands), 0);
  NodeScore poor;
  poor.total = 2;
  poor.capacity = 60;
  EXPECT_EQ(band.ExtenderScore(poor), 1) << "an in-band node never ties an out-of-band one";
  // Off (band < 0) or no capacity score: every node is in the band, the total alone decides.
  CapacityBand off(-1);
  off.Offer(packs);
  EXPECT_TRUE(off.In(strands));
  EXPECT_TRUE(off.Ahead(strands, packs));
  NodeScore unscored;
  unscored.total = 10;
  EXPECT_TRUE(band.In(unscored));
  // Off, the scale is still relative: the best of the call gets 10, one less per point below.
  NodeScore aligned, unaligned;
  aligned.total = 74;
  unaligned.total = 62;
  CapacityBand plain(-1);
  plain.Offer(aligned);
  plain.Offer(unaligned);
  EXPECT_EQ(plain.ExtenderScore(aligned), 10);
  EXPECT_EQ(plain.ExtenderScore(unaligned), 1);  // 12 points below
  NodeScore nearly;
  nearly.total = 73;
  EXPECT_EQ(plain.ExtenderScore(nearly), 9);
}

TEST(CapacityBandTest, NodesKeptForARarerShapeRankLastWhileAnotherFits) {
  NodeScore kept;  // a rare node class: the best total and capacity of the call
  kept.total = 100;
  kept.capacity = 60;
  kept.reserved = true;
  NodeScore other;
  other.total = 50;
  other.capacity = 30;  // 30 points below the kept node's capacity: still the band's best
  NodeScore weaker;
  weaker.total = 25;
  weaker.capacity = 28;
  CapacityBand band(5);
  for (const NodeScore* s : {&kept, &other, &weaker}) band.Offer(*s);
  EXPECT_EQ(band.best(), 30) << "the band is the unreserved nodes'";
  EXPECT_FALSE(band.In(kept));
  EXPECT_TRUE(band.In(other));
  EXPECT_TRUE(band.In(weaker));
  EXPECT_TRUE(band.Ahead(other, kept))
      << "a kept node ranks after every node that is not, whatever its scores";
  EXPECT_TRUE(band.Ahead(weaker, kept));
  EXPECT_FALSE(band.Ahead(kept, weaker));
  EXPECT_EQ(band.ExtenderScore(kept), 0);
  EXPECT_EQ(band.ExtenderScore(other), 10) << "relative to the best unreserved total, not the kept node's";
  EXPECT_EQ(band.ExtenderScore(weaker), 1);  // 25 points below

  // Only kept nodes fit: they rank among themselves as any nodes do, and score 1..10.
  NodeScore kept_low = kept;
  kept_low.total = 40;
  CapacityBand only(5);
  only.Offer(kept);
  only.Offer(kept_low);
  EXPECT_TRUE(only.In(kept));
  EXPECT_TRUE(only.Ahead(kept, kept_low));
  EXPECT_EQ(only.ExtenderScore(kept), 10);
  EXPECT_EQ(only.ExtenderScore(kept_low), 1);
  EXPECT_EQ(only.best(), 60);

  // With capacity first off, the same order.
  CapacityBand off(-1);
  for (const NodeScore* s : {&kept, &other}) off.Offer(*s);
  EXPECT_TRUE(off.Ahead(other, kept));
  EXPECT_EQ(off.ExtenderScore(kept), 0);
  EXPECT_EQ(off.ExtenderScore(other), 10);
}

// Rules 1-5 in their order. Band 5 over capacities {80, 78, 60}: 60 is out of the band.
TEST(RankBestFirstTest, RareClassThenBandThenTotalThenCapacityThenRemnantsThenStableOrder) {
  CapacityBand band(5);
  std::vector<RankedNode> nodes = {
      {Score(99, 80, true), 1, -1, 0},  // kept for a rarer shape: last among those that fit
      {Score(99, 60), 2, -1, 1},        // out of the band: after every in-band node
      {Score(70, 80), 3, -1, 2},        // in band, a lower total
      {Score(90, 78), 4, -1, 3},        // the best total, a lower capacity
      {Score(90, 80), 9, -1, 4},        // the best total and capacity, a later order key
      {Score(90, 80), 5, -1, 5},        // ... an earlier one: first
  };
  for (const RankedNode& n : nodes) band.Offer(n.score);
  Framework fw = MakeFramework({});
  RemnantTie off(fw, PlacementRequest{}, [] { return std::make_shared<const packing::RemnantCounts>(); });
  RankBestFirst(nodes, band, off);
  std::vector<std::size_t> order;
  for (const RankedNode& n : nodes) order.push_back(n.index);
  EXPECT_EQ(order, (std::vector<std::size_t>{5, 4, 3, 2, 1, 0}));
}

// Rule 4: among the nodes tied for the first place, a single vGPU's card that evens out the
// remnants goes first; nodes behind the first place keep the stable order, and the remnants are
// counted once, only because two nodes tie.
TEST(RankBestFirstTest, ASingleVgpuTiedAtTheTopGoesWhereItsCardEvensOutTheRemnants) {
  Framework fw = MakeFramework({});
  int counted = 0;
  // Three GPUs with 500 milli left, none with 300: a 200-milli share on a 500 card leaves a rare
  // 300 (the sum of squares falls); on a free card (1000 left) it leaves 800, which is as rare.
  RemnantTie remnants(fw, OneVgpu(20), [&counted] {
    ++counted;
    auto c = std::make_shared<packing::RemnantCounts>();
    for (int i = 0; i < 3; ++i) c->Add(500);
    return std::shared_ptr<const packing::RemnantCounts>(std::move(c));
  });
  ASSERT_TRUE(remnants.on());
  ASSERT_LT(remnants.Rank(500), remnants.Rank(1000));  // the arithmetic the case relies on
  counted = 0;
  RemnantTie fresh(fw, OneVgpu(20), [&counted] {
    ++counted;
    auto c = std::make_shared<packing::RemnantCounts>();
    for (int i = 0; i < 3; ++i) c->Add(500);
    return std::shared_ptr<const packing::RemnantCounts>(std::move(c));
  });
  CapacityBand band(-1);
  std::vector<RankedNode> nodes = {
      {Score(80, -1), 1, 1000, 0},  // first in the stable order, a free card
      {Score(80, -1), 2, 500, 1},   // the card whose remnant is common
      {Score(70, -1), 0, 500, 2},   // behind: its card does not matter
  };
  for (const RankedNode& n : nodes) band.Offer(n.score);
  RankBestFirst(nodes, band, fresh);
  EXPECT_EQ(nodes[0].index, 1u);
  EXPECT_EQ(nodes[1].index, 0u);
  EXPECT_EQ(nodes[2].index, 2u);
  EXPECT_EQ(counted, 1);

  // Off for whole GPUs and with capacity.evenRemnants off: the stable order alone.
  PlacementRequest whole;
  whole.gpus = 1;
  EXPECT_FALSE(RemnantTie(fw, whole, {}).on());
  EXPECT_FALSE(RemnantTie(MakeFramework({.even_remnants = false}), OneVgpu(20), {}).on());
}

// The agreement the simulators rely on: over random calls, the node RankBestFirst puts first is
// the node PreferOneOfTheBest keeps at the wire's top score (CapacityBand::ExtenderScore and
// TieKeyOf), for kube-scheduler's 0-10 and for Volcano's total x weight alike.
TEST(RankBestFirstTest, TheFirstNodeIsTheOneTheWireScoresHighest) {
  Framework fw = MakeFramework({});
  std::mt19937 rng(7);
  auto counts = std::make_shared<packing::RemnantCounts>();
  for (int left : {500, 500, 300, 800, 800, 800}) counts->Add(left);
  for (int round = 0; round < 2000; ++round) {
    SCOPED_TRACE(round);
    const int band_width = static_cast<int>(rng() % 3) == 0 ? -1 : 5;
    CapacityBand band(band_width);
    RemnantTie remnants(fw, OneVgpu(20), [counts] { return counts; });
    std::vector<RankedNode> nodes;
    const int n = 1 + static_cast<int>(rng() % 8);
    for (int k = 0; k < n; ++k) {
      // Few distinct values, so ties are common.
      RankedNode node{
          Score(60 + static_cast<int>(rng() % 4), 70 + static_cast<int>(rng() % 8) * 2, rng() % 5 == 0),
          rng() % 4, static_cast<int>(rng() % 3) == 0 ? -1 : 300 + 100 * static_cast<int>(rng() % 8),
          static_cast<std::size_t>(k)};
      band.Offer(node.score);
      nodes.push_back(node);
    }
    std::vector<int> wire;
    std::vector<double> volcano;
    for (const RankedNode& node : nodes) {
      wire.push_back(band.ExtenderScore(node.score));
      volcano.push_back(band.In(node.score) ? node.score.total * 10.0 : 0);
    }
    const auto key = [&](std::size_t k) {
      return TieKeyOf(nodes[k].score.capacity, remnants.Rank(nodes[k].share_left), nodes[k].order_key);
    };
    const std::size_t kube = PreferOneOfTheBest(std::span<int>(wire), key, [](int& s) -> int& { return s; });
    const std::size_t vc = PreferOneOfTheBest(
        std::span<double>(volcano), key, [](double& s) -> double& { return s; }, 5.0);
    std::vector<RankedNode> ranked = nodes;
    RankBestFirst(ranked, band, remnants);
    ASSERT_LT(kube, nodes.size());
    EXPECT_EQ(ranked[0].index, kube);
    EXPECT_EQ(ranked[0].index, vc);
  }
}

// Rule 1: only for a pod asking RDMA NICs, with typical pods of a shape fewer nodes can host;
// the nodes already running the pod's own pool are not kept from it.
TEST(RareClassTest, KeepsTheNodesOnlyTheRareShapeFitsExceptThePodsOwnPool) {
  Framework fw = MakeFramework({});
  packing::ShapeMix mix;
  mix.shapes = {{packing::Shape{.gpus = 1, .milli = packing::kMilli, .nics = 1}, 0.9},
                {packing::Shape{.gpus = 8, .milli = packing::kMilli, .nics = 8}, 0.1}};
  const packing::NodeHardware big{.gpus = {8, 0}, .rdma_nics = 8};
  const packing::NodeHardware small{.gpus = {2, 0}, .rdma_nics = 2};
  const packing::HardwareCensus census = {{big, 2}, {small, 20}};
  PlacementRequest pod;
  pod.gpus = 1;
  pod.rdma_nics = 1;
  pod.pool = "llama";
  int asked = 0;
  const RareClass rare(fw, pod, &mix, census, [&asked] {
    ++asked;
    return std::make_shared<const std::vector<std::string>>(std::vector<std::string>{"big-0"});
  });
  ASSERT_TRUE(rare.active());
  EXPECT_EQ(asked, 1);
  EXPECT_TRUE(rare.Reserved(big, "big-1"));
  EXPECT_FALSE(rare.Reserved(big, "big-0"));  // its own pool runs there
  EXPECT_FALSE(rare.Reserved(small, "small-0"));

  PlacementRequest no_nics = pod;
  no_nics.rdma_nics = 0;
  EXPECT_FALSE(RareClass(fw, no_nics, &mix, census, {}).active());
  EXPECT_FALSE(RareClass(fw, pod, nullptr, census, {}).active());
  EXPECT_FALSE(RareClass(MakeFramework({.rare_class_last = false}), pod, &mix, census, {}).active());
}

}  // namespace
}  // namespace toposched::framework
