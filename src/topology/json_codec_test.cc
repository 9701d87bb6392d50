#include "toposched/topology/json_codec.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "toposched/topology/node_topology.h"

namespace toposched {
namespace {

using nlohmann::json;

// Designated initializers would read better, but GCC's -Wextra flags every std::string member
// they leave out; these small builders keep the fixtures warning-free.
PcieNode Bridge(const char* id, PcieKind kind, int parent, bool is_switch, int numa) {
  PcieNode p;
  p.id = id;
  p.kind = kind;
  p.parent = parent;
  p.is_switch = is_switch;
  p.numa = numa;
  p.package = numa;
  if (kind == PcieKind::kBridge) {
    p.vendor_id = 0x1000;
    p.device_id = 0xc030;
    p.link_gbps = 31.5077;
    p.link_width = 16;
  }
  return p;
}

GpuPeer Peer(int gpu, Fabric fabric, int links, std::uint64_t bandwidth_mbps, bool via_switch) {
  GpuPeer p;
  p.gpu = gpu;
  p.fabric = fabric;
  p.links = links;
  p.bandwidth_mbps = bandwidth_mbps;
  p.via_switch = via_switch;
  return p;
}

Gpu H100(const char* bus_id, const char* uuid, int parent, int peer) {
  Gpu g;
  g.pci_bus_id = bus_id;
  g.vendor = GpuVendor::kNvidia;
  g.vendor_id = 0x10de;
  g.device_id = 0x2330;
  g.model = "NVIDIA H100 80GB HBM3";
  g.uuid = uuid;
  g.memory_mib = 81559;
  g.numa = 0;
  g.package = 0;
  g.cpus = "0-23,48-71";
  g.parent = parent;
  g.link_gbps = 31.5077;
  g.link_width = 16;
  g.peers = {Peer(peer, Fabric::kNvlink, 18, 477000, true)};
  return g;
}

// Two sockets; socket 0 has a PCIe switch with two H100s (NVLinked through NVSwitches) and a
// ConnectX-7, socket 1 an Ethernet NIC straight on its host bridge. Devices are listed out of
// order so that DeriveLinks' sorting is part of what round-trips.
NodeTopology MakeTopology() {
  NodeTopology t;
  t.node_name = "gpu-node-17";
  t.source = TopologySource::kHwloc;
  t.source_detail = "gpu-node-17.example.com";
  t.agent_version = "0.1.0-test";
  for (int i = 0; i < 2; ++i) {
    NumaNode n;
    n.id = i;
    n.package = i;
    n.cpus = i == 0 ? "0-23,48-71" : "24-47,72-95";
    n.memory_bytes = 412316860416ull;
    t.numa_nodes.push_back(n);
  }
  t.pcie = {
      Bridge("hostbridge:0", PcieKind::kHostBridge, -1, false, 0),
      Bridge("0000:15:00.0", PcieKind::kBridge, 0, true, 0),
      Bridge("0000:16:00.0", PcieKind::kBridge, 1, false, 0),
      Bridge("0000:16:01.0", PcieKind::kBridge, 1, false, 0),
      Bridge("0000:16:02.0", PcieKind::kBridge, 1, false, 0),
      Bridge("hostbridge:1", PcieKind::kHostBridge, -1, false, 1),
  };
  t.gpus = {H100("0000:19:00.0", "GPU-5c1b3e3a-8f9e-2d1c-7b6a-0e4f3a2b1c0d", 3, 1),
            H100("0000:18:00.0", "GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9", 2, 0)};
  t.gpus[1].index = 1;

  Nic eth;
  eth.name = "eth0";
  eth.pci_bus_id = "0000:ca:00.0";
  eth.netdevs = {"eth0"};
  eth.kind = NicKind::kEthernet;
  eth.vendor_id = 0x8086;
  eth.device_id = 0x1593;
  eth.link_rate_mbps = 25000;
  eth.numa = 1;
  eth.package = 1;
  eth.cpus = "24-47,72-95";
  eth.parent = 5;
  eth.link_gbps = 7.877;
  eth.link_width = 8;
  Nic ib;
  ib.name = "mlx5_0";
  ib.pci_bus_id = "0000:1a:00.0";
  ib.netdevs = {"ib0", "ib0.8001"};
  ib.rdma = true;
  ib.kind = NicKind::kInfiniband;
  ib.vendor_id = 0x15b3;
  ib.device_id = 0x1021;
  ib.link_rate_mbps = 400000;
  ib.numa = 0;
  ib.package = 0;
  ib.cpus = "0-23,48-71";
  ib.parent = 4;
  ib.link_gbps = 31.5077;
  ib.link_width = 16;
  ib.rail = "rail0";
  t.nics = {eth, ib};
  DeriveLinks(t);
  return t;
}

// Everything unknown: no NUMA or PCIe information, AMD GPUs joined by xGMI, a NIC known only by
// its bus id.
NodeTopology MakeSparseAmdTopology() {
  NodeTopology t;
  t.node_name = "mi300-a";
  t.source = TopologySource::kNcclXml;
  for (int i = 0; i < 2; ++i) {
    Gpu g;
    g.index = i;
    g.pci_bus_id = i == 0 ? "0000:0c:00.0" : "0000:22:00.0";
    g.vendor = GpuVendor::kAmd;
    g.peers = {Peer(1 - i, Fabric::kXgmi, 0, 64000, false)};
    t.gpus.push_back(g);
  }
  Nic unnamed;
  unnamed.pci_bus_id = "0000:0d:00.0";
  unnamed.rdma = true;
  unnamed.kind = NicKind::kRoce;
  Nic unlocated;
  unlocated.name = "hsi0";
  t.nics = {unnamed, unlocated};
  DeriveLinks(t);
  return t;
}

std::vector<std::string> Tokens(const LinkMatrix& m) {
  std::vector<std::string> out;
  for (const Link& l : m.cells) out.push_back(l.Token());
  return out;
}

void ExpectSameMatrix(const LinkMatrix& a, const LinkMatrix& b, const char* name) {
  SCOPED_TRACE(name);
  EXPECT_EQ(a.rows, b.rows);
  EXPECT_EQ(a.cols, b.cols);
  EXPECT_EQ(Tokens(a), Tokens(b));
  EXPECT_TRUE(a == b);  // also compares Link::count and Link::fabric
}

// Element by element first, so a failure names the entry that differs; then the whole value.
template <typename T>
void ExpectSameEntries(const std::vector<T>& a, const std::vector<T>& b, const char* name) {
  ASSERT_EQ(a.size(), b.size()) << name;
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(a[i] == b[i]) << name << "[" << i << "] differs";
}

void ExpectSameTopology(const NodeTopology& a, const NodeTopology& b) {
  EXPECT_EQ(a.node_name, b.node_name);
  EXPECT_EQ(a.source, b.source);
  EXPECT_EQ(a.source_detail, b.source_detail);
  EXPECT_EQ(a.agent_version, b.agent_version);
  ExpectSameEntries(a.numa_nodes, b.numa_nodes, "numa_nodes");
  ExpectSameEntries(a.pcie, b.pcie, "pcie");  // link_gbps exact: the JSON number must round-trip
  ExpectSameEntries(a.gpus, b.gpus, "gpus");
  ExpectSameEntries(a.nics, b.nics, "nics");
  ExpectSameMatrix(a.gpu_gpu, b.gpu_gpu, "gpu_gpu");
  ExpectSameMatrix(a.gpu_nic, b.gpu_nic, "gpu_nic");
  ExpectSameMatrix(a.nic_nic, b.nic_nic, "nic_nic");
  EXPECT_TRUE(a == b);
  EXPECT_EQ(a.Fingerprint(), b.Fingerprint());
}

TEST(TopologyJsonTest, RoundTripsHandBuiltTopology) {
  const NodeTopology original = MakeTopology();
  // Sanity of the fixture: the NVLink pair and both NICs made it into the matrices.
  ASSERT_EQ(original.gpu_gpu.at(0, 1).Token(), "NV18");
  ASSERT_EQ(original.nics[0].name, "mlx5_0");  // RDMA NICs sort first
  ASSERT_EQ(original.gpus[0].pci_bus_id, "0000:18:00.0");

  const std::string text = EncodeTopologyJson(original);
  Result<NodeTopology> decoded = DecodeTopologyJson(text);
  ASSERT_TRUE(decoded.ok()) << decoded.error().message() << "\n" << text;
  ExpectSameTopology(original, *decoded);
  EXPECT_EQ(decoded->Fingerprint(), original.Fingerprint());
  EXPECT_EQ(EncodeTopologyJson(*decoded), text);
}

TEST(TopologyJsonTest, RoundTripsSparseAmdTopology) {
  const NodeTopology original = MakeSparseAmdTopology();
  ASSERT_EQ(original.gpu_gpu.at(0, 1).Token(), "XGMI");
  const std::string text = EncodeTopologyJson(original);
  Result<NodeTopology> decoded = DecodeTopologyJson(text);
  ASSERT_TRUE(decoded.ok()) << decoded.error().message() << "\n" << text;
  ExpectSameTopology(original, *decoded);
}

TEST(TopologyJsonTest, RoundTripsEmptyTopology) {
  NodeTopology original;
  original.node_name = "cpu-only";
  DeriveLinks(original);
  Result<NodeTopology> decoded = DecodeTopologyJson(EncodeTopologyJson(original));
  ASSERT_TRUE(decoded.ok()) << decoded.error().message();
  ExpectSameTopology(original, *decoded);
}

TEST(TopologyJsonTest, CompactAndIndentedBothDecode) {
  const NodeTopology original = MakeTopology();
  const std::string compact = EncodeTopologyJson(original, -1);
  const std::string indented = EncodeTopologyJson(original, 4);
  EXPECT_EQ(compact.find('\n'), std::string::npos);
  EXPECT_NE(indented.find("\n    \"apiVersion\""), std::string::npos);
  EXPECT_EQ(json::parse(compact), json::parse(indented));
  for (const std::string* text : {&compact, &indented}) {
    Result<NodeTopology> decoded = DecodeTopologyJson(*text);
    ASSERT_TRUE(decoded.ok()) << decoded.error().message();
    ExpectSameTopology(original, *decoded);
  }
}

TEST(TopologyJsonTest, EncodesDocumentedFields) {
  const NodeTopology t = MakeTopology();
  const json doc = json::parse(EncodeTopologyJson(t));
  EXPECT_EQ(doc["apiVersion"], "toposched.io/v1alpha1");
  EXPECT_EQ(doc["kind"], "NodeTopology");
  EXPECT_EQ(doc["metadata"]["name"], "gpu-node-17");
  const json& s = doc["status"];
  EXPECT_EQ(s["schemaVersion"], 1);
  EXPECT_EQ(s["source"], "hwloc");
  EXPECT_EQ(s["sourceDetail"], "gpu-node-17.example.com");
  EXPECT_EQ(s["agentVersion"], "0.1.0-test");
  EXPECT_EQ(s["fingerprint"], t.Fingerprint());
  EXPECT_EQ(s["switchCount"], 1);
  EXPECT_EQ(s["rdmaNicCount"], 1);

  EXPECT_EQ(s["numaNodes"][1], json::parse(R"({"id":1,"package":1,"cpus":"24-47,72-95",
                                                "memoryBytes":412316860416})"));
  EXPECT_EQ(s["pcie"][0], json::parse(R"({"id":"hostbridge:0","kind":"hostBridge",
      "parent":null,"switch":false,"numa":0,"package":0})"));
  EXPECT_EQ(s["pcie"][1], json::parse(R"({"id":"0000:15:00.0","kind":"bridge",
      "parent":"hostbridge:0","switch":true,"numa":0,"package":0,"vendorId":"0x1000",
      "deviceId":"0xc030","linkGBps":31.5077,"linkWidth":16})"));
  EXPECT_EQ(s["gpus"][0], json::parse(R"({"index":0,"pciBusId":"0000:18:00.0","vendor":"nvidia",
      "vendorId":"0x10de","deviceId":"0x2330","model":"NVIDIA H100 80GB HBM3",
      "uuid":"GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9","memoryMiB":81559,"numa":0,"package":0,
      "cpus":"0-23,48-71","parent":"0000:16:00.0","linkGBps":31.5077,"linkWidth":16,
      "peers":[{"gpu":1,"fabric":"nvlink","links":18,"bandwidthMBps":477000,
                "viaSwitch":true}]})"));
  EXPECT_EQ(s["nics"][0]["name"], "mlx5_0");
  EXPECT_EQ(s["nics"][0]["kind"], "infiniband");
  EXPECT_EQ(s["nics"][0]["netdevs"], json::parse(R"(["ib0","ib0.8001"])"));
  EXPECT_EQ(s["nics"][0]["linkRateMbps"], 400000);
  EXPECT_EQ(s["nics"][0]["rail"], "rail0");
  EXPECT_EQ(s["nics"][1]["rdma"], false);
  EXPECT_EQ(s["nics"][1]["parent"], "hostbridge:1");
  EXPECT_FALSE(s["nics"][1].contains("rail"));
  EXPECT_EQ(s["links"]["gpuGpu"], json::parse(R"([["X","NV18"],["NV18","X"]])"));
  EXPECT_EQ(s["links"]["gpuNic"], json::parse(R"([["PIX","SYS"],["PIX","SYS"]])"));
  EXPECT_EQ(s["links"]["nicNic"], json::parse(R"([["X","SYS"],["SYS","X"]])"));
}

TEST(TopologyJsonTest, EncodesUnknownsAsNullOrOmitted) {
  const json s = json::parse(EncodeTopologyJson(MakeSparseAmdTopology()))["status"];
  EXPECT_EQ(s["gpus"][0], json::parse(R"({"index":0,"pciBusId":"0000:0c:00.0","vendor":"amd",
      "numa":null,"package":null,"parent":null,
      "peers":[{"gpu":1,"fabric":"xgmi","links":0,"bandwidthMBps":64000,"viaSwitch":false}]})"));
  EXPECT_EQ(s["nics"][0], json::parse(R"({"name":"","pciBusId":"0000:0d:00.0","rdma":true,
      "kind":"roce","numa":null,"package":null,"parent":null})"));
  EXPECT_EQ(s["nics"][1], json::parse(R"({"name":"hsi0","rdma":false,"kind":"unknown",
      "numa":null,"package":null,"parent":null})"));
  EXPECT_EQ(s["links"]["gpuGpu"], json::parse(R"([["X","XGMI"],["XGMI","X"]])"));
  EXPECT_EQ(s["switchCount"], 0);
}

TEST(TopologyJsonTest, UnknownKeysAreIgnored) {
  const NodeTopology original = MakeTopology();
  json doc = json::parse(EncodeTopologyJson(original));
  doc["spec"] = {{"anything", {1, 2, 3}}};
  doc["metadata"]["labels"] = {{"a", "b"}};
  doc["metadata"]["uid"] = "1234";
  json& s = doc["status"];
  s["futureField"] = {{"nested", {{"deeper", nullptr}}}};
  s["numaNodes"][0]["distance"] = {10, 21};
  s["pcie"][1]["speed"] = "32.0 GT/s";
  s["gpus"][0]["migMode"] = false;
  s["gpus"][0]["peers"][0]["version"] = 4;
  s["nics"][1]["gid"] = "fe80::1";
  s["links"]["cpuGpu"] = json::array();
  // Derived fields are informational: stale values do not matter.
  s["fingerprint"] = "0000000000000000";
  s["switchCount"] = "many";
  s.erase("rdmaNicCount");
  Result<NodeTopology> decoded = DecodeTopologyJson(doc.dump());
  ASSERT_TRUE(decoded.ok()) << decoded.error().message();
  ExpectSameTopology(original, *decoded);
}

TEST(TopologyJsonTest, AcceptsOptionalFieldsAbsentAndLenientSpellings) {
  const json doc = json::parse(R"({
    "apiVersion": "toposched.io/v1alpha1", "kind": "NodeTopology",
    "metadata": {"name": "n1"},
    "status": {
      "schemaVersion": 1, "source": "synthetic",
      "numaNodes": [{"id": 3}],
      "pcie": [{"id": "hostbridge:0", "kind": "hostBridge"}],
      "gpus": [{"index": 0, "pciBusId": "4E:00.0", "vendor": "nvidia", "vendorId": "0X10DE",
                "deviceId": "0x20b", "parent": "hostbridge:0", "linkGBps": 16}],
      "nics": [{"name": "mlx5_0", "rdma": true, "pciBusId": "0000:4F:00.1"}],
      "links": {"gpuGpu": [["X"]], "gpuNic": [["PHB"]], "nicNic": [["X"]]}
    }})");
  Result<NodeTopology> decoded = DecodeTopologyJson(doc.dump());
  ASSERT_TRUE(decoded.ok()) << decoded.error().message();
  const NodeTopology& t = *decoded;
  EXPECT_EQ(t.source_detail, "");
  ASSERT_EQ(t.numa_nodes.size(), 1u);
  EXPECT_EQ(t.numa_nodes[0].id, 3);
  EXPECT_EQ(t.numa_nodes[0].package, -1);
  EXPECT_EQ(t.pcie[0].numa, -1);
  EXPECT_EQ(t.pcie[0].parent, -1);
  EXPECT_FALSE(t.pcie[0].is_switch);
  ASSERT_EQ(t.gpus.size(), 1u);
  EXPECT_EQ(t.gpus[0].pci_bus_id, "0000:4e:00.0");  // normalized
  EXPECT_EQ(t.gpus[0].vendor_id, 0x10de);
  EXPECT_EQ(t.gpus[0].device_id, 0x020b);
  EXPECT_EQ(t.gpus[0].parent, 0);
  EXPECT_EQ(t.gpus[0].numa, -1);
  EXPECT_EQ(t.gpus[0].link_gbps, 16.0);
  EXPECT_TRUE(t.gpus[0].peers.empty());
  ASSERT_EQ(t.nics.size(), 1u);
  EXPECT_EQ(t.nics[0].pci_bus_id, "0000:4f:00.1");
  EXPECT_EQ(t.nics[0].kind, NicKind::kUnknown);
  EXPECT_EQ(t.nics[0].parent, -1);
  EXPECT_EQ(t.gpu_nic.rows, 1);
  EXPECT_EQ(t.gpu_nic.cols, 1);
  EXPECT_EQ(t.gpu_nic.at(0, 0).cls, LinkClass::kPHB);
}

// ---------------------------------------------------------------------------------------------
// Malformed documents.

struct MalformedCase {
  std::string name;
  std::function<std::string()> document;
  std::string expected_error;  // a substring of the message
};

std::string ValidDocument() {
  return EncodeTopologyJson(MakeTopology(), -1);
}

// The valid document with `edit` applied to its status (or, for top-level edits, to the root).
std::function<std::string()> EditRoot(std::function<void(json&)> edit) {
  return [edit = std::move(edit)] {
    json doc = json::parse(ValidDocument());
    edit(doc);
    return doc.dump();
  };
}

std::function<std::string()> EditStatus(std::function<void(json&)> edit) {
  return EditRoot([edit = std::move(edit)](json& doc) { edit(doc["status"]); });
}

std::function<std::string()> Text(std::string text) {
  return [text = std::move(text)] { return text; };
}

std::vector<MalformedCase> MalformedCases() {
  return {
      {"EmptyString", Text(""), "not valid JSON: the document is empty"},
      {"OnlyWhitespace", Text(" \n\t"), "the document is empty"},
      {"TopLevelArray", Text("[]"), "top level: expected a JSON object, got an array"},
      {"TopLevelString", Text(R"("NodeTopology")"), "top level: expected a JSON object"},
      {"NotJson", Text("apiVersion: v1\nkind: NodeTopology\n"),
       "not valid JSON (byte 1): parse error at line 1, column 1"},
      {"TruncatedJson",
       [] {
         const std::string doc = ValidDocument();
         return doc.substr(0, doc.size() / 2);
       },
       "not valid JSON"},
      {"TrailingGarbage", [] { return ValidDocument() + "}"; }, "not valid JSON"},
      {"InvalidUtf8InString", Text("{\"apiVersion\":\"\xff\"}"), "not valid JSON"},
      {"AgentVersionNotString", EditStatus([](json& s) { s["agentVersion"] = 0; }),
       "status.agentVersion: expected a string, got 0"},
      {"NumberTooLargeForDouble",
       [] {
         std::string doc = ValidDocument();
         doc.replace(doc.find("\"schemaVersion\":1"), 17, "\"schemaVersion\":1e999");
         return doc;
       },
       "not valid JSON"},
      {"NestedTooDeep", Text(std::string(100000, '[') + std::string(100000, ']')), "nested deeper than"},
      {"WrongApiVersion", EditRoot([](json& d) { d["apiVersion"] = "toposched.io/v1"; }),
       "apiVersion: expected \"toposched.io/v1alpha1\", got \"toposched.io/v1\""},
      {"MissingApiVersion", EditRoot([](json& d) { d.erase("apiVersion"); }),
       "apiVersion: required field is missing"},
      {"WrongKind", EditRoot([](json& d) { d["kind"] = "Node"; }),
       "kind: expected \"NodeTopology\", got \"Node\""},
      {"MissingMetadataName", EditRoot([](json& d) { d["metadata"].erase("name"); }),
       "metadata.name: required field is missing"},
      {"EmptyMetadataName", EditRoot([](json& d) { d["metadata"]["name"] = ""; }),
       "metadata.name: expected a node name of 1 to 253 characters"},
      {"LongMetadataName", EditRoot([](json& d) { d["metadata"]["name"] = std::string(254, 'n'); }),
       "metadata.name: expected a node name of 1 to 253 characters, got \"nnnn"},
      {"MetadataNotObject", EditRoot([](json& d) { d["metadata"] = "n1"; }),
       "metadata: expected an object, got \"n1\""},
      {"MissingStatus", EditRoot([](json& d) { d.erase("status"); }), "status: required field is missing"},
      {"SchemaVersion2", EditStatus([](json& s) { s["schemaVersion"] = 2; }),
       "status.schemaVersion: unsupported schemaVersion 2 (this build reads 1)"},
      {"SchemaVersionString", EditStatus([](json& s) { s["schemaVersion"] = "1"; }),
       "status.schemaVersion: expected an integer, got \"1\""},
      {"UnknownSource", EditStatus([](json& s) { s["source"] = "lspci"; }),
       "status.source: expected one of hwloc, hwloc-xml, nccl-xml, synthetic, got \"lspci\""},
      {"MissingNics", EditStatus([](json& s) { s.erase("nics"); }), "status.nics: required field is missing"},
      {"MissingLinks", EditStatus([](json& s) { s.erase("links"); }),
       "status.links: required field is missing"},
      {"GpusNotArray", EditStatus([](json& s) { s["gpus"] = json::object(); }),
       "status.gpus: expected an array, got an object"},
      {"GpuNotObject", EditStatus([](json& s) { s["gpus"][1] = 7; }),
       "status.gpus[1]: expected an object, got 7"},
      {"GpuIndexMismatch", EditStatus([](json& s) { s["gpus"][1]["index"] = 5; }),
       "status.gpus[1].index: expected 1 (GPUs are listed in index order), got 5"},
      {"GpuIndexFloat", EditStatus([](json& s) { s["gpus"][0]["index"] = 0.0; }),
       "status.gpus[0].index: expected a non-negative integer, got 0.0"},
      {"BadPciBusId", EditStatus([](json& s) { s["gpus"][1]["pciBusId"] = "zz"; }),
       "status.gpus[1].pciBusId: expected a PCI bus id like 0000:4e:00.0, got \"zz\""},
      {"DuplicateGpuBusId", EditStatus([](json& s) { s["gpus"][1]["pciBusId"] = "0000:18:00.0"; }),
       "status.gpus[1].pciBusId: duplicate GPU bus id 0000:18:00.0"},
      {"DuplicateGpuBusIdAfterNormalizing", EditStatus([](json& s) { s["gpus"][1]["pciBusId"] = "18:00.0"; }),
       "status.gpus[1].pciBusId: duplicate GPU bus id 0000:18:00.0"},
      {"UnknownGpuVendor", EditStatus([](json& s) { s["gpus"][0]["vendor"] = "intel"; }),
       "status.gpus[0].vendor: expected \"nvidia\" or \"amd\", got \"intel\""},
      {"BadVendorId", EditStatus([](json& s) { s["gpus"][0]["vendorId"] = "0x10de0"; }),
       "status.gpus[0].vendorId: expected a 16-bit hex id like \"0x10de\", got \"0x10de0\""},
      {"VendorIdNumber", EditStatus([](json& s) { s["pcie"][1]["vendorId"] = 4318; }),
       "status.pcie[1].vendorId: expected a 16-bit hex id"},
      {"UnknownParentId", EditStatus([](json& s) { s["gpus"][0]["parent"] = "0000:99:00.0"; }),
       "status.gpus[0].parent: \"0000:99:00.0\" is not the id of a pcie entry"},
      {"ParentNotString", EditStatus([](json& s) { s["nics"][0]["parent"] = 4; }),
       "status.nics[0].parent: expected a pcie id or null, got 4"},
      {"ParentReferencesLaterEntry", EditStatus([](json& s) { std::swap(s["pcie"][0], s["pcie"][1]); }),
       "status.pcie[0].parent: \"hostbridge:0\" is not an earlier pcie entry (parents must come "
       "before children)"},
      {"ParentIsSelf", EditStatus([](json& s) { s["pcie"][0]["parent"] = "hostbridge:0"; }),
       "status.pcie[0].parent: \"hostbridge:0\" is not an earlier pcie entry"},
      {"DuplicatePcieId", EditStatus([](json& s) { s["pcie"][2]["id"] = "0000:15:00.0"; }),
       "status.pcie[2].id: duplicate pcie id \"0000:15:00.0\""},
      {"EmptyPcieId", EditStatus([](json& s) { s["pcie"][3]["id"] = ""; }),
       "status.pcie[3].id: must not be empty"},
      {"UnknownPcieKind", EditStatus([](json& s) { s["pcie"][0]["kind"] = "root"; }),
       "status.pcie[0].kind: expected \"hostBridge\" or \"bridge\", got \"root\""},
      {"SwitchNotBool", EditStatus([](json& s) { s["pcie"][1]["switch"] = 1; }),
       "status.pcie[1].switch: expected true or false, got 1"},
      {"LinkWidthTooLarge", EditStatus([](json& s) { s["pcie"][1]["linkWidth"] = 65; }),
       "status.pcie[1].linkWidth: expected an integer in [0, 64], got 65"},
      {"NegativeLinkGbps", EditStatus([](json& s) { s["gpus"][0]["linkGBps"] = -1.5; }),
       "status.gpus[0].linkGBps: expected a number in [0, 1000000], got -1.5"},
      {"HugeLinkGbps", EditStatus([](json& s) { s["gpus"][0]["linkGBps"] = 1e300; }),
       "status.gpus[0].linkGBps: expected a number in [0, 1000000]"},
      {"NegativeMemory", EditStatus([](json& s) { s["gpus"][0]["memoryMiB"] = -1; }),
       "status.gpus[0].memoryMiB: expected a non-negative integer, got -1"},
      {"PeerGpuOutOfRange", EditStatus([](json& s) { s["gpus"][0]["peers"][0]["gpu"] = 2; }),
       "status.gpus[0].peers[0].gpu: 2 is out of range (2 GPUs)"},
      {"PeerIsSelf", EditStatus([](json& s) { s["gpus"][1]["peers"][0]["gpu"] = 1; }),
       "status.gpus[1].peers[0].gpu: a GPU cannot be its own peer"},
      {"DuplicatePeer",
       EditStatus([](json& s) { s["gpus"][0]["peers"].push_back(s["gpus"][0]["peers"][0]); }),
       "status.gpus[0].peers[1].gpu: duplicate peer 1"},
      {"PeerFabricNone", EditStatus([](json& s) { s["gpus"][0]["peers"][0]["fabric"] = "none"; }),
       "status.gpus[0].peers[0].fabric: expected \"nvlink\" or \"xgmi\", got \"none\""},
      {"PeerNegativeLinks", EditStatus([](json& s) { s["gpus"][0]["peers"][0]["links"] = -2; }),
       "status.gpus[0].peers[0].links: expected an integer in [0, 1024], got -2"},
      {"NicWithoutNameOrBusId", EditStatus([](json& s) {
         s["nics"][1]["name"] = "";
         s["nics"][1].erase("pciBusId");
       }),
       "status.nics[1].name: must not be empty when there is no pciBusId"},
      {"DuplicateNicName", EditStatus([](json& s) { s["nics"][1]["name"] = "mlx5_0"; }),
       "status.nics[1].name: duplicate NIC name \"mlx5_0\""},
      {"BadNicBusId", EditStatus([](json& s) { s["nics"][0]["pciBusId"] = ""; }),
       "status.nics[0].pciBusId: expected a PCI bus id like 0000:4e:00.0, got \"\""},
      {"UnknownNicKind", EditStatus([](json& s) { s["nics"][0]["kind"] = "fddi"; }),
       "status.nics[0].kind: expected one of infiniband, roce"},
      {"MissingNicRdma", EditStatus([](json& s) { s["nics"][0].erase("rdma"); }),
       "status.nics[0].rdma: required field is missing"},
      {"NetdevNotString", EditStatus([](json& s) { s["nics"][0]["netdevs"][1] = nullptr; }),
       "status.nics[0].netdevs[1]: expected a non-empty interface name, got null"},
      {"DuplicateNumaId", EditStatus([](json& s) { s["numaNodes"][1]["id"] = 0; }),
       "status.numaNodes[1].id: duplicate NUMA node id 0"},
      {"NegativeNuma", EditStatus([](json& s) { s["gpus"][0]["numa"] = -1; }),
       "status.gpus[0].numa: expected a non-negative integer or null, got -1"},
      {"NumaAsString", EditStatus([](json& s) { s["nics"][1]["numa"] = "1"; }),
       "status.nics[1].numa: expected a non-negative integer or null, got \"1\""},
      {"PackageAsFloat", EditStatus([](json& s) { s["numaNodes"][0]["package"] = 0.5; }),
       "status.numaNodes[0].package: expected a non-negative integer or null, got 0.5"},
      {"MatrixWrongRowCount", EditStatus([](json& s) { s["links"]["gpuGpu"].erase(1); }),
       "status.links.gpuGpu: expected 2 rows, got 1"},
      {"MatrixWrongColumnCount", EditStatus([](json& s) { s["links"]["gpuNic"][1].erase(0); }),
       "status.links.gpuNic[1]: expected 2 columns, got 1"},
      {"MatrixNotArray", EditStatus([](json& s) { s["links"]["nicNic"] = "X SYS; SYS X"; }),
       "status.links.nicNic: expected an array of rows"},
      {"MissingMatrix", EditStatus([](json& s) { s["links"].erase("gpuNic"); }),
       "status.links.gpuNic: required field is missing"},
      {"BadTokenNVx", EditStatus([](json& s) { s["links"]["gpuGpu"][0][1] = "NVx"; }),
       "status.links.gpuGpu[0][1]: expected a link token (X, NV#, XGMI, PIX, PXB, PHB, NODE or "
       "SYS), got \"NVx\""},
      {"TokenNotString", EditStatus([](json& s) { s["links"]["gpuNic"][0][0] = 3; }),
       "status.links.gpuNic[0][0]: expected a link token, got 3"},
      {"DiagonalNotX", EditStatus([](json& s) { s["links"]["nicNic"][1][1] = "SYS"; }),
       "status.links.nicNic[1][1]: expected \"X\" on the diagonal, got \"SYS\""},
      {"OffDiagonalX", EditStatus([](json& s) {
         s["links"]["gpuGpu"][0][1] = "X";
         s["links"]["gpuGpu"][1][0] = "X";
       }),
       "status.links.gpuGpu[0][1]: \"X\" is allowed only on the diagonal"},
      {"XInRectangularMatrix", EditStatus([](json& s) { s["links"]["gpuNic"][0][0] = "X"; }),
       "status.links.gpuNic[0][0]: \"X\" is allowed only on the diagonal"},
      {"NvlinkToNic", EditStatus([](json& s) { s["links"]["gpuNic"][1][0] = "NV4"; }),
       "status.links.gpuNic[1][0]: \"NV4\" joins GPUs only"},
      {"AsymmetricGpuGpu", EditStatus([](json& s) { s["links"]["gpuGpu"][0][1] = "SYS"; }),
       "status.links.gpuGpu[0][1]: \"SYS\" but [1][0] is \"NV18\" (the matrix must be symmetric)"},
      {"AsymmetricNicNic", EditStatus([](json& s) { s["links"]["nicNic"][1][0] = "NODE"; }),
       "status.links.nicNic[0][1]: \"SYS\" but [1][0] is \"NODE\""},
      {"HugeGpuArray",
       EditStatus([](json& s) { s["gpus"] = json(std::vector<int>(kMaxDevicesPerKind + 1, 0)); }),
       "status.gpus: 4097 entries, more than the limit of 4096"},
      {"HugePeerArray",
       EditStatus([](json& s) { s["gpus"][0]["peers"] = json(std::vector<int>(kMaxDevicesPerKind + 1, 0)); }),
       "status.gpus[0].peers: 4097 entries, more than the limit of 4096"},
      {"TooManyValues",
       [] {
         // 8 MiB of "[]," inside an unknown key: under the size and depth limits, but 2.8 million
         // values; refused before nlohmann builds them (~200 MB).
         std::string doc = ValidDocument();
         std::string filler = "\"filler\":[";
         for (int i = 0; i < 2'800'000; ++i) filler += "[],";
         filler += "[]],";
         doc.insert(doc.find('{') + 1, filler);
         return doc;
       },
       "more than 1000000 JSON values"},
      {"DocumentOverSizeLimit",
       [] {
         std::string doc = ValidDocument();
         doc.resize(kMaxTopologyJsonBytes + 1, ' ');  // valid JSON, just too long
         return doc;
       },
       "document is 16777217 bytes, over the limit of 16777216 bytes"},
  };
}

class TopologyJsonMalformedTest : public testing::TestWithParam<MalformedCase> {};

TEST_P(TopologyJsonMalformedTest, IsRejectedWithPathInMessage) {
  const std::string text = GetParam().document();
  Result<NodeTopology> decoded = DecodeTopologyJson(text);
  ASSERT_FALSE(decoded.ok()) << "decoded: " << (text.size() < 4096 ? text : text.substr(0, 4096));
  EXPECT_NE(decoded.error().message().find(GetParam().expected_error), std::string::npos)
      << "message: " << decoded.error().message() << "\nexpected to contain: " << GetParam().expected_error;
}

INSTANTIATE_TEST_SUITE_P(Cases, TopologyJsonMalformedTest, testing::ValuesIn(MalformedCases()),
                         [](const testing::TestParamInfo<MalformedCase>& param_info) {
                           return param_info.param.name;
                         });

TEST(TopologyJsonTest, DocumentAtSizeLimitIsAccepted) {
  std::string doc = ValidDocument();
  doc.resize(kMaxTopologyJsonBytes, ' ');
  Result<NodeTopology> decoded = DecodeTopologyJson(doc);
  EXPECT_TRUE(decoded.ok()) << decoded.error().message();
}

TEST(TopologyJsonTest, ArrayAtLimitIsAccepted) {
  NodeTopology t;
  t.node_name = "many-nics";
  for (int i = 0; i < kMaxDevicesPerKind; ++i) {
    NumaNode n;
    n.id = i;
    t.numa_nodes.push_back(n);
  }
  DeriveLinks(t);
  Result<NodeTopology> decoded = DecodeTopologyJson(EncodeTopologyJson(t, -1));
  ASSERT_TRUE(decoded.ok()) << decoded.error().message();
  EXPECT_EQ(decoded->numa_nodes.size(), static_cast<std::size_t>(kMaxDevicesPerKind));
}

// Encoding never throws, even on strings that are not UTF-8 (they come from hardware).
TEST(TopologyJsonTest, EncodesInvalidUtf8WithoutThrowing) {
  NodeTopology t = MakeTopology();
  t.gpus[0].model = "H100\xff\xfe";
  std::string text;
  ASSERT_NO_THROW(text = EncodeTopologyJson(t));
  Result<NodeTopology> decoded = DecodeTopologyJson(text);
  ASSERT_TRUE(decoded.ok()) << decoded.error().message();
  EXPECT_EQ(decoded->gpus[0].model, "H100\xEF\xBF\xBD\xEF\xBF\xBD");  // U+FFFD twice
}

// ---------------------------------------------------------------------------------------------
// Deterministic corruption: truncations and byte substitutions throughout the document must
// decode to a value or an error, never crash, hang or throw (the sanitizer build runs this under
// ASan/UBSan). Whatever decodes must also re-encode to a document that decodes to the same JSON.

void ExpectDecodesOrFails(const std::string& text, int* accepted, int* rejected) {
  Result<NodeTopology> decoded = DecodeTopologyJson(text);
  if (!decoded.ok()) {
    EXPECT_FALSE(decoded.error().message().empty());
    ++*rejected;
    return;
  }
  ++*accepted;
  const std::string again = EncodeTopologyJson(*decoded, -1);
  Result<NodeTopology> redecoded = DecodeTopologyJson(again);
  ASSERT_TRUE(redecoded.ok()) << redecoded.error().message() << "\nfrom: " << text;
  EXPECT_EQ(EncodeTopologyJson(*redecoded, -1), again) << "from: " << text;
}

TEST(TopologyJsonFuzzTest, TruncatedAndCorruptedDocumentsNeverCrash) {
  const std::string doc = ValidDocument();
  // Structural characters, number and literal starts, escapes, NUL and bytes that are not UTF-8.
  const std::string replacements = std::string("\"{}[],:09-.eXNn\\ ") + '\0' + "\xff\x80";
  int accepted = 0, rejected = 0;
  // Every position gets a substitution; truncations and bit flips take every 7th and 3rd
  // position, which keeps the test to a few seconds under the sanitizers.
  for (std::size_t i = 0; i < doc.size(); ++i) {
    if (i % 7 == 0) {
      // Every proper prefix is unbalanced JSON.
      Result<NodeTopology> truncated = DecodeTopologyJson(std::string_view(doc).substr(0, i));
      EXPECT_FALSE(truncated.ok()) << "prefix of " << i << " bytes decoded";
    }
    // The substitutions cycle through the replacements so that each kind of byte lands in every
    // part of the document; a bit flip mostly keeps the document well-formed and so reaches the
    // semantic checks.
    std::string corrupted = doc;
    corrupted[i] = replacements[i % replacements.size()];
    ExpectDecodesOrFails(corrupted, &accepted, &rejected);
    if (i % 3 == 0) {
      corrupted[i] = static_cast<char>(doc[i] ^ 0x01);
      ExpectDecodesOrFails(corrupted, &accepted, &rejected);
    }
    if (HasFatalFailure()) return;
  }
  // Both outcomes must actually occur, or the test exercises less than it claims.
  EXPECT_GT(accepted, 0);
  EXPECT_GT(rejected, 0);
  std::printf("%zu-byte document: %d corruptions decoded, %d rejected\n", doc.size(), accepted, rejected);
}

}  // namespace
}  // namespace toposched
