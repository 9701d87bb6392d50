// A NodeTopology JSON document (DecodeTopologyJson): what `toposched topo`/`place` and the
// file source read, and what ReadNodeTopology decodes an API server object's status with.
// Invariant: what decodes re-encodes to the same value, decode(encode(decode(x))) == decode(x).

#include <cstddef>
#include <cstdint>

#include "fuzz_check.h"
#include "toposched/topology/json_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto topology = toposched::DecodeTopologyJson(toposched::fuzz::AsText(data, size));
  if (!topology.ok()) return 0;
  (void)topology->Fingerprint();
  const auto again = toposched::DecodeTopologyJson(toposched::EncodeTopologyJson(*topology, -1));
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(*again == *topology);
  return 0;
}
