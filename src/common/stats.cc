// Percentile (nearest rank); the definition is in toposched/common/stats.h.
#include "toposched/common/stats.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace toposched {

double Percentile(std::span<const double> sorted, double p) {
  if (sorted.empty()) return 0;
  const auto rank = static_cast<std::size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  return sorted[std::clamp<std::size_t>(rank, 1, sorted.size()) - 1];
}

}  // namespace toposched
