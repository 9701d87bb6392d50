#include "toposched/pd/network.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <set>

namespace toposched::pd {
namespace {

constexpr std::array<std::string_view, kPathKinds> kPathKindNames = {
    "same-node-ipc", "same-node-rdma", "nvlink-domain", "leaf", "spine", "zone", "beyond"};

// Shortest round-trip text of a double ("-1", "0.63", "nan"), for error messages.
std::string Num(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(v);
}

bool IsTierPath(PathKind p) {
  return p == PathKind::kNvlinkDomain || p == PathKind::kLeaf || p == PathKind::kSpine ||
         p == PathKind::kZone;
}

char Lower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return Lower(x) == Lower(y); });
}

}  // namespace

std::string_view ToString(PathKind p) {
  const auto i = static_cast<std::size_t>(p);
  return i < kPathKinds ? kPathKindNames[i] : "unknown";
}

std::optional<PathKind> ParsePathKind(std::string_view s) {
  for (std::size_t i = 0; i < kPathKinds; ++i) {
    if (kPathKindNames[i] == s) return static_cast<PathKind>(i);
  }
  return std::nullopt;
}

bool UsesNic(PathKind p) {
  return p != PathKind::kSameNodeIpc && p != PathKind::kNvlinkDomain;
}

double AlignmentFactors::For(LinkClass c) const {
  switch (c) {
    case LinkClass::kSelf:
    case LinkClass::kNV:
    case LinkClass::kPIX:
      return pix;
    case LinkClass::kPXB:
      return pxb;
    case LinkClass::kPHB:
      return phb;
    case LinkClass::kNODE:
      return node;
    case LinkClass::kSYS:
      return sys;
  }
  return sys;  // not reached for valid enumerators; the worst factor is the safe answer
}

std::vector<Tier> NetworkConfig::DefaultTiers() {
  return {{"nvidia.com/gpu.clique", PathKind::kNvlinkDomain},
          {"toposched.io/leaf", PathKind::kLeaf},
          {"toposched.io/spine", PathKind::kSpine},
          {"topology.kubernetes.io/zone", PathKind::kZone}};
}

// Every number and its source: docs/kv-transfer.md, "Default costs". Bandwidths are GB/s
// (bytes) per lane; the NIC kinds assume a 400 Gb/s NIC (50 GB/s line rate).
std::array<PathCost, kPathKinds> NetworkConfig::DefaultPathCosts() {
  std::array<PathCost, kPathKinds> c{};
  c[static_cast<std::size_t>(PathKind::kSameNodeIpc)] = {150, 10};
  c[static_cast<std::size_t>(PathKind::kSameNodeRdma)] = {50, 3};
  c[static_cast<std::size_t>(PathKind::kNvlinkDomain)] = {400, 5};
  c[static_cast<std::size_t>(PathKind::kLeaf)] = {50, 5};
  c[static_cast<std::size_t>(PathKind::kSpine)] = {25, 8};     // assumption: 2:1 oversubscribed spine
  c[static_cast<std::size_t>(PathKind::kZone)] = {12.5, 100};  // assumption
  c[static_cast<std::size_t>(PathKind::kBeyond)] = {5, 1000};  // assumption: TCP across zones
  return c;
}

Status Validate(const NetworkConfig& config) {
  std::set<std::string_view> labels;
  for (std::size_t i = 0; i < config.tiers.size(); ++i) {
    const Tier& tier = config.tiers[i];
    const std::string path = "network.tiers[" + std::to_string(i) + "]";
    if (tier.label.empty()) return Error(path + ".label: must not be empty");
    if (!labels.insert(tier.label).second) {
      const auto first = std::find_if(config.tiers.begin(), config.tiers.end(),
                                      [&](const Tier& t) { return t.label == tier.label; });
      return Error(path + ".label: \"" + tier.label + "\" is listed twice (first at network.tiers[" +
                   std::to_string(first - config.tiers.begin()) + "])");
    }
    if (!IsTierPath(tier.path)) {
      return Error(path + ".path: " + std::string(ToString(tier.path)) +
                   " is not a tier path (nvlink-domain, leaf, spine, zone)");
    }
  }
  for (std::size_t i = 0; i < kPathKinds; ++i) {
    const PathCost& cost = config.paths[i];
    const std::string path = "network.paths." + std::string(kPathKindNames[i]);
    if (!std::isfinite(cost.bandwidth_gbps) || cost.bandwidth_gbps <= 0) {
      return Error(path + ".bandwidthGBps: " + Num(cost.bandwidth_gbps) + " must be > 0");
    }
    if (!std::isfinite(cost.latency_us) || cost.latency_us < 0) {
      return Error(path + ".latencyUs: " + Num(cost.latency_us) + " must be >= 0");
    }
  }
  const std::pair<std::string_view, double> factors[] = {{"PIX", config.alignment.pix},
                                                         {"PXB", config.alignment.pxb},
                                                         {"PHB", config.alignment.phb},
                                                         {"NODE", config.alignment.node},
                                                         {"SYS", config.alignment.sys}};
  for (const auto& [name, value] : factors) {
    if (!(value > 0 && value <= 1)) {  // also rejects NaN
      return Error("network.alignment." + std::string(name) + ": " + Num(value) + " must be in (0, 1]");
    }
  }
  if (!std::isfinite(config.transfer_overhead_us) || config.transfer_overhead_us < 0) {
    return Error("network.transferOverheadUs: " + Num(config.transfer_overhead_us) + " must be >= 0");
  }
  return Status::Ok();
}

Location LocateByLabels(const NetworkConfig& config, std::string_view node,
                        const std::map<std::string, std::string>& labels) {
  Location loc;
  loc.node = std::string(node);
  loc.domains.reserve(config.tiers.size());
  for (const Tier& tier : config.tiers) {
    const auto it = labels.find(tier.label);
    loc.domains.push_back(it == labels.end() ? std::string() : it->second);
  }
  return loc;
}

// Domains missing from the shorter list count as "" (shares nothing), so Locations built for a
// different tier list still compare safely. An empty node name is no node and never "same node".
int Distance(const Location& a, const Location& b) {
  if (!a.node.empty() && a.node == b.node) return 0;
  const std::size_t tiers = std::max(a.domains.size(), b.domains.size());
  for (std::size_t i = 0; i < std::min(a.domains.size(), b.domains.size()); ++i) {
    if (!a.domains[i].empty() && a.domains[i] == b.domains[i]) return static_cast<int>(i) + 1;
  }
  return static_cast<int>(tiers) + 1;
}

PathKind PathBetween(const NetworkConfig& config, const Location& a, const Location& b, bool ipc_allowed) {
  const int d = Distance(a, b);
  if (d == 0) return config.same_node_ipc && ipc_allowed ? PathKind::kSameNodeIpc : PathKind::kSameNodeRdma;
  const auto tier = static_cast<std::size_t>(d - 1);
  return tier < config.tiers.size() ? config.tiers[tier].path : PathKind::kBeyond;
}

PathEstimate Estimate(const NetworkConfig& config, PathKind path, const Endpoint& prefill,
                      const Endpoint& decode) {
  const PathCost& cost = config.Cost(path);
  PathEstimate e;
  e.path = path;
  e.latency_us = cost.latency_us + config.transfer_overhead_us;
  double per_lane = cost.bandwidth_gbps;
  if (UsesNic(path)) {
    // A known NIC link rate caps the lane: the slower end sets the pace.
    for (const Endpoint* end : {&prefill, &decode}) {
      if (end->nic_gbps > 0) per_lane = std::min(per_lane, end->nic_gbps);
    }
    e.alignment =
        std::min(config.alignment.For(prefill.worst_class), config.alignment.For(decode.worst_class));
    // An end without its own NIC (0) still moves its KV through one shared NIC or TCP.
    e.lanes = std::max(1, std::min(prefill.rdma_nics, decode.rdma_nics));
  } else {
    e.alignment = 1.0;
    e.lanes = std::max(1, std::min(prefill.gpus, decode.gpus));
  }
  e.bandwidth_gbps = per_lane * e.alignment * e.lanes;
  return e;
}

// A zero-bandwidth estimate (default-constructed) never finishes: +inf, not a division by zero.
double TransferSeconds(const PathEstimate& e, double bytes) {
  const double latency_s = e.latency_us * 1e-6;
  if (!(bytes > 0)) return latency_s;
  if (!(e.bandwidth_gbps > 0)) return std::numeric_limits<double>::infinity();
  return latency_s + bytes / (e.bandwidth_gbps * 1e9);
}

// ------------------------------------------------------------------------------------------

std::int64_t KvBytesPerToken(const ModelSpec& m) {
  return std::int64_t{2} * m.layers * m.kv_heads * m.head_dim * m.dtype_bytes;
}

// num_hidden_layers, num_key_value_heads, hidden_size / num_attention_heads from each model's
// published config.json on Hugging Face; docs/kv-transfer.md lists them with the repo names.
const std::vector<ModelSpec>& ModelPresets() {
  static const std::vector<ModelSpec> presets = {
      {"llama-3-8b", 32, 8, 128, 2, 8.03},   {"llama-3-70b", 80, 8, 128, 2, 70.6},
      {"llama-3-405b", 126, 8, 128, 2, 405}, {"qwen2.5-7b", 28, 4, 128, 2, 7.6},
      {"qwen2.5-72b", 80, 8, 128, 2, 72.7},  {"mistral-7b", 32, 8, 128, 2, 7.2},
  };
  return presets;
}

// Case-insensitive: "Llama-3-70B" finds llama-3-70b.
Result<ModelSpec> FindModel(std::string_view name) {
  std::string known;
  for (const ModelSpec& m : ModelPresets()) {
    if (EqualsIgnoreCase(m.name, name)) return m;
    known += (known.empty() ? "" : ", ") + m.name;
  }
  return Error("unknown model \"" + std::string(name.substr(0, 64)) + "\" (presets: " + known + ")");
}

}  // namespace toposched::pd
