// Volcano's Resreq read as a PlacementRequest: the request of a task that carries no Pod, from
// the scalar resources Volcano keeps in milli-units. The one place that reads Resreq; a task that
// carries its Pod is read as any pod is (ParsePodRequest, through Evaluator::EntryFor).

#include "volcano_request.h"

#include <cmath>
#include <string>

namespace toposched::extender {

PlacementRequest RequestFromResreq(const VolcanoTaskView& task, const RequestConfig& config) {
  PlacementRequest r;
  r.pod_uid = std::string(task.uid);
  r.pod_name = std::string(task.name);
  r.pod_namespace = std::string(task.task_namespace);
  auto units = [](double milli) { return static_cast<int>(std::llround(milli / 1000.0)); };
  for (const ScalarResource& s : task.resreq.scalars) {
    if (!(s.value > 0) || !std::isfinite(s.value)) continue;
    if (s.name == "nvidia.com/gpu") {
      r.gpus += units(s.value);
    } else if (s.name == "amd.com/gpu") {
      r.gpus += units(s.value);
      r.vendor = GpuVendor::kAmd;
    } else {
      for (const std::string& rdma : config.rdma_resources) {
        const bool prefix = !rdma.empty() && rdma.back() == '/';
        if (prefix ? s.name.starts_with(rdma) : s.name == rdma) {
          r.rdma_nics += units(s.value);
          break;
        }
      }
    }
  }
  return r;
}

}  // namespace toposched::extender
