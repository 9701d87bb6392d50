// Workloads: the LLM serving mix generator and the workload file reader.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "../common/json_errors.h"
#include "simulate_internal.h"
#include "toposched/common/file.h"
#include "toposched/pd/network.h"
#include "toposched/simulate/simulator.h"

namespace toposched::simulate {
namespace {

using nlohmann::json;

// Draws built from raw mt19937 output only: the standard fixes mt19937's sequence but not what
// uniform_real_distribution and friends make of it, and a seed must mean the same workload on
// every toolchain.
class Draw {
 public:
  explicit Draw(std::uint32_t seed) : rng_(seed) {}
  // Uniform in [0, 1) with 53 random bits.
  double Unit() {
    const std::uint64_t hi = rng_() >> 5;  // 27 bits
    const std::uint64_t lo = rng_() >> 6;  // 26 bits
    return static_cast<double>((hi << 26) | lo) * (1.0 / 9007199254740992.0);
  }
  // Uniform integer in [lo, hi].
  std::int64_t Between(std::int64_t lo, std::int64_t hi) {
    const auto span = static_cast<double>(hi - lo + 1);
    return lo + std::min(static_cast<std::int64_t>(Unit() * span), hi - lo);
  }
  double Exponential(double mean) { return -mean * std::log1p(-Unit()); }

 private:
  std::mt19937 rng_;
};

// The share of prefill among P/D pods: the pools' mean target share (a pod picks its pool
// uniformly, then its role), or the weights' split without pools.
double PrefillShareOfPd(const WorkloadSpec& s, const std::vector<PdPool>& pools) {
  if (!pools.empty()) {
    double sum = 0;
    for (const PdPool& p : pools) sum += p.PrefillShare();
    return sum / static_cast<double>(pools.size());
  }
  const double pd = std::max(s.prefill_weight, 0.0) + std::max(s.decode_weight, 0.0);
  return pd > 0 ? std::max(s.prefill_weight, 0.0) / pd : 0.0;
}

// Expected GPUs a pod of the mix asks for with RDMA NICs (prefill 3 on average, decode 1.5,
// training 8), per pod of the whole mix.
double NicGpusPerPod(const WorkloadSpec& s) {
  const double pd = std::max(s.prefill_weight, 0.0) + std::max(s.decode_weight, 0.0);
  const double total = pd + std::max(s.training_weight, 0.0) + std::max(s.shared_weight, 0.0);
  if (total <= 0) return 0;
  const double prefill = PrefillShareOfPd(s, GeneratorPools(s.pd_pools));
  return (pd * (prefill * 3.0 + (1 - prefill) * 1.5) + std::max(s.training_weight, 0.0) * 8.0) / total;
}

std::string PodName(std::string_view kind, int i) {
  return std::string(kind) + "-" + std::to_string(i);
}

std::string DeriveKind(const PlacementRequest& r) {
  if (r.role == PodRole::kPrefill) return std::string(kKindPrefill);
  if (r.role == PodRole::kDecode) return std::string(kKindDecode);
  if (r.IsShared()) return std::string(kKindShared);
  if (r.gpus >= 8) return std::string(kKindTraining);
  return std::string(kKindOther);
}

}  // namespace

std::vector<PdPool> GeneratorPools(int count) {
  // Prompt lengths and ratios cycle with periods (4 and 3) prime to each other and to the six
  // model presets, so the eight default pools are eight different combinations.
  constexpr int kPromptTokens[] = {4096, 2048, 8192, 1024};
  constexpr int kRatios[][2] = {{1, 1}, {1, 2}, {1, 3}};
  const std::vector<pd::ModelSpec>& models = pd::ModelPresets();
  std::vector<PdPool> pools;
  for (int i = 0; i < count && !models.empty(); ++i) {
    const pd::ModelSpec& model = models[static_cast<std::size_t>(i) % models.size()];
    PdPool pool;
    pool.name = "llm-" + std::to_string(i);
    pool.model = model.name;
    pool.kv_bytes_per_token = pd::KvBytesPerToken(model);
    pool.prompt_tokens = kPromptTokens[static_cast<std::size_t>(i) % std::size(kPromptTokens)];
    pool.ratio_prefill = kRatios[static_cast<std::size_t>(i) % std::size(kRatios)][0];
    pool.ratio_decode = kRatios[static_cast<std::size_t>(i) % std::size(kRatios)][1];
    pools.push_back(std::move(pool));
  }
  return pools;
}

WorkloadSpec DefaultWorkloadSpec(const VirtualCluster& cluster, int pods, std::uint32_t seed) {
  WorkloadSpec spec;
  spec.pods = std::max(pods, 0);
  spec.seed = seed;
  // Capacity the NIC-carrying pods compete for: GPUs of nodes with RDMA NICs (all GPUs when
  // no node has any, so a shared-GPU-only cluster still gets a sensible pace).
  int nic_gpus = 0, all_gpus = 0;
  for (const VirtualNode& n : cluster.nodes) {
    const int g = static_cast<int>(n.topology->gpus.size());
    all_gpus += g;
    if (n.topology->RdmaNicCount() > 0) nic_gpus += g;
  }
  const double capacity = std::max(nic_gpus > 0 ? nic_gpus : all_gpus, 1);
  // Little's law: pods in the system = arrival rate x mean duration; each asks NicGpusPerPod.
  const double pods_in_system = capacity / NicGpusPerPod(spec);
  spec.mean_interarrival_s = spec.mean_duration_s / pods_in_system;
  spec.load_start = kDefaultLoadStart;
  spec.load_peak = kDefaultLoadPeak;
  return spec;
}

Workload GenerateWorkload(const WorkloadSpec& spec) {
  Workload w;
  Draw draw(spec.seed);
  const std::vector<PdPool> pools = GeneratorPools(spec.pd_pools);
  // Prefill and decode share one bucket: the pool decides the role.
  const double pd_weight = std::max(spec.prefill_weight, 0.0) + std::max(spec.decode_weight, 0.0);
  const double weights[] = {pd_weight, std::max(spec.training_weight, 0.0),
                            std::max(spec.shared_weight, 0.0)};
  const double total = weights[0] + weights[1] + weights[2];
  const double unpooled_prefill_share = PrefillShareOfPd(spec, {});
  double t = 0;
  constexpr double kPi = 3.14159265358979323846;
  for (int i = 0; i < spec.pods; ++i) {
    const double x = spec.pods > 1 ? static_cast<double>(i) / (spec.pods - 1) : 0.0;
    const double load =
        std::max(spec.load_start + (spec.load_peak - spec.load_start) * std::sin(kPi * x), 0.01);
    t += draw.Exponential(spec.mean_interarrival_s / load);
    double pick = draw.Unit() * total;
    int kind = 0;
    while (kind < 2 && pick >= weights[kind]) pick -= weights[kind++];
    WorkloadPod pod;
    pod.arrival_s = t;
    pod.duration_s = std::max(draw.Exponential(spec.mean_duration_s), 1.0);
    PlacementRequest& r = pod.request;
    r.pod_namespace = "default";
    switch (kind) {
      case 0: {
        // Two draws per P/D pod, as many as before pools existed, so arrivals and the other
        // kinds of a seed stayed what they were: the pool, then one draw that decides the
        // role (below the pool's Prefill share: prefill) and, rescaled within the role's part
        // of [0, 1) where it is again uniform, the size.
        const double pool_draw = draw.Unit();
        const double role_draw = draw.Unit();
        const PdPool* pool = nullptr;
        double prefill_share = unpooled_prefill_share;
        if (!pools.empty()) {
          const auto k = std::min(static_cast<std::size_t>(pool_draw * static_cast<double>(pools.size())),
                                  pools.size() - 1);
          pool = &pools[k];
          prefill_share = pool->PrefillShare();
        }
        const bool prefill = role_draw < prefill_share;
        const double size_draw =
            prefill ? role_draw / prefill_share : (role_draw - prefill_share) / (1.0 - prefill_share);
        if (prefill) {  // a tensor-parallel group, one NIC per GPU for KV transfer and NCCL
          pod.kind = kKindPrefill;
          r.gpus = size_draw < 0.5 ? 2 : 4;
          r.rdma_nics = r.gpus;
          r.role = PodRole::kPrefill;
        } else {  // small, one NIC to receive the KV cache
          pod.kind = kKindDecode;
          r.gpus = size_draw < 0.6 ? 1 : 2;
          r.rdma_nics = 1;
          r.role = PodRole::kDecode;
        }
        if (pool != nullptr) {
          r.pool = pool->name;
          r.pd_ratio_prefill = pool->ratio_prefill;
          r.pd_ratio_decode = pool->ratio_decode;
          r.kv_bytes_per_token = pool->kv_bytes_per_token;
          r.prompt_tokens = pool->prompt_tokens;
        }
        break;
      }
      case 1:  // training or a large model: the whole node, every rail
        pod.kind = kKindTraining;
        r.gpus = 8;
        r.rdma_nics = 8;
        break;
      default:  // a small model on a slice of one GPU (HAMi)
        pod.kind = kKindShared;
        r.shared.count = 1;
        r.shared.memory_mib = draw.Between(8, 20) * 1000;
        r.shared.cores = draw.Between(20, 50) * (kFullGpuCores / 100);
        break;
    }
    pod.name = PodName(pod.kind, i);
    r.pod_name = pod.name;
    r.pod_uid = "sim-" + std::to_string(spec.seed) + "-" + std::to_string(i);
    w.pods.push_back(std::move(pod));
  }
  std::ostringstream d;
  d << spec.pods << " pods (LLM serving mix, seed " << spec.seed << "): prefill " << spec.prefill_weight
    << ", decode " << spec.decode_weight;
  if (!pools.empty()) {
    std::vector<std::string> ratios;
    for (const PdPool& p : pools) {
      std::string ratio = std::to_string(p.ratio_prefill) + ":" + std::to_string(p.ratio_decode);
      if (std::find(ratios.begin(), ratios.end(), ratio) == ratios.end()) ratios.push_back(std::move(ratio));
    }
    d << " (together, in " << pools.size() << " pools of P:D ";
    for (std::size_t k = 0; k < ratios.size(); ++k) d << (k > 0 ? ", " : "") << ratios[k];
    d << ")";
  }
  d << ", training " << spec.training_weight << ", shared " << spec.shared_weight << "; mean duration "
    << spec.mean_duration_s << " s; load factor " << spec.load_start;
  if (spec.load_peak != spec.load_start) d << " -> " << spec.load_peak << " -> " << spec.load_start;

  w.description = d.str();
  return w;
}

namespace {

Result<Workload> ParseWorkloadDocument(std::string_view text, const RequestConfig& config) {
  json doc = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Error("workload: not valid JSON");
  if (!doc.is_object())
    return Error("workload: expected an object with \"pods\", got " + json_errors::Describe(doc));
  for (const auto& [key, value] : doc.items()) {
    if (key != "pods") return Error("workload: unknown key \"" + key + "\" (only \"pods\")");
  }
  const auto pods = doc.find("pods");
  if (pods == doc.end() || !pods->is_array()) {
    return Error("workload: \"pods\" must be an array of {name, arrival, duration, kind, pod}");
  }
  Workload w;
  std::set<std::string> names;
  for (std::size_t i = 0; i < pods->size(); ++i) {
    const json& e = (*pods)[i];
    std::string where = "pods[" + std::to_string(i) + "]";
    if (!e.is_object()) return Error(where + ": expected an object, got " + json_errors::Describe(e));
    const auto name = e.find("name");
    if (name == e.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) {
      return Error(where + ": \"name\" must be a non-empty string");
    }
    WorkloadPod pod;
    pod.name = name->get<std::string>();
    where += " (\"" + pod.name + "\")";
    if (!names.insert(pod.name).second) return Error(where + ": duplicate name");
    for (const auto& [key, value] : e.items()) {
      if (key != "name" && key != "arrival" && key != "duration" && key != "kind" && key != "pod") {
        return Error(where + ": unknown key \"" + key + "\" (name, arrival, duration, kind, pod)");
      }
    }
    if (const auto a = e.find("arrival"); a != e.end()) {
      if (!a->is_number() || a->get<double>() < 0 || !std::isfinite(a->get<double>())) {
        return Error(where + ".arrival: expected seconds >= 0");
      }
      pod.arrival_s = a->get<double>();
    }
    if (const auto d = e.find("duration"); d != e.end()) {
      if (!d->is_number() || d->get<double>() < 0 || !std::isfinite(d->get<double>())) {
        return Error(where + ".duration: expected seconds >= 0 (0: never leaves)");
      }
      pod.duration_s = d->get<double>();
    }
    const auto p = e.find("pod");
    if (p == e.end() || !p->is_object()) return Error(where + ".pod: expected a Kubernetes Pod object");
    TOPOSCHED_ASSIGN_OR_RETURN_CTX(pod.request, ParsePodRequest(p->dump(), config), where + ".pod");
    if (pod.request.gpus == 0 && !pod.request.IsShared()) {
      return Error(where +
                   ".pod: asks for no GPU (nvidia.com/gpu, amd.com/gpu or a shared GPU); "
                   "the simulator only places GPU pods");
    }
    if (pod.request.pod_name.empty()) pod.request.pod_name = pod.name;
    if (pod.request.pod_uid.empty()) pod.request.pod_uid = "sim-" + std::to_string(i);
    if (const auto k = e.find("kind"); k != e.end()) {
      if (!k->is_string()) return Error(where + ".kind: expected a string");
      pod.kind = k->get<std::string>();
    } else {
      pod.kind = DeriveKind(pod.request);
    }
    w.pods.push_back(std::move(pod));
  }
  std::stable_sort(w.pods.begin(), w.pods.end(),
                   [](const WorkloadPod& a, const WorkloadPod& b) { return a.arrival_s < b.arrival_s; });
  w.description = std::to_string(w.pods.size()) + " pods from a workload file";
  return w;
}

}  // namespace

Result<Workload> ParseWorkloadJson(std::string_view text, const RequestConfig& config) {
  // The reader checks every type before it reads, so nothing should throw; this keeps the
  // no-exceptions promise for what cannot be checked (std::bad_alloc).
  try {
    return ParseWorkloadDocument(text, config);
  } catch (const std::exception& e) {
    return Error(std::string("workload: ") + e.what());
  }
}

Result<Workload> LoadWorkloadFile(const std::string& path, const RequestConfig& config) {
  TOPOSCHED_ASSIGN_OR_RETURN_CTX(const std::string content, ReadFileBounded(path, kMaxWorkloadFileBytes),
                                 path);
  TOPOSCHED_ASSIGN_OR_RETURN_CTX(Workload w, ParseWorkloadJson(content, config), path);
  w.description = std::to_string(w.pods.size()) + " pods from " + path;
  return w;
}

}  // namespace toposched::simulate
