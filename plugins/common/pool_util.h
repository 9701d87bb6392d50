#pragma once
// Helpers the pool-aware plugins (KvTransferCost, PdRatio) share: checking and reading their
// args, choosing a network tier by label, and printing sizes and durations in explanations.

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "toposched/common/status.h"
#include "toposched/framework/registry.h"
#include "toposched/pd/network.h"

namespace toposched::plugins {

// Error naming every key of `args` that is not in `known` (and listing the known ones).
Status RequireKnownArgs(const framework::PluginArgs& args, std::initializer_list<std::string_view> known);

// The integer value of `key` in `args`, min..max; `fallback` when the key is absent. Errors name
// the key and the range.
Result<std::int64_t> ReadIntArg(const framework::PluginArgs& args, std::string_view key, std::int64_t min,
                                std::int64_t max, std::int64_t fallback);

// The value of `key`, or `fallback` when absent.
std::string ReadStringArg(const framework::PluginArgs& args, std::string_view key, std::string fallback);

// The index of the tier named `label` in `config.tiers`, or nullopt.
std::optional<std::size_t> FindTier(const pd::NetworkConfig& config, std::string_view label);
// The default tier for "which leaf": the first tier whose path is leaf, else tier 0; nullopt
// when no tier is configured.
std::optional<std::size_t> DefaultLeafTier(const pd::NetworkConfig& config);

// Which tier a plugin arg names. `label` empty: the default leaf tier. ok = false when `label`
// is given but not configured (`error` says so, listing the tiers): the factories cannot check
// it, as they do not see the network config, so the plugins score neutrally and show `error` in
// every explanation. ok with tier = nullopt: no tier is configured, so every node is its own
// domain.
struct TierChoice {
  bool ok = true;
  std::optional<std::size_t> tier;
  std::string error;
};
TierChoice ResolveTier(const pd::NetworkConfig& config, std::string_view label);

// The node's domain at `tier`, "" when it has none (or the location is shorter than the tiers,
// which a consistent ClusterView never returns).
const std::string& DomainAt(const pd::Location& location, std::size_t tier);

// "320 KiB", "1.5 MiB", "1000 B".
std::string FormatBytes(std::int64_t bytes);
// "850 us", "13.7 ms", "1.4 s".
std::string FormatSeconds(double seconds);
// Fixed-point with `digits` decimals ("0.25").
std::string FormatFixed(double value, int digits);

}  // namespace toposched::plugins
