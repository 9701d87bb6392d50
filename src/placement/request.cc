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
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

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
    if (!std::isfinite(d) || d != std::floor(d))
      return Error(path + ": " + v.dump() + " is not a whole number");
    if (d > static_cast<double>(kSaturated)) return Error(path + ": " + v.dump() + " is too large");
    return Quantity{static_cast<std::int64_t>(d), false};
  }
  return Expected(path, "a quantity (a string such as \"1\", or a number)", v);
}

// A CPU quantity in milli-cores, rounded up (apimachinery's MilliValue): "500m", "2", 0.5.
Result<std::int64_t> ReadMilliQuantity(const json& v, const std::string& path) {
  if (v.is_string()) {
    auto parsed = ParseMilliQuantity(v.get_ref<const std::string&>());
    if (auto* reason = std::get_if<std::string>(&parsed))
      return Error(path + ": " + Describe(v) + " " + *reason);
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
// Field readers. Every access checks the type first, so nothing below throws on bad input.

const json* Find(const json& object, std::string_view key) {
  const auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

// Optional members of a Pod (written by Go: a JSON null is absent), common/json_read.h's readers.
Status ReadOptionalString(const json& object, std::string_view key, const std::string& path,
                          std::string* out) {
  return json_read::ReadString(object, key, path, json_read::Presence::kOptional, out,
                               json_read::Null::kAbsent);
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
    TOPOSCHED_ASSIGN_OR_RETURN(const json* entries, ReadOptionalObject(resources, list, path + ".resources"));
    if (entries == nullptr) continue;
    const json* cpu = Find(*entries, "cpu");
    if (cpu == nullptr || cpu->is_null()) continue;
    TOPOSCHED_ASSIGN_OR_RETURN(const std::int64_t milli,
                               ReadMilliQuantity(*cpu, path + ".resources." + std::string(list) + ".cpu"));
    return std::min(milli, kSaturated);
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
  TOPOSCHED_RETURN_IF_ERROR(ReadOptionalString(c, "restartPolicy", path, &restart_policy));
  ask.restartable_init = restart_policy == "Always";
  TOPOSCHED_ASSIGN_OR_RETURN(const json* resources, ReadOptionalObject(c, "resources", path));
  if (resources == nullptr) return ask;
  TOPOSCHED_ASSIGN_OR_RETURN(ask.cpu_milli, ReadContainerCpu(*resources, path));
  // Requests first, so that a limit fills in only what the requests leave out.
  for (std::string_view list : {"requests", "limits"}) {
    const std::string list_path = path + ".resources." + std::string(list);
    TOPOSCHED_ASSIGN_OR_RETURN(const json* entries,
                               ReadOptionalObject(*resources, list, path + ".resources"));
    if (entries == nullptr) continue;
    for (const auto& [name, value] : entries->items()) {
      if (!IsReadResource(name, config) || ask.amounts.contains(name)) continue;
      const std::string value_path = list_path + "." + name;
      TOPOSCHED_ASSIGN_OR_RETURN(const Quantity q, ReadQuantity(value, value_path));
      std::int64_t amount = q.value;
      if (name == kGpuMem && q.binary) {
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
  std::int64_t running = 0;   // app containers and all sidecars
  std::int64_t sidecars = 0;  // sidecars declared so far, in init order
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

bool Names(const ContainerAsk& c, std::string_view name) {
  return c.amounts.contains(name);
}

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
    TOPOSCHED_ASSIGN_OR_RETURN(ContainerAsk ask, ReadContainer((*list)[i], item_path, config));
    ask.init = init;
    if (!init) ask.restartable_init = false;  // restartPolicy means "sidecar" only on init containers
    // Validate per-vGPU amounts where they are written, so the error names the container.
    const std::string resources_path = item_path + ".resources";
    if (const std::int64_t p = AmountOf(ask, kGpuMemPercent);
        ask.amounts.contains(kGpuMemPercent) && (p < 1 || p > 100)) {
      return Error(resources_path + ": " + std::string(kGpuMemPercent) + " is " + std::to_string(p) +
                   "; a percentage of the card's memory is 1 to 100");
    }
    if (const std::int64_t p = AmountOf(ask, kGpuCores); p > 100) {
      return Error(resources_path + ": " + std::string(kGpuCores) + " is " + std::to_string(p) +
                   "; a percentage of the card's cores is 0 to 100 (100 = the whole GPU)");
    }
    if (const std::int64_t m = AmountOf(ask, kGpuMem); m > kMaxGpuMemoryMib) {
      return Error(resources_path + ": " + std::string(kGpuMem) + " is " + std::to_string(m) +
                   " MiB, more than any GPU has; the value is MiB per vGPU (a plain number, or "
                   "with a Mi/Gi suffix)");
    }
    // Without nvidia.com/gpu the kubelet never calls HAMi's device plugin for the container, so
    // a share placed for it would not be enforced: HAMi's admission webhook adds the count
    // (DefaultGPUNum) only to pods of HAMi's own scheduler. Refused, with the fix.
    if (!ask.amounts.contains(kNvidiaGpu) && !ask.amounts.contains(kAmdGpu) &&
        (ask.amounts.contains(kGpuMem) || ask.amounts.contains(kGpuMemPercent) ||
         ask.amounts.contains(kGpuCores))) {
      return Error(resources_path + ": asks " + std::string(kGpuMem) + ", " + std::string(kGpuMemPercent) +
                   " or " + std::string(kGpuCores) + " without " + std::string(kNvidiaGpu) +
                   ": the kubelet would never call HAMi's device plugin for it, so the share would not be "
                   "enforced (HAMi's webhook adds the count only to pods of HAMi's scheduler); add " +
                   std::string(kNvidiaGpu) + ": 1 (vGPUs of this size) to the container's limits");
    }
    out->push_back(std::move(ask));
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
      return Error(where + Quote(raw) +
                   " is not a GPU policy; use binpack, spread, topology-aware, "
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
  TOPOSCHED_ASSIGN_OR_RETURN(const std::int64_t n, ReadIntAnnotation(key, value, 0, kMaxDevices));
  return static_cast<int>(n);
}

Result<bool> ReadBoolAnnotation(std::string_view key, std::string_view value) {
  const std::string token = AsciiLower(TrimSpace(value));
  if (token == "true") return true;
  if (token == "false") return false;
  return Error("annotation " + std::string(key) + ": " + Quote(value) +
               " is not a boolean; use true or false");
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

// Where a label or annotation goes: the request, or for toposched.io/rdma-nics its text, which
// ReadPod reads once the containers are known (it overrides their RDMA resources).
struct MetadataOut {
  PlacementRequest* req;
  std::vector<std::string>* rdma_annotation;
};

// One label or annotation the request reads: its key and what its value (a string) sets.
struct MetadataField {
  std::string_view key;
  Status (*set)(std::string_view value, MetadataOut out);
};

Status SetRole(std::string_view value, MetadataOut out) {
  if (const std::optional<PodRole> r = ParseLlmdRole(value)) {
    out.req->role = *r;
  } else {
    out.req->warnings.push_back(
        "label " + std::string(kRoleLabel) + ": " + Quote(value) +
        " is not a role llm-d knows (prefill, decode, prefill-decode, encode, "
        "encode-prefill, encode-prefill-decode; both is deprecated): ignored, the pod is "
        "placed as no Prefill/Decode role");
  }
  return Status::Ok();
}

Status SetPool(std::string_view value, MetadataOut out) {
  out.req->pool = std::string(value);
  return Status::Ok();
}

// A comma-list annotation (HAMi's GPU type and UUID filters) into `list` of the shared request.
template <std::vector<std::string> SharedGpuRequest::*list>
Status SetList(std::string_view value, MetadataOut out) {
  out.req->shared.*list = SplitList(value);
  return Status::Ok();
}

// The annotations, read in this order (the first error is the one reported); each is read only
// when present and every error names it.
constexpr MetadataField kAnnotationFields[] = {
    {kAlignmentAnnotation,
     [](std::string_view v, MetadataOut out) -> Status {
       TOPOSCHED_ASSIGN_OR_RETURN(out.req->max_gpu_nic_class, ReadAlignment(v));
       return Status::Ok();
     }},
    {kRdmaNicsAnnotation,
     [](std::string_view v, MetadataOut out) {
       out.rdma_annotation->emplace_back(v);
       return Status::Ok();
     }},
    {kGpuPolicyAnnotation,
     [](std::string_view v, MetadataOut out) { return ReadGpuPolicy(v, &out.req->shared); }},
    {kNodePolicyAnnotation,
     [](std::string_view v, MetadataOut out) -> Status {
       TOPOSCHED_ASSIGN_OR_RETURN(out.req->node_policy, ReadNodePolicy(v));
       return Status::Ok();
     }},
    {kUseTypeAnnotation, SetList<&SharedGpuRequest::use_types>},
    {kAvoidTypeAnnotation, SetList<&SharedGpuRequest::avoid_types>},
    {kUseUuidAnnotation, SetList<&SharedGpuRequest::use_uuids>},
    {kAvoidUuidAnnotation, SetList<&SharedGpuRequest::avoid_uuids>},
    {kPdRatioAnnotation, [](std::string_view v, MetadataOut out) { return ReadPdRatio(v, out.req); }},
    {kKvBytesPerTokenAnnotation,
     [](std::string_view v, MetadataOut out) -> Status {
       TOPOSCHED_ASSIGN_OR_RETURN(out.req->kv_bytes_per_token,
                                  ReadIntAnnotation(kKvBytesPerTokenAnnotation, v, 1, kMaxKvBytesPerToken));
       return Status::Ok();
     }},
    {kPromptTokensAnnotation,
     [](std::string_view v, MetadataOut out) -> Status {
       TOPOSCHED_ASSIGN_OR_RETURN(const std::int64_t n,
                                  ReadIntAnnotation(kPromptTokensAnnotation, v, 1, kMaxPromptTokens));
       out.req->prompt_tokens = static_cast<int>(n);
       return Status::Ok();
     }},
    {kKvIpcAnnotation,
     [](std::string_view v, MetadataOut out) -> Status {
       TOPOSCHED_ASSIGN_OR_RETURN(out.req->kv_ipc, ReadBoolAnnotation(kKvIpcAnnotation, v));
       return Status::Ok();
     }},
    {kNumaBindAnnotation,
     [](std::string_view v, MetadataOut out) -> Status {
       TOPOSCHED_ASSIGN_OR_RETURN(const bool bind, ReadBoolAnnotation(kNumaBindAnnotation, v));
       // Either way of asking binds: the annotation or the "numa" policy token.
       out.req->shared.numa_bind = out.req->shared.numa_bind || bind;
       return Status::Ok();
     }},
};

// Applies each field of `fields` present in `map` (labels or annotations; null when absent).
// `kind` ("label", "annotation") names the entry in errors.
Status ReadFields(const json* map, std::string_view kind, std::span<const MetadataField> fields,
                  MetadataOut out) {
  for (const MetadataField& field : fields) {
    TOPOSCHED_ASSIGN_OR_RETURN(const std::optional<std::string> value, ReadStringEntry(map, field.key, kind));
    if (value) TOPOSCHED_RETURN_IF_ERROR(field.set(*value, out));
  }
  return Status::Ok();
}

Status ReadMetadata(const json& doc, const RequestConfig& config, PlacementRequest* req,
                    std::vector<std::string>* rdma_annotation) {
  TOPOSCHED_ASSIGN_OR_RETURN(const json* metadata, ReadOptionalObject(doc, "metadata", ""));
  if (metadata == nullptr) return Status::Ok();
  const json& m = *metadata;
  TOPOSCHED_RETURN_IF_ERROR(ReadOptionalString(m, "name", "metadata", &req->pod_name));
  TOPOSCHED_RETURN_IF_ERROR(ReadOptionalString(m, "namespace", "metadata", &req->pod_namespace));
  TOPOSCHED_RETURN_IF_ERROR(ReadOptionalString(m, "uid", "metadata", &req->pod_uid));
  TOPOSCHED_ASSIGN_OR_RETURN(const json* labels, ReadOptionalObject(m, "labels", "metadata"));
  TOPOSCHED_ASSIGN_OR_RETURN(const json* annotations, ReadOptionalObject(m, "annotations", "metadata"));
  const MetadataOut out{req, rdma_annotation};
  const MetadataField label_fields[] = {{kRoleLabel, SetRole}, {config.pool_label, SetPool}};
  TOPOSCHED_RETURN_IF_ERROR(ReadFields(labels, "label", label_fields, out));
  return ReadFields(annotations, "annotation", kAnnotationFields, out);
}

// The pod's CPU (pod_cpu.h) from its containers as read and its spec's overhead.
Result<std::int64_t> PodCpu(const json& spec, const std::vector<ContainerAsk>& containers) {
  std::int64_t cpu = EffectiveAmount(containers, [](const ContainerAsk& c) { return c.cpu_milli; });
  TOPOSCHED_ASSIGN_OR_RETURN(const json* overhead, ReadOptionalObject(spec, "overhead", "spec"));
  if (overhead != nullptr) {
    if (const json* v = Find(*overhead, "cpu"); v != nullptr && !v->is_null()) {
      TOPOSCHED_ASSIGN_OR_RETURN(const std::int64_t milli, ReadMilliQuantity(*v, "spec.overhead.cpu"));
      cpu = SaturatingAdd(cpu, std::min(milli, kSaturated));
    }
  }
  return cpu;
}

// spec.resourceClaims: at most kMaxPodResourceClaims entries, each with a name and exactly one of
// resourceClaimName and resourceClaimTemplateName (the API server's validation).
constexpr std::size_t kMaxPodResourceClaims = 128;
Status ReadResourceClaims(const json& spec, std::vector<PlacementRequest::ClaimRef>* out) {
  const json* claims = Find(spec, "resourceClaims");
  if (claims == nullptr || claims->is_null()) return Status::Ok();
  if (!claims->is_array()) return Expected("spec.resourceClaims", "an array", *claims);
  if (claims->size() > kMaxPodResourceClaims) {
    return Error("spec.resourceClaims: " + std::to_string(claims->size()) + " entries, more than " +
                 std::to_string(kMaxPodResourceClaims));
  }
  for (std::size_t i = 0; i < claims->size(); ++i) {
    const json& c = (*claims)[i];
    const std::string path = "spec.resourceClaims[" + std::to_string(i) + "]";
    if (!c.is_object()) return Expected(path, "an object", c);
    PlacementRequest::ClaimRef ref;
    TOPOSCHED_RETURN_IF_ERROR(ReadOptionalString(c, "name", path, &ref.name));
    TOPOSCHED_RETURN_IF_ERROR(ReadOptionalString(c, "resourceClaimName", path, &ref.claim_name));
    TOPOSCHED_RETURN_IF_ERROR(ReadOptionalString(c, "resourceClaimTemplateName", path, &ref.template_name));
    if (ref.name.empty()) return Error(path + ".name: missing");
    if (ref.claim_name.empty() == ref.template_name.empty()) {
      return Error(path + ": names both or neither of resourceClaimName and resourceClaimTemplateName");
    }
    out->push_back(std::move(ref));
  }
  return Status::Ok();
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
  TOPOSCHED_ASSIGN_OR_RETURN(const json* spec, ReadOptionalObject(doc, "spec", ""));
  if (spec != nullptr) {
    TOPOSCHED_RETURN_IF_ERROR(ReadContainerList(*spec, "initContainers", true, config, &containers));
    TOPOSCHED_RETURN_IF_ERROR(ReadContainerList(*spec, "containers", false, config, &containers));
    TOPOSCHED_ASSIGN_OR_RETURN(req.cpu_milli, PodCpu(*spec, containers));
    TOPOSCHED_RETURN_IF_ERROR(ReadResourceClaims(*spec, &req.resource_claims));
  }

  // Whole GPUs, by vendor.
  const std::int64_t nvidia = EffectiveRequest(containers, kNvidiaGpu);
  const std::int64_t amd = EffectiveRequest(containers, kAmdGpu);
  const bool names_hami = std::any_of(containers.begin(), containers.end(), [](const ContainerAsk& c) {
    return Names(c, kGpuMem) || Names(c, kGpuMemPercent) || Names(c, kGpuCores);
  });
  if (amd > 0 && names_hami) {
    return Error(
        "the pod asks amd.com/gpu together with HAMi's nvidia.com/gpumem, "
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
    TOPOSCHED_ASSIGN_OR_RETURN(req.rdma_nics,
                               ReadCountAnnotation(kRdmaNicsAnnotation, rdma_annotation.front()));
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
      return Error("the pod asks " + std::to_string(nics) +
                   " RDMA NICs (resources matching the configured "
                   "RDMA names); one node has at most " +
                   std::to_string(kMaxDevices) +
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

}  // namespace

Result<std::int64_t> PodCpuRequestMilli(const json& pod) {
  if (!pod.is_object()) return Expected("top level", "a JSON object (a Pod)", pod);
  TOPOSCHED_ASSIGN_OR_RETURN(const json* spec, ReadOptionalObject(pod, "spec", ""));
  if (spec == nullptr) return std::int64_t{0};
  // Only what the CPU rule reads: each container's role and CPU (its devices are not checked here).
  std::vector<ContainerAsk> containers;
  for (const bool init : {true, false}) {
    const std::string key = init ? "initContainers" : "containers";
    const json* list = Find(*spec, key);
    if (list == nullptr || list->is_null()) continue;
    if (!list->is_array()) return Expected("spec." + key, "an array", *list);
    for (std::size_t i = 0; i < list->size(); ++i) {
      const std::string path = "spec." + key + "[" + std::to_string(i) + "]";
      const json& c = (*list)[i];
      if (!c.is_object()) return Expected(path, "an object (a container)", c);
      ContainerAsk ask;
      ask.init = init;
      std::string restart_policy;
      TOPOSCHED_RETURN_IF_ERROR(ReadOptionalString(c, "restartPolicy", path, &restart_policy));
      ask.restartable_init = init && restart_policy == "Always";
      TOPOSCHED_ASSIGN_OR_RETURN(const json* resources, ReadOptionalObject(c, "resources", path));
      if (resources != nullptr) {
        TOPOSCHED_ASSIGN_OR_RETURN(ask.cpu_milli, ReadContainerCpu(*resources, path));
      }
      containers.push_back(std::move(ask));
    }
  }
  return PodCpu(*spec, containers);
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

}  // namespace toposched
