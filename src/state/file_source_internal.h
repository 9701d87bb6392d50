#pragma once
// The node document parser of the file source (internal; exposed for its tests and fuzzer).

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "toposched/common/status.h"
#include "toposched/topology/node_topology.h"

namespace toposched::state::internal {

// Kubernetes object names (DNS-1123 subdomain): lower-case alphanumerics, '-' and '.', each
// dot-separated label starting and ending with an alphanumeric, at most 253 characters.
bool IsDns1123Subdomain(std::string_view name);

// One DIR/nodes/*.json document. Exactly one of topology / topology_file / preset is set.
struct NodeDocument {
  std::string name;
  std::map<std::string, std::string> labels;
  bool schedulable = true;
  std::optional<NodeTopology> topology;  // inline "topology"
  std::string topology_file;             // "topologyFile", relative to DIR, checked
  std::string preset;                    // "preset", not yet resolved
};

// Parses and validates a node document. Errors name the field ("labels.zone: expected a
// string, got 3"); the caller adds the file name. Never throws.
Result<NodeDocument> ParseNodeDocument(std::string_view text, std::size_t max_bytes);

}  // namespace toposched::state::internal
