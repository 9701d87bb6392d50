// A Pod as the extender reads it (ParsePodRequest): its toposched.io/*, hami.io/* and llm-d
// annotations and labels, and the containers' resource quantities. Any user who can create or
// edit a pod writes these. What parses must be a sane request, and the simdjson reader of the
// kept fields must agree with nlohmann's filter wherever it answers.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "fuzz_check.h"
#include "src/placement/request_keep.h"
#include "toposched/placement/request.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // The two readers of the kept fields (request_keep.h) agree wherever the simdjson one answers.
  const std::string_view text = toposched::fuzz::AsText(data, size);
  if (const auto fast = toposched::request_keep::BySimdjson(text)) {
    nlohmann::json slow;
    bool threw = false;
    try {
      slow = toposched::request_keep::ByFilter(text);
    } catch (const nlohmann::json::exception&) {
      threw = true;
    }
    FUZZ_CHECK(!threw);
    FUZZ_CHECK(*fast == slow);
    FUZZ_CHECK(fast->dump() == slow.dump());
  }
  const auto request = toposched::ParsePodRequest(text);
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
