#include "common/pool_util.h"

#include <algorithm>
#include <charconv>
#include <cstdio>

namespace toposched::plugins {

Status RequireKnownArgs(const framework::PluginArgs& args, std::initializer_list<std::string_view> known) {
  std::string unknown;
  for (const auto& [key, value] : args) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    unknown += (unknown.empty() ? "" : ", ") + key;
  }
  if (unknown.empty()) return Status::Ok();
  std::string names;
  for (std::string_view k : known) names += (names.empty() ? "" : ", ") + std::string(k);
  return Error("unknown args: " + unknown + " (known: " + names + ")");
}

Result<std::int64_t> ReadIntArg(const framework::PluginArgs& args, std::string_view key, std::int64_t min,
                                std::int64_t max, std::int64_t fallback) {
  const auto it = args.find(std::string(key));
  if (it == args.end()) return fallback;
  const std::string& text = it->second;
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value < min || value > max) {
    return Error("arg " + std::string(key) + ": \"" + text + "\" is not an integer " + std::to_string(min) +
                 " to " + std::to_string(max));
  }
  return value;
}

std::string ReadStringArg(const framework::PluginArgs& args, std::string_view key, std::string fallback) {
  const auto it = args.find(std::string(key));
  if (it == args.end()) return fallback;
  return it->second;
}

std::optional<std::size_t> FindTier(const pd::NetworkConfig& config, std::string_view label) {
  for (std::size_t i = 0; i < config.tiers.size(); ++i) {
    if (config.tiers[i].label == label) return i;
  }
  return std::nullopt;
}

std::optional<std::size_t> DefaultLeafTier(const pd::NetworkConfig& config) {
  if (config.tiers.empty()) return std::nullopt;
  for (std::size_t i = 0; i < config.tiers.size(); ++i) {
    if (config.tiers[i].path == pd::PathKind::kLeaf) return i;
  }
  return 0;
}

TierChoice ResolveTier(const pd::NetworkConfig& config, std::string_view label) {
  TierChoice choice;
  if (label.empty()) {
    choice.tier = DefaultLeafTier(config);
    return choice;
  }
  choice.tier = FindTier(config, label);
  if (!choice.tier) {
    std::string labels;
    for (const pd::Tier& t : config.tiers) labels += (labels.empty() ? "" : ", ") + t.label;
    choice.ok = false;
    choice.error = "tier " + std::string(label) + " is not a configured network tier (" +
                   (labels.empty() ? std::string("none configured") : labels) + ")";
  }
  return choice;
}

const std::string& DomainAt(const pd::Location& location, std::size_t tier) {
  static const std::string kNone;
  return tier < location.domains.size() ? location.domains[tier] : kNone;
}

std::string FormatBytes(std::int64_t bytes) {
  constexpr std::int64_t kKiB = 1024, kMiB = kKiB * 1024, kGiB = kMiB * 1024;
  const auto scaled = [bytes](std::int64_t unit, const char* name) {
    if (bytes % unit == 0) return std::to_string(bytes / unit) + " " + name;
    return FormatFixed(static_cast<double>(bytes) / static_cast<double>(unit), 1) + " " + name;
  };
  if (bytes >= kGiB) return scaled(kGiB, "GiB");
  if (bytes >= kMiB) return scaled(kMiB, "MiB");
  if (bytes >= kKiB && bytes % kKiB == 0) return scaled(kKiB, "KiB");
  return std::to_string(bytes) + " B";
}

std::string FormatSeconds(double seconds) {
  if (seconds < 1e-3) return FormatFixed(seconds * 1e6, 0) + " us";
  if (seconds < 1.0) return FormatFixed(seconds * 1e3, 1) + " ms";
  return FormatFixed(seconds, 1) + " s";
}

std::string FormatFixed(double value, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, value);
  return buf;
}

}  // namespace toposched::plugins
