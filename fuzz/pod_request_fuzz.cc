// A Pod as the extender reads it (ParsePodRequest): its toposched.io/*, hami.io/* and llm-d
// annotations and labels, and the containers' resource quantities. Any user who can create or
// edit a pod writes these. What parses must be a sane request.

#include <cstddef>
#include <cstdint>

#include "fuzz_check.h"
#include "toposched/placement/request.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto request = toposched::ParsePodRequest(toposched::fuzz::AsText(data, size));
  if (!request.ok()) {
    FUZZ_CHECK(!request.error().message().empty());
    return 0;
  }
  FUZZ_CHECK(request->gpus >= 0);
  FUZZ_CHECK(request->rdma_nics >= 0);
  FUZZ_CHECK(request->shared.count >= 0);
  FUZZ_CHECK(!(request->gpus > 0 && request->IsShared()));  // whole or shared, never both
  (void)request->ShapeKey();
  return 0;
}
