#pragma once
// A Pod's CPU request, as kube-scheduler counts it, for the packing score (FGD's measure counts
// a node's GPUs as stranded where its CPU is spent). The extender reads the scheduled pod's
// through ParsePodRequest (PlacementRequest::cpu_milli) and every bound pod's through the
// Kubernetes source (ClusterStore::SetPodCpu), by this one rule.

#include <cstdint>

#include <nlohmann/json.hpp>

#include "toposched/common/status.h"

namespace toposched {

// The pod's CPU request in milli-cores as kube-scheduler's NodeResourcesFit counts it
// (k8s.io/component-helpers resource.PodRequests): app containers and sidecars (init containers
// with restartPolicy Always) add up; each plain init container runs beside the sidecars declared
// before it; the pod needs the larger, plus spec.overhead. A container's request, else its limit
// (the API server's defaulting copies limits into absent requests). Quantities round up to a
// milli-core, as Quantity.MilliValue does. 0 when nothing asks CPU. Errors name the field.
Result<std::int64_t> PodCpuRequestMilli(const nlohmann::json& pod);

}  // namespace toposched
