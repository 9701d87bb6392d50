// Objects from the API server as the kube source reads them: a watch event line (or a bare
// object) parsed as api.cc parses it, then its object read as a Node (ReadNode), a Pod
// (ReadPod) and a NodeTopology (ReadNodeTopology). Any user who can edit a pod writes its
// annotations and labels; a NodeTopology is written by the agents (or anyone with RBAC on it).
// Invariant: a NodeTopology that reads re-publishes (NodeTopologyObject) to an object that reads
// back to the same topology.

#include <chrono>
#include <cstddef>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "fuzz_check.h"
#include "toposched/kube/objects.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using nlohmann::json;
  const std::string_view line = toposched::fuzz::AsText(data, size);
  const json event = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (event.is_discarded()) return 0;
  const json* object = &event;
  if (event.is_object()) {
    if (const auto it = event.find("object"); it != event.end() && it->is_object()) object = &*it;
  }
  (void)toposched::kube::ReadNode(*object);
  (void)toposched::kube::ReadPod(*object);
  const auto topology = toposched::kube::ReadNodeTopology(*object);
  if (topology.ok() && topology->topology != nullptr) {
    const json republished = toposched::kube::NodeTopologyObject(
        *topology->topology, topology->name, "owner-uid", topology->generation,
        std::chrono::system_clock::time_point{std::chrono::seconds{1700000000}});
    const auto again = toposched::kube::ReadNodeTopology(republished);
    FUZZ_CHECK(again.ok());
    FUZZ_CHECK(again->topology != nullptr);
    FUZZ_CHECK(*again->topology == *topology->topology);
    FUZZ_CHECK(again->name == topology->name);
  }
  return 0;
}
