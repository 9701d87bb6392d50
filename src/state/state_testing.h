#pragma once
// Builders, a fake persistence, a temporary directory and the store invariant, shared by the
// state tests (test-only header).

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "testing/framework_testing.h"
#include "toposched/framework/allocation.h"
#include "toposched/placement/request.h"
#include "toposched/state/cluster_state.h"

namespace toposched::state::testing {

using toposched::testing::PresetTopology;

inline NodeSpec PresetNode(std::string name, const std::string& preset,
                           std::map<std::string, std::string> labels = {}, bool schedulable = true) {
  NodeSpec spec;
  spec.name = std::move(name);
  spec.topology = PresetTopology(preset);
  spec.labels = std::move(labels);
  spec.schedulable = schedulable;
  return spec;
}

inline framework::AllocationDelta Whole(std::vector<int> gpus, std::vector<int> nics = {}) {
  framework::AllocationDelta d;
  d.exclusive_gpus = std::move(gpus);
  d.nics = std::move(nics);
  return d;
}

// One vGPU on `gpu` taking `memory_mib` and `cores`.
inline framework::AllocationDelta Share(int gpu, std::int64_t memory_mib, std::int64_t cores = 0) {
  framework::AllocationDelta d;
  d.shares.emplace_back(gpu, GpuShareUsage{1, memory_mib, cores});
  return d;
}

// A decision that takes `delta` whatever the record holds (the store must check it).
inline ClusterStore::Decide Take(framework::AllocationDelta delta, LinkClass worst = LinkClass::kPIX) {
  return [delta = std::move(delta), worst](const NodeRecord&) -> Result<PodAllocation> {
    PodAllocation a;
    a.pod_namespace = "default";
    a.pod_name = "pod";
    a.delta = delta;
    a.worst_class = worst;
    return a;
  };
}

inline PodAllocation Allocation(std::string uid, std::string node, framework::AllocationDelta delta) {
  PodAllocation a;
  a.uid = std::move(uid);
  a.pod_namespace = "default";
  a.pod_name = "pod-" + a.uid;
  a.node = std::move(node);
  a.delta = std::move(delta);
  a.topology_generation = 1;
  return a;
}

// Records what it is asked to persist; fails with `fail_with` when set.
class FakePersistence : public Persistence {
 public:
  Status RecordBind(const PodAllocation& a, const NodeRecord& /*node*/) override { return Record(a, binds_); }
  Status RecordRelease(const PodAllocation& a) override { return Record(a, releases_); }
  void FailWith(std::string message) {
    std::lock_guard lock(mu_);
    fail_with_ = std::move(message);
  }
  std::vector<PodAllocation> binds() const {
    std::lock_guard lock(mu_);
    return binds_;
  }
  std::vector<PodAllocation> releases() const {
    std::lock_guard lock(mu_);
    return releases_;
  }

 private:
  Status Record(const PodAllocation& a, std::vector<PodAllocation>& into) {
    std::lock_guard lock(mu_);
    if (!fail_with_.empty()) return Error(fail_with_);
    into.push_back(a);
    return Status::Ok();
  }
  mutable std::mutex mu_;
  std::string fail_with_;
  std::vector<PodAllocation> binds_, releases_;
};

// The published invariant of one record, checked independently of the store's own code: empty
// when it holds, else what is wrong.
inline std::string RecordViolation(const NodeRecord& r, int max_shares_per_gpu) {
  std::ostringstream out;
  const NodeAllocation& a = r.allocated;
  const std::size_t gpus = r.topology ? r.topology->gpus.size() : 0;
  const std::size_t nics = r.topology ? r.topology->nics.size() : 0;
  for (std::size_t g = 0; g < std::max(a.gpu_exclusive.size(), a.gpu_shares.size()); ++g) {
    const bool whole = g < a.gpu_exclusive.size() && a.gpu_exclusive[g];
    const GpuShareUsage u = g < a.gpu_shares.size() ? a.gpu_shares[g] : GpuShareUsage{};
    if (!whole && u == GpuShareUsage{}) continue;
    if (g >= gpus) out << r.name << ": GPU" << g << " allocated beyond the topology; ";
    if (whole && u.shares != 0) out << r.name << ": GPU" << g << " whole and shared; ";
    if (u.shares < 0 || u.shares > max_shares_per_gpu)
      out << r.name << ": GPU" << g << " has " << u.shares << " shares; ";
    if (u.cores < 0 || u.cores > kFullGpuCores)
      out << r.name << ": GPU" << g << " has " << u.cores << " cores; ";
    if (g < gpus && r.topology->gpus[g].memory_mib > 0 &&
        u.memory_mib > static_cast<std::int64_t>(r.topology->gpus[g].memory_mib)) {
      out << r.name << ": GPU" << g << " has " << u.memory_mib << " MiB of shares; ";
    }
  }
  for (std::size_t n = 0; n < a.nic_used.size(); ++n) {
    if (a.nic_used[n] && n >= nics) out << r.name << ": NIC" << n << " allocated beyond the topology; ";
  }
  if (!std::is_sorted(r.pods.begin(), r.pods.end()) ||
      std::adjacent_find(r.pods.begin(), r.pods.end()) != r.pods.end()) {
    out << r.name << ": pods not sorted and unique; ";
  }
  if (r.class_key != ComputeClassKey(r)) out << r.name << ": stale class key; ";
  return out.str();
}

// The allocation vectors cut or padded to the topology's sizes, so that records compare by
// content rather than by vector length.
inline NodeAllocation Normalized(NodeAllocation a, const NodeTopology& t) {
  a.gpu_exclusive.resize(t.gpus.size(), false);
  a.gpu_shares.resize(t.gpus.size());
  a.nic_used.resize(t.nics.size(), false);
  return a;
}

// Every record's allocation is exactly the sum of its pods' allocations in the pod index, every
// indexed pod is on the record that lists it, and the index holds nothing else. Empty when so.
inline std::string IndexViolation(const ClusterStore& store) {
  std::ostringstream out;
  const auto snapshot = store.snapshot();
  std::size_t listed = 0;
  for (const auto& r : snapshot->nodes()) {
    NodeAllocation rebuilt;
    for (const std::string& uid : r->pods) {
      ++listed;
      const std::optional<PodAllocation> pod = store.FindPod(uid);
      if (!pod) {
        out << r->name << " lists " << uid << ", which the index lacks; ";
        continue;
      }
      if (pod->node != r->name)
        out << uid << " is listed by " << r->name << " but indexed on " << pod->node << "; ";
      if (r->topology && !framework::ApplyDelta(*r->topology, pod->delta, rebuilt).ok()) {
        out << r->name << ": pods overlap at " << uid << "; ";
      }
    }
    if (r->topology && !(Normalized(rebuilt, *r->topology) == Normalized(r->allocated, *r->topology))) {
      out << r->name << ": allocation differs from the sum of its pods; ";
    }
  }
  if (listed != store.pod_count()) {
    out << "records list " << listed << " pods, the index holds " << store.pod_count() << "; ";
  }
  return out.str();
}

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern =
        std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/toposched-state-XXXXXX";
    if (::mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline void WriteFile(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace toposched::state::testing
