#pragma once
// Volcano's Resreq read as a PlacementRequest (private to the extender): for a task that
// carries no Pod.

#include "toposched/placement/request.h"
#include "toposched/wire/wire.h"

namespace toposched::extender {

// A request from Volcano's Resreq when the task carries no Pod: whole GPUs and RDMA NICs from
// the scalar resources, which Volcano keeps in milli-units (1 GPU = 1000).
PlacementRequest RequestFromResreq(const VolcanoTaskView& task, const RequestConfig& config);

}  // namespace toposched::extender
