#pragma once
// A small Prometheus registry: counters, gauges and histograms with fixed label names, rendered
// in the text exposition format (version 0.0.4) for GET /metrics. Updates are lock-free atomics
// on the hot path; a series (one label value set) is created on first use under a mutex and
// never removed, so callers may keep the returned reference.

#include <atomic>
#include <bit>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace toposched::metrics {

class Counter {
 public:
  void Inc(std::uint64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  // For a total kept elsewhere (a server's or an informer's own counters) copied at scrape time:
  // raises the value to `total`; a smaller `total` changes nothing, so the series never decreases.
  void Advance(std::uint64_t total) {
    std::uint64_t now = value_.load(std::memory_order_relaxed);
    while (now < total && !value_.compare_exchange_weak(now, total, std::memory_order_relaxed)) {
    }
  }
  std::uint64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<std::uint64_t> value_{0};
};

class Gauge {
 public:
  void Set(double v) { bits_.store(std::bit_cast<std::uint64_t>(v), std::memory_order_relaxed); }
  double value() const { return std::bit_cast<double>(bits_.load(std::memory_order_relaxed)); }

 private:
  std::atomic<std::uint64_t> bits_{0};  // a double's bits (0 bits = 0.0)
};

class Histogram {
 public:
  explicit Histogram(const std::vector<double>& upper_bounds);  // ascending, without +Inf
  void Observe(double v);
  // Cumulative counts per bound (+Inf last), the sum and the count, for rendering and tests.
  struct Snapshot {
    std::vector<double> bounds;
    std::vector<std::uint64_t> cumulative;  // bounds.size() + 1 entries, the last is +Inf
    double sum = 0;
    std::uint64_t count = 0;
  };
  Snapshot Read() const;

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> buckets_;  // non-cumulative, bounds+1
  std::atomic<std::uint64_t> sum_bits_{0};                 // double bits, CAS-added
  std::atomic<std::uint64_t> count_{0};
};

// Latency buckets in seconds, 50 us .. 10 s.
const std::vector<double>& LatencyBuckets();

// A metric family: name, help, label names; series by label values (same count as names).
template <typename Metric>
class Family {
 public:
  Family(std::string name, std::string help, std::vector<std::string> label_names,
         std::vector<double> buckets = {});
  // The series for these label values (created on first use). Values are escaped when rendered.
  Metric& With(std::initializer_list<std::string_view> label_values);
  Metric& With(const std::vector<std::string>& label_values);
  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  const std::vector<std::string>& label_names() const { return label_names_; }
  // Series in label-value order (stable output).
  std::vector<std::pair<std::vector<std::string>, const Metric*>> Series() const;

 private:
  std::string name_, help_;
  std::vector<std::string> label_names_;
  std::vector<double> buckets_;
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<Metric>> series_;
};

class Registry {
 public:
  // Names must match [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]* and be unique;
  // a violation is a programming error (the process stops with the reason, at start-up).
  Family<Counter>& AddCounter(std::string name, std::string help, std::vector<std::string> labels = {});
  Family<Gauge>& AddGauge(std::string name, std::string help, std::vector<std::string> labels = {});
  Family<Histogram>& AddHistogram(std::string name, std::string help, std::vector<std::string> labels,
                                  std::vector<double> buckets);
  // The whole registry in Prometheus text format: # HELP, # TYPE, then the series, families in
  // registration order; histograms as _bucket{le=...}, _sum, _count.
  std::string Render() const;

 private:
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Family<Counter>>> counters_;
  std::vector<std::unique_ptr<Family<Gauge>>> gauges_;
  std::vector<std::unique_ptr<Family<Histogram>>> histograms_;
  struct Entry {
    int kind;  // 0 counter, 1 gauge, 2 histogram
    std::size_t index;
  };
  std::vector<Entry> order_;
};

// Defined and instantiated in metrics.cc for exactly these three metric types.
extern template class Family<Counter>;
extern template class Family<Gauge>;
extern template class Family<Histogram>;

}  // namespace toposched::metrics
