// Volcano's extender request bodies (predicate, prioritize, allocate/deallocate,
// preemptable/reclaimable, onSessionOpen) through the WireReader the extender service uses.
// Every view of an accepted body is read.

#include <cstddef>
#include <cstdint>

#include "fuzz_check.h"
#include "toposched/wire/wire.h"

using toposched::fuzz::Touch;

namespace {

void TouchTask(const toposched::extender::VolcanoTaskView& t) {
  for (std::string_view s : {t.raw, t.uid, t.name, t.task_namespace, t.node_name, t.job, t.pod.raw, t.pod.uid,
                             t.pod.pod_namespace, t.pod.name, t.pod.resource_version}) {
    Touch(s);
  }
  for (const auto& scalar : t.resreq.scalars) Touch(scalar.name);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static toposched::extender::WireReader reader;
  const std::string_view body = toposched::fuzz::AsText(data, size);
  if (auto p = reader.ReadVolcanoPredicate(body); p.ok()) {
    TouchTask(p->task);
    Touch(p->node_name);
  }
  if (auto p = reader.ReadVolcanoPrioritize(body); p.ok()) {
    TouchTask(p->task);
    for (std::string_view n : p->node_names) Touch(n);
  }
  if (auto e = reader.ReadVolcanoEvent(body); e.ok()) TouchTask(e->task);
  if (auto e = reader.ReadVolcanoEvict(body); e.ok()) {
    TouchTask(e->evictor);
    for (const auto& t : e->evictees) TouchTask(t);
  }
  (void)reader.ReadVolcanoSession(body);
  return 0;
}
