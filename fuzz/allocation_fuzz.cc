// Allocation records read back onto a node: the toposched.io/allocation pod annotation
// (kube::DecodeAllocation, and DevicesNamedBy for one that does not read back), which any user
// who can edit a pod writes, and the `toposched place --allocated` file (DecodeAllocationJson).
// Invariant: an annotation that decodes is re-encoded (EncodeAllocation) to one that decodes to
// the same devices.

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "fuzz_check.h"
#include "fuzz_topology.h"
#include "toposched/kube/objects.h"
#include "toposched/placement/allocation_json.h"

namespace {

toposched::framework::AllocationDelta Sorted(toposched::framework::AllocationDelta d) {
  std::sort(d.exclusive_gpus.begin(), d.exclusive_gpus.end());
  std::sort(d.nics.begin(), d.nics.end());
  std::sort(d.shares.begin(), d.shares.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return d;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const toposched::NodeTopology& topology = toposched::fuzz::HgxTopology();
  const std::string_view text = toposched::fuzz::AsText(data, size);
  const int gpus = static_cast<int>(topology.gpus.size()), nics = static_cast<int>(topology.nics.size());

  toposched::LinkClass worst = toposched::LinkClass::kSYS;
  const auto delta = toposched::kube::DecodeAllocation(text, topology, &worst);
  if (delta.ok()) {
    for (int g : delta->exclusive_gpus) FUZZ_CHECK(g >= 0 && g < gpus);
    for (const auto& [g, usage] : delta->shares) FUZZ_CHECK(g >= 0 && g < gpus && usage.shares >= 1);
    for (int n : delta->nics) FUZZ_CHECK(n >= 0 && n < nics);
    toposched::state::PodAllocation allocation;
    allocation.uid = "u";
    allocation.node = "gpu-a";
    allocation.delta = *delta;
    const auto encoded = toposched::kube::EncodeAllocation(allocation, topology, "toposched");
    const auto again = toposched::kube::DecodeAllocation(encoded.allocation, topology);
    FUZZ_CHECK(again.ok());
    FUZZ_CHECK(Sorted(*again) == Sorted(*delta));
  } else {
    // What the kube source holds for a record it cannot read: whole GPUs, ascending, once each.
    const auto held = toposched::kube::DevicesNamedBy(text, {}, topology);
    FUZZ_CHECK(std::is_sorted(held.exclusive_gpus.begin(), held.exclusive_gpus.end()));
    FUZZ_CHECK(std::adjacent_find(held.exclusive_gpus.begin(), held.exclusive_gpus.end()) ==
               held.exclusive_gpus.end());
    for (int g : held.exclusive_gpus) FUZZ_CHECK(g >= 0 && g < gpus);
    for (int n : held.nics) FUZZ_CHECK(n >= 0 && n < nics);
    FUZZ_CHECK(held.shares.empty());
  }

  const auto allocated = toposched::DecodeAllocationJson(text, topology);
  if (allocated.ok()) {
    FUZZ_CHECK(allocated->gpu_exclusive.size() <= topology.gpus.size());
    FUZZ_CHECK(allocated->nic_used.size() <= topology.nics.size());
  }
  return 0;
}
