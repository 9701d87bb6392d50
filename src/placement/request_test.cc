#include "toposched/placement/request.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <functional>
#include <ostream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "toposched/placement/pod_cpu.h"
#include "toposched/topology/node_topology.h"

namespace toposched {

// Failures print the whole request rather than bytes.
void PrintTo(const PlacementRequest& r, std::ostream* os) {
  *os << "{ns=" << r.pod_namespace << " name=" << r.pod_name << " uid=" << r.pod_uid
      << " role=" << ToString(r.role) << " pool=" << r.pool << " shape=" << r.ShapeKey() << "}";
}

namespace {

using nlohmann::json;

// ---------------------------------------------------------------------------------------------
// Pod builders.

json Container(json limits, json requests = nullptr) {
  json c = {{"name", "c"}, {"image", "registry.example/app:1"}};
  if (!limits.is_null()) c["resources"]["limits"] = std::move(limits);
  if (!requests.is_null()) c["resources"]["requests"] = std::move(requests);
  return c;
}

json Sidecar(json limits) {
  json c = Container(std::move(limits));
  c["restartPolicy"] = "Always";
  return c;
}

struct PodSpec {
  json containers = json::array();
  json init_containers = nullptr;
  json annotations = nullptr;
  json labels = nullptr;
};

json Pod(PodSpec p) {
  json pod = {{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", {{"name", "p"}, {"namespace", "ns"}}}};
  if (!p.annotations.is_null()) pod["metadata"]["annotations"] = std::move(p.annotations);
  if (!p.labels.is_null()) pod["metadata"]["labels"] = std::move(p.labels);
  pod["spec"]["containers"] = std::move(p.containers);
  if (!p.init_containers.is_null()) pod["spec"]["initContainers"] = std::move(p.init_containers);
  return pod;
}

// One container with these limits.
json PodWithLimits(json limits) {
  return Pod({.containers = json::array({Container(std::move(limits))})});
}

json PodWithAnnotations(json annotations, json limits = {{"nvidia.com/gpu", "1"}}) {
  return Pod(
      {.containers = json::array({Container(std::move(limits))}), .annotations = std::move(annotations)});
}

// The request every builder pod starts from (metadata p/ns), changed by `edit`.
PlacementRequest Expect(const std::function<void(PlacementRequest&)>& edit) {
  PlacementRequest r;
  r.pod_name = "p";
  r.pod_namespace = "ns";
  edit(r);
  return r;
}

// A realistic pod as the API server returns it: managedFields, status and fields we don't read.
json RichPod() {
  json pod = json::parse(R"({
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {
      "name": "trainer-0", "namespace": "ml", "uid": "0b6c7f2e-5f0e-4d7e-9a53-0c1d2e3f4a5b",
      "labels": {"llm-d.ai/role": "prefill", "toposched.io/pool": "h100-a"},
      "annotations": {"toposched.io/gpu-nic-alignment": "PXB", "hami.io/node-scheduler-policy": "binpack"},
      "managedFields": [{"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {
        "f:containers": {"k:{\"name\":\"main\"}": {"f:resources": {"f:limits": {
          "f:nvidia.com/gpu": {}, "f:rdma/ib": {}}}}}}}}]
    },
    "spec": {
      "schedulerName": "toposched",
      "initContainers": [
        {"name": "fetch", "image": "busybox", "resources": {"limits": {"cpu": "500m"}}},
        {"name": "proxy", "image": "envoy", "restartPolicy": "Always",
         "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}
      ],
      "containers": [{
        "name": "main", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
        "command": ["torchrun", "--nproc-per-node=8"],
        "env": [{"name": "NCCL_DEBUG", "value": "INFO"}],
        "resources": {
          "limits": {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": "8", "rdma/ib": "8"},
          "requests": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8", "rdma/ib": "8"}
        },
        "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}]
      }],
      "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}}],
      "overhead": {"cpu": "250m"}
    },
    "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]}
  })");
  return pod;
}

// ---------------------------------------------------------------------------------------------
// Valid pods.

struct ParseCase {
  std::string name;
  json pod;
  PlacementRequest want;
  RequestConfig config = {};
};

class PodRequestParseTest : public testing::TestWithParam<ParseCase> {};

TEST_P(PodRequestParseTest, Parses) {
  const ParseCase& c = GetParam();
  const Result<PlacementRequest> got = ParsePodRequest(c.pod.dump(), c.config);
  ASSERT_TRUE(got.ok()) << got.error().message();
  PlacementRequest without_containers = *got;  // container_devices has its own table below
  without_containers.container_devices.clear();
  without_containers.init_containers = 0;
  EXPECT_EQ(without_containers, c.want);
}

// Devices per container, in HAMi's order: init containers first, then app containers; a
// container without the vendor's GPU resource counts 0; pods without GPUs list nothing.
// A pod's CPU as kube-scheduler's NodeResourcesFit counts it (component-helpers PodRequests):
// app containers and sidecars add up (0.5 + 1.5 + 0.25), the plain init container after the
// sidecar runs beside it (3 + 0.25), the larger wins, plus the RuntimeClass overhead; a
// container without a request counts its limit. Both readers of a Pod agree.
TEST(PodRequestCpu, IsKubeSchedulersEffectiveRequestPlusOverhead) {
  const std::string pod = R"({"metadata":{"name":"p"},"spec":{
    "overhead":{"cpu":"100m","memory":"64Mi"},
    "initContainers":[{"name":"proxy","restartPolicy":"Always","resources":{"requests":{"cpu":"250m"}}},
                      {"name":"warm","resources":{"limits":{"cpu":"3"}}}],
    "containers":[{"name":"a","resources":{"requests":{"cpu":"500m"},"limits":{"cpu":"8"}}},
                  {"name":"b","resources":{"limits":{"cpu":1.5,"nvidia.com/gpu":1}}}]}})";
  const Result<PlacementRequest> r = ParsePodRequest(pod);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->cpu_milli, 3350);
  EXPECT_EQ(r->gpus, 1);
  const Result<std::int64_t> direct = PodCpuRequestMilli(nlohmann::json::parse(pod));
  ASSERT_TRUE(direct.ok()) << direct.error().message();
  EXPECT_EQ(*direct, 3350);

  // Without the plain init container the app side decides: 0.5 + 1.5 + 0.25 + 0.1.
  nlohmann::json lighter = nlohmann::json::parse(pod);
  lighter["spec"]["initContainers"].erase(1);
  EXPECT_EQ(*PodCpuRequestMilli(lighter), 2350);
  EXPECT_EQ(ParsePodRequest(lighter.dump())->cpu_milli, 2350);
  // Nothing asks CPU: 0.
  EXPECT_EQ(ParsePodRequest(R"({"spec":{"containers":[{"name":"c"}]}})")->cpu_milli, 0);
  EXPECT_EQ(*PodCpuRequestMilli(nlohmann::json::parse(R"({"metadata":{}})")), 0);
  // A CPU that is not a quantity is an error that names the field, by both.
  const std::string bad = R"({"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"two"}}}]}})";
  const Result<PlacementRequest> refused = ParsePodRequest(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message().find("spec.containers[0].resources.requests.cpu"), std::string::npos)
      << refused.error().message();
  EXPECT_FALSE(PodCpuRequestMilli(nlohmann::json::parse(bad)).ok());
}

TEST(PodRequestContainers, DevicesPerContainerInitFirst) {
  struct Case {
    const char* name;
    const char* spec;
    std::vector<int> want;
  };
  const Case cases[] = {
      {"OneContainer", R"({"containers":[{"name":"a","resources":{"limits":{"nvidia.com/gpu":"4"}}}]})", {4}},
      {"SidecarWithoutGpus",
       R"({"containers":[{"name":"a","resources":{"limits":{"nvidia.com/gpu":"2"}}},{"name":"log"}]})",
       {2, 0}},
      {"InitContainerFirst",
       R"({"initContainers":[{"name":"i","resources":{"limits":{"nvidia.com/gpu":"1"}}}],
           "containers":[{"name":"a","resources":{"limits":{"nvidia.com/gpu":"2"}}},
                         {"name":"b","resources":{"requests":{"nvidia.com/gpu":"1"}}}]})",
       {1, 2, 1}},
      {"SharedVgpus",
       R"({"containers":[{"name":"a","resources":{"limits":{"nvidia.com/gpu":"2","nvidia.com/gpumem":"8000"}}}]})",
       {2}},
      {"AmdGpus", R"({"containers":[{"name":"a","resources":{"limits":{"amd.com/gpu":"2"}}}]})", {2}},
      {"NoGpus", R"({"containers":[{"name":"a","resources":{"limits":{"rdma/ib":"1"}}}]})", {}},
  };
  for (const Case& c : cases) {
    const json pod = {{"metadata", {{"name", "p"}, {"namespace", "ns"}, {"uid", "u"}}},
                      {"spec", json::parse(c.spec)}};
    const Result<PlacementRequest> got = ParsePodRequest(pod.dump());
    ASSERT_TRUE(got.ok()) << c.name << ": " << got.error().message();
    EXPECT_EQ(got->container_devices, c.want) << c.name;
    EXPECT_EQ(got->init_containers, std::string(c.name) == "InitContainerFirst" ? 1 : 0) << c.name;
  }
}

std::vector<ParseCase> ParseCases() {
  std::vector<ParseCase> cases;
  auto add = [&](std::string name, json pod, std::function<void(PlacementRequest&)> edit,
                 RequestConfig config = {}) {
    cases.push_back({std::move(name), std::move(pod), Expect(edit), std::move(config)});
  };

  // --- Whole GPUs and NICs.
  add("Plain8GpuAnd8Ib", RichPod(), [](PlacementRequest& r) {
    r.pod_name = "trainer-0";
    r.pod_namespace = "ml";
    r.pod_uid = "0b6c7f2e-5f0e-4d7e-9a53-0c1d2e3f4a5b";
    r.gpus = 8;
    r.rdma_nics = 8;
    r.max_gpu_nic_class = LinkClass::kPXB;
    r.role = PodRole::kPrefill;
    r.pool = "h100-a";
    r.node_policy = PackPolicy::kBinpack;
    r.cpu_milli = 64'350;  // main's request (not its limit of 96), the sidecar's 100m, the overhead
  });
  add("LimitsOnly", PodWithLimits({{"nvidia.com/gpu", "4"}, {"rdma/hca_shared_devices_a", "2"}}),
      [](PlacementRequest& r) {
        r.gpus = 4;
        r.rdma_nics = 2;
      });
  add("RequestsOnly",
      Pod({.containers = json::array({Container(nullptr, {{"nvidia.com/gpu", "2"}, {"rdma/ib", "1"}})})}),
      [](PlacementRequest& r) {
        r.gpus = 2;
        r.rdma_nics = 1;
      });
  // Requests take precedence; a limit fills in only resources the requests leave out.
  add("RequestsThenLimits",
      Pod({.containers = json::array(
               {Container({{"nvidia.com/gpu", "3"}, {"rdma/ib", "2"}}, {{"nvidia.com/gpu", "3"}})})}),
      [](PlacementRequest& r) {
        r.gpus = 3;
        r.rdma_nics = 2;
      });
  add("JsonNumbers", PodWithLimits({{"nvidia.com/gpu", 4}, {"rdma/ib", 2.0}}), [](PlacementRequest& r) {
    r.gpus = 4;
    r.rdma_nics = 2;
  });
  add("WholeMilliQuantity", PodWithLimits({{"nvidia.com/gpu", "2000m"}}),
      [](PlacementRequest& r) { r.gpus = 2; });
  add("ExponentQuantity", PodWithLimits({{"nvidia.com/gpu", "1e1"}}),
      [](PlacementRequest& r) { r.gpus = 10; });
  add("ZeroGpus", PodWithLimits({{"nvidia.com/gpu", "0"}}), [](PlacementRequest&) {});
  add("AmdGpu", PodWithLimits({{"amd.com/gpu", "4"}, {"rdma/roce", "4"}}), [](PlacementRequest& r) {
    r.gpus = 4;
    r.vendor = GpuVendor::kAmd;
    r.rdma_nics = 4;
  });
  add("NicOnly", PodWithLimits({{"rdma/ib", "2"}}), [](PlacementRequest& r) { r.rdma_nics = 2; });
  add("NothingDeviceRelated", PodWithLimits({{"cpu", "250m"}, {"memory", "1.5Gi"}}),
      [](PlacementRequest& r) { r.cpu_milli = 250; });
  add("NoSpec", json{{"kind", "Pod"}, {"metadata", {{"name", "p"}, {"namespace", "ns"}}}},
      [](PlacementRequest&) {});
  add("KindAbsent", json{{"spec", {{"containers", {Container({{"nvidia.com/gpu", "1"}})}}}}},
      [](PlacementRequest& r) {
        r.pod_name.clear();
        r.pod_namespace.clear();
        r.gpus = 1;
      });

  // --- Container arithmetic (kube-scheduler's effective request).
  // Two app containers: 2 + 3 = 5.
  add("AppContainersAdd",
      Pod({.containers =
               json::array({Container({{"nvidia.com/gpu", "2"}}), Container({{"nvidia.com/gpu", "3"}})})}),
      [](PlacementRequest& r) { r.gpus = 5; });
  // App 2, init 4: the init container runs alone, max(2, 4) = 4.
  add("InitLargerThanApp",
      Pod({.containers = json::array({Container({{"nvidia.com/gpu", "2"}})}),
           .init_containers = json::array({Container({{"nvidia.com/gpu", "4"}})})}),
      [](PlacementRequest& r) { r.gpus = 4; });
  // App 4, init 2: max(4, 2) = 4.
  add("InitSmallerThanApp",
      Pod({.containers = json::array({Container({{"nvidia.com/gpu", "4"}})}),
           .init_containers = json::array({Container({{"nvidia.com/gpu", "2"}})})}),
      [](PlacementRequest& r) { r.gpus = 4; });
  // App 2, sidecar 1 declared before init 3: max(2 + 1, 3 + 1) = 4.
  add("SidecarBeforeInit",
      Pod({.containers = json::array({Container({{"nvidia.com/gpu", "2"}})}),
           .init_containers =
               json::array({Sidecar({{"nvidia.com/gpu", "1"}}), Container({{"nvidia.com/gpu", "3"}})})}),
      [](PlacementRequest& r) { r.gpus = 4; });
  // App 2, init 3 then sidecar 1: the init runs before the sidecar starts, max(2 + 1, 3) = 3.
  add("SidecarAfterInit",
      Pod({.containers = json::array({Container({{"nvidia.com/gpu", "2"}})}),
           .init_containers =
               json::array({Container({{"nvidia.com/gpu", "3"}}), Sidecar({{"nvidia.com/gpu", "1"}})})}),
      [](PlacementRequest& r) { r.gpus = 3; });
  // Two sidecars (1, 2) then init 1, app 0: max(0 + 1 + 2, 1 + 1 + 2) = 4.
  add("TwoSidecarsBeforeInit",
      Pod({.containers = json::array({Container(nullptr)}),
           .init_containers =
               json::array({Sidecar({{"nvidia.com/gpu", "1"}}), Sidecar({{"nvidia.com/gpu", "2"}}),
                            Container({{"nvidia.com/gpu", "1"}})})}),
      [](PlacementRequest& r) { r.gpus = 4; });
  // restartPolicy on an app container does not make it a sidecar: 2 + 2 = 4 either way, and an
  // init container after it still sees no sidecars: max(4, 3) = 4.
  add("RestartPolicyOnAppContainer",
      Pod({.containers =
               json::array({Sidecar({{"nvidia.com/gpu", "2"}}), Container({{"nvidia.com/gpu", "2"}})}),
           .init_containers = json::array({Container({{"nvidia.com/gpu", "3"}})})}),
      [](PlacementRequest& r) { r.gpus = 4; });
  // RDMA is computed per resource name, then summed. rdma/a: app 1 + sidecar 1 = 2 vs init
  // 0 + 1 = 1 -> 2; rdma/b: app 0 vs init 1 -> 1; total 3.
  add("RdmaPerNameThenSummed",
      Pod({.containers = json::array({Container({{"rdma/a", "1"}, {"nvidia.com/gpu", "1"}})}),
           .init_containers = json::array({Sidecar({{"rdma/a", "1"}}), Container({{"rdma/b", "1"}})})}),
      [](PlacementRequest& r) {
        r.gpus = 1;
        r.rdma_nics = 3;
      });

  // --- RDMA names and the annotation.
  {
    RequestConfig config;
    config.rdma_resources = {"mellanox.com/rdma_shared", "rdma/"};
    add(
        "RdmaExactAndPrefixNames",
        PodWithLimits({{"mellanox.com/rdma_shared", "1"}, {"mellanox.com/other", "5"}, {"rdma/ib", "2"}}),
        [](PlacementRequest& r) { r.rdma_nics = 3; }, config);
  }
  {
    RequestConfig config;
    config.rdma_resources = {"nvidia.com/"};  // a pattern that also matches GPU names
    add(
        "GpuNamesAreNeverNics", PodWithLimits({{"nvidia.com/gpu", "2"}, {"nvidia.com/hca", "1"}}),
        [](PlacementRequest& r) {
          r.gpus = 2;
          r.rdma_nics = 1;
        },
        config);
  }
  add("RdmaAnnotationOverridesResource",
      PodWithAnnotations({{"toposched.io/rdma-nics", "4"}},
                         {{"nvidia.com/gpu", "4"}, {"rdma/hca_shared_devices_a", "1"}}),
      [](PlacementRequest& r) {
        r.gpus = 4;
        r.rdma_nics = 4;
      });
  add("RdmaAnnotationZero",
      PodWithAnnotations({{"toposched.io/rdma-nics", " 0 "}}, {{"nvidia.com/gpu", "1"}, {"rdma/ib", "2"}}),
      [](PlacementRequest& r) { r.gpus = 1; });
  // The annotation governs, so a resource count above 64 (a shared-device grant) is not an error.
  add("RdmaAnnotationWithLargeResource",
      PodWithAnnotations({{"toposched.io/rdma-nics", "2"}}, {{"nvidia.com/gpu", "2"}, {"rdma/shared", "1k"}}),
      [](PlacementRequest& r) {
        r.gpus = 2;
        r.rdma_nics = 2;
      });

  // --- HAMi shared GPUs.
  add("GpumemAndCores",
      PodWithLimits({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "8000"}, {"nvidia.com/gpucores", "30"}}),
      [](PlacementRequest& r) {
        r.shared.count = 1;
        r.shared.memory_mib = 8000;
        r.shared.cores = 3000;
      });
  add("GpumemGi", PodWithLimits({{"nvidia.com/gpu", "2"}, {"nvidia.com/gpumem", "8Gi"}}),
      [](PlacementRequest& r) {
        r.shared.count = 2;
        r.shared.memory_mib = 8192;
      });
  add("GpumemMi", PodWithLimits({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "3000Mi"}}),
      [](PlacementRequest& r) {
        r.shared.count = 1;
        r.shared.memory_mib = 3000;
      });
  // The API server writes 16000 back as "16k"; HAMi reads it as 16000 MiB.
  add("GpumemCanonicalK", PodWithLimits({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "16k"}}),
      [](PlacementRequest& r) {
        r.shared.count = 1;
        r.shared.memory_mib = 16000;
      });
  add("GpumemJsonNumber", PodWithLimits({{"nvidia.com/gpu", 1}, {"nvidia.com/gpumem", 4096}}),
      [](PlacementRequest& r) {
        r.shared.count = 1;
        r.shared.memory_mib = 4096;
      });
  add("Percentage", PodWithLimits({{"nvidia.com/gpu", "2"}, {"nvidia.com/gpumem-percentage", "25"}}),
      [](PlacementRequest& r) {
        r.shared.count = 2;
        r.shared.memory_percent = 25;
      });
  add("GpumemWinsOverPercentage",
      PodWithLimits(
          {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "8000"}, {"nvidia.com/gpumem-percentage", "50"}}),
      [](PlacementRequest& r) {
        r.shared.count = 1;
        r.shared.memory_mib = 8000;
      });
  // Cores without memory: HAMi's default memory is the whole card.
  add("CoresOnly", PodWithLimits({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpucores", "30"}}),
      [](PlacementRequest& r) {
        r.shared.count = 1;
        r.shared.memory_percent = 100;
        r.shared.cores = 3000;
      });
  add("Cores100AloneIsWholeGpu", PodWithLimits({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpucores", "100"}}),
      [](PlacementRequest& r) { r.gpus = 1; });
  add("Percentage100AloneIsWholeGpu",
      PodWithLimits({{"nvidia.com/gpu", "2"}, {"nvidia.com/gpumem-percentage", "100"}}),
      [](PlacementRequest& r) { r.gpus = 2; });
  add("Cores0AloneIsWholeGpu", PodWithLimits({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpucores", "0"}}),
      [](PlacementRequest& r) { r.gpus = 1; });
  add("Cores100WithGpumem",
      PodWithLimits({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "1024"}, {"nvidia.com/gpucores", "100"}}),
      [](PlacementRequest& r) {
        r.shared.count = 1;
        r.shared.memory_mib = 1024;
        r.shared.cores = 10000;
      });
  // Per-vGPU amounts are not summed: two containers of one vGPU each, 4000 and 6000 MiB, are
  // two vGPUs of (at most) 6000 MiB.
  add("SharedAcrossContainersTakesLargest",
      Pod({.containers = json::array({Container({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "4000"}}),
                                      Container({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "6000"}})})}),
      [](PlacementRequest& r) {
        r.shared.count = 2;
        r.shared.memory_mib = 6000;
      });
  // A container with a GPU but no memory limit gets HAMi's default, the whole card's memory, which
  // covers the other container's 4000 MiB.
  add("SharedBesideUnlimitedContainer",
      Pod({.containers = json::array({Container({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "4000"}}),
                                      Container({{"nvidia.com/gpu", "1"}})})}),
      [](PlacementRequest& r) {
        r.shared.count = 2;
        r.shared.memory_percent = 100;
      });
  // 30% in one container makes the pod shared although the other asks 100%: 100% per vGPU.
  add("SharedPercentagesTakeLargest",
      Pod({.containers = json::array({Container({{"nvidia.com/gpu", "1"},
                                                 {"nvidia.com/gpumem-percentage", "30"},
                                                 {"nvidia.com/gpucores", "20"}}),
                                      Container({{"nvidia.com/gpu", "1"},
                                                 {"nvidia.com/gpumem-percentage", "100"},
                                                 {"nvidia.com/gpucores", "50"}})})}),
      [](PlacementRequest& r) {
        r.shared.count = 2;
        r.shared.memory_percent = 100;
        r.shared.cores = 5000;
      });
  // The init container's vGPU (8000 MiB) runs alone: max(1, 1) = 1 vGPU of 8000 MiB.
  add("SharedInitContainer",
      Pod({.containers = json::array({Container({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "2000"}})}),
           .init_containers =
               json::array({Container({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "8000"}})})}),
      [](PlacementRequest& r) {
        r.shared.count = 1;
        r.shared.memory_mib = 8000;
      });
  add("SharedWithNics",
      PodWithLimits({{"nvidia.com/gpu", "2"}, {"nvidia.com/gpumem", "10000"}, {"rdma/ib", "1"}}),
      [](PlacementRequest& r) {
        r.shared.count = 2;
        r.shared.memory_mib = 10000;
        r.rdma_nics = 1;
      });

  // --- Annotations.
  add("AlignmentPix", PodWithAnnotations({{"toposched.io/gpu-nic-alignment", "PIX"}}),
      [](PlacementRequest& r) {
        r.gpus = 1;
        r.max_gpu_nic_class = LinkClass::kPIX;
      });
  add("AlignmentLowerCase", PodWithAnnotations({{"toposched.io/gpu-nic-alignment", "node"}}),
      [](PlacementRequest& r) {
        r.gpus = 1;
        r.max_gpu_nic_class = LinkClass::kNODE;
      });
  add("AlignmentSys", PodWithAnnotations({{"toposched.io/gpu-nic-alignment", "SYS"}}),
      [](PlacementRequest& r) {
        r.gpus = 1;
        r.max_gpu_nic_class = LinkClass::kSYS;
      });
  add("GpuPolicyBinpackNuma", PodWithAnnotations({{"hami.io/gpu-scheduler-policy", "binpack, numa"}}),
      [](PlacementRequest& r) {
        r.gpus = 1;
        r.shared.gpu_policy = PackPolicy::kBinpack;
        r.shared.numa_bind = true;
      });
  add("GpuPolicySpread", PodWithAnnotations({{"hami.io/gpu-scheduler-policy", "spread"}}),
      [](PlacementRequest& r) {
        r.gpus = 1;
        r.shared.gpu_policy = PackPolicy::kSpread;
      });
  add("GpuPolicyTopologyAwareIsDefault",
      PodWithAnnotations({{"hami.io/gpu-scheduler-policy", "topology-aware"}}),
      [](PlacementRequest& r) { r.gpus = 1; });
  add("GpuPolicyMutexThenSpread", PodWithAnnotations({{"hami.io/gpu-scheduler-policy", "mutex,spread"}}),
      [](PlacementRequest& r) {
        r.gpus = 1;
        r.shared.gpu_policy = PackPolicy::kSpread;
      });
  add("NodePolicySpread", PodWithAnnotations({{"hami.io/node-scheduler-policy", "spread"}}),
      [](PlacementRequest& r) {
        r.gpus = 1;
        r.node_policy = PackPolicy::kSpread;
      });
  add("CardFilters",
      PodWithAnnotations({{"nvidia.com/use-gputype", " A100, H100 ,,"},
                          {"nvidia.com/nouse-gputype", "T4"},
                          {"nvidia.com/use-gpuuuid", "GPU-aaa,GPU-bbb"},
                          {"nvidia.com/nouse-gpuuuid", ","}},
                         {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "2000"}}),
      [](PlacementRequest& r) {
        r.shared.count = 1;
        r.shared.memory_mib = 2000;
        r.shared.use_types = {"A100", "H100"};
        r.shared.avoid_types = {"T4"};
        r.shared.use_uuids = {"GPU-aaa", "GPU-bbb"};
      });
  add("NumaBindTrue", PodWithAnnotations({{"nvidia.com/numa-bind", "true"}}), [](PlacementRequest& r) {
    r.gpus = 1;
    r.shared.numa_bind = true;
  });
  add("NumaBindFalse", PodWithAnnotations({{"nvidia.com/numa-bind", "false"}}),
      [](PlacementRequest& r) { r.gpus = 1; });
  // Prefill/Decode pool annotations (not part of the shape).
  add("PdAnnotations",
      PodWithAnnotations({{"toposched.io/pd-ratio", " 1:3 "},
                          {"toposched.io/kv-bytes-per-token", "327680"},
                          {"toposched.io/prompt-tokens", "2048"},
                          {"toposched.io/kv-ipc", "true"}}),
      [](PlacementRequest& r) {
        r.gpus = 1;
        r.pd_ratio_prefill = 1;
        r.pd_ratio_decode = 3;
        r.kv_bytes_per_token = 327680;
        r.prompt_tokens = 2048;
        r.kv_ipc = true;
      });
  add("UnrelatedAnnotationsIgnored",
      PodWithAnnotations({{"kubectl.kubernetes.io/last-applied-configuration", "{\"big\": true}"},
                          {"example.com/flag", "whatever"}}),
      [](PlacementRequest& r) { r.gpus = 1; });

  // --- Labels.
  // llm-d's router roles (filter/bylabel/roles.go), each with its meaning for P/D placement.
  for (const auto& [value, role] :
       {std::pair{"prefill", PodRole::kPrefill}, std::pair{"decode", PodRole::kDecode},
        std::pair{"both", PodRole::kBoth}, std::pair{"prefill-decode", PodRole::kBoth},
        std::pair{"encode-prefill-decode", PodRole::kBoth}, std::pair{"encode-prefill", PodRole::kPrefill},
        std::pair{"encode", PodRole::kNone}}) {
    std::string name = std::string("Role_") + value;
    std::replace(name.begin(), name.end(), '-', '_');
    add(name,
        Pod({.containers = json::array({Container({{"nvidia.com/gpu", "1"}})}),
             .labels = {{"llm-d.ai/role", value}}}),
        [role = role](PlacementRequest& r) {
          r.gpus = 1;
          r.role = role;
        });
  }
  add("PoolLabel",
      Pod({.containers = json::array({Container({{"nvidia.com/gpu", "1"}})}),
           .labels = {{"toposched.io/pool", "pool-a"}, {"app", "x"}}}),
      [](PlacementRequest& r) {
        r.gpus = 1;
        r.pool = "pool-a";
      });
  {
    RequestConfig config;
    config.pool_label = "example.com/gpu-pool";
    add(
        "ConfiguredPoolLabel",
        Pod({.containers = json::array({Container({{"nvidia.com/gpu", "1"}})}),
             .labels = {{"toposched.io/pool", "ignored"}, {"example.com/gpu-pool", "b"}}}),
        [](PlacementRequest& r) {
          r.gpus = 1;
          r.pool = "b";
        },
        config);
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, PodRequestParseTest, testing::ValuesIn(ParseCases()),
                         [](const testing::TestParamInfo<ParseCase>& p) { return p.param.name; });

// ---------------------------------------------------------------------------------------------
// Malformed pods: each error names the field and says what is wrong.

struct ErrorCase {
  std::string name;
  std::string text;
  std::string want_substring;
};

class PodRequestErrorTest : public testing::TestWithParam<ErrorCase> {};

TEST_P(PodRequestErrorTest, Rejects) {
  const ErrorCase& c = GetParam();
  const Result<PlacementRequest> got = ParsePodRequest(c.text);
  ASSERT_FALSE(got.ok()) << "parsed: " << testing::PrintToString(got.value());
  EXPECT_NE(got.error().message().find(c.want_substring), std::string::npos)
      << "message: " << got.error().message() << "\nwanted: " << c.want_substring;
}

std::vector<ErrorCase> ErrorCases() {
  std::vector<ErrorCase> cases;
  auto add = [&](std::string name, const json& pod, std::string want) {
    cases.push_back({std::move(name), pod.dump(), std::move(want)});
  };
  auto add_text = [&](std::string name, std::string text, std::string want) {
    cases.push_back({std::move(name), std::move(text), std::move(want)});
  };
  const std::string valid = RichPod().dump();

  add_text("NotJson", "hello", "not valid JSON");
  add_text("Empty", "", "empty");
  add_text("Blank", " \n", "empty");
  add_text("Truncated", valid.substr(0, valid.size() / 2), "not valid JSON");
  add_text("TrailingGarbage", valid + "}", "not valid JSON");
  add_text("InvalidUtf8", "{\"metadata\": {\"name\": \"\xff\"}}", "not valid JSON");
  add_text("TopLevelArray", "[]", "top level: expected a JSON object");
  add_text("TopLevelString", "\"Pod\"", "top level: expected a JSON object");
  add_text("Oversize", std::string(kMaxPodJsonBytes + 1, ' '), "over the limit");
  add("WrongKind", json{{"kind", "Deployment"}}, "kind: expected \"Pod\", got \"Deployment\"");
  add("KindNotString", json{{"kind", 1}}, "kind: expected \"Pod\"");

  add("NegativeGpu", PodWithLimits({{"nvidia.com/gpu", "-1"}}), "nvidia.com/gpu: \"-1\" is negative");
  add("NegativeGpuNumber", PodWithLimits({{"nvidia.com/gpu", -2}}), "nvidia.com/gpu: -2 is negative");
  add("MilliGpu", PodWithLimits({{"nvidia.com/gpu", "500m"}}),
      "nvidia.com/gpu: \"500m\" is not a whole number");
  add("FractionalGpu", PodWithLimits({{"nvidia.com/gpu", "1.5"}}),
      "nvidia.com/gpu: \"1.5\" is not a whole number");
  add("FractionalGpuNumber", PodWithLimits({{"nvidia.com/gpu", 0.5}}),
      "nvidia.com/gpu: 0.5 is not a whole number");
  add("GarbageQuantity", PodWithLimits({{"nvidia.com/gpu", "two"}}), "\"two\" is not a Kubernetes quantity");
  add("BadSuffix", PodWithLimits({{"nvidia.com/gpu", "1Xi"}}), "is not a Kubernetes quantity");
  add("HugeQuantity", PodWithLimits({{"nvidia.com/gpu", "99999999999999999999"}}), "is too large");
  add("QuantityWrongType", PodWithLimits({{"nvidia.com/gpu", true}}), "nvidia.com/gpu: expected a quantity");
  add("TooManyGpus", PodWithLimits({{"nvidia.com/gpu", "65"}}), "one node has at most 64");
  add("TooManyGpusSummed",
      Pod({.containers =
               json::array({Container({{"nvidia.com/gpu", "40"}}), Container({{"nvidia.com/gpu", "40"}})})}),
      "asks 80 nvidia.com/gpu");
  add("TooManyNics", PodWithLimits({{"rdma/ib", "65"}}), "65 RDMA NICs");
  add("BothVendors", PodWithLimits({{"nvidia.com/gpu", "1"}, {"amd.com/gpu", "1"}}),
      "a pod asks GPUs of one vendor");
  add("AmdWithGpumem", PodWithLimits({{"amd.com/gpu", "1"}, {"nvidia.com/gpumem", "1000"}}),
      "NVIDIA GPUs only");

  add("Percent150", PodWithLimits({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem-percentage", "150"}}),
      "nvidia.com/gpumem-percentage is 150");
  add("Percent0", PodWithLimits({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem-percentage", "0"}}),
      "1 to 100");
  add("Cores150", PodWithLimits({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpucores", "150"}}),
      "nvidia.com/gpucores is 150");
  add("GpumemDecimalGiga", PodWithLimits({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "8G"}}),
      "more than any GPU has");
  add("GpumemNotWholeMib", PodWithLimits({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "1500Ki"}}),
      "\"1500Ki\" is not a whole number of MiB");

  add("ContainersNotArray", json{{"kind", "Pod"}, {"spec", {{"containers", {{"name", "c"}}}}}},
      "spec.containers: expected an array, got an object");
  add("InitContainersNotArray", json{{"spec", {{"initContainers", "none"}}}},
      "spec.initContainers: expected an array");
  add("ContainerNotObject", json{{"spec", {{"containers", {5}}}}}, "spec.containers[0]: expected an object");
  add("ResourcesWrongType", json{{"spec", {{"containers", {{{"name", "c"}, {"resources", "lots"}}}}}}},
      "spec.containers[0].resources: expected an object, got \"lots\"");
  add("LimitsWrongType",
      json{{"spec", {{"containers", {{{"name", "c"}, {"resources", {{"limits", json::array({1})}}}}}}}}},
      "spec.containers[0].resources.limits: expected an object, got an array");
  add("RestartPolicyWrongType", json{{"spec", {{"initContainers", {{{"name", "c"}, {"restartPolicy", 1}}}}}}},
      "spec.initContainers[0].restartPolicy: expected a string");
  add("SpecWrongType", json{{"spec", 1}}, "spec: expected an object");
  add("MetadataWrongType", json{{"metadata", "x"}}, "metadata: expected an object");
  add("NameWrongType", json{{"metadata", {{"name", 7}}}}, "metadata.name: expected a string, got 7");
  add("LabelsWrongType", json{{"metadata", {{"labels", json::array()}}}},
      "metadata.labels: expected an object");
  add("AnnotationNotString", PodWithAnnotations({{"toposched.io/gpu-nic-alignment", 3}}),
      "annotation toposched.io/gpu-nic-alignment: expected a string, got 3");

  add("AlignmentUnknown", PodWithAnnotations({{"toposched.io/gpu-nic-alignment", "FAST"}}),
      "\"FAST\" is not a GPU-NIC link class; use one of PIX, PXB, PHB, NODE, SYS");
  add("AlignmentNvLink", PodWithAnnotations({{"toposched.io/gpu-nic-alignment", "NV"}}),
      "is not a GPU-NIC link class");
  add("AlignmentSelf", PodWithAnnotations({{"toposched.io/gpu-nic-alignment", "X"}}),
      "is not a GPU-NIC link class");
  add("RdmaAnnotationWord", PodWithAnnotations({{"toposched.io/rdma-nics", "many"}}), "is not a count");
  add("RdmaAnnotationNegative", PodWithAnnotations({{"toposched.io/rdma-nics", "-1"}}), "is not a count");
  add("RdmaAnnotationTooMany", PodWithAnnotations({{"toposched.io/rdma-nics", "65"}}), "integer 0 to 64");
  add("GpuPolicyUnknown", PodWithAnnotations({{"hami.io/gpu-scheduler-policy", "fast"}}),
      "\"fast\" is not a GPU policy");
  add("GpuPolicyContradiction", PodWithAnnotations({{"hami.io/gpu-scheduler-policy", "binpack,spread"}}),
      "names both binpack and spread");
  add("GpuPolicyEmpty", PodWithAnnotations({{"hami.io/gpu-scheduler-policy", " , "}}), "is empty");
  add("NodePolicyUnknown", PodWithAnnotations({{"hami.io/node-scheduler-policy", "topology-aware"}}),
      "is not a node policy; use binpack or spread");
  add("NumaBindNotBool", PodWithAnnotations({{"nvidia.com/numa-bind", "yes"}}), "is not a boolean");
  add("PdRatioNoColon", PodWithAnnotations({{"toposched.io/pd-ratio", "3"}}),
      "annotation toposched.io/pd-ratio: \"3\" is not a Prefill:Decode ratio; write it as \"1:3\"");
  add("PdRatioZero", PodWithAnnotations({{"toposched.io/pd-ratio", "0:2"}}), "is not a Prefill:Decode ratio");
  add("PdRatioTooBig", PodWithAnnotations({{"toposched.io/pd-ratio", "1:101"}}), "(each side 1 to 100)");
  add("PdRatioNegative", PodWithAnnotations({{"toposched.io/pd-ratio", "-1:2"}}),
      "is not a Prefill:Decode ratio");
  add("KvBytesZero", PodWithAnnotations({{"toposched.io/kv-bytes-per-token", "0"}}),
      "annotation toposched.io/kv-bytes-per-token: \"0\" is not a count; use an integer 1 to 1073741824");
  add("KvBytesText", PodWithAnnotations({{"toposched.io/kv-bytes-per-token", "320Ki"}}), "is not a count");
  add("PromptTokensHuge", PodWithAnnotations({{"toposched.io/prompt-tokens", "99999999999"}}),
      "use an integer 1 to 10000000");
  add("KvIpcNotBool", PodWithAnnotations({{"toposched.io/kv-ipc", "yes"}}), "is not a boolean");
  // Issue 15 (6): no nvidia.com/gpu, no device plugin call, no enforcement: refused with the fix.
  for (const char* name : {"nvidia.com/gpumem", "nvidia.com/gpucores", "nvidia.com/gpumem-percentage"}) {
    std::string test = std::string("ShareWithoutGpuCount_") + (name + 11);
    std::replace(test.begin(), test.end(), '-', '_');
    add(test, PodWithLimits({{name, "30"}}),
        "without nvidia.com/gpu: the kubelet would never call HAMi's device plugin for it");
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, PodRequestErrorTest, testing::ValuesIn(ErrorCases()),
                         [](const testing::TestParamInfo<ErrorCase>& p) { return p.param.name; });

// ---------------------------------------------------------------------------------------------
// Robustness.

// Every prefix of a valid pod is invalid JSON and must come back as an error, never a crash.
TEST(PodRequestRobustnessTest, EveryTruncationIsAnError) {
  const std::string text = RichPod().dump();
  for (std::size_t n = 0; n < text.size(); ++n) {
    const Result<PlacementRequest> got = ParsePodRequest(std::string_view(text).substr(0, n));
    ASSERT_FALSE(got.ok()) << "prefix of " << n << " bytes parsed";
  }
  EXPECT_TRUE(ParsePodRequest(text).ok());
}

// Overwriting any byte with a structural character may or may not leave valid JSON; either way
// the parser returns.
TEST(PodRequestRobustnessTest, EverySingleByteCorruptionReturns) {
  const std::string text = RichPod().dump();
  int accepted = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    for (char c : {'"', '{', ']', '-', '0', 'x', '\0'}) {
      std::string corrupt = text;
      corrupt[i] = c;
      if (ParsePodRequest(corrupt).ok()) ++accepted;
    }
  }
  EXPECT_GT(accepted, 0);  // some corruptions land in strings and are harmless
}

// Deep nesting in fields the parser does not read is dropped while parsing, so it costs neither
// memory nor an error.
TEST(PodRequestRobustnessTest, DeepNestingInUnreadFieldsIsDropped) {
  const std::size_t depth = 1'000'000;
  std::string text =
      R"({"kind":"Pod","spec":{"containers":[{"resources":{"limits":{"nvidia.com/gpu":"2"}}}]},)"
      R"("status":)";
  text += std::string(depth, '[') + std::string(depth, ']') + "}";
  const Result<PlacementRequest> got = ParsePodRequest(text);
  ASSERT_TRUE(got.ok()) << got.error().message();
  EXPECT_EQ(got->gpus, 2);
}

// Deep nesting where a value is read is cut at the kept depth and reported as the wrong type.
TEST(PodRequestRobustnessTest, DeepNestingInReadFieldsIsATypeError) {
  const std::size_t depth = 100'000;
  std::string text = R"({"spec":{"containers":[{"resources":{"limits":{"nvidia.com/gpu":)";
  text += std::string(depth, '[') + std::string(depth, ']') + "}}}]}}";
  const Result<PlacementRequest> got = ParsePodRequest(text);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.error().message().find("expected a quantity"), std::string::npos) << got.error().message();
}

// ---------------------------------------------------------------------------------------------
// ShapeKey and names.

TEST(PodRequestShapeKeyTest, IdentityRoleAndPoolDoNotMatter) {
  json a = RichPod();
  json b = RichPod();
  b["metadata"]["name"] = "trainer-1";
  b["metadata"]["namespace"] = "other";
  b["metadata"]["uid"] = "ffffffff-0000-0000-0000-000000000000";
  b["metadata"]["labels"]["llm-d.ai/role"] = "decode";
  b["metadata"]["labels"]["toposched.io/pool"] = "h100-b";
  const auto ra = ParsePodRequest(a.dump());
  const auto rb = ParsePodRequest(b.dump());
  ASSERT_TRUE(ra.ok() && rb.ok());
  EXPECT_NE(*ra, *rb);
  EXPECT_EQ(ra->ShapeKey(), rb->ShapeKey());
}

TEST(PodRequestShapeKeyTest, AlignmentChangesTheKey) {
  json a = RichPod();
  json b = RichPod();
  b["metadata"]["annotations"]["toposched.io/gpu-nic-alignment"] = "PIX";
  json c = RichPod();
  c["metadata"]["annotations"].erase("toposched.io/gpu-nic-alignment");
  const auto ra = ParsePodRequest(a.dump());
  const auto rb = ParsePodRequest(b.dump());
  const auto rc = ParsePodRequest(c.dump());
  ASSERT_TRUE(ra.ok() && rb.ok() && rc.ok());
  EXPECT_NE(ra->ShapeKey(), rb->ShapeKey());
  EXPECT_NE(ra->ShapeKey(), rc->ShapeKey());
  EXPECT_NE(rb->ShapeKey(), rc->ShapeKey());
}

// Every placement-relevant field changes the key, and no two single-field changes collide.
TEST(PodRequestShapeKeyTest, EveryShapeFieldChangesTheKey) {
  const std::vector<std::pair<std::string, std::function<void(PlacementRequest&)>>> edits = {
      {"gpus", [](PlacementRequest& r) { r.gpus = 2; }},
      {"vendor", [](PlacementRequest& r) { r.vendor = GpuVendor::kAmd; }},
      {"rdma_nics", [](PlacementRequest& r) { r.rdma_nics = 1; }},
      {"max_class", [](PlacementRequest& r) { r.max_gpu_nic_class = LinkClass::kSYS; }},
      {"node_policy", [](PlacementRequest& r) { r.node_policy = PackPolicy::kSpread; }},
      {"shared.count", [](PlacementRequest& r) { r.shared.count = 1; }},
      {"shared.memory_mib", [](PlacementRequest& r) { r.shared.memory_mib = 1; }},
      {"shared.memory_percent", [](PlacementRequest& r) { r.shared.memory_percent = 1; }},
      {"shared.cores", [](PlacementRequest& r) { r.shared.cores = 1; }},
      {"shared.gpu_policy", [](PlacementRequest& r) { r.shared.gpu_policy = PackPolicy::kBinpack; }},
      {"shared.numa_bind", [](PlacementRequest& r) { r.shared.numa_bind = true; }},
      {"shared.use_types", [](PlacementRequest& r) { r.shared.use_types = {"a"}; }},
      {"shared.avoid_types", [](PlacementRequest& r) { r.shared.avoid_types = {"a"}; }},
      {"shared.use_uuids", [](PlacementRequest& r) { r.shared.use_uuids = {"a"}; }},
      {"shared.avoid_uuids", [](PlacementRequest& r) { r.shared.avoid_uuids = {"a"}; }},
      // A separator inside a name must not imitate two names.
      {"shared.use_types joined", [](PlacementRequest& r) { r.shared.use_types = {"a,b"}; }},
      {"shared.use_types split",
       [](PlacementRequest& r) {
         r.shared.use_types = {"a", "b"};
       }},
      {"shared.use_types imitating", [](PlacementRequest& r) { r.shared.use_types = {"1:a1:b"}; }},
  };
  const PlacementRequest base;
  std::set<std::string> keys = {base.ShapeKey()};
  for (const auto& [name, edit] : edits) {
    PlacementRequest r;
    edit(r);
    EXPECT_TRUE(keys.insert(r.ShapeKey()).second) << name << " collides: " << r.ShapeKey();
  }
  PlacementRequest same;
  same.pod_name = "x";
  same.pod_uid = "y";
  same.role = PodRole::kBoth;
  same.pool = "z";
  EXPECT_EQ(same.ShapeKey(), base.ShapeKey());
}

// The lenient reader for restores reads "true" exactly as the parser does, and nothing else.
TEST(PodRequestAnnotationTest, AnnotationIsTrue) {
  for (const char* yes : {"true", "True", " TRUE\t"}) EXPECT_TRUE(AnnotationIsTrue(yes)) << yes;
  for (const char* no : {"false", "", "yes", "1", "truee"}) EXPECT_FALSE(AnnotationIsTrue(no)) << no;
}

TEST(PodRequestNamesTest, ToStringNames) {
  EXPECT_EQ(ToString(PodRole::kNone), "none");
  EXPECT_EQ(ToString(PodRole::kPrefill), "prefill");
  EXPECT_EQ(ToString(PodRole::kDecode), "decode");
  EXPECT_EQ(ToString(PodRole::kBoth), "both");
  EXPECT_EQ(ToString(PackPolicy::kDefault), "default");
  EXPECT_EQ(ToString(PackPolicy::kBinpack), "binpack");
  EXPECT_EQ(ToString(PackPolicy::kSpread), "spread");
}

// spec.resourceClaims (DRA) is read as the API server validates it: a name and exactly one of
// resourceClaimName and resourceClaimTemplateName; the devices they ask are the source's to say.
TEST(PodRequestResourceClaims, ReadsEachEntryAndRefusesMalformedOnes) {
  const Result<PlacementRequest> r = ParsePodRequest(R"({"metadata":{"name":"p","namespace":"ml"},
      "spec":{"resourceClaims":[{"name":"gpus","resourceClaimTemplateName":"four-gpus"},
                                {"name":"nic","resourceClaimName":"shared-nic"}],
              "containers":[{"name":"a","resources":{"claims":[{"name":"gpus"}]}}]}})");
  ASSERT_TRUE(r.ok()) << r.error().message();
  ASSERT_EQ(r->resource_claims.size(), 2u);
  EXPECT_EQ(r->resource_claims[0], (PlacementRequest::ClaimRef{"gpus", "", "four-gpus"}));
  EXPECT_EQ(r->resource_claims[1], (PlacementRequest::ClaimRef{"nic", "shared-nic", ""}));
  EXPECT_EQ(r->gpus, 0);  // the claims' devices are not the pod's extended resources
  EXPECT_FALSE(r->dra);
  for (const char* bad :
       {R"({"spec":{"resourceClaims":{}}})", R"({"spec":{"resourceClaims":[{"name":"a"}]}})",
        R"({"spec":{"resourceClaims":[{"resourceClaimName":"c"}]}})",
        R"({"spec":{"resourceClaims":[{"name":"a","resourceClaimName":"c",
                              "resourceClaimTemplateName":"t"}]}})"}) {
    EXPECT_FALSE(ParsePodRequest(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace toposched

namespace toposched {
namespace {

// An llm-d.ai/role value llm-d does not know is ignored with a warning, never a failure: a pod
// labelled with a future role must still be scheduled.
TEST(PodRequestTest, AnUnknownRoleIsIgnoredWithAWarning) {
  for (const char* value : {"chef", "Prefill", ""}) {
    SCOPED_TRACE(value);
    const std::string pod =
        R"({"metadata":{"name":"p","labels":{"llm-d.ai/role":")" + std::string(value) +
        R"("}},"spec":{"containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}})";
    Result<PlacementRequest> r = ParsePodRequest(pod);
    ASSERT_TRUE(r.ok()) << r.error().message();
    EXPECT_EQ(r->role, PodRole::kNone);
    EXPECT_EQ(r->gpus, 1);
    ASSERT_EQ(r->warnings.size(), 1u);
    EXPECT_NE(r->warnings[0].find("is not a role llm-d knows"), std::string::npos) << r->warnings[0];
  }
  Result<PlacementRequest> known =
      ParsePodRequest(R"({"metadata":{"labels":{"llm-d.ai/role":"prefill-decode"}}})");
  ASSERT_TRUE(known.ok());
  EXPECT_TRUE(known->warnings.empty());
  EXPECT_EQ(known->role, PodRole::kBoth);
}

}  // namespace
}  // namespace toposched
