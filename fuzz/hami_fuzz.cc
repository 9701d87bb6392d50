// HAMi's annotations: the node registration (hami.io/node-nvidia-register: JSON or colon
// records, ParseHamiRegister + ApplyHamiRegister, as the kube source applies it to a node's
// topology), a pod's device list (hami.io/vgpu-devices-allocated: DecodeHamiDevices +
// DeltaFromHami) and the node lock (hami.io/mutex.lock). Any user who can edit a pod writes the
// device list; the registration comes from HAMi's device plugin.
// Invariants: a device list that decodes re-encodes to the same list; a node lock too.

#include <cstddef>
#include <cstdint>

#include "fuzz_check.h"
#include "fuzz_topology.h"
#include "toposched/kube/objects.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace kube = toposched::kube;
  const std::string_view text = toposched::fuzz::AsText(data, size);
  const toposched::NodeTopology& hgx = toposched::fuzz::HgxTopology();

  if (const auto registered = kube::ParseHamiRegister(text); registered.ok()) {
    toposched::NodeTopology copy = hgx;
    for (toposched::Gpu& g : copy.gpus) g.uuid.clear();  // as hwloc discovery leaves them
    const int split = kube::ApplyHamiRegister(*registered, copy);
    FUZZ_CHECK(split >= 0);
    FUZZ_CHECK(copy.gpus.size() == hgx.gpus.size());
    (void)copy.Fingerprint();
  }

  if (const auto devices = kube::DecodeHamiDevices(text); devices.ok()) {
    const auto again = kube::DecodeHamiDevices(kube::EncodeHamiDevices(*devices));
    FUZZ_CHECK(again.ok());
    FUZZ_CHECK(*again == *devices);
    if (const auto delta = kube::DeltaFromHami(*devices, hgx); delta.ok()) {
      for (int g : delta->exclusive_gpus) FUZZ_CHECK(g >= 0 && g < static_cast<int>(hgx.gpus.size()));
      for (const auto& [g, usage] : delta->shares) {
        FUZZ_CHECK(g >= 0 && g < static_cast<int>(hgx.gpus.size()));
        FUZZ_CHECK(usage.memory_mib >= 0 && usage.cores >= 0);
      }
    }
  }

  if (const auto lock = kube::DecodeHamiNodeLock(text); lock.ok()) {
    const auto again = kube::DecodeHamiNodeLock(kube::EncodeHamiNodeLock(*lock));
    FUZZ_CHECK(again.ok());
    FUZZ_CHECK(again->pod_namespace == lock->pod_namespace && again->pod_name == lock->pod_name);
  }
  return 0;
}
