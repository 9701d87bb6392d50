// Volcano HyperNodes (topology.volcano.sh/v1alpha1) as the kube source lists them:
// ResolveHyperNodes over a HyperNodeList or an array, with three network tiers and a few
// labelled nodes. Members carry RE2 patterns and label selectors written by cluster admins or
// network operators' controllers. Each resolved Location must be well formed.

#include <cstddef>
#include <cstdint>

#include "fuzz_check.h"
#include "toposched/pd/network.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace pd = toposched::pd;
  static const pd::NetworkConfig config = [] {
    pd::NetworkConfig c;
    c.tiers = {{"toposched.io/leaf", pd::PathKind::kLeaf},
               {"toposched.io/spine", pd::PathKind::kSpine},
               {"topology.kubernetes.io/zone", pd::PathKind::kZone}};
    return c;
  }();
  static const pd::NodeLabels nodes = {
      {"n1", {}},
      {"n2", {}},
      {"gpu-a1", {{"rack", "r3"}}},
      {"gpu-a2", {{"rack", "r3"}, {"gpu", "h100"}}},
      {"infer-0.rack-2", {{"rack", "r4"}}},
  };
  std::vector<std::string> warnings;
  const auto resolved = pd::ResolveHyperNodes(config, toposched::fuzz::AsText(data, size), nodes, &warnings);
  if (resolved.ok()) {
    // Nodes named by exactMatch are resolved whether listed or not (as Volcano does); every
    // Location is its node's, with one domain per configured tier.
    for (const auto& [name, location] : *resolved) {
      FUZZ_CHECK(location.node == name);
      FUZZ_CHECK(location.domains.size() == config.tiers.size());
    }
  }
  return 0;
}
