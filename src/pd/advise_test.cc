// The disaggregation advisor: length distributions, the per-instance arithmetic, the queueing,
// the KV transfer per path, the verdict's direction on the published short-vs-long-prompt
// observation, and the inputs it refuses. Hand-computed numbers are in the comments.

#include "toposched/pd/advise.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace toposched::pd {
namespace {

LengthDist Dist(const std::string& spec) {
  auto d = ParseLengthDist(spec);
  EXPECT_TRUE(d.ok()) << spec << ": " << (d.ok() ? "" : d.error().message());
  return d.ok() ? *d : LengthDist{};
}

Endpoint EightAlignedNics() {
  Endpoint e;
  e.gpus = 8;
  e.rdma_nics = 8;
  e.worst_class = LinkClass::kPIX;
  return e;
}

// llama-3-70b on h100-sxm, TP8, two instances, fixed 1000-token prompts and 200-token outputs.
AdviseInput Llama70bTp8(double rate, std::vector<PathKind> paths = {PathKind::kLeaf}) {
  AdviseInput in;
  in.model = *FindModel("llama-3-70b");
  in.gpu = *FindGpu("h100-sxm");
  in.gpus_per_instance = 8;
  in.total_gpus = 16;
  in.prompt = Dist("fixed:1000");
  in.output = Dist("fixed:200");
  in.rate_rps = rate;
  in.ttft_p99_ms = 1000;
  in.tpot_p99_ms = 50;
  in.paths = std::move(paths);
  in.prefill_end = in.decode_end = EightAlignedNics();
  return in;
}

// ------------------------------------------------------------------------------------------
// Length distributions

TEST(LengthDist, ParsesEachKind) {
  struct Case {
    std::string spec;
    double mean, p50, p99, tolerance;
  };
  const std::vector<Case> cases = {
      {"fixed:100", 100, 100, 100, 1e-9},
      // Uniform on [100, 200]: mean 150, median 150, P99 100 + 0.99 * 100 = 199.
      {"uniform:100-200", 150, 150, 199, 0.1},
      // Lognormal median 2048, sigma 0.8: mean 2048 e^(0.8^2/2) = 2048 * 1.3771 = 2820;
      // P99 2048 e^(0.8 * 2.3263) = 2048 * 6.436 = 13181. The 1000 quantiles cut the far
      // tail, so the mean is within 1%.
      {"lognormal:2048,0.8", 2820, 2048, 13181, 0.01 * 2820},
      {"lognormal:1000,0", 1000, 1000, 1000, 1e-6},
      // Samples 1..4: mean 2.5.
      {"list:4,1,3,2", 2.5, 2.5, 4, 0.51},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.spec);
    const LengthDist d = Dist(c.spec);
    ASSERT_EQ(d.quantiles.size(), 1000u);
    EXPECT_TRUE(std::is_sorted(d.quantiles.begin(), d.quantiles.end()));
    EXPECT_NEAR(d.Mean(), c.mean, c.tolerance);
    EXPECT_NEAR(d.Quantile(0.5), c.p50, std::max(c.tolerance, 0.01 * c.p50));
    EXPECT_NEAR(d.Quantile(0.99), c.p99, std::max(c.tolerance, 0.01 * c.p99));
  }
  const LengthDist list = Dist("list:1,2,3,4");
  EXPECT_EQ(list.Quantile(0), 1);
  EXPECT_EQ(list.Quantile(1), 4);
}

TEST(LengthDist, RejectsBadSpecs) {
  for (const char* spec :
       {"", "100", "fixed", "fixed:", "fixed:0", "fixed:abc", "fixed:1e9", "fixed:10x", "uniform:200-100",
        "uniform:5", "uniform:1-2-3", "lognormal:100", "lognormal:100,-1", "lognormal:100,9",
        "list:", "list:1,,2", "list:1,0", "gamma:1,2"}) {
    SCOPED_TRACE(spec);
    auto d = ParseLengthDist(spec);
    ASSERT_FALSE(d.ok());
    EXPECT_NE(d.error().message().find("expected fixed:N"), std::string::npos) << d.error().message();
  }
}

TEST(GpuPresets, FindsPresetsAndListsThemOnError) {
  EXPECT_EQ(FindGpu("H100-SXM")->hbm_gbps, 3350);
  EXPECT_EQ(FindGpu("a100-sxm-80g")->peak_tflops, 312);
  EXPECT_EQ(GpuPresets().size(), 4u);
  auto missing = FindGpu("b200");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message().find("h200-sxm"), std::string::npos);
}

// ------------------------------------------------------------------------------------------
// The arithmetic, on llama-3-70b (70.6B params, 320 KiB KV per token) on h100-sxm TP8:
//   prefill  2 * 70.6e9 / (8 * 989e12 * 0.5) = 35.69 us/token, + 5 ms:  1000 tokens = 40.69 ms
//   decode   weights 141.2e9 B / (8 * 3350e9 * 0.7 = 18.76e12 B/s) = 7.527 ms per step, plus per
//            sequence ctx = 1000 + 200^2 / (2 * 200) = 1100 tokens * 327680 B / 18.76e12 = 19.21 us

TEST(AdviseArithmetic, CoLocatedAtAVanishingRateIsOnePrefillAndOneStep) {
  // 0.001 rps over 2 instances: rho = 0.0005 * 40.69 ms = 2e-5 (no queue wait), batch ~ 0.
  // TTFT = 40.69 + 7.53 = 48.22 ms; TPOT = step / (1 - rho) = 7.53 ms.
  auto advice = Advise(Llama70bTp8(0.001));
  ASSERT_TRUE(advice.ok()) << advice.error().message();
  EXPECT_EQ(advice->kv_bytes_per_token, 327680);
  const OptionEstimate& co = advice->options.at(0);
  EXPECT_EQ(co.name, "co-located");
  EXPECT_EQ(co.prefill_instances, 2);
  EXPECT_NEAR(co.ttft_p99_ms, 40.69 + 7.527, 0.05);
  EXPECT_NEAR(co.tpot_p99_ms, 7.527, 0.01);
  EXPECT_NEAR(co.prefill_utilisation, 0.0005 * 0.04069, 1e-6);
  EXPECT_TRUE(co.meets_slo);
}

TEST(AdviseArithmetic, DisaggregatedDecodeBatchAndMg1Wait) {
  // 1 rps, split 1:1 (the only split of 2 instances).
  // Decode: lambda = 1, x = 1 * 200 * 19.21e-6 = 0.003842; B = 200 * 7.527e-3 / (1 - x) = 1.511;
  //   step = 7.527 + 1.511 * 0.01921 = 7.556 ms.
  // Prefill M/G/1 (fixed S = 40.69 ms): rho = 0.04069, Wq = S^2 / (2 (1 - rho)) = 0.8630 ms,
  //   P99 wait = Wq / rho * ln(rho / 0.01) = 21.21 ms * 1.4034 = 29.77 ms.
  // Leaf transfer, 8 aligned NICs: 50 GB/s * 8 = 400 GB/s; 327.68 MB -> 0.8192 ms + 5 us + 300 us
  //   = 1.124 ms.
  // TTFT = 29.77 + 40.69 + 7.556 + 1.124 = 79.14 ms.
  auto advice = Advise(Llama70bTp8(1.0));
  ASSERT_TRUE(advice.ok()) << advice.error().message();
  ASSERT_EQ(advice->options.size(), 2u);
  const OptionEstimate& dis = advice->options[1];
  EXPECT_EQ(dis.name, "disaggregated over leaf");
  EXPECT_EQ(dis.prefill_instances, 1);
  EXPECT_EQ(dis.decode_instances, 1);
  EXPECT_NEAR(dis.decode_batch, 1.511, 0.002);
  EXPECT_NEAR(dis.tpot_p99_ms, 7.556, 0.005);
  EXPECT_NEAR(dis.prefill_utilisation, 0.04069, 1e-4);
  EXPECT_NEAR(dis.kv_transfer_ms_p99, 1.124, 0.001);
  EXPECT_NEAR(dis.ttft_p99_ms, 79.14, 0.1);
  EXPECT_NEAR(dis.kv_share_of_ttft, 1.124 / 79.14, 1e-3);
}

TEST(AdviseArithmetic, KvTransferPerPath) {
  // 1000 tokens * 327680 B = 327.68 MB; latency = the path's + 300 us connector overhead.
  struct Case {
    PathKind path;
    LinkClass worst;
    double ms;
  };
  const std::vector<Case> cases = {
      {PathKind::kSameNodeIpc, LinkClass::kPIX, 0.010 + 0.300 + 327.68 / (150 * 8 * 1e3) * 1e3},  // 0.583
      {PathKind::kSameNodeRdma, LinkClass::kPIX, 0.003 + 0.300 + 0.8192},                         // 1.122
      {PathKind::kNvlinkDomain, LinkClass::kPIX, 0.005 + 0.300 + 0.1024},                         // 3.2 TB/s
      {PathKind::kLeaf, LinkClass::kPIX, 0.005 + 0.300 + 0.8192},
      {PathKind::kLeaf, LinkClass::kSYS, 0.005 + 0.300 + 2.048},  // 50 * 0.4 * 8 = 160 GB/s
      {PathKind::kSpine, LinkClass::kPIX, 0.008 + 0.300 + 1.6384},
      {PathKind::kZone, LinkClass::kPIX, 0.100 + 0.300 + 3.2768},
      {PathKind::kBeyond, LinkClass::kPIX, 1.000 + 0.300 + 8.192},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(ToString(c.path)) + " " + std::string(ToString(c.worst)));
    AdviseInput in = Llama70bTp8(1.0, {c.path});
    in.decode_end.worst_class = c.worst;
    auto advice = Advise(in);
    ASSERT_TRUE(advice.ok()) << advice.error().message();
    EXPECT_NEAR(advice->options.at(1).kv_transfer_ms_p99, c.ms, 1e-3);
    EXPECT_NEAR(advice->options.at(1).kv_transfer_ms_mean, c.ms, 1e-3);  // fixed prompts
  }
}

TEST(AdviseArithmetic, NoPathsGivenMeansEveryTierPathWithAlignedNics) {
  AdviseInput in = Llama70bTp8(1.0, {});
  auto advice = Advise(in);
  ASSERT_TRUE(advice.ok()) << advice.error().message();
  // co-located + same-node-rdma + the four default tiers' paths.
  ASSERT_EQ(advice->options.size(), 6u);
  EXPECT_EQ(advice->options[1].name, "disaggregated over same-node-rdma");
  EXPECT_EQ(advice->options[5].name, "disaggregated over zone");
  EXPECT_NEAR(advice->options[3].kv_transfer_ms_p99, 1.124, 0.001);  // leaf, 8 aligned NICs
}

TEST(AdviseArithmetic, UnstableQueuesNeverMeetTheSlo) {
  // Prefill capacity of 2 instances: 2 / 40.69 ms = 49.2 rps. At 60 rps everything overflows.
  auto advice = Advise(Llama70bTp8(60));
  ASSERT_TRUE(advice.ok()) << advice.error().message();
  for (const OptionEstimate& o : advice->options) {
    EXPECT_FALSE(o.stable) << o.name;
    EXPECT_FALSE(o.meets_slo) << o.name;
    EXPECT_LT(o.max_rate_rps, 49.2) << o.name;
  }
  EXPECT_EQ(advice->verdict.rfind("neither meets the SLO", 0), 0u) << advice->verdict;
}

TEST(AdviseArithmetic, MaxRateIsWhereTheSloStopsHolding) {
  auto advice = Advise(Llama70bTp8(1.0));
  ASSERT_TRUE(advice.ok());
  for (const OptionEstimate& o : advice->options) {
    SCOPED_TRACE(o.name);
    ASSERT_GT(o.max_rate_rps, 1.0);
    auto below = Advise(Llama70bTp8(o.max_rate_rps * 0.98, {PathKind::kLeaf}));
    auto above = Advise(Llama70bTp8(o.max_rate_rps * 1.02, {PathKind::kLeaf}));
    ASSERT_TRUE(below.ok() && above.ok());
    const std::size_t k = o.name == "co-located" ? 0 : 1;
    EXPECT_TRUE(below->options[k].meets_slo);
    EXPECT_FALSE(above->options[k].meets_slo);
  }
}

// ------------------------------------------------------------------------------------------
// The published direction (DistServe, Splitwise; llm-d's co-located vs cross-node finding):
// short prompts at low load favour co-location, long prompts at high load disaggregation.

// llama-3-70b on h100-sxm TP8, outputs lognormal:256,0.5, P99 TPOT target 50 ms, the default
// network paths with 8 aligned NICs per instance.
AdviseInput Llama70b(int gpus, const std::string& prompt, double rate, double ttft_ms) {
  AdviseInput in;
  in.model = *FindModel("llama-3-70b");
  in.gpu = *FindGpu("h100-sxm");
  in.gpus_per_instance = 8;
  in.total_gpus = gpus;
  in.prompt = Dist(prompt);
  in.output = Dist("lognormal:256,0.5");
  in.rate_rps = rate;
  in.ttft_p99_ms = ttft_ms;
  in.tpot_p99_ms = 50;
  return in;
}
AdviseInput ShortLow() {
  return Llama70b(16, "lognormal:256,0.5", 1, 1000);
}
AdviseInput LongHigh() {
  return Llama70b(32, "lognormal:8192,0.3", 6, 3000);
}

std::string Joined(const std::vector<std::string>& lines) {
  std::string all;
  for (const std::string& l : lines) all += l + "\n";
  return all;
}

TEST(AdviseVerdict, ShortPromptsAtLowRateCoLocate) {
  // 2 instances, 0.5 rps each: a step sees a prefill arrive 0.5 * 7.5 ms = 0.4% of the time
  // (no stall in the P99 TPOT); splitting 1:1 halves the prefill and the decode capacity and
  // adds the transfer to TTFT, so co-location sustains more (77.8 vs 62.4 rps).
  auto advice = Advise(ShortLow());
  ASSERT_TRUE(advice.ok()) << advice.error().message();
  EXPECT_EQ(advice->verdict.rfind("co-locate", 0), 0u) << advice->verdict;
  EXPECT_TRUE(advice->options[0].meets_slo);
  for (std::size_t k = 1; k < advice->options.size(); ++k) {
    EXPECT_GT(advice->options[k].ttft_p99_ms, advice->options[0].ttft_p99_ms) << advice->options[k].name;
    EXPECT_LT(advice->options[k].max_rate_rps, advice->options[0].max_rate_rps) << advice->options[k].name;
  }
  const std::string why = Joined(advice->reasons);
  EXPECT_NE(why.find("no prefill stall in the P99 TPOT"), std::string::npos) << why;
  EXPECT_NE(why.find("of KV transfer to the P99 TTFT and leaves prefill 1 of 2 instances"), std::string::npos)
      << why;
  EXPECT_NE(why.find("max sustainable rate"), std::string::npos) << why;
  EXPECT_NE(Joined(advice->uncertain).find("the verdict holds"), std::string::npos);
}

TEST(AdviseVerdict, LongPromptsAtHighRateDisaggregate) {
  // 4 instances, 1.5 rps each, 8k prompts (P99 16.5k: a 593 ms prefill): 1.3% of decode steps
  // see a prefill arrive, so a ~240 ms stall lands in the co-located P99 TPOT; P:D 3:1 has none.
  auto advice = Advise(LongHigh());
  ASSERT_TRUE(advice.ok()) << advice.error().message();
  EXPECT_EQ(advice->verdict.rfind("disaggregate over ", 0), 0u) << advice->verdict;
  EXPECT_NE(advice->verdict.find("at P:D 3:1"), std::string::npos) << advice->verdict;
  const OptionEstimate& co = advice->options[0];
  EXPECT_FALSE(co.meets_slo);
  EXPECT_GT(co.tpot_p99_ms, 200) << "the prefill stalls blow the P99 TPOT";
  for (std::size_t k = 1; k < advice->options.size(); ++k) {
    EXPECT_LT(advice->options[k].tpot_p99_ms, 50) << advice->options[k].name;
  }
  EXPECT_NE(Joined(advice->reasons).find("lands in the P99 TPOT"), std::string::npos);
}

TEST(AdviseVerdict, UncertaintyAlwaysListsTheAssumptions) {
  auto advice = Advise(ShortLow());
  ASSERT_TRUE(advice.ok());
  const std::string all = Joined(advice->uncertain);
  for (const char* must : {"MFU", "MBU", "chunked prefill", "prefix caching",
                           "network costs are the defaults", "topology-unaware", "30%"}) {
    EXPECT_NE(all.find(must), std::string::npos) << must << " in\n" << all;
  }
}

TEST(AdviseVerdict, FlagsAVerdictThatFlipsWithinThirtyPercent) {
  // Long prompts at 6 rps: disaggregation meets only just (prefill utilisation 62% on 3
  // instances); with MFU 30% lower nothing meets.
  auto advice = Advise(LongHigh());
  ASSERT_TRUE(advice.ok());
  const std::string all = Joined(advice->uncertain);
  EXPECT_NE(all.find("the verdict flips with MFU -30%"), std::string::npos) << advice->verdict << "\n" << all;
  EXPECT_EQ(all.find("the verdict holds"), std::string::npos) << all;
}

// ------------------------------------------------------------------------------------------
// Reports

TEST(AdviseReports, TableJsonAndSvg) {
  const AdviseInput in = Llama70bTp8(1.0, {PathKind::kSameNodeRdma, PathKind::kLeaf, PathKind::kSpine});
  auto advice = Advise(in);
  ASSERT_TRUE(advice.ok());
  const std::string table = FormatAdviceTable(in, *advice);
  for (const char* part :
       {"option", "co-located", "disaggregated over spine", "verdict:", "why:", "uncertain:"}) {
    EXPECT_NE(table.find(part), std::string::npos) << part;
  }
  const auto json = nlohmann::json::parse(FormatAdviceJson(in, *advice));
  EXPECT_EQ(json["options"].size(), 4u);
  EXPECT_EQ(json["options"][2]["path"], "leaf");
  EXPECT_EQ(json["kvBytesPerToken"], 327680);
  EXPECT_EQ(json["verdict"], advice->verdict);
  const std::string svg = RenderTransferSvg(in);
  EXPECT_EQ(svg.rfind("<svg ", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_EQ(std::count(svg.begin(), svg.end(), '\n') > 10, true);
  EXPECT_NE(svg.find("<title>spine</title>"), std::string::npos);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
}

// ------------------------------------------------------------------------------------------
// Bad inputs

TEST(AdviseInputs, RejectsWhatCannotBeEstimated) {
  struct Case {
    std::string name;
    void (*mutate)(AdviseInput&);
    std::string error;
  };
  const std::vector<Case> cases = {
      {"zero GPUs", [](AdviseInput& in) { in.total_gpus = 0; }, "at least 1"},
      {"zero per instance", [](AdviseInput& in) { in.gpus_per_instance = 0; }, "at least 1"},
      {"instance bigger than total", [](AdviseInput& in) { in.total_gpus = 4; }, "does not fit in 4 GPUs"},
      {"weights do not fit", [](AdviseInput& in) { in.gpus_per_instance = 1; }, "do not fit"},
      {"zero rate", [](AdviseInput& in) { in.rate_rps = 0; }, "rate"},
      {"negative TTFT", [](AdviseInput& in) { in.ttft_p99_ms = -1; }, "targets"},
      {"no prompt", [](AdviseInput& in) { in.prompt = {}; }, "length distributions"},
      {"no model", [](AdviseInput& in) { in.model.layers = 0; }, "model"},
      {"no params", [](AdviseInput& in) { in.model.params_billion = 0; }, "parameter count"},
      {"MFU above 1", [](AdviseInput& in) { in.gpu.mfu = 1.5; }, "MFU"},
      {"bad network", [](AdviseInput& in) { in.network.paths[0].bandwidth_gbps = 0; }, "network"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    AdviseInput in = Llama70bTp8(1.0);
    c.mutate(in);
    auto advice = Advise(in);
    ASSERT_FALSE(advice.ok());
    EXPECT_NE(advice.error().message().find(c.error), std::string::npos) << advice.error().message();
  }
}

TEST(AdviseInputs, OneInstanceCannotDisaggregate) {
  AdviseInput in = Llama70bTp8(0.5);
  in.total_gpus = 8;
  auto advice = Advise(in);
  ASSERT_TRUE(advice.ok()) << advice.error().message();
  EXPECT_FALSE(advice->options[1].meets_slo);
  EXPECT_EQ(advice->options[1].max_rate_rps, 0);
  EXPECT_EQ(advice->verdict.rfind("co-locate", 0), 0u) << advice->verdict;
}

}  // namespace
}  // namespace toposched::pd
