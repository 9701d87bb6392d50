// An NCCL topology XML (NCCL_TOPO_DUMP_FILE, cloud images' topology files): ParseNcclXml, what
// the agent's --topology-xml and `toposched topo` read. What parses (named, as LoadTopologyFile names
// it) must encode to a NodeTopology JSON that decodes to the same value (the agent publishes it).

#include <cstddef>
#include <cstdint>

#include "fuzz_check.h"
#include "toposched/topology/json_codec.h"
#include "toposched/topology/nccl_xml.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto topology = toposched::ParseNcclXml(toposched::fuzz::AsText(data, size));
  if (!topology.ok()) return 0;
  // LoadTopologyFile names a topology without a host name after its file.
  if (topology->node_name.empty()) topology->node_name = "node-from-file";
  (void)topology->Fingerprint();
  const auto decoded = toposched::DecodeTopologyJson(toposched::EncodeTopologyJson(*topology, -1));
  FUZZ_CHECK(decoded.ok());
  FUZZ_CHECK(*decoded == *topology);
  return 0;
}
