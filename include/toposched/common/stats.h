#pragma once
// Summary statistics of measured samples, defined once so that every report (simulate, trace
// replay, benchmarks) means the same thing by "p99".

#include <span>

namespace toposched {

// The p-quantile (p in [0, 1]) of `sorted` (ascending) by the nearest-rank method, the one
// docs/placement.md's reported p50/p99 use: the smallest sample with at least p of the samples at
// or below it, i.e. sorted[ceil(p * n) - 1], with rank 1 for p = 0 (the minimum) and rank n for
// p = 1 (the maximum). No interpolation: the answer is always one of the samples. 0 when empty.
double Percentile(std::span<const double> sorted, double p);

}  // namespace toposched
