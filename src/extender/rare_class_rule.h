#pragma once
// Rule 1 of the ranking (framework::RareClass, ranking.h) with the extender's facts: the
// snapshot's hardware census and the nodes the store says run the pod's pool.

#include "toposched/framework/framework.h"
#include "toposched/framework/ranking.h"
#include "toposched/placement/rare_class.h"
#include "toposched/placement/request.h"
#include "toposched/state/cluster_state.h"

namespace toposched::extender {

// `mix`: the pod's typical pods (may be null: inactive); `store` (may be null) gives the pod's
// pool members.
framework::RareClass RareClassFor(const framework::Framework& framework, const PlacementRequest& request,
                                  const packing::ShapeMix* mix, const state::Snapshot& snapshot,
                                  const state::ClusterStore* store);

}  // namespace toposched::extender
