#include "toposched/metrics/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <system_error>
#include <type_traits>
#include <utility>

namespace toposched::metrics {
namespace {

// A metric defined or used against its definition (a bad name, a repeated name, the wrong number
// of label values) is a programming error: every metric is defined at start-up and its labels
// are fixed by the code, so no input reaches this. The process stops with the reason, as Go's
// client_golang panics in MustRegister and WithLabelValues; nothing is thrown across the
// component's boundary (docs/architecture.md, "Errors").
[[noreturn]] void Misuse(const std::string& what) {
  std::fprintf(stderr, "toposched: metrics misuse: %s\n", what.c_str());
  std::abort();
}

bool IsAsciiLetter(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
bool IsAsciiDigit(char c) {
  return c >= '0' && c <= '9';
}

// [a-zA-Z_:][a-zA-Z0-9_:]*
bool IsValidMetricName(std::string_view name) {
  if (name.empty() || IsAsciiDigit(name[0])) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return IsAsciiLetter(c) || IsAsciiDigit(c) || c == '_' || c == ':'; });
}

// [a-zA-Z_][a-zA-Z0-9_]*, and not "__..." (reserved by Prometheus for internal labels).
bool IsValidLabelName(std::string_view name) {
  if (name.empty() || IsAsciiDigit(name[0]) || name.starts_with("__")) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return IsAsciiLetter(c) || IsAsciiDigit(c) || c == '_'; });
}

std::string Quoted(std::string_view s) {
  return "\"" + std::string(s) + "\"";
}

std::string FormatValue(double v);
std::string FormatBound(double v);

// Histogram bounds: finite (+Inf is implicit) and strictly ascending.
void ValidateBounds(const std::vector<double>& bounds) {
  for (std::size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i])) {
      Misuse("histogram bucket bound " + FormatValue(bounds[i]) + ": must be finite (+Inf is implicit)");
    }
    if (i > 0 && !(bounds[i - 1] < bounds[i])) {
      Misuse("histogram bucket bounds must be strictly ascending: " + FormatBound(bounds[i - 1]) + " then " +
             FormatBound(bounds[i]));
    }
  }
}

void ValidateFamily(const std::string& name, const std::vector<std::string>& label_names, bool histogram,
                    const std::vector<double>& buckets) {
  if (!IsValidMetricName(name)) {
    Misuse("metric name " + Quoted(name) + ": must match [a-zA-Z_:][a-zA-Z0-9_:]*");
  }
  std::set<std::string_view> seen;
  for (const std::string& label : label_names) {
    if (!IsValidLabelName(label)) {
      Misuse("metric " + name + ": label name " + Quoted(label) +
             ": must match [a-zA-Z_][a-zA-Z0-9_]* and not start with __");
    }
    if (histogram && label == "le") {
      Misuse("metric " + name + ": label name \"le\" is reserved for histogram buckets");
    }
    if (!seen.insert(label).second) {
      Misuse("metric " + name + ": label name " + Quoted(label) + " is repeated");
    }
  }
  if (histogram) {
    ValidateBounds(buckets);
  } else if (!buckets.empty()) {
    Misuse("metric " + name + ": buckets are only meaningful for a histogram");
  }
}

// Shortest text that parses back to the same double; fixed notation when `prefer_fixed`.
std::string ToChars(double v, bool prefer_fixed) {
  char buf[128];
  auto result = prefer_fixed ? std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed)
                             : std::to_chars(buf, buf + sizeof buf, v);
  if (result.ec != std::errc()) result = std::to_chars(buf, buf + sizeof buf, v);  // cannot fail
  return std::string(buf, result.ptr);
}

// A sample value: Prometheus spells the specials NaN, +Inf, -Inf; integral values up to 1e17 print
// without an exponent (2^53 is about 9e15, so that covers every exactly representable integer
// count); the rest print as the shortest round-tripping text ("0.1", "1e+21").
std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return ToChars(v, v == std::trunc(v) && std::fabs(v) < 1e17);
}

// A bucket bound: fixed notation in the usual range so latency buckets read 0.00005, not 5e-05.
std::string FormatBound(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  const double magnitude = std::fabs(v);
  return ToChars(v, v == 0 || (magnitude >= 1e-9 && magnitude < 1e17));
}

// HELP text: backslash and newline escaped.
std::string EscapeHelp(std::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// Label value: backslash, double quote and newline escaped.
void AppendLabelValue(std::string& out, std::string_view value) {
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
}

// `a="x",b="y"` (no braces).
std::string LabelPairs(const std::vector<std::string>& names, const std::vector<std::string>& values) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += ',';
    out += names[i];
    out += "=\"";
    AppendLabelValue(out, values[i]);
    out += '"';
  }
  return out;
}

void AppendHeader(std::string& out, const std::string& name, const std::string& help, std::string_view type) {
  out.append("# HELP ").append(name).append(" ").append(EscapeHelp(help)).append("\n");
  out.append("# TYPE ").append(name).append(" ").append(type).append("\n");
}

// One sample line: name+suffix, `{pairs}` unless there are no labels, the value.
void AppendSample(std::string& out, const std::string& name, std::string_view suffix,
                  const std::string& pairs, const std::string& value) {
  out.append(name).append(suffix);
  if (!pairs.empty()) out.append("{").append(pairs).append("}");
  out.append(" ").append(value).append("\n");
}

void RenderFamily(std::string& out, const Family<Counter>& family) {
  AppendHeader(out, family.name(), family.help(), "counter");
  for (const auto& [values, counter] : family.Series()) {
    AppendSample(out, family.name(), "", LabelPairs(family.label_names(), values),
                 std::to_string(counter->value()));
  }
}

void RenderFamily(std::string& out, const Family<Gauge>& family) {
  AppendHeader(out, family.name(), family.help(), "gauge");
  for (const auto& [values, gauge] : family.Series()) {
    AppendSample(out, family.name(), "", LabelPairs(family.label_names(), values),
                 FormatValue(gauge->value()));
  }
}

void RenderFamily(std::string& out, const Family<Histogram>& family) {
  AppendHeader(out, family.name(), family.help(), "histogram");
  for (const auto& [values, histogram] : family.Series()) {
    const std::string pairs = LabelPairs(family.label_names(), values);
    const Histogram::Snapshot snapshot = histogram->Read();
    for (std::size_t i = 0; i < snapshot.cumulative.size(); ++i) {
      std::string bucket_pairs = pairs;
      if (!bucket_pairs.empty()) bucket_pairs += ',';
      bucket_pairs.append("le=\"")
          .append(i < snapshot.bounds.size() ? FormatBound(snapshot.bounds[i]) : "+Inf")
          .append("\"");
      AppendSample(out, family.name(), "_bucket", bucket_pairs, std::to_string(snapshot.cumulative[i]));
    }
    AppendSample(out, family.name(), "_sum", pairs, FormatValue(snapshot.sum));
    AppendSample(out, family.name(), "_count", pairs, std::to_string(snapshot.count));
  }
}

// The series names a family puts on the wire; two families may not share any of them.
std::vector<std::string> ExposedNames(const std::string& name, bool histogram) {
  if (!histogram) return {name};
  return {name, name + "_bucket", name + "_sum", name + "_count"};
}

}  // namespace

Histogram::Histogram(const std::vector<double>& upper_bounds)
    : bounds_(upper_bounds),
      buckets_(std::make_unique<std::atomic<std::uint64_t>[]>(upper_bounds.size() + 1)) {
  ValidateBounds(bounds_);
  for (std::size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double v) {
  // Bucket i counts bounds[i-1] < v <= bounds[i]; NaN compares false with everything and goes to
  // +Inf, as in the Go client.
  const std::size_t index =
      std::isnan(v)
          ? bounds_.size()
          : static_cast<std::size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  buckets_[index].fetch_add(1, std::memory_order_relaxed);
  std::uint64_t old_bits = sum_bits_.load(std::memory_order_relaxed);
  while (!sum_bits_.compare_exchange_weak(old_bits,
                                          std::bit_cast<std::uint64_t>(std::bit_cast<double>(old_bits) + v),
                                          std::memory_order_relaxed)) {
  }
  // Last and release: a reader that sees this count also sees the bucket and the sum above.
  count_.fetch_add(1, std::memory_order_release);
}

Histogram::Snapshot Histogram::Read() const {
  Snapshot snapshot;
  snapshot.bounds = bounds_;
  snapshot.cumulative.resize(bounds_.size() + 1);
  // Observations in flight can make the buckets run ahead of the count. Retry a few times for a
  // snapshot where the two agree; if writers never pause, report the bucket total as the count so
  // that _count always equals the +Inf bucket, which is what Prometheus expects.
  constexpr int kAttempts = 8;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    const std::uint64_t count_before = count_.load(std::memory_order_acquire);
    std::uint64_t running = 0;
    for (std::size_t i = 0; i <= bounds_.size(); ++i) {
      running += buckets_[i].load(std::memory_order_relaxed);
      snapshot.cumulative[i] = running;
    }
    snapshot.sum = std::bit_cast<double>(sum_bits_.load(std::memory_order_relaxed));
    snapshot.count = running;
    if (running == count_before && count_.load(std::memory_order_acquire) == count_before) break;
  }
  return snapshot;
}

const std::vector<double>& LatencyBuckets() {
  static const std::vector<double> kBuckets = {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025,
                                               0.005,   0.01,   0.025,   0.05,   0.1,   0.25,
                                               0.5,     1,      2.5,     5,      10};
  return kBuckets;
}

template <typename Metric>
Family<Metric>::Family(std::string name, std::string help, std::vector<std::string> label_names,
                       std::vector<double> buckets)
    : name_(std::move(name)),
      help_(std::move(help)),
      label_names_(std::move(label_names)),
      buckets_(std::move(buckets)) {
  // Bad bounds throw here, at registration, rather than on the first With().
  ValidateFamily(name_, label_names_, std::is_same_v<Metric, Histogram>, buckets_);
}

template <typename Metric>
Metric& Family<Metric>::With(std::initializer_list<std::string_view> label_values) {
  std::vector<std::string> values;
  values.reserve(label_values.size());
  for (std::string_view v : label_values) values.emplace_back(v);
  return With(values);
}

template <typename Metric>
Metric& Family<Metric>::With(const std::vector<std::string>& label_values) {
  if (label_values.size() != label_names_.size()) {
    Misuse("metric " + name_ + ": " + std::to_string(label_values.size()) + " label values for " +
           std::to_string(label_names_.size()) + " label names");
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = series_.find(label_values);
  if (it == series_.end()) {
    std::unique_ptr<Metric> metric;
    if constexpr (std::is_same_v<Metric, Histogram>) {
      metric = std::make_unique<Histogram>(buckets_);
    } else {
      metric = std::make_unique<Metric>();
    }
    it = series_.emplace(label_values, std::move(metric)).first;
  }
  return *it->second;
}

template <typename Metric>
std::vector<std::pair<std::vector<std::string>, const Metric*>> Family<Metric>::Series() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<std::vector<std::string>, const Metric*>> out;
  out.reserve(series_.size());
  for (const auto& [values, metric] : series_) out.emplace_back(values, metric.get());
  return out;
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

namespace {

// Throws if any wire name of the new family is already taken by a registered one.
template <typename F>
void CheckUnique(const std::vector<std::unique_ptr<F>>& families, bool families_are_histograms,
                 const std::vector<std::string>& new_names) {
  for (const auto& family : families) {
    for (const std::string& taken : ExposedNames(family->name(), families_are_histograms)) {
      if (std::find(new_names.begin(), new_names.end(), taken) != new_names.end()) {
        Misuse("metric name " + Quoted(new_names.front()) + " collides with registered " + Quoted(taken));
      }
    }
  }
}

}  // namespace

Family<Counter>& Registry::AddCounter(std::string name, std::string help, std::vector<std::string> labels) {
  auto family = std::make_unique<Family<Counter>>(std::move(name), std::move(help), std::move(labels));
  std::lock_guard<std::mutex> lock(mu_);
  const std::vector<std::string> names = ExposedNames(family->name(), false);
  CheckUnique(counters_, false, names);
  CheckUnique(gauges_, false, names);
  CheckUnique(histograms_, true, names);
  order_.push_back(Entry{0, counters_.size()});
  counters_.push_back(std::move(family));
  return *counters_.back();
}

Family<Gauge>& Registry::AddGauge(std::string name, std::string help, std::vector<std::string> labels) {
  auto family = std::make_unique<Family<Gauge>>(std::move(name), std::move(help), std::move(labels));
  std::lock_guard<std::mutex> lock(mu_);
  const std::vector<std::string> names = ExposedNames(family->name(), false);
  CheckUnique(counters_, false, names);
  CheckUnique(gauges_, false, names);
  CheckUnique(histograms_, true, names);
  order_.push_back(Entry{1, gauges_.size()});
  gauges_.push_back(std::move(family));
  return *gauges_.back();
}

Family<Histogram>& Registry::AddHistogram(std::string name, std::string help, std::vector<std::string> labels,
                                          std::vector<double> buckets) {
  auto family = std::make_unique<Family<Histogram>>(std::move(name), std::move(help), std::move(labels),
                                                    std::move(buckets));
  std::lock_guard<std::mutex> lock(mu_);
  const std::vector<std::string> names = ExposedNames(family->name(), true);
  CheckUnique(counters_, false, names);
  CheckUnique(gauges_, false, names);
  CheckUnique(histograms_, true, names);
  order_.push_back(Entry{2, histograms_.size()});
  histograms_.push_back(std::move(family));
  return *histograms_.back();
}

std::string Registry::Render() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const Entry& entry : order_) {
    switch (entry.kind) {
      case 0:
        RenderFamily(out, *counters_[entry.index]);
        break;
      case 1:
        RenderFamily(out, *gauges_[entry.index]);
        break;
      default:
        RenderFamily(out, *histograms_[entry.index]);
        break;
    }
  }
  return out;
}

}  // namespace toposched::metrics
