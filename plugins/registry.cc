#include "registry.h"

#include <cstdlib>

#include "device_fit/device_fit.h"
#include "expected_fragmentation/expected_fragmentation.h"
#include "fragmentation/fragmentation.h"
#include "gpu_nic_alignment/gpu_nic_alignment.h"
#include "kv_transfer_cost/kv_transfer_cost.h"
#include "numa_alignment/numa_alignment.h"
#include "nvlink_affinity/nvlink_affinity.h"
#include "pd_ratio/pd_ratio.h"
#include "rdma_affinity/rdma_affinity.h"
#include "shared_gpu/shared_gpu.h"

namespace toposched::plugins {

Status RegisterBuiltinPlugins(framework::Registry& registry) {
  struct Builtin {
    std::string_view name;
    framework::PluginFactory factory;
    int default_weight;
  };
  const Builtin builtins[] = {
      {device_fit::kName, device_fit::New, device_fit::kDefaultWeight},
      {gpu_nic_alignment::kName, gpu_nic_alignment::New, gpu_nic_alignment::kDefaultWeight},
      {nvlink_affinity::kName, nvlink_affinity::New, nvlink_affinity::kDefaultWeight},
      {numa_alignment::kName, numa_alignment::New, numa_alignment::kDefaultWeight},
      {fragmentation::kName, fragmentation::New, fragmentation::kDefaultWeight},
      {expected_fragmentation::kName, expected_fragmentation::New, expected_fragmentation::kDefaultWeight},
      {shared_gpu::kName, shared_gpu::New, shared_gpu::kDefaultWeight},
      {rdma_affinity::kName, rdma_affinity::New, rdma_affinity::kDefaultWeight},
      {kv_transfer_cost::kName, kv_transfer_cost::New, kv_transfer_cost::kDefaultWeight},
      {pd_ratio::kName, pd_ratio::New, pd_ratio::kDefaultWeight},
  };
  for (const Builtin& b : builtins) {
    TOPOSCHED_RETURN_IF_ERROR(registry.Register(std::string(b.name), b.factory, b.default_weight));
  }
  return Status::Ok();
}

framework::Registry BuiltinRegistry() {
  framework::Registry registry;
  // Cannot fail on an empty registry; a failure here is a duplicate in the list above.
  if (!RegisterBuiltinPlugins(registry).ok()) std::abort();
  return registry;
}

framework::SchedulerConfig DefaultSchedulerConfig() {
  return framework::DefaultSchedulerConfig(BuiltinRegistry());
}

}  // namespace toposched::plugins
