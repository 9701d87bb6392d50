#pragma once
// toposched's built-in plugins: the one list of their names, factories and default weights.

#include "toposched/framework/config.h"
#include "toposched/framework/registry.h"

namespace toposched::plugins {

// Registers DeviceFit, GpuNicAlignment, NvlinkAffinity, NumaAlignment, Fragmentation,
// SharedGpu, RdmaAffinity, KvTransferCost and PdRatio, in that order (the default run order).
// Fails only when one of them is already in `registry`.
Status RegisterBuiltinPlugins(framework::Registry& registry);

// A registry holding exactly the built-in plugins.
framework::Registry BuiltinRegistry();

// Every built-in plugin with its default weight: DeviceFit (no score), GpuNicAlignment 5,
// NvlinkAffinity 3, NumaAlignment 2, Fragmentation 2, SharedGpu 1 -- the order of the
// placement objective in DESIGN.md -- then RdmaAffinity 3 and the Prefill/Decode pool plugins
// KvTransferCost 3 and PdRatio 2 (neutral 100 for pods outside a pool).
framework::SchedulerConfig DefaultSchedulerConfig();

}  // namespace toposched::plugins
