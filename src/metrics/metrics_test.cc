#include "toposched/metrics/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace toposched::metrics {
namespace {

TEST(RegistryRender, SmallRegistryExactText) {
  Registry registry;
  auto& requests =
      registry.AddCounter("toposched_requests_total", "Requests by verb and code.", {"verb", "code"});
  requests.With({"filter", "200"}).Inc(3);
  requests.With({"bind", "500"}).Inc();
  requests.With({"filter", "200"}).Inc();  // the same series again: 3 + 1
  registry.AddCounter("toposched_restarts_total", "No labels.").With({}).Inc(7);
  registry.AddGauge("toposched_nodes", "Nodes known.\nA second line with a \\ backslash.").With({}).Set(2.5);
  auto& latency =
      registry.AddHistogram("toposched_latency_seconds", "Request latency.", {"verb"}, {0.005, 0.25, 1});
  Histogram& filter = latency.With({"filter"});
  filter.Observe(0.25);   // exactly on a bound: counts in le="0.25"
  filter.Observe(0.75);   // le="1"
  filter.Observe(4);      // above the last bound: only +Inf
  filter.Observe(0.001);  // le="0.005"
  registry.AddCounter("toposched_binds_total", "Labelled, no series yet.", {"node"});

  // Families in registration order, series in label-value order ("bind" < "filter"); histogram
  // buckets cumulative (1, 1+1, 2+1, 3+1) and the sum 0.25 + 0.75 + 4 + 0.001 = 5.001.
  EXPECT_EQ(registry.Render(),
            "# HELP toposched_requests_total Requests by verb and code.\n"
            "# TYPE toposched_requests_total counter\n"
            "toposched_requests_total{verb=\"bind\",code=\"500\"} 1\n"
            "toposched_requests_total{verb=\"filter\",code=\"200\"} 4\n"
            "# HELP toposched_restarts_total No labels.\n"
            "# TYPE toposched_restarts_total counter\n"
            "toposched_restarts_total 7\n"
            "# HELP toposched_nodes Nodes known.\\nA second line with a \\\\ backslash.\n"
            "# TYPE toposched_nodes gauge\n"
            "toposched_nodes 2.5\n"
            "# HELP toposched_latency_seconds Request latency.\n"
            "# TYPE toposched_latency_seconds histogram\n"
            "toposched_latency_seconds_bucket{verb=\"filter\",le=\"0.005\"} 1\n"
            "toposched_latency_seconds_bucket{verb=\"filter\",le=\"0.25\"} 2\n"
            "toposched_latency_seconds_bucket{verb=\"filter\",le=\"1\"} 3\n"
            "toposched_latency_seconds_bucket{verb=\"filter\",le=\"+Inf\"} 4\n"
            "toposched_latency_seconds_sum{verb=\"filter\"} 5.001\n"
            "toposched_latency_seconds_count{verb=\"filter\"} 4\n"
            "# HELP toposched_binds_total Labelled, no series yet.\n"
            "# TYPE toposched_binds_total counter\n");
}

// A total kept elsewhere (the HTTP server's, an informer's), copied at scrape time, is a counter:
// Advance raises it to the total and never lowers it.
TEST(RegistryRender, AdvanceCopiesATotalAsACounter) {
  Registry r;
  Counter& accepted =
      r.AddCounter("toposched_http_connections_accepted_total", "HTTP connections accepted.").With({});
  accepted.Advance(5);
  EXPECT_EQ(accepted.value(), 5u);
  accepted.Advance(3);  // an older copy read late: ignored
  EXPECT_EQ(accepted.value(), 5u);
  accepted.Advance(9);
  EXPECT_EQ(r.Render(),
            "# HELP toposched_http_connections_accepted_total HTTP connections accepted.\n"
            "# TYPE toposched_http_connections_accepted_total counter\n"
            "toposched_http_connections_accepted_total 9\n");
}

TEST(RegistryRender, HistogramWithoutLabelsHasOnlyLe) {
  Registry registry;
  registry.AddHistogram("h", "H.", {}, {1}).With({}).Observe(0.5);
  EXPECT_EQ(registry.Render(),
            "# HELP h H.\n# TYPE h histogram\n"
            "h_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 1\nh_sum 0.5\nh_count 1\n");
}

TEST(RegistryRender, EmptyRegistryIsEmpty) {
  EXPECT_EQ(Registry().Render(), "");
}

TEST(RegistryRender, LabelValuesAreEscaped) {
  struct Case {
    const char* name;
    std::string value;
    std::string rendered;
  };
  const std::vector<Case> cases = {
      {"plain", "ns/pod-0", "ns/pod-0"},          {"double quote", "say \"hi\"", "say \\\"hi\\\""},
      {"backslash", "C:\\dir", "C:\\\\dir"},      {"newline", "a\nb", "a\\nb"},
      {"tab and utf-8 kept", "\tnœud", "\tnœud"}, {"empty", "", ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Registry registry;
    registry.AddCounter("c", "C.", {"l"}).With({c.value}).Inc();
    EXPECT_EQ(registry.Render(), "# HELP c C.\n# TYPE c counter\nc{l=\"" + c.rendered + "\"} 1\n");
  }
}

TEST(RegistryRender, GaugeValuesRoundTrip) {
  const double inf = std::numeric_limits<double>::infinity();
  struct Case {
    double value;
    std::string rendered;
  };
  const std::vector<Case> cases = {
      {0, "0"},
      {2.5, "2.5"},
      {-3, "-3"},
      {100, "100"},
      {123456789012345, "123456789012345"},  // integral: no exponent
      {0.1, "0.1"},                          // shortest text, not 0.10000000000000001
      {1.0 / 3, "0.3333333333333333"},
      {1e21, "1e+21"},
      {std::numeric_limits<double>::quiet_NaN(), "NaN"},
      {inf, "+Inf"},
      {-inf, "-Inf"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.rendered);
    Registry registry;
    registry.AddGauge("g", "G.").With({}).Set(c.value);
    const std::string text = registry.Render();
    EXPECT_EQ(text, "# HELP g G.\n# TYPE g gauge\ng " + c.rendered + "\n");
    if (std::isfinite(c.value)) {
      EXPECT_EQ(std::strtod(c.rendered.c_str(), nullptr), c.value);
    }
  }
}

TEST(RegistryRender, LatencyBucketBoundsPrintCompactly) {
  Registry registry;
  registry.AddHistogram("lat", "L.", {}, LatencyBuckets()).With({});
  const std::vector<std::string> expected_le = {"0.00005", "0.0001", "0.00025", "0.0005", "0.001", "0.0025",
                                                "0.005",   "0.01",   "0.025",   "0.05",   "0.1",   "0.25",
                                                "0.5",     "1",      "2.5",     "5",      "10",    "+Inf"};
  std::string expected = "# HELP lat L.\n# TYPE lat histogram\n";
  for (const std::string& le : expected_le) expected += "lat_bucket{le=\"" + le + "\"} 0\n";
  expected += "lat_sum 0\nlat_count 0\n";
  EXPECT_EQ(registry.Render(), expected);
}

TEST(Histogram, ReadIsCumulativeAndBoundsAreInclusive) {
  Histogram histogram({1, 2, 4});
  for (double v : {0.0, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, -1.0}) histogram.Observe(v);
  const Histogram::Snapshot s = histogram.Read();
  // le=1: 0, 1, -1; le=2: +1.5, 2; le=4: +3, 4; +Inf: +5.
  EXPECT_EQ(s.bounds, (std::vector<double>{1, 2, 4}));
  EXPECT_EQ(s.cumulative, (std::vector<std::uint64_t>{3, 5, 7, 8}));
  EXPECT_EQ(s.count, 8u);
  EXPECT_EQ(s.sum, 15.5);  // 0 + 1 + 1.5 + 2 + 3 + 4 + 5 - 1
}

TEST(Histogram, NanCountsOnlyInInf) {
  Histogram histogram({1});
  histogram.Observe(std::numeric_limits<double>::quiet_NaN());
  const Histogram::Snapshot s = histogram.Read();
  EXPECT_EQ(s.cumulative, (std::vector<std::uint64_t>{0, 1}));
  EXPECT_EQ(s.count, 1u);
  EXPECT_TRUE(std::isnan(s.sum));
}

TEST(Histogram, LatencyBucketsAreFiftyMicrosecondsToTenSeconds) {
  const std::vector<double>& b = LatencyBuckets();
  ASSERT_EQ(b.size(), 17u);
  EXPECT_EQ(b.front(), 50e-6);
  EXPECT_EQ(b[4], 1e-3);
  EXPECT_EQ(b[13], 1.0);
  EXPECT_EQ(b.back(), 10.0);
}

TEST(Registry, InvalidDefinitionsAreRejected) {
  struct Case {
    const char* name;
    std::function<void(Registry&)> define;
  };
  const std::vector<Case> cases = {
      {"empty metric name", [](Registry& r) { r.AddCounter("", "h"); }},
      {"metric name starts with a digit", [](Registry& r) { r.AddCounter("1abc", "h"); }},
      {"dash in metric name", [](Registry& r) { r.AddGauge("has-dash", "h"); }},
      {"space in metric name", [](Registry& r) { r.AddGauge("has space", "h"); }},
      {"empty label name", [](Registry& r) { r.AddCounter("c", "h", {""}); }},
      {"label starts with a digit", [](Registry& r) { r.AddCounter("c", "h", {"1x"}); }},
      {"colon in label name", [](Registry& r) { r.AddCounter("c", "h", {"a:b"}); }},
      {"reserved __ label", [](Registry& r) { r.AddCounter("c", "h", {"__name"}); }},
      {"repeated label",
       [](Registry& r) {
         r.AddCounter("c", "h", {"verb", "node", "verb"});
       }},
      {"le label on a histogram", [](Registry& r) { r.AddHistogram("h", "h", {"le"}, {1}); }},
      {"descending buckets",
       [](Registry& r) {
         r.AddHistogram("h", "h", {}, {1, 0.5});
       }},
      {"repeated bucket",
       [](Registry& r) {
         r.AddHistogram("h", "h", {}, {1, 1});
       }},
      {"NaN bucket", [](Registry& r) { r.AddHistogram("h", "h", {}, {std::nan("")}); }},
      {"+Inf bucket",
       [](Registry& r) {
         r.AddHistogram("h", "h", {}, {1, std::numeric_limits<double>::infinity()});
       }},
      {"same name twice",
       [](Registry& r) {
         r.AddCounter("dup", "h");
         r.AddGauge("dup", "h");
       }},
      {"counter named like a histogram's _count",
       [](Registry& r) {
         r.AddHistogram("lat", "h", {}, {1});
         r.AddCounter("lat_count", "h");
       }},
      {"histogram whose _sum is a gauge",
       [](Registry& r) {
         r.AddGauge("lat_sum", "h");
         r.AddHistogram("lat", "h", {}, {1});
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Registry registry;
    EXPECT_DEATH(c.define(registry), "metrics misuse");
  }
}

TEST(Registry, ValidNamesAreAccepted) {
  Registry registry;
  EXPECT_NO_THROW(registry.AddCounter("toposched:binds_total", "h", {"_private", "Verb2"}));
  EXPECT_NO_THROW(registry.AddGauge("_g", "h", {"le"}));     // "le" is only reserved on histograms
  EXPECT_NO_THROW(registry.AddHistogram("h", "h", {}, {}));  // only the +Inf bucket
}

TEST(Registry, RejectedDefinitionLeavesNoFamily) {
  Registry registry;
  registry.AddCounter("dup", "first");
  EXPECT_DEATH(registry.AddCounter("dup", "second"), "metrics misuse");
  EXPECT_EQ(registry.Render(), "# HELP dup first\n# TYPE dup counter\n");
}

TEST(Family, WrongLabelCountIsRejected) {
  Registry registry;
  auto& counter = registry.AddCounter("c", "h", {"verb", "code"});
  auto& plain = registry.AddGauge("g", "h");
  auto& histogram = registry.AddHistogram("h", "h", {"verb"}, {1});
  EXPECT_DEATH(counter.With({"filter"}), "metrics misuse");
  EXPECT_DEATH(counter.With({"filter", "200", "extra"}), "metrics misuse");
  EXPECT_DEATH(counter.With(std::vector<std::string>{}), "metrics misuse");
  EXPECT_DEATH(plain.With({"unexpected"}), "metrics misuse");
  EXPECT_DEATH(histogram.With({}), "metrics misuse");
  EXPECT_TRUE(counter.Series().empty());  // no series was created by the failed calls
}

TEST(Family, SeriesReferencesStayValid) {
  Registry registry;
  auto& family = registry.AddCounter("c", "h", {"pod"});
  Counter& first = family.With({"p0"});
  for (int i = 1; i < 1000; ++i) family.With({"p" + std::to_string(i)}).Inc();
  first.Inc(5);
  EXPECT_EQ(&family.With({"p0"}), &first);
  EXPECT_EQ(&family.With(std::vector<std::string>{"p0"}), &first);  // both overloads, one series
  EXPECT_EQ(family.With({"p0"}).value(), 5u);
  EXPECT_EQ(family.Series().size(), 1000u);
}

TEST(Family, HistogramSeriesUseTheFamilyBuckets) {
  Registry registry;
  auto& family = registry.AddHistogram("h", "h", {"verb"}, {0.1, 0.2});
  EXPECT_EQ(family.With({"a"}).Read().bounds, (std::vector<double>{0.1, 0.2}));
  EXPECT_EQ(family.With({"b"}).Read().bounds, (std::vector<double>{0.1, 0.2}));
}

TEST(Concurrency, EightThreadsGiveExactTotals) {
  constexpr int kThreads = 8;
  constexpr int kPerThread = 10000;
  Registry registry;
  auto& counters = registry.AddCounter("c", "h", {"verb"});
  auto& histograms = registry.AddHistogram("h", "h", {"verb"}, {0.5, 1});
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&counters, &histograms] {
      for (int i = 0; i < kPerThread; ++i) {
        // With() on every call: series creation and lookup race too.
        counters.With({"filter"}).Inc();
        histograms.With({"filter"}).Observe(i % 2 == 0 ? 0.25 : 2.0);
      }
    });
  }
  // Render concurrently with the writers: it must not crash, and _count must equal +Inf.
  for (int i = 0; i < 20; ++i) {
    const Histogram::Snapshot s = histograms.With({"filter"}).Read();
    EXPECT_EQ(s.count, s.cumulative.back());
    (void)registry.Render();
  }
  for (std::thread& t : threads) t.join();

  constexpr std::uint64_t kTotal = std::uint64_t{kThreads} * kPerThread;  // 80000
  EXPECT_EQ(counters.With({"filter"}).value(), kTotal);
  const Histogram::Snapshot s = histograms.With({"filter"}).Read();
  // Half the observations are 0.25 (le=0.5), half are 2 (+Inf only).
  EXPECT_EQ(s.cumulative, (std::vector<std::uint64_t>{kTotal / 2, kTotal / 2, kTotal}));
  EXPECT_EQ(s.count, kTotal);
  // 40000 * 0.25 + 40000 * 2 = 90000, exact: every partial sum is a multiple of 0.25 below 2^50.
  EXPECT_EQ(s.sum, 90000.0);
}

}  // namespace
}  // namespace toposched::metrics
