#pragma once
// The scheduler's configuration: which plugins run, in which order and with which weights, the
// engine's options and how pod requests are read. Loaded from YAML at startup; a bad config
// refuses to start (every error names the key path), it never falls back to defaults.
//
// YAML schema (docs/configuration.md has every key, its default and its effect):
//
//   plugins:                     # optional; absent = every registered plugin, default weights
//     - name: DeviceFit          # required; a registered plugin name; each name at most once
//     - name: GpuNicAlignment
//       weight: 5                # optional; 0..100; default: the plugin's registered default
//     - name: SharedGpu
//       args: {defaultNodePolicy: binpack}   # optional; plugin-specific string arguments
//   engine:                      # optional
//     defaultGpuPolicy: spread   # binpack | spread; default spread
//     maxSharesPerGpu: 10        # 1..100; default 10
//   request:                     # optional
//     rdmaResources: ["rdma/"]   # exact resource names, or prefixes ending in '/'
//     poolLabel: toposched.io/pool
//   network:                     # optional; Prefill/Decode network tiers and KV-transfer costs
//     ...                        # every key: include/toposched/pd/network.h (NetworkConfig)
//   capacity:                    # optional; capacity first (docs/placement.md "Capacity first")
//     plugin: ExpectedFragmentation   # a Score plugin; absent or "none": off (the default)
//     band: 5                    # 0..100 score points
//
// Unknown keys are errors at every level: a misspelt key must not silently mean "default".

#include <string>
#include <string_view>
#include <vector>

#include "toposched/common/status.h"
#include "toposched/framework/registry.h"
#include "toposched/pd/network.h"
#include "toposched/placement/placement.h"
#include "toposched/placement/request.h"

namespace toposched::framework {

inline constexpr int kMaxSharesPerGpuLimit = 100;
inline constexpr std::size_t kMaxConfigYamlBytes = 1u << 20;

struct PluginConfig {
  std::string name;
  // Score weight, 0..kMaxPluginWeight; 0 keeps the plugin's score in explanations but out of the
  // total. Ignored for plugins without Score.
  int weight = 1;
  PluginArgs args;
  bool operator==(const PluginConfig&) const = default;
};

// Capacity first: among the nodes that fit, only those whose capacity plugin scores within
// `band` points of the best one compete on the weighted total; the others rank after them.
// The capacity plugin runs whether or not `plugins` lists it (listed at weight 0, or not listed:
// it still ranks, and adds nothing to the total), so no weight can trade capacity away.
// Off unless configured (docs/placement.md, "Capacity first", says why it is not the default).
inline constexpr int kDefaultCapacityBand = 5;
// CapacityConfig::min_typical_pods: its default (a fortieth of the extender's window, which
// docs/placement.md, "The window rule's threshold", measures against the values tried) and
// bounds (the window's size).
inline constexpr int kDefaultMinTypicalPods = 50;
inline constexpr int kMaxMinTypicalPods = 2000;

struct CapacityConfig {
  std::string plugin;  // a Score plugin (ExpectedFragmentation); empty: off
  int band = kDefaultCapacityBand;
  // A rare node class last (packing::RareShape; docs/placement.md): for a pod asking RDMA NICs,
  // the nodes whose hardware can host the typical shape that the fewest nodes can host rank
  // after every other node that fits, except nodes running the pod's own Prefill/Decode pool.
  // On by default, with or without `plugin`.
  bool rare_class_last = true;
  // Evening out the remnants: where capacity packing chooses a single vGPU's card
  // (CycleState::share_packing), the nodes that share the best score rank first by how much
  // their card evens out the cluster's partly used GPUs (packing::RemnantCounts::TieRank), then
  // by the fixed node order. On by default (docs/placement.md, "Evening out the remnants").
  bool even_remnants = true;
  // How many pods asking a device the extender's window of typical pods (ShapeWindow, the last
  // 2,000 pods) must hold before their mix is taken as the workload and the blind heuristics
  // stand down (extender::Evaluator, PodEntry::packs_by_mix): a new leader's first few pods are
  // not the workload. A cluster that runs fewer device pods than this never packs by the mix.
  int min_typical_pods = kDefaultMinTypicalPods;
  bool operator==(const CapacityConfig&) const = default;
};

struct SchedulerConfig {
  // Run order of Filter and Reserve, and the order of score parts in explanations.
  std::vector<PluginConfig> plugins;
  EngineOptions engine;
  RequestConfig request;
  pd::NetworkConfig network;
  CapacityConfig capacity;
};

// Every plugin of `registry`, in registration order, with its default weight and no args.
SchedulerConfig DefaultSchedulerConfig(const Registry& registry);

// Parses and validates a config. Checks plugin names against `registry` and builds each plugin
// once to validate its args (then discards it). Errors carry the key path:
// "plugins[2].weight: 150 is out of range 0..100".
Result<SchedulerConfig> LoadSchedulerConfigYaml(std::string_view yaml, const Registry& registry);

}  // namespace toposched::framework
