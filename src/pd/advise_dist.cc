// The prompt and output length distributions of `toposched advise` (advise.h's LengthDist):
// the parser of fixed:N, uniform:A-B, lognormal:MEDIAN,SIGMA and list:a,b,c, each held as its
// quantile function at evenly spaced probability points.

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "toposched/common/text.h"
#include "toposched/pd/advise.h"

namespace toposched::pd {
namespace {

constexpr int kQuantiles = 1000;
constexpr std::size_t kMaxListSamples = 1000000;

bool ParseNumber(std::string_view s, double& out) {
  if (s.empty()) return false;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && ptr == s.data() + s.size() && std::isfinite(out);
}

// Inverse of the standard normal CDF (Acklam's rational approximation, |error| < 1.2e-9).
double NormalQuantile(double p) {
  static constexpr double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,  -2.759285104469687e+02,
                                 1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
  static constexpr double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                                 6.680131188771972e+01, -1.328068155288572e+01};
  static constexpr double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                                 -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
  static constexpr double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                                 3.754408661907416e+00};
  constexpr double kLow = 0.02425;
  if (p < kLow) {
    const double q = std::sqrt(-2 * std::log(p));
    return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
           ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  }
  if (p > 1 - kLow) return -NormalQuantile(1 - p);
  const double q = p - 0.5, r = q * q;
  return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
         (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
}

// The i-th of kQuantiles evenly spaced probability points (midpoints: no 0 or 1).
double QuantilePoint(int i) {
  return (i + 0.5) / kQuantiles;
}

}  // namespace

// ------------------------------------------------------------------------------------------
// Length distributions

double LengthDist::Mean() const {
  if (quantiles.empty()) return 0;
  double sum = 0;
  for (double q : quantiles) sum += q;
  return sum / static_cast<double>(quantiles.size());
}

double LengthDist::Quantile(double q) const {
  if (quantiles.empty()) return 0;
  q = std::clamp(q, 0.0, 1.0);
  // quantiles[i] holds probability (i + 0.5) / n; interpolate linearly between them.
  const double n = static_cast<double>(quantiles.size());
  const double pos = q * n - 0.5;
  if (pos <= 0) return quantiles.front();
  if (pos >= n - 1) return quantiles.back();
  const auto i = static_cast<std::size_t>(pos);
  const double f = pos - static_cast<double>(i);
  return quantiles[i] * (1 - f) + quantiles[i + 1] * f;
}

Result<LengthDist> ParseLengthDist(std::string_view spec) {
  const std::string s(spec);
  auto bad = [&](const std::string& why) {
    return Error("length '" + s + "': " + why +
                 " (expected fixed:N, uniform:A-B, lognormal:MEDIAN,SIGMA or list:a,b,c)");
  };
  const std::size_t colon = spec.find(':');
  if (colon == std::string_view::npos) return bad("no kind");
  const std::string_view kind = spec.substr(0, colon), args = spec.substr(colon + 1);
  LengthDist d;
  d.spec = s;
  d.quantiles.reserve(kQuantiles);
  constexpr double kMaxTokens = 1e7;
  auto in_range = [&](double v) { return v >= 1 && v <= kMaxTokens; };
  if (kind == "fixed") {
    double n = 0;
    if (!ParseNumber(args, n) || !in_range(n)) return bad("N must be a number of tokens in 1..1e7");
    d.quantiles.assign(kQuantiles, n);
  } else if (kind == "uniform") {
    const auto parts = Split(args, '-');
    double lo = 0, hi = 0;
    if (parts.size() != 2 || !ParseNumber(parts[0], lo) || !ParseNumber(parts[1], hi) || !in_range(lo) ||
        !in_range(hi) || lo > hi) {
      return bad("uniform needs A-B with 1 <= A <= B <= 1e7");
    }
    for (int i = 0; i < kQuantiles; ++i) d.quantiles.push_back(lo + (hi - lo) * QuantilePoint(i));
  } else if (kind == "lognormal") {
    const auto parts = Split(args, ',');
    double median = 0, sigma = 0;
    if (parts.size() != 2 || !ParseNumber(parts[0], median) || !ParseNumber(parts[1], sigma) ||
        !in_range(median) || sigma < 0 || sigma > 3) {
      return bad("lognormal needs MEDIAN,SIGMA with MEDIAN in 1..1e7 and SIGMA in 0..3");
    }
    for (int i = 0; i < kQuantiles; ++i) {
      d.quantiles.push_back(
          std::clamp(median * std::exp(sigma * NormalQuantile(QuantilePoint(i))), 1.0, kMaxTokens));
    }
  } else if (kind == "list") {
    std::vector<double> samples;
    for (std::string_view item : Split(args, ',')) {
      double v = 0;
      if (!ParseNumber(item, v) || !in_range(v)) return bad("list entries must be token counts in 1..1e7");
      samples.push_back(v);
      if (samples.size() > kMaxListSamples) return bad("more than 1000000 samples");
    }
    std::sort(samples.begin(), samples.end());
    // The empirical distribution's quantile function at the same probability points.
    for (int i = 0; i < kQuantiles; ++i) {
      const auto k = static_cast<std::size_t>(QuantilePoint(i) * static_cast<double>(samples.size()));
      d.quantiles.push_back(samples[std::min(k, samples.size() - 1)]);
    }
  } else {
    return bad("unknown kind '" + std::string(kind) + "'");
  }
  return d;
}

}  // namespace toposched::pd
