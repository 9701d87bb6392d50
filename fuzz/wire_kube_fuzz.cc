// kube-scheduler's extender request bodies (ExtenderArgs for filter and prioritize,
// ExtenderBindingArgs, ExtenderPreemptionArgs) through the WireReader the extender service
// uses: any pod that reaches the Service can send them. Every view of an accepted body is read.

#include <cstddef>
#include <cstdint>

#include "fuzz_check.h"
#include "toposched/wire/wire.h"

using toposched::fuzz::Touch;

namespace {

void TouchPod(const toposched::extender::PodRef& p) {
  Touch(p.raw);
  Touch(p.uid);
  Touch(p.pod_namespace);
  Touch(p.name);
  Touch(p.resource_version);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static toposched::extender::WireReader reader;  // the service keeps one per thread
  const std::string_view body = toposched::fuzz::AsText(data, size);
  if (auto args = reader.ReadExtenderArgs(body); args.ok()) {
    TouchPod(args->pod);
    for (const auto& node : args->nodes) {
      Touch(node.name);
      Touch(node.raw);
    }
    FUZZ_CHECK(args->nodes.empty() || args->node_names_given || args->nodes_given);
  }
  if (auto bind = reader.ReadBindingArgs(body); bind.ok()) {
    Touch(bind->pod_name);
    Touch(bind->pod_namespace);
    Touch(bind->pod_uid);
    Touch(bind->node);
  }
  if (auto preempt = reader.ReadPreemptionArgs(body); preempt.ok()) {
    TouchPod(preempt->pod);
    for (const auto& node : preempt->nodes) {
      Touch(node.node);
      for (std::string_view uid : node.uids) Touch(uid);
    }
  }
  return 0;
}
