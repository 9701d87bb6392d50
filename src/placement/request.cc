#include "toposched/placement/request.h"
#include "toposched/placement/pod_cpu.h"

#include "../common/json_errors.h"
#include "../common/json_read.h"
#include "request_keep.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <exception>
#include <limits>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>
#include <simdjson.h>

#include "toposched/common/quantity.h"
#include "toposched/common/text.h"

namespace toposched {
namespace {

using nlohmann::json;

// Resource names. HAMi's (protocols.md 3.2) are its defaults; renamed HAMi resources are not
// supported.
constexpr std::string_view kNvidiaGpu = "nvidia.com/gpu";
constexpr std::string_view kAmdGpu = "amd.com/gpu";
constexpr std::string_view kGpuMem = "nvidia.com/gpumem";
constexpr std::string_view kGpuMemPercent = "nvidia.com/gpumem-percentage";
constexpr std::string_view kGpuCores = "nvidia.com/gpucores";

// Annotations and labels (protocols.md 3.4) beyond those request.h names.
constexpr std::string_view kGpuPolicyAnnotation = "hami.io/gpu-scheduler-policy";
constexpr std::string_view kNodePolicyAnnotation = "hami.io/node-scheduler-policy";
constexpr std::string_view kUseTypeAnnotation = "nvidia.com/use-gputype";
constexpr std::string_view kAvoidTypeAnnotation = "nvidia.com/nouse-gputype";
constexpr std::string_view kUseUuidAnnotation = "nvidia.com/use-gpuuuid";
constexpr std::string_view kAvoidUuidAnnotation = "nvidia.com/nouse-gpuuuid";
constexpr std::string_view kNumaBindAnnotation = "nvidia.com/numa-bind";

// One pod runs on one node, and no node this project models has more than 64 GPUs or NICs
// (the topology model's own bound), so a larger request can never be placed: say so up front.
constexpr std::int64_t kMaxDevices = 64;
constexpr std::int64_t kMaxKvBytesPerToken = std::int64_t{1} << 30;  // 1 GiB per token: far above any model
constexpr std::int64_t kMaxPromptTokens = 10'000'000;
constexpr int kMaxPdRatioPart = 100;
// Far above any GPU's memory (the largest today are under 300 GiB), low enough that a decimal
// suffix mistaken for bytes ("8G" is 8e9 MiB to HAMi) is caught with a hint.
constexpr std::int64_t kMaxGpuMemoryMib = std::int64_t{1} << 24;  // 16 TiB
// Sums saturate here: a hostile pod with many huge quantities must not overflow, and every
// bound above is far below it.
constexpr std::int64_t kSaturated = std::int64_t{1} << 62;
// Values quoted in error messages are cut to this many characters.
// The deepest value the parser keeps is spec.containers[i].resources.limits.<name> (depth 6);
// everything deeper is dropped while parsing, which bounds the memory a hostile document costs.
constexpr int kMaxKeptDepth = 6;

using json_errors::Describe;
using json_errors::Expected;
using json_errors::Quote;
using json_errors::StripExceptionTag;

std::int64_t SaturatingAdd(std::int64_t a, std::int64_t b) {
  return std::min(a + b, kSaturated);  // both operands are in [0, kSaturated]
}

// Comma list as HAMi's filter annotations write it; blanks around items and empty items are
// dropped so that "A100, H100," means {"A100", "H100"}.
std::vector<std::string> SplitList(std::string_view s) {
  std::vector<std::string> out;
  while (true) {
    const std::size_t comma = s.find(',');
    const std::string_view item = TrimSpace(s.substr(0, comma));
    if (!item.empty()) out.emplace_back(item);
    if (comma == std::string_view::npos) break;
    s.remove_prefix(comma + 1);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Kubernetes quantities: common/quantity.h.

// A resource value as the API server writes it (a string) or as people write it by hand (a JSON
// number). `path` names the field for errors.
Result<Quantity> ReadQuantity(const json& v, const std::string& path) {
  if (v.is_string()) {
    auto parsed = ParseQuantity(v.get_ref<const std::string&>());
    if (auto* reason = std::get_if<std::string>(&parsed)) {
      return Error(path + ": " + Describe(v) + " " + *reason);
    }
    return std::get<Quantity>(parsed);
  }
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(kSaturated)) return Error(path + ": " + v.dump() + " is too large");
    return Quantity{static_cast<std::int64_t>(u), false};
  }
  if (v.is_number_integer()) {
    const auto n = v.get<std::int64_t>();
    if (n < 0) return Error(path + ": " + v.dump() + " is negative");
    return Quantity{n, false};
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (d < 0) return Error(path + ": " + v.dump() + " is negative");
    if (!std::isfinite(d) || d != std::floor(d)) return Error(path + ": " + v.dump() + " is not a whole number");
    if (d > static_cast<double>(kSaturated)) return Error(path + ": " + v.dump() + " is too large");
    return Quantity{static_cast<std::int64_t>(d), false};
  }
  return Expected(path, "a quantity (a string such as \"1\", or a number)", v);
}

// A CPU quantity in milli-cores, rounded up (apimachinery's MilliValue): "500m", "2", 0.5.
Result<std::int64_t> ReadMilliQuantity(const json& v, const std::string& path) {
  if (v.is_string()) {
    auto parsed = ParseMilliQuantity(v.get_ref<const std::string&>());
    if (auto* reason = std::get_if<std::string>(&parsed)) return Error(path + ": " + Describe(v) + " " + *reason);
    return std::get<std::int64_t>(parsed);
  }
  if (v.is_number()) {
    const double d = v.get<double>();
    if (!std::isfinite(d)) return Expected(path, "a quantity (a string such as \"500m\", or a number)", v);
    if (d < 0) return Error(path + ": " + v.dump() + " is negative");
    if (d * 1000 > static_cast<double>(kSaturated)) return Error(path + ": " + v.dump() + " is too large");
    return static_cast<std::int64_t>(std::ceil(d * 1000));
  }
  return Expected(path, "a quantity (a string such as \"500m\", or a number)", v);
}

// ---------------------------------------------------------------------------------------------
// Parsing with a filter: only the fields read below are kept, so a 4 MiB pod full of
// managedFields, volumes or hostile nesting costs little more than its bytes.

// The path of the value an event belongs to: slot[d] is the key at depth d, or "[]" for an
// array element.
class KeepFilter {
 public:
  bool operator()(int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::key:
        if (depth > kMaxKeptDepth) return false;
        Set(depth, parsed.is_string() ? parsed.get_ref<const std::string&>() : std::string());
        return Wanted(depth);
      case json::parse_event_t::array_start:
        // Elements of this array are at depth + 1 and have no key.
        if (depth + 1 <= kMaxKeptDepth) Set(depth + 1, "[]");
        return depth <= kMaxKeptDepth;
      case json::parse_event_t::object_start:
        return depth <= kMaxKeptDepth;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
      case json::parse_event_t::value:
        return true;
    }
    return true;
  }

 private:
  void Set(int depth, const std::string& s) {
    const auto d = static_cast<std::size_t>(depth);
    if (slots_.size() <= d) slots_.resize(d + 1);
    slots_[d] = s;
  }
  const std::string& At(int depth) const {
    static const std::string kNone;
    const auto d = static_cast<std::size_t>(depth);
    return d < slots_.size() ? slots_[d] : kNone;
  }

  // Whether the key just read at `depth` (path slots_[1..depth]) leads to a field we read.
  bool Wanted(int depth) const {
    const std::string& k = At(depth);
    switch (depth) {
      case 1:
        return k == "kind" || k == "metadata" || k == "spec";
      case 2:
        if (At(1) == "metadata") {
          return k == "name" || k == "namespace" || k == "uid" || k == "labels" || k == "annotations";
        }
        return At(1) == "spec" && (k == "containers" || k == "initContainers" || k == "overhead");
      case 3:
        // A label or annotation, or a resource of the pod's overhead (RuntimeClass).
        return (At(1) == "metadata" && (At(2) == "labels" || At(2) == "annotations")) ||
               (At(1) == "spec" && At(2) == "overhead");
      default:
        break;
    }
    // spec.<containers>[i].<field>...
    if (At(1) != "spec" || (At(2) != "containers" && At(2) != "initContainers") || At(3) != "[]") {
      return false;
    }
    if (depth == 4) return k == "name" || k == "restartPolicy" || k == "resources";
    if (At(4) != "resources") return false;
    if (depth == 5) return k == "requests" || k == "limits";
    return depth == 6;  // a resource name
  }

  std::vector<std::string> slots_;
};

}  // namespace

namespace request_keep {

json ByFilter(std::string_view text) { return json::parse(text.begin(), text.end(), KeepFilter()); }

namespace {

namespace dom = simdjson::dom;

// The element as an object (array), held in a local: a range-for over get_object()'s result
// would iterate a temporary that is gone.
bool AsObject(dom::element v, dom::object& out) { return v.get(out) == simdjson::SUCCESS; }
bool AsArray(dom::element v, dom::array& out) { return v.get(out) == simdjson::SUCCESS; }

// A kept leaf: a string or null (names, labels, annotations), or for a resource quantity also
// a number, typed as nlohmann types it (a non-negative integer unsigned). False: another type.
bool KeepLeaf(dom::element v, bool number_ok, json& out) {
  switch (v.type()) {
    case dom::element_type::STRING:
      out = std::string(v.get_string().value_unsafe());
      return true;
    case dom::element_type::NULL_VALUE:
      out = nullptr;
      return true;
    case dom::element_type::INT64: {
      if (!number_ok) return false;
      const std::int64_t n = v.get_int64().value_unsafe();
      if (n >= 0) {
        out = static_cast<std::uint64_t>(n);
      } else {
        out = n;
      }
      return true;
    }
    case dom::element_type::UINT64:
      if (!number_ok) return false;
      out = v.get_uint64().value_unsafe();
      return true;
    case dom::element_type::DOUBLE:
      if (!number_ok) return false;
      out = v.get_double().value_unsafe();
      return true;
    default:
      return false;
  }
}

// An object, or null where `null_ok`, of which `field(key, value, out)` keeps what it wants
// (returning false for a field of another type than a Pod gives it). False: another type.
template <typename Field>
bool KeepObject(dom::element v, bool null_ok, json& out, Field&& field) {
  if (null_ok && v.is_null()) {
    out = nullptr;
    return true;
  }
  dom::object object;
  if (!AsObject(v, object)) return false;
  out = json::object();
  for (dom::key_value_pair f : object) {
    if (!field(f.key, f.value, out)) return false;
  }
  return true;
}

// An object of kept leaves (labels, annotations, requests, limits), or null.
bool KeepMap(dom::element v, bool number_ok, json& out) {
  return KeepObject(v, true, out, [number_ok](std::string_view key, dom::element value, json& o) {
    return KeepLeaf(value, number_ok, o[std::string(key)]);
  });
}

// A container: its name, restart policy and resources' requests and limits.
bool KeepContainer(dom::element v, json& out) {
  return KeepObject(v, false, out, [](std::string_view key, dom::element value, json& o) {
    if (key == "name" || key == "restartPolicy") return KeepLeaf(value, false, o[std::string(key)]);
    if (key != "resources") return true;
    return KeepObject(value, true, o["resources"], [](std::string_view k, dom::element r, json& resources) {
      return (k != "requests" && k != "limits") || KeepMap(r, true, resources[std::string(k)]);
    });
  });
}

bool KeepContainers(dom::element v, json& out) {
  if (v.is_null()) {
    out = nullptr;
    return true;
  }
  dom::array containers;
  if (!AsArray(v, containers)) return false;
  out = json::array();
  for (dom::element c : containers) {
    json kept;
    if (!KeepContainer(c, kept)) return false;
    out.push_back(std::move(kept));
  }
  return true;
}

}  // namespace

std::optional<json> BySimdjson(std::string_view text) {
  // The thread's parser keeps buffers sized to the largest document it read (its tape can take
  // several times the text): a large pod (up to kMaxPodJsonBytes; real pods are a few KB, those
  // with big managedFields tens of KB) goes to nlohmann's filter, which keeps nothing.
  if (text.size() > kMaxBytes) return std::nullopt;
  thread_local dom::parser parser;
  dom::element root;
  if (parser.parse(text.data(), text.size()).get(root) != simdjson::SUCCESS) return std::nullopt;
  json out;
  const bool kept = KeepObject(root, false, out, [](std::string_view key, dom::element value, json& pod) {
    if (key == "kind") return KeepLeaf(value, false, pod["kind"]);
    if (key == "metadata") {
      return KeepObject(value, true, pod["metadata"], [](std::string_view k, dom::element m, json& metadata) {
        if (k == "name" || k == "namespace" || k == "uid") return KeepLeaf(m, false, metadata[std::string(k)]);
        if (k == "labels" || k == "annotations") return KeepMap(m, false, metadata[std::string(k)]);
        return true;
      });
    }
    if (key == "spec") {
      return KeepObject(value, true, pod["spec"], [](std::string_view k, dom::element m, json& spec) {
        if (k == "overhead") return KeepMap(m, true, spec["overhead"]);
        return (k != "containers" && k != "initContainers") || KeepContainers(m, spec[std::string(k)]);
      });
    }
    return true;
  });
  if (!kept) return std::nullopt;
  return out;
}

}  // namespace request_keep

namespace {

// ---------------------------------------------------------------------------------------------
// Field readers. Every access checks the type first, so nothing below throws on bad input.

const json* Find(const json& object, std::string_view key) {
  const auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

// Optional members of a Pod (written by Go: a JSON null is absent), common/json_read.h's readers.
Status ReadOptionalString(const json& object, std::string_view key, const std::string& path, std::string* out) {
  return json_read::ReadString(object, key, path, json_read::Presence::kOptional, out, json_read::Null::kAbsent);
}
Result<const json*> ReadOptionalObject(const json& object, std::string_view key, const std::string& path) {
  return json_read::ReadObject(object, key, path, json_read::Presence::kOptional, json_read::Null::kAbsent);
}

// A label or annotation value; nullopt when absent.
Result<std::optional<std::string>> ReadStringEntry(const json* map, std::string_view key,
                                                   std::string_view kind) {
  if (map == nullptr) return std::optional<std::string>();
  const json* v = Find(*map, key);
  if (v == nullptr) return std::optional<std::string>();
  if (!v->is_string()) return Expected(std::string(kind) + " " + std::string(key), "a string", *v);
  return std::optional<std::string>(v->get_ref<const std::string&>());
}

// ---------------------------------------------------------------------------------------------
// Containers and the effective request.

// What one container asks of the resources we read, in the units we use (gpumem in MiB).
struct ContainerAsk {
  bool restartable_init = false;  // a sidecar: an init container with restartPolicy Always
  bool init = false;
  std::map<std::string, std::int64_t, std::less<>> amounts;
  std::int64_t cpu_milli = 0;  // its CPU request (else limit) in milli-cores; apart from the devices
};

bool IsRdmaResource(std::string_view name, const RequestConfig& config) {
  for (const std::string& r : config.rdma_resources) {
    if (r.empty()) continue;
    if (r.back() == '/' ? name.starts_with(r) : name == r) return true;
  }
  return false;
}

bool IsGpuResource(std::string_view name) {
  return name == kNvidiaGpu || name == kAmdGpu || name == kGpuMem || name == kGpuMemPercent ||
         name == kGpuCores;
}

// GPU names win over an RDMA pattern that happens to match them.
bool IsReadResource(std::string_view name, const RequestConfig& config) {
  return IsGpuResource(name) || IsRdmaResource(name, config);
}

// One container's CPU in milli-cores from its `resources`: the request, else the limit (the API
// server's defaulting), else 0. Only the packing score reads it.
Result<std::int64_t> ReadContainerCpu(const json& resources, const std::string& path) {
  for (std::string_view list : {"requests", "limits"}) {
    auto entries = ReadOptionalObject(resources, list, path + ".resources");
    if (!entries.ok()) return entries.error();
    if (*entries == nullptr) continue;
    const json* cpu = Find(**entries, "cpu");
    if (cpu == nullptr || cpu->is_null()) continue;
    auto milli = ReadMilliQuantity(*cpu, path + ".resources." + std::string(list) + ".cpu");
    if (!milli.ok()) return milli.error();
    return std::min(*milli, kSaturated);
  }
  return std::int64_t{0};
}

// Reads one container's requests and limits. A resource takes its request when there is one,
// else its limit: the API server's defaulting copies limits into absent requests, and extended
// resources are usually written as limits only. (HAMi reads limits first, but the API server
// requires requests == limits for extended resources when both are set, so the order does not
// matter for any pod that exists.)
Result<ContainerAsk> ReadContainer(const json& c, const std::string& path, const RequestConfig& config) {
  ContainerAsk ask;
  if (!c.is_object()) return Expected(path, "an object (a container)", c);
  std::string restart_policy;
  if (Status s = ReadOptionalString(c, "restartPolicy", path, &restart_policy); !s.ok()) {
    return s.error();
  }
  ask.restartable_init = restart_policy == "Always";
  auto resources = ReadOptionalObject(c, "resources", path);
  if (!resources.ok()) return resources.error();
  if (*resources == nullptr) return ask;
  auto cpu = ReadContainerCpu(**resources, path);
  if (!cpu.ok()) return cpu.error();
  ask.cpu_milli = *cpu;
  // Requests first, so that a limit fills in only what the requests leave out.
  for (std::string_view list : {"requests", "limits"}) {
    const std::string list_path = path + ".resources." + std::string(list);
    auto entries = ReadOptionalObject(**resources, list, path + ".resources");
    if (!entries.ok()) return entries.error();
    if (*entries == nullptr) continue;
    for (const auto& [name, value] : (*entries)->items()) {
      if (!IsReadResource(name, config) || ask.amounts.contains(name)) continue;
      const std::string value_path = list_path + "." + name;
      auto q = ReadQuantity(value, value_path);
      if (!q.ok()) return q.error();
      std::int64_t amount = q->value;
      if (name == kGpuMem && q->binary) {
        // HAMi reads gpumem as a plain number of MiB; "8Gi" would be 8 Gi MiB to it. The evident
        // intent of a binary suffix is bytes, so convert, and insist on whole MiB.
        constexpr std::int64_t kMib = std::int64_t{1} << 20;
        if (amount % kMib != 0) {
          return Error(value_path + ": " + Describe(value) + " is not a whole number of MiB");
        }
        amount /= kMib;
      }
      ask.amounts.emplace(name, std::min(amount, kSaturated));
    }
  }
  return ask;
}

std::int64_t AmountOf(const ContainerAsk& c, std::string_view name) {
  const auto it = c.amounts.find(name);
  return it == c.amounts.end() ? 0 : it->second;
}

// kube-scheduler's effective pod request for one resource (component-helpers
// resource.PodRequests): app containers and sidecars run together and add up; each plain init
// container runs alone beside the sidecars declared before it; the pod needs the larger.
// E.g. app 2 + sidecar 1, then init 3 after that sidecar: max(2 + 1, 3 + 1) = 4.
template <typename Amount>
std::int64_t EffectiveAmount(const std::vector<ContainerAsk>& containers, Amount amount) {
  std::int64_t running = 0;       // app containers and all sidecars
  std::int64_t sidecars = 0;      // sidecars declared so far, in init order
  std::int64_t init_peak = 0;
  for (const ContainerAsk& c : containers) {
    const std::int64_t v = amount(c);
    if (!c.init) {
      running = SaturatingAdd(running, v);
    } else if (c.restartable_init) {
      running = SaturatingAdd(running, v);
      sidecars = SaturatingAdd(sidecars, v);
      init_peak = std::max(init_peak, sidecars);
    } else {
      init_peak = std::max(init_peak, SaturatingAdd(v, sidecars));
    }
  }
  return std::max(running, init_peak);
}

std::int64_t EffectiveRequest(const std::vector<ContainerAsk>& containers, std::string_view name) {
  return EffectiveAmount(containers, [name](const ContainerAsk& c) { return AmountOf(c, name); });
}

bool Names(const ContainerAsk& c, std::string_view name) { return c.amounts.contains(name); }

// Whether a container's vGPUs are shared (HAMi): a memory limit, a memory share below 100%, or
// a compute share strictly between 0 and 100%. gpucores 100 alone is HAMi's "exclusive card",
// and gpumem-percentage 100 alone takes the card's memory: both are whole GPUs here. gpumem 0
// is HAMi's "no memory limit".
bool AsksSharedGpus(const ContainerAsk& c) {
  const std::int64_t cores = AmountOf(c, kGpuCores);
  return AmountOf(c, kNvidiaGpu) > 0 &&
         (AmountOf(c, kGpuMem) > 0 || (Names(c, kGpuMemPercent) && AmountOf(c, kGpuMemPercent) < 100) ||
          (cores > 0 && cores < 100));
}

// The per-vGPU shape of a shared pod. gpumem, gpumem-percentage and gpucores are per vGPU, not
// pod totals (two containers at 60% are two 60% vGPUs, not one of 120%), and HAMi sizes each
// container's vGPUs separately while this model has one shape per pod, so the shape is the most
// any container's vGPU may take:
// - memory: a container with GPUs but no memory limit gets HAMi's defaultMemory, 0 = the whole
//   card unless configured, so 100%, which covers every other container; else the largest
//   gpumem (gpumem wins over gpumem-percentage in a container that names both, as in HAMi);
//   else the largest percentage. A pod mixing gpumem in one container with a percentage below
//   100 in another is approximated by its gpumem.
// - cores: the largest asked; 0 means no compute limit, for which HAMi reserves nothing.
void FillSharedShape(const std::vector<ContainerAsk>& containers, SharedGpuRequest* shared) {
  std::int64_t memory_mib = 0, percent = 0, cores = 0;
  for (const ContainerAsk& c : containers) {
    if (AmountOf(c, kNvidiaGpu) == 0) continue;
    if (const std::int64_t m = AmountOf(c, kGpuMem); m > 0) {
      memory_mib = std::max(memory_mib, m);
    } else {
      percent = std::max(percent, Names(c, kGpuMemPercent) ? AmountOf(c, kGpuMemPercent) : std::int64_t{100});
    }
    cores = std::max(cores, AmountOf(c, kGpuCores));
  }
  if (percent == 100 || memory_mib == 0) {
    shared->memory_percent = static_cast<int>(percent);
  } else {
    shared->memory_mib = memory_mib;
  }
  shared->cores = cores * (kFullGpuCores / 100);
}

Status ReadContainerList(const json& spec, std::string_view key, bool init, const RequestConfig& config,
                         std::vector<ContainerAsk>* out) {
  const std::string path = "spec." + std::string(key);
  const json* list = Find(spec, key);
  if (list == nullptr || list->is_null()) return Status::Ok();
  if (!list->is_array()) return Expected(path, "an array", *list);
  for (std::size_t i = 0; i < list->size(); ++i) {
    const std::string item_path = path + "[" + std::to_string(i) + "]";
    auto ask = ReadContainer((*list)[i], item_path, config);
    if (!ask.ok()) return ask.error();
    ask->init = init;
    if (!init) ask->restartable_init = false;  // restartPolicy means "sidecar" only on init containers
    // Validate per-vGPU amounts where they are written, so the error names the container.
    const std::string resources_path = item_path + ".resources";
    if (const std::int64_t p = AmountOf(*ask, kGpuMemPercent); ask->amounts.contains(kGpuMemPercent) &&
                                                                (p < 1 || p > 100)) {
      return Error(resources_path + ": " + std::string(kGpuMemPercent) + " is " + std::to_string(p) +
                   "; a percentage of the card's memory is 1 to 100");
    }
    if (const std::int64_t p = AmountOf(*ask, kGpuCores); p > 100) {
      return Error(resources_path + ": " + std::string(kGpuCores) + " is " + std::to_string(p) +
                   "; a percentage of the card's cores is 0 to 100 (100 = the whole GPU)");
    }
    if (const std::int64_t m = AmountOf(*ask, kGpuMem); m > kMaxGpuMemoryMib) {
      return Error(resources_path + ": " + std::string(kGpuMem) + " is " + std::to_string(m) +
                   " MiB, more than any GPU has; the value is MiB per vGPU (a plain number, or "
                   "with a Mi/Gi suffix)");
    }
    // Without nvidia.com/gpu the kubelet never calls HAMi's device plugin for the container, so
    // a share placed for it would not be enforced: HAMi's admission webhook adds the count
    // (DefaultGPUNum) only to pods of HAMi's own scheduler. Refused, with the fix.
    if (!ask->amounts.contains(kNvidiaGpu) && !ask->amounts.contains(kAmdGpu) &&
        (ask->amounts.contains(kGpuMem) || ask->amounts.contains(kGpuMemPercent) ||
         ask->amounts.contains(kGpuCores))) {
      return Error(resources_path + ": asks " + std::string(kGpuMem) + ", " + std::string(kGpuMemPercent) + " or " +
                   std::string(kGpuCores) + " without " + std::string(kNvidiaGpu) +
                   ": the kubelet would never call HAMi's device plugin for it, so the share would not be "
                   "enforced (HAMi's webhook adds the count only to pods of HAMi's scheduler); add " +
                   std::string(kNvidiaGpu) + ": 1 (vGPUs of this size) to the container's limits");
    }
    out->push_back(std::move(*ask));
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// Annotations and labels.

// hami.io/gpu-scheduler-policy: one word or a comma chain ("binpack,numa"). binpack and spread
// set the GPU policy; numa asks for NUMA binding; topology-aware and mutex are HAMi strategies
// this scheduler subsumes (its placement is topology-aware already), so they are accepted and
// leave the default.
Status ReadGpuPolicy(std::string_view value, SharedGpuRequest* shared) {
  const std::string where = "annotation " + std::string(kGpuPolicyAnnotation) + ": ";
  std::optional<PackPolicy> policy;
  const std::vector<std::string> tokens = SplitList(value);
  if (tokens.empty()) return Error(where + Quote(value) + " is empty; use binpack or spread");
  for (const std::string& raw : tokens) {
    const std::string token = AsciiLower(raw);
    std::optional<PackPolicy> p;
    if (token == "binpack") {
      p = PackPolicy::kBinpack;
    } else if (token == "spread") {
      p = PackPolicy::kSpread;
    } else if (token == "numa") {
      shared->numa_bind = true;
    } else if (token != "topology-aware" && token != "mutex") {
      return Error(where + Quote(raw) + " is not a GPU policy; use binpack, spread, topology-aware, "
                   "mutex or numa, or a comma chain such as \"binpack,numa\"");
    }
    if (p && policy && *p != *policy) {
      return Error(where + Quote(value) + " names both binpack and spread; use one");
    }
    if (p) policy = p;
  }
  shared->gpu_policy = policy.value_or(PackPolicy::kDefault);
  return Status::Ok();
}

Result<PackPolicy> ReadNodePolicy(std::string_view value) {
  const std::string token = AsciiLower(TrimSpace(value));
  if (token == "binpack") return PackPolicy::kBinpack;
  if (token == "spread") return PackPolicy::kSpread;
  return Error("annotation " + std::string(kNodePolicyAnnotation) + ": " + Quote(value) +
               " is not a node policy; use binpack or spread");
}

Result<LinkClass> ReadAlignment(std::string_view value) {
  // nvidia-smi prints the classes in upper case; accept any case since nothing else could be meant.
  std::string upper(TrimSpace(value));
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  const std::optional<LinkClass> c = ParseLinkClass(upper);
  // X (a device to itself) and NV (GPU to GPU) are not classes a GPU->NIC path can have.
  if (!c || *c == LinkClass::kSelf || *c == LinkClass::kNV) {
    return Error("annotation " + std::string(kAlignmentAnnotation) + ": " + Quote(value) +
                 " is not a GPU-NIC link class; use one of PIX, PXB, PHB, NODE, SYS (best to worst)");
  }
  return *c;
}

// An integer annotation min..max, plain decimal digits (max is far below int64's range, so
// stopping once the value passes it rules out overflow).
Result<std::int64_t> ReadIntAnnotation(std::string_view key, std::string_view value, std::int64_t min,
                                       std::int64_t max) {
  const std::string_view t = TrimSpace(value);
  std::int64_t n = 0;
  bool ok = !t.empty();
  for (char c : t) {
    if (!std::isdigit(static_cast<unsigned char>(c)) || n > max) {
      ok = false;
      break;
    }
    n = n * 10 + (c - '0');
  }
  if (!ok || n < min || n > max) {
    return Error("annotation " + std::string(key) + ": " + Quote(value) + " is not a count; use an integer " +
                 std::to_string(min) + " to " + std::to_string(max));
  }
  return n;
}

// A device count written as an annotation: a plain integer 0..kMaxDevices.
Result<int> ReadCountAnnotation(std::string_view key, std::string_view value) {
  Result<std::int64_t> n = ReadIntAnnotation(key, value, 0, kMaxDevices);
  if (!n.ok()) return n.error();
  return static_cast<int>(*n);
}

Result<bool> ReadBoolAnnotation(std::string_view key, std::string_view value) {
  const std::string token = AsciiLower(TrimSpace(value));
  if (token == "true") return true;
  if (token == "false") return false;
  return Error("annotation " + std::string(key) + ": " + Quote(value) + " is not a boolean; use true or false");
}

// "P:D", two integers 1..kMaxPdRatioPart: the pool's Prefill:Decode instance ratio.
Status ReadPdRatio(std::string_view value, PlacementRequest* req) {
  const std::string_view t = TrimSpace(value);
  const std::size_t colon = t.find(':');
  auto part = [](std::string_view s, int* out) {
    s = TrimSpace(s);
    if (s.empty() || s.size() > 3) return false;
    int n = 0;
    for (char c : s) {
      if (!std::isdigit(static_cast<unsigned char>(c))) return false;
      n = n * 10 + (c - '0');
    }
    if (n < 1 || n > kMaxPdRatioPart) return false;
    *out = n;
    return true;
  };
  int p = 0, d = 0;
  if (colon == std::string_view::npos || !part(t.substr(0, colon), &p) || !part(t.substr(colon + 1), &d)) {
    return Error("annotation " + std::string(kPdRatioAnnotation) + ": " + Quote(value) +
                 " is not a Prefill:Decode ratio; write it as \"1:3\" (each side 1 to " +
                 std::to_string(kMaxPdRatioPart) + ")");
  }
  req->pd_ratio_prefill = p;
  req->pd_ratio_decode = d;
  return Status::Ok();
}

Status ReadMetadata(const json& doc, const RequestConfig& config, PlacementRequest* req,
                    std::vector<std::string>* rdma_annotation) {
  auto metadata = ReadOptionalObject(doc, "metadata", "");
  if (!metadata.ok()) return metadata.error();
  if (*metadata == nullptr) return Status::Ok();
  const json& m = **metadata;
  TOPOSCHED_RETURN_IF_ERROR(ReadOptionalString(m, "name", "metadata", &req->pod_name));
  TOPOSCHED_RETURN_IF_ERROR(ReadOptionalString(m, "namespace", "metadata", &req->pod_namespace));
  TOPOSCHED_RETURN_IF_ERROR(ReadOptionalString(m, "uid", "metadata", &req->pod_uid));
  auto labels = ReadOptionalObject(m, "labels", "metadata");
  if (!labels.ok()) return labels.error();
  auto annotations = ReadOptionalObject(m, "annotations", "metadata");
  if (!annotations.ok()) return annotations.error();

  // Labels.
  {
    auto role = ReadStringEntry(*labels, kRoleLabel, "label");
    if (!role.ok()) return role.error();
    if (*role) {
      if (const std::optional<PodRole> r = ParseLlmdRole(**role)) {
        req->role = *r;
      } else {
        req->warnings.push_back("label " + std::string(kRoleLabel) + ": " + Quote(**role) +
                                " is not a role llm-d knows (prefill, decode, prefill-decode, encode, "
                                "encode-prefill, encode-prefill-decode; both is deprecated): ignored, the pod is "
                                "placed as no Prefill/Decode role");
      }
    }
    auto pool = ReadStringEntry(*labels, config.pool_label, "label");
    if (!pool.ok()) return pool.error();
    if (*pool) req->pool = **pool;
  }

  // Annotations. Each one is read only when present and every error names it.
  auto get = [&](std::string_view key) { return ReadStringEntry(*annotations, key, "annotation"); };
  if (auto v = get(kAlignmentAnnotation); !v.ok()) {
    return v.error();
  } else if (*v) {
    auto c = ReadAlignment(**v);
    if (!c.ok()) return c.error();
    req->max_gpu_nic_class = *c;
  }
  if (auto v = get(kRdmaNicsAnnotation); !v.ok()) {
    return v.error();
  } else if (*v) {
    rdma_annotation->push_back(**v);
  }
  if (auto v = get(kGpuPolicyAnnotation); !v.ok()) {
    return v.error();
  } else if (*v) {
    TOPOSCHED_RETURN_IF_ERROR(ReadGpuPolicy(**v, &req->shared));
  }
  if (auto v = get(kNodePolicyAnnotation); !v.ok()) {
    return v.error();
  } else if (*v) {
    auto p = ReadNodePolicy(**v);
    if (!p.ok()) return p.error();
    req->node_policy = *p;
  }
  const std::pair<std::string_view, std::vector<std::string>*> lists[] = {
      {kUseTypeAnnotation, &req->shared.use_types},
      {kAvoidTypeAnnotation, &req->shared.avoid_types},
      {kUseUuidAnnotation, &req->shared.use_uuids},
      {kAvoidUuidAnnotation, &req->shared.avoid_uuids},
  };
  for (const auto& [key, out] : lists) {
    auto v = get(key);
    if (!v.ok()) return v.error();
    if (*v) *out = SplitList(**v);
  }
  if (auto v = get(kPdRatioAnnotation); !v.ok()) {
    return v.error();
  } else if (*v) {
    TOPOSCHED_RETURN_IF_ERROR(ReadPdRatio(**v, req));
  }
  if (auto v = get(kKvBytesPerTokenAnnotation); !v.ok()) {
    return v.error();
  } else if (*v) {
    auto n = ReadIntAnnotation(kKvBytesPerTokenAnnotation, **v, 1, kMaxKvBytesPerToken);
    if (!n.ok()) return n.error();
    req->kv_bytes_per_token = *n;
  }
  if (auto v = get(kPromptTokensAnnotation); !v.ok()) {
    return v.error();
  } else if (*v) {
    auto n = ReadIntAnnotation(kPromptTokensAnnotation, **v, 1, kMaxPromptTokens);
    if (!n.ok()) return n.error();
    req->prompt_tokens = static_cast<int>(*n);
  }
  if (auto v = get(kKvIpcAnnotation); !v.ok()) {
    return v.error();
  } else if (*v) {
    auto b = ReadBoolAnnotation(kKvIpcAnnotation, **v);
    if (!b.ok()) return b.error();
    req->kv_ipc = *b;
  }
  if (auto v = get(kNumaBindAnnotation); !v.ok()) {
    return v.error();
  } else if (*v) {
    auto b = ReadBoolAnnotation(kNumaBindAnnotation, **v);
    if (!b.ok()) return b.error();
    // Either way of asking binds: the annotation or the "numa" policy token.
    req->shared.numa_bind = req->shared.numa_bind || *b;
  }
  return Status::Ok();
}

// The pod's CPU (pod_cpu.h) from its containers as read and its spec's overhead.
Result<std::int64_t> PodCpu(const json& spec, const std::vector<ContainerAsk>& containers) {
  std::int64_t cpu = EffectiveAmount(containers, [](const ContainerAsk& c) { return c.cpu_milli; });
  auto overhead = ReadOptionalObject(spec, "overhead", "spec");
  if (!overhead.ok()) return overhead.error();
  if (*overhead != nullptr) {
    if (const json* v = Find(**overhead, "cpu"); v != nullptr && !v->is_null()) {
      auto milli = ReadMilliQuantity(*v, "spec.overhead.cpu");
      if (!milli.ok()) return milli.error();
      cpu = SaturatingAdd(cpu, std::min(*milli, kSaturated));
    }
  }
  return cpu;
}

Result<PlacementRequest> ReadPod(const json& doc, const RequestConfig& config) {
  if (!doc.is_object()) return Expected("top level", "a JSON object (a Pod)", doc);
  if (const json* kind = Find(doc, "kind"); kind != nullptr && !kind->is_null()) {
    if (!kind->is_string() || *kind != "Pod") return Expected("kind", "\"Pod\"", *kind);
  }
  PlacementRequest req;
  std::vector<std::string> rdma_annotation;
  TOPOSCHED_RETURN_IF_ERROR(ReadMetadata(doc, config, &req, &rdma_annotation));

  std::vector<ContainerAsk> containers;
  auto spec = ReadOptionalObject(doc, "spec", "");
  if (!spec.ok()) return spec.error();
  if (*spec != nullptr) {
    TOPOSCHED_RETURN_IF_ERROR(ReadContainerList(**spec, "initContainers", true, config, &containers));
    TOPOSCHED_RETURN_IF_ERROR(ReadContainerList(**spec, "containers", false, config, &containers));
    auto cpu = PodCpu(**spec, containers);
    if (!cpu.ok()) return cpu.error();
    req.cpu_milli = *cpu;
  }

  // Whole GPUs, by vendor.
  const std::int64_t nvidia = EffectiveRequest(containers, kNvidiaGpu);
  const std::int64_t amd = EffectiveRequest(containers, kAmdGpu);
  const bool names_hami = std::any_of(containers.begin(), containers.end(), [](const ContainerAsk& c) {
    return Names(c, kGpuMem) || Names(c, kGpuMemPercent) || Names(c, kGpuCores);
  });
  if (amd > 0 && names_hami) {
    return Error("the pod asks amd.com/gpu together with HAMi's nvidia.com/gpumem, "
                 "gpumem-percentage or gpucores, which share NVIDIA GPUs only; drop one");
  }
  if (nvidia > 0 && amd > 0) {
    return Error("the pod asks both nvidia.com/gpu (" + std::to_string(nvidia) + ") and amd.com/gpu (" +
                 std::to_string(amd) + "); a pod asks GPUs of one vendor");
  }
  const std::int64_t gpus = std::max(nvidia, amd);
  if (gpus > kMaxDevices) {
    return Error("the pod asks " + std::to_string(gpus) + " " + std::string(amd > 0 ? kAmdGpu : kNvidiaGpu) +
                 "; one node has at most " + std::to_string(kMaxDevices));
  }
  if (amd > 0) req.vendor = GpuVendor::kAmd;
  if (gpus > 0) {
    const std::string_view vendor_gpu = amd > 0 ? kAmdGpu : kNvidiaGpu;
    for (const ContainerAsk& c : containers) {
      const auto it = c.amounts.find(vendor_gpu);
      req.container_devices.push_back(
          it == c.amounts.end() ? 0 : static_cast<int>(std::min<std::int64_t>(it->second, kMaxDevices)));
      if (c.init) ++req.init_containers;
    }
  }

  // Shared or whole: one shape per pod, shared when any container's vGPUs are.
  if (gpus >= 1 && std::any_of(containers.begin(), containers.end(), AsksSharedGpus)) {
    req.shared.count = static_cast<int>(gpus);
    FillSharedShape(containers, &req.shared);
  } else {
    req.gpus = static_cast<int>(gpus);
  }

  // RDMA NICs: the per-name effective requests of every RDMA resource, summed, unless the
  // annotation says how many NICs to align. The annotation overrides rather than adds because
  // shared-device RDMA plugins (rdma/hca_shared_devices_a) grant every HCA for a count of 1, so
  // the resource count need not be the NIC count; the annotation is the pod's explicit word.
  if (!rdma_annotation.empty()) {
    auto n = ReadCountAnnotation(kRdmaNicsAnnotation, rdma_annotation.front());
    if (!n.ok()) return n.error();
    req.rdma_nics = *n;
  } else {
    std::set<std::string, std::less<>> names;
    for (const ContainerAsk& c : containers) {
      for (const auto& entry : c.amounts) {
        if (!IsGpuResource(entry.first)) names.insert(entry.first);
      }
    }
    std::int64_t nics = 0;
    for (const std::string& name : names) nics = SaturatingAdd(nics, EffectiveRequest(containers, name));
    if (nics > kMaxDevices) {
      return Error("the pod asks " + std::to_string(nics) + " RDMA NICs (resources matching the configured "
                   "RDMA names); one node has at most " + std::to_string(kMaxDevices) +
                   ". If the resource counts shared-device grants, set the annotation " +
                   std::string(kRdmaNicsAnnotation) + " to the number of NICs");
    }
    req.rdma_nics = static_cast<int>(nics);
  }
  return req;
}

Result<PlacementRequest> Parse(std::string_view text, const RequestConfig& config) {
  if (text.size() > kMaxPodJsonBytes) {
    return Error("pod JSON is " + std::to_string(text.size()) + " bytes, over the limit of " +
                 std::to_string(kMaxPodJsonBytes) + " bytes");
  }
  if (TrimSpace(text).empty()) return Error("not valid JSON: the pod document is empty");
  if (std::optional<json> kept = request_keep::BySimdjson(text)) return ReadPod(*kept, config);
  json doc;
  try {
    doc = request_keep::ByFilter(text);
  } catch (const json::parse_error& e) {
    return Error("not valid JSON (byte " + std::to_string(e.byte) + "): " + StripExceptionTag(e.what()));
  } catch (const json::exception& e) {
    return Error("not valid JSON: " + StripExceptionTag(e.what()));
  }
  return ReadPod(doc, config);
}


// Length-prefixed, so that no string can imitate a separator.
void AppendString(std::string* out, std::string_view s) {
  *out += std::to_string(s.size());
  *out += ':';
  *out += s;
}

void AppendList(std::string* out, const std::vector<std::string>& items) {
  *out += '[';
  for (const std::string& s : items) AppendString(out, s);
  *out += ']';
}

}  // namespace

std::optional<PodRole> ParseLlmdRole(std::string_view value) {
  if (value == "prefill" || value == "encode-prefill") return PodRole::kPrefill;
  if (value == "decode") return PodRole::kDecode;
  if (value == "prefill-decode" || value == "encode-prefill-decode" || value == "both") return PodRole::kBoth;
  if (value == "encode") return PodRole::kNone;
  return std::nullopt;
}

std::string_view ToString(PodRole r) {
  switch (r) {
    case PodRole::kNone: return "none";
    case PodRole::kPrefill: return "prefill";
    case PodRole::kDecode: return "decode";
    case PodRole::kBoth: return "both";
  }
  return "none";
}

std::string_view ToString(PackPolicy p) {
  switch (p) {
    case PackPolicy::kDefault: return "default";
    case PackPolicy::kBinpack: return "binpack";
    case PackPolicy::kSpread: return "spread";
  }
  return "default";
}

std::string PlacementRequest::ShapeKey() const {
  // Every field the engine's choice depends on, in a fixed order; identity, role and pool are
  // left out so that pods of one shape share memoized placements.
  std::string key;
  key.reserve(96);
  key += "g=" + std::to_string(gpus);
  key += ";v=";
  key += ToString(vendor);
  key += ";n=" + std::to_string(rdma_nics);
  key += ";c=";
  key += max_gpu_nic_class ? ToString(*max_gpu_nic_class) : std::string_view("-");
  key += ";np=";
  key += ToString(node_policy);
  key += ";s=" + std::to_string(shared.count) + "," + std::to_string(shared.memory_mib) + "," +
         std::to_string(shared.memory_percent) + "," + std::to_string(shared.cores) + ",";
  key += ToString(shared.gpu_policy);
  key += shared.numa_bind ? ",numa" : ",-";
  key += ";ut=";
  AppendList(&key, shared.use_types);
  key += ";at=";
  AppendList(&key, shared.avoid_types);
  key += ";uu=";
  AppendList(&key, shared.use_uuids);
  key += ";au=";
  AppendList(&key, shared.avoid_uuids);
  return key;
}

Result<std::int64_t> PodCpuRequestMilli(const json& pod) {
  if (!pod.is_object()) return Expected("top level", "a JSON object (a Pod)", pod);
  auto spec = ReadOptionalObject(pod, "spec", "");
  if (!spec.ok()) return spec.error();
  if (*spec == nullptr) return std::int64_t{0};
  // Only what the CPU rule reads: each container's role and CPU (its devices are not checked here).
  std::vector<ContainerAsk> containers;
  for (const bool init : {true, false}) {
    const std::string key = init ? "initContainers" : "containers";
    const json* list = Find(**spec, key);
    if (list == nullptr || list->is_null()) continue;
    if (!list->is_array()) return Expected("spec." + key, "an array", *list);
    for (std::size_t i = 0; i < list->size(); ++i) {
      const std::string path = "spec." + key + "[" + std::to_string(i) + "]";
      const json& c = (*list)[i];
      if (!c.is_object()) return Expected(path, "an object (a container)", c);
      ContainerAsk ask;
      ask.init = init;
      std::string restart_policy;
      if (Status st = ReadOptionalString(c, "restartPolicy", path, &restart_policy); !st.ok()) return st.error();
      ask.restartable_init = init && restart_policy == "Always";
      auto resources = ReadOptionalObject(c, "resources", path);
      if (!resources.ok()) return resources.error();
      if (*resources != nullptr) {
        auto cpu = ReadContainerCpu(**resources, path);
        if (!cpu.ok()) return cpu.error();
        ask.cpu_milli = *cpu;
      }
      containers.push_back(std::move(ask));
    }
  }
  return PodCpu(**spec, containers);
}

Result<PlacementRequest> ParsePodRequest(std::string_view pod_json, const RequestConfig& config) {
  // The readers check types before every access, so nothing should throw; this is the backstop
  // that keeps the no-exceptions promise (e.g. for std::bad_alloc).
  try {
    return Parse(pod_json, config);
  } catch (const std::exception& e) {
    return Error(std::string("cannot read the pod: ") + e.what());
  }
}

bool AnnotationIsTrue(std::string_view value) { return AsciiLower(TrimSpace(value)) == "true"; }

}  // namespace toposched
