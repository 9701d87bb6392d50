// An hwloc XML export (lstopo --of xml): ParseHwlocXml, hwloc's XML import plus the agent's walk
// of the tree, what the agent's --topology-xml and `toposched topo` read. hwloc itself is
// Debian's uninstrumented build, so coverage is the agent's code; ASan still sees hwloc's heap.
// What parses (named, as LoadTopologyFile names it) must encode to a NodeTopology JSON that
// decodes to the same value.

#include <cstddef>
#include <cstdint>

#include "fuzz_check.h"
#include "toposched/agent/discovery.h"
#include "toposched/topology/json_codec.h"

// The import worker is forked on first use: do it here, before libFuzzer starts its threads
// (hwloc_import_worker.cc, kImportsPerWorker).
extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  (void)toposched::ParseHwlocXml(R"(<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE topology SYSTEM "hwloc2.dtd">
<topology version="2.0">
  <object type="Machine" os_index="0" cpuset="0x00000001" complete_cpuset="0x00000001" allowed_cpuset="0x00000001" nodeset="0x00000001" complete_nodeset="0x00000001" allowed_nodeset="0x00000001" gp_index="1">
    <object type="NUMANode" os_index="0" cpuset="0x00000001" complete_cpuset="0x00000001" nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="2"/>
    <object type="PU" os_index="0" cpuset="0x00000001" complete_cpuset="0x00000001" nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="3"/>
  </object>
</topology>
)");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto topology = toposched::ParseHwlocXml(toposched::fuzz::AsText(data, size));
  if (!topology.ok()) return 0;
  // LoadTopologyFile names a topology without a host name after its file.
  if (topology->node_name.empty()) topology->node_name = "node-from-file";
  (void)topology->Fingerprint();
  const auto decoded = toposched::DecodeTopologyJson(toposched::EncodeTopologyJson(*topology, -1));
  FUZZ_CHECK(decoded.ok());
  FUZZ_CHECK(*decoded == *topology);
  return 0;
}
