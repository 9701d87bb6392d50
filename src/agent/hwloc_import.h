#pragma once
// What the hwloc walk (hwloc_discovery.cc, the only translation unit that includes hwloc) and
// the XML import guard (hwloc_import_worker.cc: the known-crash checks and the worker process
// that runs the import) share. Internal to src/agent.

#include <string_view>

#include "toposched/common/status.h"
#include "toposched/topology/node_topology.h"

namespace toposched::agent_internal {

// The import itself, in whatever process calls it (ParseHwlocXml: the worker process). hwloc
// may crash on a malformed file: call it only where a crash costs the worker, not the caller.
Result<NodeTopology> ImportHwlocXml(std::string_view content);

}  // namespace toposched::agent_internal
