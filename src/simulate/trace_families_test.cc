#include "toposched/simulate/trace_families.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include "testing/shared_topologies.h"

namespace toposched::simulate {
namespace {

std::filesystem::path TraceDir() {
  return toposched::testing::SharedTopologiesDir().parent_path() / "traces" / "alibaba-gpu-v2023";
}

// The default pod list, loaded once; nullopt without the trace.
const std::optional<Trace>& DefaultTrace() {
  static const std::optional<Trace> trace = []() -> std::optional<Trace> {
    if (!std::filesystem::is_directory(TraceDir())) return std::nullopt;
    auto loaded = LoadTrace(TraceDir().string(), "default");
    if (!loaded.ok()) {
      ADD_FAILURE() << loaded.error().message();
      return std::nullopt;
    }
    return std::move(loaded).value();
  }();
  return trace;
}

#define REQUIRE_TRACE()                                              \
  if (!DefaultTrace()) GTEST_SKIP() << "no trace at " << TraceDir(); \
  const Trace& base = *DefaultTrace()

TraceTask Task(std::string name, std::int64_t cpu, int gpus, int gpu_milli) {
  TraceTask t;
  t.name = std::move(name);
  t.cpu_milli = cpu;
  t.memory_mib = 1024;
  t.gpus = gpus;
  t.gpu_milli = gpu_milli;
  return t;
}

// Four nodes: two 8-GPU G2 (16 GPUs), one 2-GPU T4, one CPU-only.
Trace SmallTrace() {
  Trace t;
  t.variant = "default";
  t.nodes = {{"n0", 96000, 786432, 8, "G2"},
             {"n1", 96000, 786432, 8, "G2"},
             {"n2", 32000, 131072, 2, "T4"},
             {"n3", 64000, 262144, 0, ""}};
  t.tasks = {Task("c0", 4000, 0, 0),     Task("c1", 2000, 0, 0),    Task("s0", 8000, 1, 500),
             Task("s1", 8000, 1, 250),   Task("w0", 8000, 1, 1000), Task("w1", 8000, 1, 1000),
             Task("m0", 16000, 2, 1000), Task("m8", 64000, 8, 1000)};
  return t;
}

std::int64_t Demand(const std::vector<TraceTask>& tasks) {
  std::int64_t d = 0;
  for (const TraceTask& t : tasks) d += t.GpuMilli();
  return d;
}

std::size_t CpuOnly(const std::vector<TraceTask>& tasks) {
  return static_cast<std::size_t>(
      std::count_if(tasks.begin(), tasks.end(), [](const TraceTask& t) { return t.gpus == 0; }));
}

std::string ParseError(std::string_view spec) {
  auto r = ParseTraceFamilies(spec);
  return r.ok() ? std::string("ok") : r.error().message();
}

TEST(TraceFamiliesTest, ParsesSpecs) {
  auto all = ParseTraceFamilies("all");
  ASSERT_TRUE(all.ok()) << all.error().message();
  // 5 multigpu + 4 gpushare + 4 gpuspec + 3 cpu levels.
  ASSERT_EQ(all->size(), 16u);
  EXPECT_EQ((*all)[0].Name(), "multigpu20");
  EXPECT_EQ(all->back().Name(), "cpu300");

  auto some = ParseTraceFamilies("multigpu:20:40,cpu");
  ASSERT_TRUE(some.ok()) << some.error().message();
  std::vector<std::string> names;
  for (const TraceFamilyLevel& l : *some) names.push_back(l.Name());
  EXPECT_EQ(names, (std::vector<std::string>{"multigpu20", "multigpu40", "cpu50", "cpu200", "cpu300"}));

  EXPECT_EQ(ParseError("bogus"), "\"bogus\": unknown family (known: multigpu, gpushare, gpuspec, cpu, all)");
  EXPECT_EQ(ParseError("multigpu:0"), "\"multigpu:0\": level \"0\" is not a percent in 1..100");
  EXPECT_EQ(ParseError("gpushare:150"), "\"gpushare:150\": level \"150\" is not a percent in 1..100");
  EXPECT_EQ(ParseError("cpu:1001"), "\"cpu:1001\": level \"1001\" is not a percent in 1..1000");
  EXPECT_EQ(ParseError("cpu:x"), "\"cpu:x\": level \"x\" is not a percent in 1..1000");
  EXPECT_EQ(ParseError("cpu:300,cpu"), "\"cpu\": level cpu300 listed twice");
  EXPECT_EQ(ParseError("cpu,,gpuspec"), "an empty item in \"cpu,,gpuspec\"");
  EXPECT_TRUE(ParseTraceFamilies("cpu:1000").ok());
}

TEST(TraceFamiliesTest, SyntheticLevelsHoldTheirShares) {
  const Trace base = SmallTrace();
  const std::int64_t demand = Demand(base.tasks);  // 500 + 250 + 1000 + 1000 + 2000 + 8000 = 12750
  ASSERT_EQ(demand, 12750);

  auto multi = MakeFamilyVariant(base, {TraceFamily::kMultiGpu, 50}, 1);
  ASSERT_TRUE(multi.ok()) << multi.error().message();
  EXPECT_EQ(multi->variant, "multigpu50");
  EXPECT_EQ(multi->nodes.size(), base.nodes.size());
  EXPECT_EQ(multi->tasks[0].name, "multigpu50-00000");
  EXPECT_EQ(multi->tasks[0].creation_s, 0);
  EXPECT_EQ(multi->tasks[0].gpus, 0);  // CPU-only first
  EXPECT_EQ(multi->tasks[1].gpus, 0);
  EXPECT_EQ(CpuOnly(multi->tasks), 2u);
  // The drawn demand reaches D and overshoots it by less than the largest task (8 GPUs).
  EXPECT_GE(Demand(multi->tasks), demand);
  EXPECT_LT(Demand(multi->tasks), demand + 8000);
  // P's share is below p until a P task is drawn; each draw moves it by at most one task.
  const TraceMixFacts facts = MixFactsOf(multi->tasks);
  EXPECT_GT(facts.multi_gpu_demand, 0.2);
  EXPECT_LT(facts.multi_gpu_demand, 0.9);

  // gpushare 100: N is never drawn, so every GPU task is a share.
  auto share = MakeFamilyVariant(base, {TraceFamily::kGpuShare, 100}, 7);
  ASSERT_TRUE(share.ok()) << share.error().message();
  EXPECT_DOUBLE_EQ(MixFactsOf(share->tasks).shared_demand, 1.0);
  EXPECT_EQ(share->tasks.back().name,
            "gpushare100-" + std::string(5 - std::to_string(share->tasks.size() - 1).size(), '0') +
                std::to_string(share->tasks.size() - 1));

  // gpuspec 50: round(0.5 x 6) = 3 of the 6 GPU tasks pinned; the 8-GPU task only to G2.
  auto spec = MakeFamilyVariant(base, {TraceFamily::kGpuSpec, 50}, 3);
  ASSERT_TRUE(spec.ok()) << spec.error().message();
  ASSERT_EQ(spec->tasks.size(), base.tasks.size());
  EXPECT_DOUBLE_EQ(MixFactsOf(spec->tasks).pinned_tasks, 0.5);
  for (const TraceTask& t : spec->tasks) {
    if (t.gpu_spec.empty()) continue;
    ASSERT_EQ(t.gpu_spec.size(), 1u);
    EXPECT_TRUE(t.gpu_spec[0] == "G2" || (t.gpu_spec[0] == "T4" && t.gpus <= 2))
        << t.name << " " << t.gpu_spec[0];
  }

  // cpu 300: base CPU-only total 6000, so drawn until >= 18000, overshooting by under 4000.
  auto cpu = MakeFamilyVariant(base, {TraceFamily::kCpu, 300}, 1);
  ASSERT_TRUE(cpu.ok()) << cpu.error().message();
  EXPECT_GE(MixFactsOf(cpu->tasks).cpu_only_cpu_milli, 18000);
  EXPECT_LT(MixFactsOf(cpu->tasks).cpu_only_cpu_milli, 22000);
  EXPECT_EQ(cpu->tasks.size() - CpuOnly(cpu->tasks), 6u);

  // A level the base cannot meet.
  Trace no_multi = base;
  no_multi.tasks.resize(6);  // drops m0 and m8
  auto bad = MakeFamilyVariant(no_multi, {TraceFamily::kMultiGpu, 40}, 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message(), "multigpu40: the base has no multi-GPU tasks to draw from");
}

TEST(TraceFamiliesTest, MixFactsCountDemand) {
  // Demand 12750: multi-GPU 10000, shared 750; CPU-only 6000; none pinned.
  const TraceMixFacts f = MixFactsOf(SmallTrace().tasks);
  EXPECT_DOUBLE_EQ(f.multi_gpu_demand, 10000.0 / 12750);
  EXPECT_DOUBLE_EQ(f.shared_demand, 750.0 / 12750);
  EXPECT_EQ(f.pinned_tasks, 0);
  EXPECT_EQ(f.cpu_only_cpu_milli, 6000);
  EXPECT_EQ(f.tasks, 8u);
}

TEST(TraceFamiliesTest, CsvRoundTrips) {
  auto spec = MakeFamilyVariant(SmallTrace(), {TraceFamily::kGpuSpec, 100}, 5);
  ASSERT_TRUE(spec.ok()) << spec.error().message();
  spec->tasks[2].gpu_spec = {"G2", "T4"};
  const std::string csv = FormatTraceTasksCsv(spec->tasks);
  EXPECT_EQ(csv.substr(0, csv.find('\n')),
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,creation_time");
  auto back = ParseTraceTasks(csv);
  ASSERT_TRUE(back.ok()) << back.error().message();
  ASSERT_EQ(back->size(), spec->tasks.size());
  for (std::size_t i = 0; i < back->size(); ++i) {
    const TraceTask &a = spec->tasks[i], &b = (*back)[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.cpu_milli, b.cpu_milli);
    EXPECT_EQ(a.memory_mib, b.memory_mib);
    EXPECT_EQ(a.gpus, b.gpus);
    EXPECT_EQ(a.gpu_milli, b.gpu_milli);
    EXPECT_EQ(a.gpu_spec, b.gpu_spec);
    EXPECT_EQ(a.creation_s, b.creation_s);
  }
}

TEST(TraceFamiliesTest, RealTraceDemandShares) {
  REQUIRE_TRACE();
  const TraceMixFacts base_facts = MixFactsOf(base.tasks);
  const std::size_t base_cpu_only = CpuOnly(base.tasks);
  for (const TraceFamilyLevel level : {TraceFamilyLevel{TraceFamily::kMultiGpu, 20},
                                       {TraceFamily::kMultiGpu, 40},
                                       {TraceFamily::kMultiGpu, 60},
                                       {TraceFamily::kGpuShare, 40},
                                       {TraceFamily::kGpuShare, 100}}) {
    SCOPED_TRACE(level.Name());
    auto v = MakeFamilyVariant(base, level, 1);
    ASSERT_TRUE(v.ok()) << v.error().message();
    const TraceMixFacts f = MixFactsOf(v->tasks);
    const double share = level.family == TraceFamily::kMultiGpu ? f.multi_gpu_demand : f.shared_demand;
    EXPECT_NEAR(100 * share, level.percent, 1.5);
    EXPECT_EQ(CpuOnly(v->tasks), base_cpu_only);
    EXPECT_EQ(f.cpu_only_cpu_milli, base_facts.cpu_only_cpu_milli);
    EXPECT_GE(Demand(v->tasks), Demand(base.tasks));
  }
}

TEST(TraceFamiliesTest, RealTracePinsModelsTheNodesHave) {
  REQUIRE_TRACE();
  std::map<std::string, int> largest;  // model -> most GPUs on one node
  for (const TraceNode& n : base.nodes) {
    if (n.gpus > 0) largest[n.model] = std::max(largest[n.model], n.gpus);
  }
  auto v = MakeFamilyVariant(base, {TraceFamily::kGpuSpec, 33}, 1);
  ASSERT_TRUE(v.ok()) << v.error().message();
  ASSERT_EQ(v->tasks.size(), base.tasks.size());
  EXPECT_NEAR(100 * MixFactsOf(v->tasks).pinned_tasks, 33, 0.5);
  std::size_t models_used = 0;
  std::map<std::string, int> seen;
  for (const TraceTask& t : v->tasks) {
    if (t.gpu_spec.empty()) continue;
    ASSERT_EQ(t.gpu_spec.size(), 1u);
    ASSERT_TRUE(largest.count(t.gpu_spec[0])) << t.name << " pinned to " << t.gpu_spec[0];
    EXPECT_GE(largest[t.gpu_spec[0]], t.gpus) << t.name;
    if (seen[t.gpu_spec[0]]++ == 0) ++models_used;
  }
  EXPECT_GT(models_used, 1u);  // drawn by weight, not always the largest model
}

// A third of the GPU tasks pinned to one model each: FGD counts a model a typical shape does not
// accept as fragmentation for that shape, so its measure pulls unpinned tasks onto the models the
// fewest shapes accept, which the tasks pinned there then miss; toposched's measure does not
// count it (packing::ForeignModels) and allocates more (docs/placement.md, "Workload
// families"). The whole cluster (a tenth of it is too few nodes of each model to tell), three
// seeds: +2.2 points on the full sweep.
TEST(TraceFamiliesTest, PinnedTasksFindTheirModelsUnderToposchedsMeasure) {
  REQUIRE_TRACE();
  auto v = MakeFamilyVariant(base, {TraceFamily::kGpuSpec, 33}, 1);
  ASSERT_TRUE(v.ok()) << v.error().message();
  TraceReplayOptions options;
  options.policies = {"toposched", "fgd"};
  options.seeds = {42, 43, 44};
  auto result = ReplayTrace(*v, options);
  ASSERT_TRUE(result.ok()) << result.error().message();
  const std::optional<PairedDifference> d =
      PairedRatioDifference(result->policies[0], result->policies[1], 0);
  ASSERT_TRUE(d.has_value());
  EXPECT_GT(d->mean, 0.01) << FormatTraceTable({*result});
}

TEST(TraceFamiliesTest, RealTraceCpuLevel) {
  REQUIRE_TRACE();
  const std::int64_t base_total = MixFactsOf(base.tasks).cpu_only_cpu_milli;
  std::int64_t largest = 0;
  for (const TraceTask& t : base.tasks) {
    if (t.gpus == 0) largest = std::max(largest, t.cpu_milli);
  }
  auto v = MakeFamilyVariant(base, {TraceFamily::kCpu, 300}, 1);
  ASSERT_TRUE(v.ok()) << v.error().message();
  const std::int64_t total = MixFactsOf(v->tasks).cpu_only_cpu_milli;
  EXPECT_GE(total, 3 * base_total);
  EXPECT_LT(total, 3 * base_total + largest);
  EXPECT_EQ(v->tasks.size() - CpuOnly(v->tasks), base.tasks.size() - CpuOnly(base.tasks));
}

TEST(TraceFamiliesTest, RealTraceDeterministicBySeed) {
  REQUIRE_TRACE();
  const auto csv = [&](std::uint32_t seed) {
    auto v = MakeFamilyVariant(base, {TraceFamily::kMultiGpu, 40}, seed);
    return v.ok() ? FormatTraceTasksCsv(v->tasks) : v.error().message();
  };
  EXPECT_EQ(csv(1), csv(1));
  EXPECT_NE(csv(1), csv(2));

  auto v = MakeFamilyVariant(base, {TraceFamily::kGpuShare, 40}, 1);
  ASSERT_TRUE(v.ok()) << v.error().message();
  auto back = ParseTraceTasks(FormatTraceTasksCsv(v->tasks));
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(FormatTraceTasksCsv(*back), FormatTraceTasksCsv(v->tasks));
}

}  // namespace
}  // namespace toposched::simulate
