// The extender end to end, minus the socket: up to four requests, each routed to one of
// kube-scheduler's or Volcano's verbs and handed to ExtenderService::Handle (the server's
// Handler) over a store of four nodes, so that a filter's cached result can meet a later bind.
// Input: pieces separated by "\n--\n"; each piece's first byte picks the verb, the rest is the
// body. Invariants: every reply is JSON; a verb that does not change state (filter, prioritize,
// preempt, predicate, ...) leaves the store as it was; a bind or allocate that is rejected
// (non-200, or an in-band error) leaves the store as it was.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz_check.h"
#include "fuzz_topology.h"
#include "plugins/registry.h"
#include "toposched/extender/service.h"
#include "toposched/framework/framework.h"
#include "toposched/metrics/logging.h"
#include "toposched/metrics/metrics.h"
#include "toposched/state/cluster_state.h"
#include "toposched/topology/synthetic.h"

namespace {

namespace framework = toposched::framework;
namespace state = toposched::state;

struct Route {
  std::string_view target;
  bool changes_state;
  std::string_view error_key;  // the in-band error of a state-changing verb
};
constexpr Route kRoutes[] = {
    {"/scheduler/filter", false, ""},
    {"/scheduler/prioritize", false, ""},
    {"/scheduler/bind", true, "Error"},
    {"/scheduler/preempt", false, ""},
    {"/volcano/predicate", false, ""},
    {"/volcano/prioritize", false, ""},
    {"/volcano/allocate", true, "errorMessage"},
    {"/volcano/deallocate", true, "errorMessage"},
    {"/volcano/preemptable", false, ""},
    {"/volcano/reclaimable", false, ""},
    {"/volcano/onSessionOpen", false, ""},
    {"/volcano/onSessionClose", false, ""},
};
constexpr std::string_view kSeparator = "\n--\n";

const framework::Framework& Framework() {
  static const framework::Registry registry = toposched::plugins::BuiltinRegistry();
  static const framework::Framework fw =
      framework::Framework::Create(toposched::plugins::DefaultSchedulerConfig(), registry).value();
  return fw;
}

std::shared_ptr<const toposched::NodeTopology> Inference() {
  static const auto topology = [] {
    auto spec = toposched::SyntheticPreset("inference-4gpu");
    return std::make_shared<const toposched::NodeTopology>(toposched::GenerateSynthetic(*spec).value());
  }();
  return topology;
}

// What the invariants compare: every node's allocation, pods and held pods.
struct StoreState {
  std::vector<toposched::NodeAllocation> allocated;
  std::vector<std::vector<std::string>> pods, held;
  std::size_t pod_count = 0;
  bool operator==(const StoreState&) const = default;
};
StoreState Capture(const state::ClusterStore& store) {
  StoreState s;
  for (const auto& record : store.snapshot()->nodes()) {
    s.allocated.push_back(record->allocated);
    s.pods.push_back(record->pods);
    s.held.push_back(record->held_pods);
  }
  s.pod_count = store.pod_count();
  return s;
}

}  // namespace

// The service logs a warning per bad request: off, or a million inputs write gigabytes.
extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  toposched::metrics::ConfigureLogging(toposched::metrics::LogFormat::kText,
                                       toposched::metrics::LogLevel::kOff);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const auto hgx = std::make_shared<const toposched::NodeTopology>(toposched::fuzz::HgxTopology());
  const framework::Framework& fw = Framework();
  // Fresh per input, so that every run is reproducible from its input alone.
  state::ClusterStore store(
      nullptr, toposched::extender::StoreOptionsFor(toposched::plugins::DefaultSchedulerConfig()));
  for (const char* name : {"hgx-0", "hgx-1", "gpu-a"}) {
    if (!store.UpsertNode({name, hgx, {{"toposched.io/leaf", "leaf-1"}}, true}).ok()) std::abort();
  }
  if (!store.UpsertNode({"infer-0", Inference(), {}, true}).ok()) std::abort();
  toposched::metrics::Registry metrics;
  toposched::extender::ExtenderService service(fw, store, metrics, toposched::extender::ExtenderOptions{});

  std::string_view input = toposched::fuzz::AsText(data, size);
  for (int n = 0; n < 4 && !input.empty(); ++n) {
    const std::size_t end = input.find(kSeparator);
    const std::string_view piece = input.substr(0, end);
    input = end == std::string_view::npos ? std::string_view() : input.substr(end + kSeparator.size());
    if (piece.empty()) continue;
    const Route& route = kRoutes[static_cast<unsigned char>(piece[0]) % std::size(kRoutes)];
    // The body in a buffer of its own, as the server hands it over (views past it trip ASan).
    const std::unique_ptr<char[]> body(new char[piece.size() - 1]);
    std::copy(piece.begin() + 1, piece.end(), body.get());
    const toposched::server::HttpRequest request{
        "POST", route.target, "application/json", std::string_view(body.get(), piece.size() - 1),
        "fuzz", false};
    const StoreState before = Capture(store);
    toposched::server::HttpResponse response;
    service.Handle(request, response);
    const nlohmann::json reply = nlohmann::json::parse(response.body, nullptr, false);
    FUZZ_CHECK(!reply.is_discarded());
    const StoreState after = Capture(store);
    if (!route.changes_state) {
      FUZZ_CHECK(after == before);
      continue;
    }
    const bool rejected = response.status != 200 || (reply.is_object() && reply.contains(route.error_key) &&
                                                     reply[route.error_key].is_string() &&
                                                     !reply[route.error_key].get<std::string>().empty());
    if (rejected) FUZZ_CHECK(after == before);
  }
  return 0;
}
