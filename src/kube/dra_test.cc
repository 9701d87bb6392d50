// DRA objects (kube/dra.h): ResourceSlices as NVIDIA's GPU driver and DRANET publish them,
// ResourceClaims, DeviceClasses, the mapping onto a real node's topology and a claim's demand.

#include "toposched/kube/dra.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "testing/shared_topologies.h"
#include "toposched/topology/nccl_xml.h"

namespace toposched::kube {
namespace {

using nlohmann::json;

// OCI BM.GPU.H100.8 (NCCL's export): GPU 0 at 0000:0f:00.0, GPU 1 at 0000:2d:00.0; each
// ConnectX-7 is one PCI function with two RDMA ports (mlx5_18 and mlx5_19 at 0000:0c:00.0).
constexpr const char* kOciH100 = "oci__bm.gpu.h100.8_kubernetes-variant.nccl.xml";

NodeTopology OciH100() {
  Result<NodeTopology> r = ParseNcclXml(testing::ReadFile(testing::SharedTopology(kOciH100)));
  EXPECT_TRUE(r.ok()) << r.error().message();
  return r.ok() ? std::move(r).value() : NodeTopology{};
}

int NicIndex(const NodeTopology& t, const std::string& name) {
  for (std::size_t n = 0; n < t.nics.size(); ++n) {
    if (t.nics[n].name == name) return static_cast<int>(n);
  }
  return -1;
}

// A whole GPU as kubernetes-sigs/dra-driver-nvidia-gpu publishes it
// (cmd/gpu-kubelet-plugin/deviceinfo.go @bbcbdfbe05a3 GpuInfo.Attributes: unqualified driver
// attributes, the standard pciBusID and pcieRoot from k8s.io/dynamic-resource-allocation's
// deviceattribute package; capacity "memory" in bytes).
json NvidiaGpu(int minor, const std::string& bus_id, const std::string& pcie_root) {
  return json::parse(R"({"name": "gpu-)" + std::to_string(minor) + R"(",
    "attributes": {
      "type": {"string": "gpu"},
      "uuid": {"string": "GPU-7d2c0a5e-13a1-4b0f-9e53-6c1f4d0b2a9)" +
                     std::to_string(minor) + R"("},
      "productName": {"string": "NVIDIA H100 80GB HBM3"},
      "brand": {"string": "Nvidia"},
      "architecture": {"string": "Hopper"},
      "cudaComputeCapability": {"version": "9.0.0"},
      "driverVersion": {"version": "570.133.20"},
      "cudaDriverVersion": {"version": "12.8.0"},
      "resource.kubernetes.io/pciBusID": {"string": ")" +
                     bus_id + R"("},
      "resource.kubernetes.io/pcieRoot": {"string": ")" +
                     pcie_root + R"("}
    },
    "capacity": {"memory": {"value": "81559Mi"}}})");
}

// A MIG device (mig.go CommonAttributesMig @bbcbdfbe05a3): type "mig" and the parent's pciBusID.
json NvidiaMig(const std::string& parent_bus_id) {
  return json::parse(R"({"name": "gpu-0-mig-9-4-4",
    "attributes": {
      "type": {"string": "mig"},
      "uuid": {"string": "MIG-1f0e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"},
      "parentUUID": {"string": "GPU-7d2c0a5e-13a1-4b0f-9e53-6c1f4d0b2a90"},
      "profile": {"string": "3g.40gb"},
      "productName": {"string": "NVIDIA H100 80GB HBM3"},
      "resource.kubernetes.io/pciBusID": {"string": ")" +
                     parent_bus_id + R"("}
    },
    "capacity": {"multiprocessors": {"value": "60"}, "memory": {"value": "40Gi"}}})");
}

json Slice(const std::string& driver, const std::string& node, const json& devices) {
  json s = json::parse(R"({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
    "metadata": {"name": "", "resourceVersion": "4711"},
    "spec": {"driver": "", "pool": {"name": "", "generation": 3, "resourceSliceCount": 1}, "nodeName": ""}})");
  s["metadata"]["name"] = node + "-" + driver + "-x7k2q";
  s["spec"]["driver"] = driver;
  s["spec"]["pool"]["name"] = node;
  s["spec"]["nodeName"] = node;
  s["spec"]["devices"] = devices;
  return s;
}

// A NIC as DRANET publishes it (kubernetes-sigs/dranet pkg/inventory/db.go @eb6aa20e0a4b
// discoverPCIDevices / addLinkAttributes / discoverRDMADevices; names from pkg/apis/attributes.go
// @588903d1cdb2, rdmaDevice from the same file). The device name is names.NormalizePCIAddress of
// the address; its exact prefix is not confirmed here and the mapping never reads it.
json DranetNic(const std::string& bus_id, const std::string& ifname, const std::string& rdma_device) {
  std::string name = bus_id;
  for (char& c : name) c = (c == ':' || c == '.') ? '-' : c;
  json d = json::parse(R"({"attributes": {
      "dra.net/pciVendor": {"string": "Mellanox Technologies"},
      "dra.net/pciDevice": {"string": "MT2910 Family [ConnectX-7]"},
      "dra.net/pciSubsystem": {"string": "0038"},
      "dra.net/numaNode": {"int": 0},
      "resource.kubernetes.io/pcieRoot": {"string": "pci0000:00"},
      "dra.net/mac": {"string": "a0:88:c2:1e:6d:94"},
      "dra.net/mtu": {"int": 4200},
      "dra.net/encapsulation": {"string": "ether"},
      "dra.net/alias": {"string": ""},
      "dra.net/state": {"string": "up"},
      "dra.net/type": {"string": "device"},
      "dra.net/ebpf": {"bool": false},
      "dra.net/sriov": {"bool": false},
      "dra.net/virtual": {"bool": false},
      "dra.net/rdma": {"bool": true}}})");
  d["name"] = "pci-" + name;
  d["attributes"]["dra.net/pciAddress"] = {{"string", bus_id}};
  if (!ifname.empty()) d["attributes"]["dra.net/ifName"] = {{"string", ifname}};
  if (!rdma_device.empty()) d["attributes"]["dra.net/rdmaDevice"] = {{"string", rdma_device}};
  return d;
}

// ---- PCI addresses ----

TEST(DraPciAddress, NormalizesEveryWrittenForm) {
  struct Case {
    std::string in, want;
  } const cases[] = {
      {"0000:07:00.0", "0000:07:00.0"},      // standard pciBusID (deviceattribute's BDF)
      {"07:00.0", "0000:07:00.0"},           // no domain: 0000
      {"0000:2D:00.0", "0000:2d:00.0"},      // upper case
      {"00000000:2D:00.0", "0000:2d:00.0"},  // NVML / nvidia-smi's 8-digit domain
      {"pci0000:00", ""},                    // a pcieRoot, not a bus id
      {"", ""},
  };
  for (const Case& c : cases) EXPECT_EQ(NormalizePciBusId(c.in), c.want) << c.in;
}

// ---- ResourceSlice ----

TEST(DraReadResourceSlice, NvidiaSliceQualifiesDriverAttributes) {
  Result<DraSlice> s = ReadResourceSlice(
      Slice("gpu.nvidia.com", "h100-a", json::array({NvidiaGpu(0, "0000:0f:00.0", "pci0000:00")})));
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_EQ(s->name, "h100-a-gpu.nvidia.com-x7k2q");
  EXPECT_EQ(s->resource_version, "4711");
  EXPECT_EQ(s->driver, "gpu.nvidia.com");
  EXPECT_EQ(s->pool, "h100-a");
  EXPECT_EQ(s->pool_generation, 3);
  EXPECT_EQ(s->node_name, "h100-a");
  ASSERT_EQ(s->devices.size(), 1u);
  const DraDevice& d = s->devices[0];
  EXPECT_EQ(d.name, "gpu-0");
  ASSERT_NE(DraStringAttribute(d, "gpu.nvidia.com/type"), nullptr);  // "type" took the driver's domain
  EXPECT_EQ(*DraStringAttribute(d, "gpu.nvidia.com/type"), "gpu");
  EXPECT_EQ(DraStringAttribute(d, "type"), nullptr);
  EXPECT_EQ(*DraStringAttribute(d, kDraPciBusIdAttribute), "0000:0f:00.0");  // already qualified: kept
  EXPECT_EQ(d.attributes.at("gpu.nvidia.com/cudaComputeCapability"), DraAttributeValue(DraVersion{"9.0.0"}));
  EXPECT_EQ(d.capacity.at("gpu.nvidia.com/memory"), "81559Mi");
}

TEST(DraReadResourceSlice, DranetTypedValuesAndNumaLists) {
  json nic = DranetNic("0000:0c:00.0", "eth0", "mlx5_18");
  // numaNode in the list form (DRAListTypeAttributes; deviceattribute/numa_linux.go).
  nic["attributes"][std::string(kDraNumaNodeAttribute)] = {{"ints", {1, 0}}};
  Result<DraSlice> s = ReadResourceSlice(Slice("dra.net", "h100-a", json::array({nic})));
  ASSERT_TRUE(s.ok()) << s.error().message();
  const DraDevice& d = s->devices[0];
  EXPECT_EQ(d.name, "pci-0000-0c-00-0");
  EXPECT_EQ(DraBoolAttribute(d, kDranetRdmaAttribute), true);
  EXPECT_EQ(DraIntAttribute(d, kDranetNumaNodeAttribute), 0);
  EXPECT_EQ(DraIntAttribute(d, kDraNumaNodeAttribute), 1);  // the physical node leads the list
  EXPECT_EQ(DraIntAttribute(d, "dra.net/mtu"), 4200);
}

TEST(DraReadResourceSlice, NodeSelectorAndAllNodesSlicesHaveNoNode) {
  json s = Slice("dra.net", "h100-a", json::array());
  s["spec"].erase("nodeName");
  s["spec"]["allNodes"] = true;
  Result<DraSlice> r = ReadResourceSlice(s);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->node_name, "");
  EXPECT_TRUE(r->all_nodes);
}

TEST(DraReadResourceSlice, MalformedTable) {
  const json gpu = NvidiaGpu(0, "0000:0f:00.0", "pci0000:00");
  json too_many = json::array();
  for (int i = 0; i < 129; ++i) too_many.push_back(NvidiaGpu(i, "0000:0f:00.0", "pci0000:00"));
  auto with = [&](const std::function<void(json&)>& edit) {
    json s = Slice("gpu.nvidia.com", "h100-a", json::array({gpu}));
    edit(s);
    return s;
  };
  struct Case {
    std::string name;
    json slice;
    std::string error;
  } const cases[] = {
      {"not an object", json::array(), "ResourceSlice: top level: expected an object"},
      {"no spec", with([](json& s) { s.erase("spec"); }), "spec: required field is missing"},
      {"driver not a string", with([](json& s) { s["spec"]["driver"] = 7; }),
       "spec.driver: expected a string, got 7"},
      {"no pool", with([](json& s) { s["spec"].erase("pool"); }), "spec.pool: required field is missing"},
      {"negative generation", with([](json& s) { s["spec"]["pool"]["generation"] = -1; }),
       "spec.pool.generation"},
      {"two placements", with([](json& s) { s["spec"]["allNodes"] = true; }), "exactly one of nodeName"},
      {"129 devices", with([&](json& s) { s["spec"]["devices"] = too_many; }),
       "129 entries, over the limit of 128"},
      {"two values", with([](json& s) { s["spec"]["devices"][0]["attributes"]["type"]["int"] = 1; }),
       "spec.devices[0].attributes.type: must have exactly one value field, has 2"},
      {"no value", with([](json& s) { s["spec"]["devices"][0]["attributes"]["type"] = json::object(); }),
       "must have exactly one value field, has 0"},
      {"unknown value type", with([](json& s) {
         s["spec"]["devices"][0]["attributes"]["type"] = {{"float", 1.5}};
       }),
       "unknown attribute type"},
      {"int too large", with([](json& s) {
         s["spec"]["devices"][0]["attributes"]["minor"] = {{"int", 1e30}};
       }),
       "attributes.minor.int: expected an integer"},
      {"given twice", with([](json& s) {
         s["spec"]["devices"][0]["attributes"]["gpu.nvidia.com/type"] = {{"string", "gpu"}};
       }),
       "is given twice"},
      {"bad name", with([](json& s) {
         s["spec"]["devices"][0]["attributes"]["a/b/c"] = {{"bool", true}};
       }),
       "is not a qualified name"},
      {"duplicate device", with([&](json& s) { s["spec"]["devices"].push_back(gpu); }),
       "duplicate device \"gpu-0\""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Result<DraSlice> r = ReadResourceSlice(c.slice);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message().find(c.error), std::string::npos) << r.error().message();
  }
}

// ---- mapping onto the node's topology ----

TEST(DraMapDevices, NvidiaGpusMapByPciAddress) {
  TOPOSCHED_SKIP_WITHOUT_SHARED_TOPOLOGIES();
  const NodeTopology t = OciH100();
  ASSERT_EQ(t.gpus.size(), 8u);
  ASSERT_EQ(t.gpus[0].pci_bus_id, "0000:0f:00.0");
  ASSERT_EQ(t.gpus[1].pci_bus_id, "0000:2d:00.0");
  json older = NvidiaGpu(1, "", "pci0000:00");
  // NVIDIA/k8s-dra-driver-gpu deviceinfo.go @03af824603ff: the driver's own "pcieBusID" only.
  older["attributes"].erase("resource.kubernetes.io/pciBusID");
  older["attributes"]["pcieBusID"] = {{"string", "0000:2d:00.0"}};
  json unknown = NvidiaGpu(9, "0000:ee:00.0", "pci0000:e0");
  Result<DraSlice> s = ReadResourceSlice(Slice(
      "gpu.nvidia.com", "h100-a", json::array({NvidiaGpu(0, "0000:0f:00.0", "pci0000:00"), older, unknown})));
  ASSERT_TRUE(s.ok()) << s.error().message();
  const std::vector<DraDeviceMapping> m = MapDraDevices(*s, t);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0], (DraDeviceMapping{"gpu-0", DraDeviceKind::kGpu, 0, "0000:0f:00.0", ""}));
  EXPECT_EQ(m[1], (DraDeviceMapping{"gpu-1", DraDeviceKind::kGpu, 1, "0000:2d:00.0", ""}));
  EXPECT_FALSE(m[2].mapped());
  EXPECT_EQ(m[2].kind, DraDeviceKind::kGpu);
  EXPECT_EQ(m[2].reason, "PCI address 0000:ee:00.0 is no GPU of the node");
}

TEST(DraMapDevices, UpperCaseAndEightDigitDomainsMap) {
  TOPOSCHED_SKIP_WITHOUT_SHARED_TOPOLOGIES();
  const NodeTopology t = OciH100();
  json upper = NvidiaGpu(0, "0000:0F:00.0", "pci0000:00");
  json nvml = NvidiaGpu(1, "", "pci0000:00");
  nvml["attributes"].erase("resource.kubernetes.io/pciBusID");
  nvml["attributes"]["pcieBusID"] = {{"string", "00000000:2D:00.0"}};  // as NVML and nvidia-smi write it
  Result<DraSlice> s = ReadResourceSlice(Slice("gpu.nvidia.com", "h100-a", json::array({upper, nvml})));
  ASSERT_TRUE(s.ok()) << s.error().message();
  const std::vector<DraDeviceMapping> m = MapDraDevices(*s, t);
  EXPECT_EQ(m[0].index, 0);
  EXPECT_EQ(m[0].pci_bus_id, "0000:0f:00.0");
  EXPECT_EQ(m[1].index, 1);
}

TEST(DraMapDevices, MigAndAddresslessDevicesAreUnmappedWithAReason) {
  TOPOSCHED_SKIP_WITHOUT_SHARED_TOPOLOGIES();
  const NodeTopology t = OciH100();
  json addressless = NvidiaGpu(3, "", "");
  addressless["attributes"].erase("resource.kubernetes.io/pciBusID");
  addressless["attributes"].erase("resource.kubernetes.io/pcieRoot");
  json disagree = NvidiaGpu(4, "0000:89:00.0", "pci0000:80");
  disagree["attributes"]["pcieBusID"] = {{"string", "0000:a8:00.0"}};
  Result<DraSlice> s = ReadResourceSlice(
      Slice("gpu.nvidia.com", "h100-a", json::array({NvidiaMig("0000:0f:00.0"), addressless, disagree})));
  ASSERT_TRUE(s.ok()) << s.error().message();
  const std::vector<DraDeviceMapping> m = MapDraDevices(*s, t);
  for (const DraDeviceMapping& d : m) EXPECT_FALSE(d.mapped()) << d.device;
  // The MIG device carries GPU 0's address: mapping it by address would count a slice as the card.
  EXPECT_NE(m[0].reason.find("a MIG device"), std::string::npos) << m[0].reason;
  EXPECT_NE(m[1].reason.find("no PCI address"), std::string::npos) << m[1].reason;
  EXPECT_EQ(
      m[2].reason,
      "resource.kubernetes.io/pciBusID says 0000:89:00.0 but gpu.nvidia.com/pcieBusID says 0000:a8:00.0");
}

TEST(DraMapDevices, DranetTwoPortNicMapsByName) {
  TOPOSCHED_SKIP_WITHOUT_SHARED_TOPOLOGIES();
  const NodeTopology t = OciH100();
  const int port0 = NicIndex(t, "mlx5_18"), port1 = NicIndex(t, "mlx5_19");
  ASSERT_GE(port0, 0);
  ASSERT_GE(port1, 0);
  ASSERT_EQ(t.nics[static_cast<std::size_t>(port1)].pci_bus_id, "0000:0c:00.0");  // shared with mlx5_18
  Result<DraSlice> s = ReadResourceSlice(Slice(
      "dra.net", "h100-a",
      json::array({DranetNic("0000:0c:00.0", "", "mlx5_19"),  // IB-only: no netdev, the RDMA link name
                   DranetNic("0000:0C:00.0", "mlx5_18", ""),  // a name in ifName (NCCL exports no netdevs)
                   DranetNic("0000:2a:00.0", "ibp42s0", "mlx5_99"),  // two ports, neither named so
                   DranetNic("0000:0f:00.0", "", ""),                // a GPU's address
                   DranetNic("0000:ef:00.0", "eno1", "")})));
  ASSERT_TRUE(s.ok()) << s.error().message();
  const std::vector<DraDeviceMapping> m = MapDraDevices(*s, t);
  EXPECT_EQ(m[0].kind, DraDeviceKind::kNic);
  EXPECT_EQ(m[0].index, port1);
  EXPECT_EQ(m[1].index, port0);
  EXPECT_FALSE(m[2].mapped());
  EXPECT_EQ(m[2].reason,
            "PCI address 0000:2a:00.0 is shared by NICs \"mlx5_26\", \"mlx5_27\" and the device's "
            "dra.net/rdmaDevice/dra.net/ifName (\"mlx5_99\"/\"ibp42s0\") names none of them");
  EXPECT_EQ(m[3].reason, "PCI address 0000:0f:00.0 is a GPU of the node, not a NIC");
  EXPECT_EQ(m[4].reason, "PCI address 0000:ef:00.0 is no GPU or NIC of the node");
}

TEST(DraMapDevices, SingleFunctionNicMapsByAddressAlone) {
  TOPOSCHED_SKIP_WITHOUT_SHARED_TOPOLOGIES();
  NodeTopology t = OciH100();
  // Make mlx5_27 a function of its own: its address is then unique.
  t.nics[static_cast<std::size_t>(NicIndex(t, "mlx5_27"))].pci_bus_id = "0000:2a:00.1";
  Result<DraSlice> s = ReadResourceSlice(
      Slice("dra.net", "h100-a", json::array({DranetNic("0000:2a:00.1", "ens9f1np1", "")})));
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_EQ(MapDraDevices(*s, t)[0].index, NicIndex(t, "mlx5_27"));
}

TEST(DraMapDevices, OtherDriversTakeTheKindOfTheAddress) {
  TOPOSCHED_SKIP_WITHOUT_SHARED_TOPOLOGIES();
  const NodeTopology t = OciH100();
  const json devices = json::parse(R"([
    {"name": "a", "attributes": {"resource.kubernetes.io/pciBusID": {"string": "0000:2d:00.0"}}},
    {"name": "b", "attributes": {"resource.kubernetes.io/pciBusID": {"string": "0000:0c:00.0"}}}])");
  Result<DraSlice> s = ReadResourceSlice(Slice("example.com", "h100-a", devices));
  ASSERT_TRUE(s.ok()) << s.error().message();
  const std::vector<DraDeviceMapping> m = MapDraDevices(*s, t);
  EXPECT_EQ(m[0], (DraDeviceMapping{"a", DraDeviceKind::kGpu, 1, "0000:2d:00.0", ""}));
  EXPECT_EQ(m[1].kind, DraDeviceKind::kNic);
  EXPECT_FALSE(m[1].mapped());  // two ports share the address and nothing names one
}

// ---- DeviceClass ----

json DeviceClass(const std::string& name, const std::vector<std::string>& expressions) {
  json c = {{"apiVersion", "resource.k8s.io/v1"}, {"kind", "DeviceClass"}, {"metadata", {{"name", name}}}};
  c["spec"]["selectors"] = json::array();
  for (const std::string& e : expressions) c["spec"]["selectors"].push_back({{"cel", {{"expression", e}}}});
  return c;
}

TEST(DraReadDeviceClass, DriverChecksTable) {
  struct Case {
    std::string name;
    std::vector<std::string> expressions;
    std::string driver;
    std::vector<DraAttributeEquality> clauses;
    std::string reason;  // a part of it
  } const cases[] = {
      // The class NVIDIA's chart installs for whole GPUs.
      {"nvidia gpu",
       {"device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"},
       "gpu.nvidia.com",
       {{"gpu.nvidia.com/type", "gpu", true}},
       ""},
      {"dranet, double quotes", {R"(device.driver == "dra.net")"}, "dra.net", {}, ""},
      {"reversed, spaces", {R"(  "dra.net"==device.driver   )"}, "dra.net", {}, ""},
      {"rdma clause in a second selector",
       {R"(device.driver == "dra.net")", R"(device.attributes["dra.net"].rdma == true)"},
       "dra.net",
       {{"dra.net/rdma", "true", false}},
       ""},
      {"or",
       {R"(device.driver == "dra.net" || device.driver == "gpu.nvidia.com")"},
       "",
       {},
       "toposched does not evaluate CEL"},
      {"function", {R"(device.driver.startsWith("gpu"))"}, "", {}, "toposched does not evaluate CEL"},
      {"two drivers",
       {R"(device.driver == "a.com")", R"(device.driver == "b.com")"},
       "",
       {},
       "selects two drivers"},
      {"no driver", {R"(device.attributes["dra.net"].rdma == true)"}, "", {}, "no selector names a driver"},
      {"unbalanced", {R"(device.driver == "dra.net)"}, "", {}, "do not balance"},
      {"no selectors", {}, "", {}, "matches devices of every driver"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Result<DeviceClassInfo> r = ReadDeviceClass(DeviceClass("class-x", c.expressions));
    ASSERT_TRUE(r.ok()) << r.error().message();
    EXPECT_EQ(r->name, "class-x");
    EXPECT_EQ(r->driver, c.driver);
    EXPECT_EQ(r->clauses, c.clauses);
    if (c.reason.empty()) {
      EXPECT_EQ(r->reason, "");
    } else {
      EXPECT_NE(r->reason.find(c.reason), std::string::npos) << r->reason;
    }
  }
  EXPECT_FALSE(ReadDeviceClass(json::parse(R"({"metadata": {}})")).ok());
}

// ---- ResourceClaim ----

json Claim(const json& requests, const json& constraints = json::array()) {
  json c = json::parse(R"({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
    "metadata": {"name": "train-0-gpus-4x2kd", "namespace": "ml", "uid": "c0ffee00-0000-4000-8000-000000000001",
                 "resourceVersion": "99"},
    "spec": {"devices": {}}})");
  c["spec"]["devices"]["requests"] = requests;
  if (!constraints.empty()) c["spec"]["devices"]["constraints"] = constraints;
  return c;
}

json Exactly(const std::string& name, const std::string& cls, int count) {
  return {{"name", name},
          {"exactly", {{"deviceClassName", cls}, {"allocationMode", "ExactCount"}, {"count", count}}}};
}

TEST(DraReadResourceClaim, SpecAndStatus) {
  json claim = Claim(
      json::array({Exactly("gpus", "gpu.nvidia.com", 2), json::parse(R"({"name": "nic", "firstAvailable": [
                      {"name": "rdma", "deviceClassName": "dranet-rdma", "count": 1},
                      {"name": "any", "deviceClassName": "dranet", "allocationMode": "ExactCount", "count": 1,
                       "selectors": [{"cel": {"expression": "device.attributes['dra.net'].mtu >= 4000"}}]}]})")}),
      json::parse(R"([{"requests": ["gpus", "nic"], "matchAttribute": "resource.kubernetes.io/pcieRoot"}])"));
  claim["metadata"]["deletionTimestamp"] = "2026-12-07T10:00:00Z";
  // As the scheduler's allocator writes it (structured/internal/stable/allocator_stable.go).
  claim["status"] = json::parse(R"({
    "allocation": {
      "devices": {"results": [
        {"request": "gpus", "driver": "gpu.nvidia.com", "pool": "h100-a", "device": "gpu-0"},
        {"request": "gpus", "driver": "gpu.nvidia.com", "pool": "h100-a", "device": "gpu-1"},
        {"request": "nic/rdma", "driver": "dra.net", "pool": "h100-a", "device": "pci-0000-0c-00-0"}]},
      "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["h100-a"]}]}]},
      "allocationTimestamp": "2026-12-07T09:59:00Z"},
    "reservedFor": [{"resource": "pods", "name": "train-0", "uid": "p0d-uid-1"}]})");
  Result<DraClaim> r = ReadResourceClaim(claim);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->uid, "c0ffee00-0000-4000-8000-000000000001");
  EXPECT_EQ(r->namespace_, "ml");
  EXPECT_EQ(r->name, "train-0-gpus-4x2kd");
  EXPECT_EQ(r->resource_version, "99");
  EXPECT_TRUE(r->deleting);
  ASSERT_EQ(r->spec.requests.size(), 2u);
  ASSERT_TRUE(r->spec.requests[0].exactly.has_value());
  EXPECT_EQ(r->spec.requests[0].exactly->count, 2);
  EXPECT_EQ(r->spec.requests[0].exactly->device_class, "gpu.nvidia.com");
  const DraRequest& nic = r->spec.requests[1];
  EXPECT_FALSE(nic.exactly.has_value());
  ASSERT_EQ(nic.first_available.size(), 2u);
  EXPECT_EQ(nic.first_available[0].name, "rdma");
  EXPECT_EQ(nic.first_available[0].selection.count, 1);
  EXPECT_EQ(nic.first_available[1].selection.cel_selectors,
            std::vector<std::string>{"device.attributes['dra.net'].mtu >= 4000"});
  EXPECT_EQ(r->spec.constraints,
            (std::vector<DraConstraint>{{{"gpus", "nic"}, "resource.kubernetes.io/pcieRoot", ""}}));
  EXPECT_TRUE(r->allocated);
  ASSERT_EQ(r->results.size(), 3u);
  EXPECT_EQ(r->results[2], (DraAllocationResult{"nic/rdma", "dra.net", "h100-a", "pci-0000-0c-00-0"}));
  EXPECT_EQ(r->allocated_node, "h100-a");
  EXPECT_EQ(r->reserved_pod_uids, std::vector<std::string>{"p0d-uid-1"});
}

TEST(DraReadResourceClaim, CountDefaultsToOneAndOnlyTheAllocatorsSelectorNamesANode) {
  json claim = Claim(json::parse(R"([{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}])"));
  claim["status"]["allocation"]["nodeSelector"] = json::parse(R"({"nodeSelectorTerms": [{"matchExpressions": [
      {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}]}]})");
  Result<DraClaim> r = ReadResourceClaim(claim);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->spec.requests[0].exactly->count, 1);
  EXPECT_EQ(r->spec.requests[0].exactly->mode, DraAllocationMode::kExactCount);
  EXPECT_TRUE(r->allocated);
  EXPECT_EQ(r->allocated_node, "");  // a network-attached pool's selector: no single node
  EXPECT_FALSE(r->deleting);
}

TEST(DraReadResourceClaim, MalformedTable) {
  json too_many = json::array();
  for (int i = 0; i < 33; ++i) too_many.push_back(Exactly("r" + std::to_string(i), "gpu.nvidia.com", 1));
  json nine = json::array();
  for (int i = 0; i < 9; ++i) nine.push_back({{"name", "s" + std::to_string(i)}, {"deviceClassName", "c"}});
  struct Case {
    std::string name;
    json claim;
    std::string error;
  } const cases[] = {
      {"no spec", json::parse(R"({"metadata": {"name": "c", "uid": "u"}})"),
       "ResourceClaim: spec: required field is missing"},
      {"no uid", json::parse(R"({"metadata": {"name": "c"}, "spec": {}})"),
       "metadata.uid: required field is missing"},
      {"requests not an array",
       json::parse(R"({"metadata": {"name": "c", "uid": "u"}, "spec": {"devices": {"requests": {}}}})"),
       "spec.devices.requests: expected an array, got an object"},
      {"33 requests", Claim(too_many), "33 entries, over the limit of 32"},
      {"9 alternatives", Claim(json::array({{{"name", "r"}, {"firstAvailable", nine}}})),
       "9 entries, over the limit of 8"},
      {"huge count", Claim(json::array({Exactly("r", "c", 1000000)})),
       "spec.devices.requests[0].exactly.count: expected an integer in [1, 32], got 1000000"},
      {"zero count", Claim(json::array({Exactly("r", "c", 0)})), "expected an integer in [1, 32], got 0"},
      {"count a string",
       Claim(json::parse(R"([{"name": "r", "exactly": {"deviceClassName": "c", "count": "2"}}])")),
       "count: expected an integer in [1, 32], got \"2\""},
      {"unknown mode",
       Claim(
           json::parse(R"([{"name": "r", "exactly": {"deviceClassName": "c", "allocationMode": "Some"}}])")),
       "unknown mode \"Some\""},
      {"All with count",
       Claim(json::parse(
           R"([{"name": "r", "exactly": {"deviceClassName": "c", "allocationMode": "All", "count": 2}}])")),
       "must not be set when allocationMode is All"},
      {"exactly and firstAvailable",
       Claim(json::parse(
           R"([{"name": "r", "exactly": {"deviceClassName": "c"}, "firstAvailable": [{"name": "a", "deviceClassName": "c"}]}])")),
       "exactly one of exactly and firstAvailable"},
      {"neither", Claim(json::parse(R"([{"name": "r"}])")), "exactly one of exactly and firstAvailable"},
      {"duplicate request", Claim(json::array({Exactly("r", "c", 1), Exactly("r", "c", 1)})),
       "duplicate request \"r\""},
      {"no class", Claim(json::parse(R"([{"name": "r", "exactly": {"count": 1}}])")),
       "deviceClassName: required field is missing"},
      {"result without device",
       [] {
         json c = Claim(json::array({Exactly("r", "c", 1)}));
         c["status"]["allocation"]["devices"]["results"] =
             json::parse(R"([{"request": "r", "driver": "d", "pool": "p"}])");
         return c;
       }(),
       "status.allocation.devices.results[0].device: required field is missing"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Result<DraClaim> r = ReadResourceClaim(c.claim);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message().find(c.error), std::string::npos) << r.error().message();
  }
}

TEST(DraReadResourceClaimTemplate, ReadsTheInnerSpec) {
  const json t = json::parse(R"({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
    "metadata": {"name": "two-gpus", "namespace": "ml", "resourceVersion": "7"},
    "spec": {"metadata": {"labels": {"a": "b"}}, "spec": {"devices": {"requests": [
      {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 2}}]}}}})");
  Result<DraClaimTemplate> r = ReadResourceClaimTemplate(t);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->name, "two-gpus");
  EXPECT_EQ(r->namespace_, "ml");
  ASSERT_EQ(r->spec.requests.size(), 1u);
  EXPECT_EQ(r->spec.requests[0].exactly->count, 2);
  EXPECT_FALSE(ReadResourceClaimTemplate(json::parse(R"({"metadata": {"name": "x"}, "spec": {}})")).ok());
}

// ---- demand ----

std::map<std::string, DeviceClassInfo> Classes() {
  std::map<std::string, DeviceClassInfo> out;
  for (const json& c :
       {DeviceClass(
            "gpu.nvidia.com",
            {"device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}),
        DeviceClass(
            "mig.nvidia.com",
            {"device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"}),
        DeviceClass("dranet", {R"(device.driver == "dra.net")"}),
        DeviceClass("dranet-rdma",
                    {R"(device.driver == "dra.net" && device.attributes["dra.net"].rdma == true)"}),
        DeviceClass("fpga", {R"(device.driver == "fpga.example.com")"}),
        DeviceClass("any", {R"(device.driver.startsWith("x"))"})}) {
    Result<DeviceClassInfo> r = ReadDeviceClass(c);
    EXPECT_TRUE(r.ok());
    out[r->name] = *r;
  }
  return out;
}

DraClaimSpec SpecOf(const json& requests, const json& constraints = json::array()) {
  Result<DraClaim> r = ReadResourceClaim(Claim(requests, constraints));
  EXPECT_TRUE(r.ok()) << r.error().message();
  return r.ok() ? r->spec : DraClaimSpec{};
}

TEST(DraDemandOf, CountsTable) {
  const json all = json::parse(
      R"([{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All"}}])");
  const json cel = json::parse(R"([{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 1,
      "selectors": [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'"}}]}}])");
  const json rdma_cel =
      json::parse(R"([{"name": "n", "exactly": {"deviceClassName": "dranet-rdma", "count": 1,
      "selectors": [{"cel": {"expression": "device.attributes[\"dra.net\"].rdma == true"}}]}}])");
  const json first = json::parse(R"([{"name": "g", "firstAvailable": [
      {"name": "eight", "deviceClassName": "gpu.nvidia.com", "count": 8},
      {"name": "four", "deviceClassName": "gpu.nvidia.com", "count": 4}]}])");
  const json pair = json::array({Exactly("gpus", "gpu.nvidia.com", 2), Exactly("nic", "dranet-rdma", 1)});
  struct Case {
    std::string name;
    DraClaimSpec spec;
    bool evaluable;
    DraDeviceCount total;
    bool same_root, same_numa;
    std::string reason;  // a part of it
  } const cases[] = {
      {"two gpus and a nic", SpecOf(pair), true, {2, 1}, false, false, ""},
      {"first of firstAvailable", SpecOf(first), true, {8, 0}, false, false, ""},
      {"pcieRoot over all",
       SpecOf(pair, json::parse(R"([{"matchAttribute": "resource.kubernetes.io/pcieRoot"}])")),
       true,
       {2, 1},
       true,
       false,
       ""},
      {"numaNode over both by name",
       SpecOf(pair,
              json::parse(
                  R"([{"requests": ["gpus", "nic"], "matchAttribute": "resource.kubernetes.io/numaNode"}])")),
       true,
       {2, 1},
       false,
       true,
       ""},
      {"pcieRoot over the gpus only",
       SpecOf(pair, json::parse(
                        R"([{"requests": ["gpus"], "matchAttribute": "resource.kubernetes.io/pcieRoot"}])")),
       false,
       {2, 1},
       false,
       false,
       "covers only some of the requests"},
      {"driver numa",
       SpecOf(pair, json::parse(R"([{"matchAttribute": "dra.net/numaNode"}])")),
       false,
       {2, 1},
       false,
       false,
       "is neither resource.kubernetes.io/pcieRoot"},
      {"cel beyond the class",
       SpecOf(cel),
       false,
       {0, 0},
       false,
       false,
       "has a CEL selector toposched does not evaluate"},
      {"rdma equality in the request", SpecOf(rdma_cel), true, {0, 1}, false, false, ""},
      {"allocationMode All", SpecOf(all), false, {0, 0}, false, false, "asks for All devices"},
      {"mig class",
       SpecOf(json::array({Exactly("m", "mig.nvidia.com", 1)})),
       false,
       {0, 0},
       false,
       false,
       "also requires gpu.nvidia.com/type == \"mig\""},
      {"unknown driver",
       SpecOf(json::array({Exactly("f", "fpga", 1)})),
       false,
       {0, 0},
       false,
       false,
       "neither a GPU nor a NIC driver"},
      {"class not a driver check",
       SpecOf(json::array({Exactly("a", "any", 1)})),
       false,
       {0, 0},
       false,
       false,
       "toposched does not evaluate CEL"},
      {"unknown class",
       SpecOf(json::array({Exactly("u", "nope", 1)})),
       false,
       {0, 0},
       false,
       false,
       "device class \"nope\" is unknown"},
  };
  const std::map<std::string, DeviceClassInfo> classes = Classes();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const DraDemand d = DemandOf(c.spec, classes);
    EXPECT_EQ(d.evaluable, c.evaluable) << d.reason;
    EXPECT_EQ(d.total, c.total);
    EXPECT_EQ(d.same_pcie_root, c.same_root);
    EXPECT_EQ(d.same_numa_node, c.same_numa);
    if (c.reason.empty()) {
      EXPECT_EQ(d.reason, "");
    } else {
      EXPECT_NE(d.reason.find(c.reason), std::string::npos) << d.reason;
    }
  }
}

TEST(DraDemandOf, KeepsEveryAlternativeInOrder) {
  const DraClaimSpec spec = SpecOf(json::parse(R"([{"name": "g", "firstAvailable": [
      {"name": "eight", "deviceClassName": "gpu.nvidia.com", "count": 8},
      {"name": "nic", "deviceClassName": "dranet", "count": 2},
      {"name": "four", "deviceClassName": "gpu.nvidia.com", "count": 4}]}])"));
  const DraDemand d = DemandOf(spec, Classes());
  ASSERT_TRUE(d.evaluable) << d.reason;
  ASSERT_EQ(d.requests.size(), 1u);
  EXPECT_EQ(d.requests[0].subrequests, (std::vector<std::string>{"eight", "nic", "four"}));
  EXPECT_EQ(d.requests[0].options, (std::vector<DraDeviceCount>{{8, 0}, {0, 2}, {4, 0}}));
}

TEST(DraDemandOf, DriversAreConfigurable) {
  DraDrivers drivers;
  drivers.gpu.insert("fpga.example.com");  // counted as GPUs once configured so
  const DraDemand d = DemandOf(SpecOf(json::array({Exactly("f", "fpga", 3)})), Classes(), drivers);
  EXPECT_TRUE(d.evaluable) << d.reason;
  EXPECT_EQ(d.total, (DraDeviceCount{3, 0}));
}

}  // namespace
}  // namespace toposched::kube
