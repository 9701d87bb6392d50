// The manifests in deploy/ (and the chart's CRD copy) are valid Kubernetes objects, the
// NodeTopology CRD's schema keeps every field the agent writes (the API server prunes what a
// schema does not list), RBAC grants exactly what the code paths need, and the agent DaemonSet
// and extender Deployment run unprivileged, as the service accounts RBAC binds, with flags the
// binary documents.
//
// Kubernetes' own schemas come from ../shared/k8s-schemas (kubeconform's standalone-strict
// files); tests that need them skip without them. The CRD schema and RBAC checks need nothing.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "testing/k8s_schema.h"
#include "testing/run_cli.h"
#include "testing/shared_topologies.h"
#include "toposched/agent/discovery.h"
#include "toposched/kube/objects.h"
#include "toposched/topology/json_codec.h"
#include "toposched/topology/synthetic.h"

namespace toposched::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const fs::path kSourceDir = TOPOSCHED_SOURCE_DIR;
const fs::path kCrdFile = kSourceDir / "deploy/crds/toposched.io_nodetopologies.yaml";
const fs::path kChartCrdFile = kSourceDir / "charts/toposched/crds/toposched.io_nodetopologies.yaml";
const fs::path kRbacFile = kSourceDir / "deploy/rbac.yaml";
const fs::path kAgentFile = kSourceDir / "deploy/agent.yaml";
const fs::path kExtenderFile = kSourceDir / "deploy/extender.yaml";
constexpr const char* kNamespace = "toposched-system";

fs::path K8sSchemasDir() {
  if (const char* env = std::getenv("TOPOSCHED_K8S_SCHEMAS")) return env;
  return TOPOSCHED_K8S_SCHEMAS;
}

#define SKIP_WITHOUT_K8S_SCHEMAS()                                                           \
  do {                                                                                       \
    if (!fs::is_directory(K8sSchemasDir())) {                                                \
      GTEST_SKIP() << "Kubernetes JSON schemas not found at " << K8sSchemasDir()             \
                   << " (set TOPOSCHED_K8S_SCHEMAS to the folder of ../shared/k8s-schemas)"; \
    }                                                                                        \
  } while (0)

std::vector<json> LoadYaml(const fs::path& path) {
  Result<std::vector<json>> docs = YamlToJson(ReadFile(path));
  EXPECT_TRUE(docs.ok()) << path << ": " << (docs.ok() ? "" : docs.error().message());
  return docs.ok() ? docs.value() : std::vector<json>{};
}

json LoadK8sSchema(const std::string& file) {
  std::ifstream in(K8sSchemasDir() / file);
  return json::parse(in, nullptr, /*allow_exceptions=*/false);
}

std::vector<fs::path> DeployManifests() {
  std::vector<fs::path> files;
  for (const fs::path& dir : {kSourceDir / "deploy/crds", kSourceDir / "charts/toposched/crds"}) {
    for (const auto& entry : fs::directory_iterator(dir)) {
      if (entry.path().extension() == ".yaml") files.push_back(entry.path());
    }
  }
  files.push_back(kRbacFile);
  files.push_back(kAgentFile);
  files.push_back(kExtenderFile);
  std::sort(files.begin(), files.end());
  return files;
}

const json& Crd() {
  static const json crd = [] {
    std::vector<json> docs = LoadYaml(kCrdFile);
    return docs.size() == 1 ? docs[0] : json();
  }();
  return crd;
}

const json& CrdSchema() {
  static const json schema = Crd().value("/spec/versions/0/schema/openAPIV3Schema"_json_pointer, json());
  return schema;
}

// What the agent publishes (kube::NodeTopologyObject): the topology JSON plus status.summary,
// generation and heartbeatTime, the topology-class label and the Node as owner.
json PublishedObject(const NodeTopology& topology) {
  using namespace std::chrono;
  const sys_time<seconds> heartbeat =
      sys_days{year{2026} / January / 15} + hours{10} + minutes{4} + seconds{5};
  return kube::NodeTopologyObject(topology, topology.node_name, "0b6f3c1e-uid", 3, heartbeat);
}

NodeTopology Preset(const std::string& name) {
  Result<SyntheticSpec> spec = SyntheticPreset(name);
  EXPECT_TRUE(spec.ok()) << name;
  Result<NodeTopology> topology = GenerateSynthetic(spec.value());
  EXPECT_TRUE(topology.ok()) << name << ": " << (topology.ok() ? "" : topology.error().message());
  NodeTopology t = topology.value();
  t.node_name = name;
  return t;
}

// ---- the manifests are valid Kubernetes objects ----------------------------------------------

TEST(Manifests, EveryDocumentValidatesAgainstItsKubernetesSchema) {
  SKIP_WITHOUT_K8S_SCHEMAS();
  for (const fs::path& file : DeployManifests()) {
    SCOPED_TRACE(file.string());
    const std::vector<json> docs = LoadYaml(file);
    EXPECT_FALSE(docs.empty());
    for (std::size_t i = 0; i < docs.size(); ++i) {
      const json& doc = docs[i];
      ASSERT_TRUE(doc.is_object() && doc.contains("apiVersion") && doc.contains("kind")) << "document " << i;
      const std::string schema_file =
          K8sSchemaFileName(doc["apiVersion"].get<std::string>(), doc["kind"].get<std::string>());
      SCOPED_TRACE("document " + std::to_string(i) + " (" + schema_file + ")");
      const json schema = LoadK8sSchema(schema_file);
      ASSERT_TRUE(schema.is_object()) << "no schema " << schema_file << " in " << K8sSchemasDir();
      const SchemaViolations violations = ValidateJsonSchema(doc, schema);
      EXPECT_TRUE(violations.empty()) << Describe(violations);
    }
  }
}

TEST(Manifests, KubernetesSchemaFileNamesFollowKubeconformsRule) {
  EXPECT_EQ(K8sSchemaFileName("v1", "ServiceAccount"), "serviceaccount-v1.json");
  EXPECT_EQ(K8sSchemaFileName("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
            "clusterrolebinding-rbac-v1.json");
  EXPECT_EQ(K8sSchemaFileName("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
            "customresourcedefinition-apiextensions-v1.json");
}

// ---- the NodeTopology CRD ----------------------------------------------------------------------

TEST(NodeTopologyCrd, ChartCopyIsByteIdentical) {
  // Helm installs charts/toposched/crds/ before the templates; kubectl users apply deploy/crds/.
  ASSERT_TRUE(fs::exists(kChartCrdFile));
  EXPECT_EQ(ReadFile(kChartCrdFile), ReadFile(kCrdFile))
      << "copy deploy/crds/toposched.io_nodetopologies.yaml to charts/toposched/crds/";
}

TEST(NodeTopologyCrd, DeclaresTheClusterScopedResourceWithStatusSubresource) {
  const json& crd = Crd();
  ASSERT_TRUE(crd.is_object());
  EXPECT_EQ(crd["metadata"]["name"], "nodetopologies.toposched.io");
  const json& spec = crd["spec"];
  EXPECT_EQ(spec["group"], "toposched.io");
  EXPECT_EQ(spec["scope"], "Cluster");
  EXPECT_EQ(spec["names"], json::parse(R"({"plural": "nodetopologies", "singular": "nodetopology",
      "kind": "NodeTopology", "listKind": "NodeTopologyList", "shortNames": ["ntopo"]})"));
  ASSERT_EQ(spec["versions"].size(), 1u);
  const json& version = spec["versions"][0];
  EXPECT_EQ(version["name"], "v1alpha1");
  EXPECT_EQ(version["served"], true);
  EXPECT_EQ(version["storage"], true);
  EXPECT_EQ(version["subresources"], json::parse(R"({"status": {}})"));
}

TEST(NodeTopologyCrd, PrinterColumns) {
  struct Column {
    std::string name, type, json_path;
    int priority;
  };
  const std::vector<Column> expected = {
      {"GPUs", "integer", ".status.summary.gpus", 0},
      {"NICs", "integer", ".status.summary.nics", 0},
      {"RDMA", "integer", ".status.summary.rdmaNics", 0},
      {"Model", "string", ".status.summary.gpuModel", 1},
      {"Class", "string", R"(.metadata.labels.toposched\.io/topology-class)", 1},
      {"Generation", "integer", ".status.generation", 0},
      {"Heartbeat", "date", ".status.heartbeatTime", 0},
      {"Age", "date", ".metadata.creationTimestamp", 0},
  };
  const json& columns = Crd()["spec"]["versions"][0]["additionalPrinterColumns"];
  ASSERT_EQ(columns.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    SCOPED_TRACE(expected[i].name);
    EXPECT_EQ(columns[i]["name"], expected[i].name);
    EXPECT_EQ(columns[i]["type"], expected[i].type);
    EXPECT_EQ(columns[i]["jsonPath"], expected[i].json_path);
    EXPECT_EQ(columns[i].value("priority", 0), expected[i].priority);
  }
}

// A column whose path the schema does not have shows <none> forever; its type must match.
TEST(NodeTopologyCrd, StatusPrinterColumnsPointAtFieldsOfTheirType) {
  int checked = 0;
  for (const json& column : Crd()["spec"]["versions"][0]["additionalPrinterColumns"]) {
    const std::string path = column["jsonPath"];
    if (path.rfind(".status.", 0) != 0) continue;
    SCOPED_TRACE(path);
    const json* node = &CrdSchema();
    std::stringstream segments(path.substr(1));
    for (std::string segment; std::getline(segments, segment, '.');) {
      ASSERT_TRUE(node->contains("properties") && (*node)["properties"].contains(segment)) << segment;
      node = &(*node)["properties"][segment];
    }
    const std::string type = column["type"];
    if (type == "date") {
      EXPECT_EQ((*node)["type"], "string");
      EXPECT_EQ((*node)["format"], "date-time");
    } else {
      EXPECT_EQ((*node)["type"], type);
    }
    ++checked;
  }
  EXPECT_EQ(checked, 6);
}

TEST(NodeTopologyCrd, SchemaIsStructural) {
  ASSERT_TRUE(CrdSchema().is_object());
  const SchemaViolations violations = CheckStructuralSchema(CrdSchema());
  EXPECT_TRUE(violations.empty()) << Describe(violations);
}

// Every field path of a JSON value ("status.gpus[].peers[].gpu"), objects and arrays included.
void CollectPaths(const json& value, const std::string& path, std::set<std::string>* out) {
  if (!path.empty()) out->insert(path);
  if (value.is_object()) {
    for (const auto& [key, child] : value.items())
      CollectPaths(child, path.empty() ? key : path + "." + key, out);
  } else if (value.is_array()) {
    for (const json& child : value) CollectPaths(child, path + "[]", out);
  }
}

// The same paths as a schema describes them.
void CollectSchemaPaths(const json& schema, const std::string& path, std::set<std::string>* out) {
  if (!path.empty()) out->insert(path);
  if (schema.contains("properties")) {
    for (const auto& [key, child] : schema["properties"].items()) {
      CollectSchemaPaths(child, path.empty() ? key : path + "." + key, out);
    }
  }
  if (schema.contains("items")) CollectSchemaPaths(schema["items"], path + "[]", out);
}

// A topology with every optional field the encoder can write filled in at least once.
NodeTopology EveryFieldTopology() {
  NodeTopology t = Preset("hgx-h100-8gpu");
  t.gpus[0].uuid = "GPU-4a9b0f0e-2d33-4c1b-9f3e-000000000000";
  t.nics[0].rail = t.nics[0].rail.empty() ? "rail0" : t.nics[0].rail;
  for (PcieNode& p : t.pcie) {
    if (p.kind == PcieKind::kBridge && p.vendor_id == 0) p.vendor_id = 0x1000, p.device_id = 0xc030;
  }
  return t;
}

// Both directions: the encoder writes nothing the schema lacks (pruned = lost), and the schema
// describes nothing the encoder no longer writes (a stale schema).
TEST(NodeTopologyCrd, StatusSchemaDescribesExactlyTheFieldsTheEncoderWrites) {
  std::set<std::string> written, described;
  CollectPaths(PublishedObject(EveryFieldTopology())["status"], "", &written);
  CollectSchemaPaths(CrdSchema()["properties"]["status"], "", &described);
  ASSERT_GT(written.size(), 50u);
  for (const std::string& path : written)
    EXPECT_TRUE(described.count(path)) << "not in the CRD schema: " << path;
  for (const std::string& path : described) EXPECT_TRUE(written.count(path)) << "never written: " << path;
}

TEST(NodeTopologyCrd, EverySyntheticPresetValidatesWithoutLoss) {
  const std::vector<std::string> presets = SyntheticPresetNames();
  ASSERT_GE(presets.size(), 5u);
  for (const std::string& name : presets) {
    SCOPED_TRACE(name);
    const SchemaViolations violations = ValidateCrdSchema(PublishedObject(Preset(name)), CrdSchema());
    EXPECT_TRUE(violations.empty()) << Describe(violations);
  }
  const SchemaViolations violations = ValidateCrdSchema(PublishedObject(EveryFieldTopology()), CrdSchema());
  EXPECT_TRUE(violations.empty()) << Describe(violations);
}

// Real hwloc and NCCL exports: nulls for unknown locality, nameless NICs, AMD xGMI, cloud VMs
// without a PCIe tree, POWER9, Slingshot... whatever the sources produce must fit the schema.
TEST(NodeTopologyCrd, EverySharedTopologyFileValidatesWithoutLoss) {
  TOPOSCHED_SKIP_WITHOUT_SHARED_TOPOLOGIES();
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(SharedTopologiesDir())) {
    if (entry.path().extension() == ".xml") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  int validated = 0, hwloc = 0, nccl = 0;
  for (const fs::path& file : files) {
    SCOPED_TRACE(file.filename().string());
    Result<NodeTopology> topology = LoadTopologyFile(file.string());
    ASSERT_TRUE(topology.ok()) << topology.error().message();
    const json object = PublishedObject(topology.value());
    const SchemaViolations violations = ValidateCrdSchema(object, CrdSchema());
    EXPECT_TRUE(violations.empty()) << Describe(violations);
    ++validated;
    (topology->source == TopologySource::kNcclXml ? nccl : hwloc) += 1;
  }
  // 40 files today (23 hwloc, 17 NCCL/RCCL); the floor catches a wrong or emptied folder.
  EXPECT_GE(validated, 30) << "fewer shared topology files than expected in " << SharedTopologiesDir();
  EXPECT_GE(hwloc, 15);
  EXPECT_GE(nccl, 10);
}

// ---- the validator itself: each kind of violation, named by its path -------------------------

struct MutationCase {
  std::string name;
  std::function<void(json&)> mutate;
  std::string path;     // the one violation's path; empty: no violation expected
  std::string message;  // a part of its message
};

TEST(CrdSchemaValidator, ReportsEachViolationAtItsPath) {
  const std::vector<MutationCase> cases = {
      {"wrong type", [](json& o) { o["status"]["gpus"][0]["index"] = "0"; }, "status.gpus[0].index",
       "expected integer, got string \"0\""},
      {"missing required field", [](json& o) { o["status"]["gpus"][1].erase("pciBusId"); },
       "status.gpus[1].pciBusId", "required field is missing"},
      {"unknown field is pruned", [](json& o) { o["status"]["nics"][2]["colour"] = "green"; },
       "status.nics[2].colour", "prune"},
      {"unknown field in spec", [](json& o) { o["spec"]["replicas"] = 1; }, "spec.replicas", "prune"},
      {"bad enum", [](json& o) { o["status"]["source"] = "lspci"; }, "status.source", "expected one of"},
      {"bad nested enum", [](json& o) { o["status"]["gpus"][0]["peers"][0]["fabric"] = "none"; },
       "status.gpus[0].peers[0].fabric", "expected one of"},
      {"null where not nullable", [](json& o) { o["status"]["gpus"][0]["index"] = nullptr; },
       "status.gpus[0].index", "not nullable"},
      {"null where nullable", [](json& o) { o["status"]["gpus"][0]["numa"] = nullptr; }, "", ""},
      {"int32 overflow", [](json& o) { o["status"]["gpus"][0]["index"] = 1LL << 40; }, "status.gpus[0].index",
       "int32"},
      {"negative count", [](json& o) { o["status"]["switchCount"] = -1; }, "status.switchCount", "minimum"},
      {"bad link token", [](json& o) { o["status"]["links"]["gpuGpu"][0][1] = "NVLINK"; },
       "status.links.gpuGpu[0][1]", "pattern"},
      {"matrix row not an array", [](json& o) { o["status"]["links"]["nicNic"][0] = "X"; },
       "status.links.nicNic[0]", "expected array"},
      {"bad date-time", [](json& o) { o["status"]["heartbeatTime"] = "yesterday"; }, "status.heartbeatTime",
       "date-time"},
      {"float for integer", [](json& o) { o["status"]["summary"]["gpus"] = 8.5; }, "status.summary.gpus",
       "expected integer"},
      {"metadata is left to the API server",
       [](json& o) {
         o["metadata"]["annotations"] = {{"a", "b"}};
       },
       "", ""},
  };
  const json valid = PublishedObject(Preset("hgx-h100-8gpu"));
  ASSERT_TRUE(ValidateCrdSchema(valid, CrdSchema()).empty());
  for (const MutationCase& c : cases) {
    SCOPED_TRACE(c.name);
    json object = valid;
    c.mutate(object);
    const SchemaViolations violations = ValidateCrdSchema(object, CrdSchema());
    if (c.path.empty()) {
      EXPECT_TRUE(violations.empty()) << Describe(violations);
      continue;
    }
    ASSERT_EQ(violations.size(), 1u) << Describe(violations);
    EXPECT_EQ(violations[0].path, c.path);
    EXPECT_NE(violations[0].message.find(c.message), std::string::npos) << violations[0].message;
  }
}

TEST(JsonSchemaValidator, ReportsEachViolationAtItsPath) {
  SKIP_WITHOUT_K8S_SCHEMAS();
  const json schema = LoadK8sSchema("clusterrole-rbac-v1.json");
  ASSERT_TRUE(schema.is_object());
  const json valid = json::parse(R"({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
      "metadata": {"name": "r", "labels": {"a": "b"}},
      "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]})");
  ASSERT_TRUE(ValidateJsonSchema(valid, schema).empty()) << Describe(ValidateJsonSchema(valid, schema));
  const std::vector<MutationCase> cases = {
      {"wrong type", [](json& o) { o["rules"][0]["verbs"] = "get"; }, "rules[0].verbs", "expected array"},
      {"missing required field", [](json& o) { o["rules"][0].erase("verbs"); }, "rules[0].verbs",
       "required field is missing"},
      {"unknown field", [](json& o) { o["rules"][0]["verb"] = json::array({"get"}); }, "rules[0].verb",
       "additionalProperties is false"},
      {"typo in metadata", [](json& o) { o["metadata"]["labelz"] = json::object(); }, "metadata.labelz",
       "unknown field"},
      {"bad enum", [](json& o) { o["kind"] = "Role"; }, "kind", "expected one of"},
      {"map value type", [](json& o) { o["metadata"]["labels"]["a"] = 1; }, R"(metadata.labels.a)",
       "expected string or null"},
      {"null is allowed where the type lists it", [](json& o) { o["aggregationRule"] = nullptr; }, "", ""},
  };
  for (const MutationCase& c : cases) {
    SCOPED_TRACE(c.name);
    json object = valid;
    c.mutate(object);
    const SchemaViolations violations = ValidateJsonSchema(object, schema);
    if (c.path.empty()) {
      EXPECT_TRUE(violations.empty()) << Describe(violations);
      continue;
    }
    ASSERT_EQ(violations.size(), 1u) << Describe(violations);
    EXPECT_EQ(violations[0].path, c.path);
    EXPECT_NE(violations[0].message.find(c.message), std::string::npos) << violations[0].message;
  }
}

TEST(JsonSchemaValidator, ResolvesRefsAndIntOrStringOneOf) {
  const json schema = json::parse(R"({
      "definitions": {"port": {"oneOf": [{"type": ["string", "null"]}, {"type": ["integer", "null"]}]}},
      "type": "object", "additionalProperties": false,
      "properties": {"port": {"$ref": "#/definitions/port"}, "size": {"type": "string", "format": "int-or-string"}}})");
  EXPECT_TRUE(ValidateJsonSchema(json::parse(R"({"port": 80, "size": "1Gi"})"), schema).empty());
  EXPECT_TRUE(ValidateJsonSchema(json::parse(R"({"port": "http"})"), schema).empty());
  const SchemaViolations bad_port = ValidateJsonSchema(json::parse(R"({"port": 1.5})"), schema);
  ASSERT_EQ(bad_port.size(), 1u) << Describe(bad_port);
  EXPECT_EQ(bad_port[0].path, "port");
  EXPECT_NE(bad_port[0].message.find("matches none of the oneOf"), std::string::npos);
  // null satisfies both alternatives, which oneOf forbids (as python-jsonschema reports it).
  const SchemaViolations null_port = ValidateJsonSchema(json::parse(R"({"port": null})"), schema);
  ASSERT_EQ(null_port.size(), 1u) << Describe(null_port);
  EXPECT_NE(null_port[0].message.find("matches 2 oneOf alternatives"), std::string::npos);
  const SchemaViolations bad_ref =
      ValidateJsonSchema(json(1), json::parse(R"({"$ref": "#/definitions/none"})"));
  ASSERT_EQ(bad_ref.size(), 1u);
  EXPECT_NE(bad_ref[0].message.find("unresolvable $ref"), std::string::npos);
}

// A keyword the validator does not implement must not pass silently.
TEST(JsonSchemaValidator, ReportsUnsupportedKeywords) {
  const SchemaViolations violations =
      ValidateJsonSchema(json("x"), json::parse(R"({"type": "string", "patternProperties": {}})"));
  ASSERT_EQ(violations.size(), 1u);
  EXPECT_NE(violations[0].message.find("\"patternProperties\" is not supported"), std::string::npos);
}

TEST(StructuralSchemaCheck, ReportsNonStructuralSchemas) {
  struct Case {
    std::string name, schema, path, message;
  };
  const std::vector<Case> cases = {
      {"property without type", R"({"type": "object", "properties": {"a": {"description": "x"}}})",
       "properties.a", "no type"},
      {"additionalProperties false", R"({"type": "object", "additionalProperties": false})",
       "additionalProperties", "forbidden"},
      {"required names no property",
       R"({"type": "object", "required": ["b"], "properties": {"a": {"type": "string"}}})", "required",
       "not a property"},
      {"array without items", R"({"type": "object", "properties": {"a": {"type": "array"}}})", "properties.a",
       "needs items"},
      {"metadata beyond name", R"({"type": "object", "properties": {"metadata": {"type": "object",
          "properties": {"labels": {"type": "object"}}}}})",
       "properties.metadata.properties.labels", "only name and generateName"},
      {"type list", R"({"type": "object", "properties": {"a": {"type": ["string", "null"]}}})",
       "properties.a.type", "single type"},
      {"unsupported keyword", R"({"type": "object", "properties": {"a": {"type": "string", "oneOf": []}}})",
       "properties.a.oneOf", "not allowed"},
      {"enum of the wrong type",
       R"({"type": "object", "properties": {"a": {"type": "integer", "enum": ["1"]}}})", "properties.a.enum",
       "not of type integer"},
      {"preserve-unknown-fields needs no type",
       R"({"type": "object", "properties": {"a": {"x-kubernetes-preserve-unknown-fields": true}}})", "", ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const SchemaViolations violations = CheckStructuralSchema(json::parse(c.schema));
    if (c.path.empty()) {
      EXPECT_TRUE(violations.empty()) << Describe(violations);
      continue;
    }
    ASSERT_EQ(violations.size(), 1u) << Describe(violations);
    EXPECT_EQ(violations[0].path, c.path);
    EXPECT_NE(violations[0].message.find(c.message), std::string::npos) << violations[0].message;
  }
}

// ---- YAML scalars: typed only when plain --------------------------------------------------------

TEST(YamlToJson, ResolvesPlainScalarsPerYaml12CoreSchemaAndKeepsQuotedOnesStrings) {
  struct Case {
    std::string yaml;
    json expected;
  };
  const std::vector<Case> cases = {
      {"v: true", true},
      {"v: \"true\"", "true"},
      {"v: 'false'", "false"},
      {"v: False", false},
      {"v: 42", 42},
      {"v: \"42\"", "42"},
      {"v: -7", -7},
      {"v: 0x1F", 31},
      {"v: 0o17", 15},
      {"v: 1.5", 1.5},
      {"v: 1e3", 1000.0},
      {"v: ~", nullptr},
      {"v:", nullptr},
      {"v: null", nullptr},
      {"v: 'null'", "null"},
      {"v: |\n  text\n", "text\n"},
      {"v: !!str 5", "5"},
      {"v: 1.2.3", "1.2.3"},
      {"v: v1alpha1", "v1alpha1"},
      {"v: \"\"", ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.yaml);
    Result<std::vector<json>> docs = YamlToJson(c.yaml);
    ASSERT_TRUE(docs.ok()) << docs.error().message();
    ASSERT_EQ(docs->size(), 1u);
    const json& v = (*docs)[0]["v"];
    EXPECT_EQ(v, c.expected);
    // 42 == 42.0 in nlohmann::json; the kind must match too (signedness aside).
    EXPECT_EQ(v.is_number_integer(), c.expected.is_number_integer());
    if (!c.expected.is_number()) {
      EXPECT_EQ(v.type(), c.expected.type());
    }
  }
}

TEST(YamlToJson, RefusesWhatKubernetesWouldReadDifferently) {
  for (const std::string yaml :
       {"v: yes", "v: off", "v: 0755", "v: .inf", "a: 1\na: 2", "v: !!int x", "v: [1"}) {
    SCOPED_TRACE(yaml);
    EXPECT_FALSE(YamlToJson(yaml).ok());
  }
}

TEST(YamlToJson, SplitsDocumentsAndSkipsEmptyOnes) {
  Result<std::vector<json>> docs = YamlToJson("---\na: 1\n---\n---\nb: [x, 2]\n...\n");
  ASSERT_TRUE(docs.ok()) << docs.error().message();
  ASSERT_EQ(docs->size(), 2u);
  EXPECT_EQ((*docs)[1], json::parse(R"({"b": ["x", 2]})"));
}

// ---- RBAC: exactly what the code paths need ------------------------------------------------------

using Grant = std::tuple<std::string, std::string, std::string>;    // apiGroup, resource, verb
using RoleKey = std::tuple<std::string, std::string, std::string>;  // kind, namespace, name

struct Rbac {
  std::vector<json> docs;
  std::map<RoleKey, const json*> roles;
  std::set<std::pair<std::string, std::string>> service_accounts;  // namespace, name
  std::vector<const json*> bindings;
};

Rbac LoadRbac() {
  Rbac rbac;
  rbac.docs = LoadYaml(kRbacFile);
  for (const json& doc : rbac.docs) {
    const std::string kind = doc.value("kind", "");
    const std::string ns = doc["metadata"].value("namespace", "");
    const std::string name = doc["metadata"].value("name", "");
    if (kind == "ClusterRole" || kind == "Role") rbac.roles[{kind, ns, name}] = &doc;
    if (kind == "ServiceAccount") rbac.service_accounts.insert({ns, name});
    if (kind == "ClusterRoleBinding" || kind == "RoleBinding") rbac.bindings.push_back(&doc);
  }
  return rbac;
}

std::set<Grant> Grants(const json& role) {
  std::set<Grant> grants;
  for (const json& rule : role["rules"]) {
    for (const json& group : rule["apiGroups"]) {
      for (const json& resource : rule["resources"]) {
        for (const json& verb : rule["verbs"]) {
          grants.emplace(group.get<std::string>(), resource.get<std::string>(), verb.get<std::string>());
        }
      }
    }
  }
  return grants;
}

TEST(Rbac, NamespaceComesFirst) {
  const Rbac rbac = LoadRbac();
  ASSERT_FALSE(rbac.docs.empty());
  EXPECT_EQ(rbac.docs[0]["kind"], "Namespace");
  EXPECT_EQ(rbac.docs[0]["metadata"]["name"], kNamespace);
  for (const json& doc : rbac.docs) {
    const std::string kind = doc["kind"];
    const bool cluster_scoped = kind == "Namespace" || kind == "ClusterRole" || kind == "ClusterRoleBinding";
    EXPECT_EQ(doc["metadata"].value("namespace", ""), cluster_scoped ? "" : kNamespace)
        << kind << " " << doc["metadata"]["name"];
  }
  EXPECT_EQ(rbac.service_accounts, (std::set<std::pair<std::string, std::string>>{
                                       {kNamespace, "toposched-agent"}, {kNamespace, "toposched-extender"}}));
}

TEST(Rbac, EachRoleGrantsExactlyWhatItsCodePathsUse) {
  const std::map<RoleKey, std::set<Grant>> expected = {
      {{"ClusterRole", "", "toposched-agent"},
       {{"", "nodes", "get"},
        {"", "nodes", "patch"},
        {"toposched.io", "nodetopologies", "get"},
        {"toposched.io", "nodetopologies", "create"},
        {"toposched.io", "nodetopologies", "patch"},
        {"toposched.io", "nodetopologies/status", "patch"}}},
      {{"ClusterRole", "", "toposched-extender"},
       {{"", "nodes", "get"},
        {"", "nodes", "list"},
        {"", "nodes", "watch"},
        {"", "nodes", "update"},
        {"", "pods", "get"},
        {"", "pods", "list"},
        {"", "pods", "watch"},
        {"", "pods", "patch"},
        {"", "pods/binding", "create"},
        {"", "events", "create"},
        {"", "events", "patch"},
        {"toposched.io", "nodetopologies", "get"},
        {"toposched.io", "nodetopologies", "list"},
        {"toposched.io", "nodetopologies", "watch"}}},
      {{"Role", kNamespace, "toposched-extender-leader"},
       {{"coordination.k8s.io", "leases", "get"},
        {"coordination.k8s.io", "leases", "create"},
        {"coordination.k8s.io", "leases", "update"}}},
  };
  const Rbac rbac = LoadRbac();
  std::set<RoleKey> found;
  for (const auto& [key, role] : rbac.roles) found.insert(key);
  std::set<RoleKey> wanted;
  for (const auto& [key, grants] : expected) wanted.insert(key);
  EXPECT_EQ(found, wanted);
  for (const auto& [key, grants] : expected) {
    SCOPED_TRACE(std::get<2>(key));
    auto it = rbac.roles.find(key);
    ASSERT_NE(it, rbac.roles.end());
    EXPECT_EQ(Grants(*it->second), grants);
    EXPECT_FALSE(it->second->contains("aggregationRule"));
    for (const json& rule : (*it->second)["rules"]) {
      EXPECT_FALSE(rule.contains("nonResourceURLs"));
      const json verbs = rule["verbs"];
      const bool has_create = std::find(verbs.begin(), verbs.end(), "create") != verbs.end();
      if (std::get<0>(key) == "ClusterRole") {
        EXPECT_FALSE(rule.contains("resourceNames")) << rule;
      } else if (has_create) {
        // RBAC cannot match create by name; resourceNames there would deny it.
        EXPECT_FALSE(rule.contains("resourceNames")) << rule;
      } else {
        EXPECT_EQ(rule.value("resourceNames", json()), json::array({"toposched-extender"})) << rule;
      }
    }
  }
}

void ForEachString(const json& value, const std::function<void(const std::string&)>& visit) {
  if (value.is_string()) visit(value.get<std::string>());
  if (value.is_object()) {
    for (const auto& [key, child] : value.items()) {
      visit(key);
      ForEachString(child, visit);
    }
  }
  if (value.is_array()) {
    for (const json& child : value) ForEachString(child, visit);
  }
}

TEST(Rbac, NoWildcardsSecretsOrBuiltinAdminRoles) {
  const Rbac rbac = LoadRbac();
  ASSERT_FALSE(rbac.docs.empty());
  for (const json& doc : rbac.docs) {
    ForEachString(doc, [&](const std::string& s) {
      EXPECT_EQ(s.find('*'), std::string::npos) << "wildcard in " << doc["metadata"]["name"] << ": " << s;
      EXPECT_NE(s, "secrets") << doc["metadata"]["name"];
      EXPECT_NE(s, "cluster-admin") << doc["metadata"]["name"];
      EXPECT_NE(s, "system:masters") << doc["metadata"]["name"];
    });
  }
}

TEST(Rbac, EveryBindingJoinsAnExistingRoleAndServiceAccount) {
  const Rbac rbac = LoadRbac();
  ASSERT_EQ(rbac.bindings.size(), 3u);
  std::set<RoleKey> bound;
  for (const json* binding : rbac.bindings) {
    const std::string name = (*binding)["metadata"]["name"];
    SCOPED_TRACE(name);
    const json& ref = (*binding)["roleRef"];
    EXPECT_EQ(ref["apiGroup"], "rbac.authorization.k8s.io");
    const std::string ref_kind = ref["kind"];
    // A ClusterRoleBinding may only reference a ClusterRole; a RoleBinding here references the
    // Role in its own namespace.
    if ((*binding)["kind"] == "ClusterRoleBinding") {
      EXPECT_EQ(ref_kind, "ClusterRole");
    }
    const std::string ns = ref_kind == "Role" ? (*binding)["metadata"].value("namespace", "") : "";
    const RoleKey key{ref_kind, ns, ref["name"]};
    EXPECT_TRUE(rbac.roles.count(key)) << "roleRef " << ref << " names no role in rbac.yaml";
    bound.insert(key);
    ASSERT_FALSE((*binding)["subjects"].empty());
    for (const json& subject : (*binding)["subjects"]) {
      EXPECT_EQ(subject["kind"], "ServiceAccount");
      EXPECT_TRUE(rbac.service_accounts.count({subject.value("namespace", ""), subject.value("name", "")}))
          << "subject " << subject << " is no ServiceAccount in rbac.yaml";
    }
  }
  for (const auto& [key, role] : rbac.roles)
    EXPECT_TRUE(bound.count(key)) << std::get<2>(key) << " is not bound";
}

// ---- the workloads: agent DaemonSet, extender Deployment and Service ---------------------------

const json* FindObject(const std::vector<json>& docs, const std::string& kind, const std::string& name) {
  for (const json& doc : docs) {
    if (doc.value("kind", "") == kind && doc["metadata"].value("name", "") == name) return &doc;
  }
  return nullptr;
}

struct DeployedWorkloads {
  std::vector<json> agent_docs, extender_docs;
  const json* agent = nullptr;     // DaemonSet toposched-agent
  const json* extender = nullptr;  // Deployment toposched-extender
  const json* service = nullptr;   // Service toposched-extender
};

DeployedWorkloads LoadWorkloads() {
  DeployedWorkloads w;
  w.agent_docs = LoadYaml(kAgentFile);
  w.extender_docs = LoadYaml(kExtenderFile);
  w.agent = FindObject(w.agent_docs, "DaemonSet", "toposched-agent");
  w.extender = FindObject(w.extender_docs, "Deployment", "toposched-extender");
  w.service = FindObject(w.extender_docs, "Service", "toposched-extender");
  return w;
}

const json& PodSpec(const json& workload) {
  return workload["spec"]["template"]["spec"];
}

// Every container of a pod spec, init containers included.
std::vector<const json*> Containers(const json& pod_spec) {
  std::vector<const json*> out;
  for (const char* key : {"initContainers", "containers"}) {
    if (!pod_spec.contains(key)) continue;
    for (const json& c : pod_spec[key]) out.push_back(&c);
  }
  return out;
}

const json& OnlyContainer(const json& workload) {
  static const json kNone = json::object();
  const json& containers = PodSpec(workload)["containers"];
  EXPECT_EQ(containers.size(), 1u);
  return containers.empty() ? kNone : containers[0];
}

std::vector<std::string> Args(const json& container) {
  return container.value("args", std::vector<std::string>{});
}

// The value after `flag` in args ("" when absent or last).
std::string FlagValue(const std::vector<std::string>& args, const std::string& flag) {
  auto it = std::find(args.begin(), args.end(), flag);
  return it == args.end() || it + 1 == args.end() ? "" : *(it + 1);
}

const json* EnvVar(const json& container, const std::string& name) {
  if (!container.contains("env")) return nullptr;
  for (const json& env : container["env"]) {
    if (env.value("name", "") == name) return &env;
  }
  return nullptr;
}

TEST(Workloads, AreTheExpectedObjectsInTheNamespaceAsTheServiceAccountsRbacDefines) {
  const DeployedWorkloads w = LoadWorkloads();
  ASSERT_NE(w.agent, nullptr) << "no DaemonSet toposched-agent in " << kAgentFile;
  ASSERT_NE(w.extender, nullptr) << "no Deployment toposched-extender in " << kExtenderFile;
  ASSERT_NE(w.service, nullptr) << "no Service toposched-extender in " << kExtenderFile;
  const Rbac rbac = LoadRbac();
  for (const std::vector<json>* docs : {&w.agent_docs, &w.extender_docs}) {
    for (const json& doc : *docs) {
      EXPECT_EQ(doc["metadata"].value("namespace", ""), kNamespace)
          << doc["kind"] << " " << doc["metadata"]["name"];
    }
  }
  const std::vector<std::pair<const json*, std::string>> expected = {{w.agent, "toposched-agent"},
                                                                     {w.extender, "toposched-extender"}};
  for (const auto& [workload, account] : expected) {
    SCOPED_TRACE(account);
    const json& pod = PodSpec(*workload);
    EXPECT_EQ(pod.value("serviceAccountName", ""), account);
    EXPECT_TRUE(rbac.service_accounts.count(
        {(*workload)["metadata"].value("namespace", ""), pod.value("serviceAccountName", "")}))
        << "not a ServiceAccount of rbac.yaml";
    // The API server refuses a workload whose selector does not select its own template.
    const json& labels = (*workload)["spec"]["template"]["metadata"]["labels"];
    for (const auto& [key, value] : (*workload)["spec"]["selector"]["matchLabels"].items()) {
      EXPECT_EQ(labels.value(key, ""), value) << key;
    }
    EXPECT_FALSE((*workload)["spec"]["selector"].contains("matchExpressions"));
    const json& container = OnlyContainer(*workload);
    // The agent runs the full binary; the extender toposched-extender (`toposched serve`
    // without hwloc), in an image without hwloc.
    EXPECT_EQ(container["command"],
              json::array({account == "toposched-agent" ? "/usr/local/bin/toposched"
                                                        : "/usr/local/bin/toposched-extender"}));
    EXPECT_TRUE(container["resources"]["requests"].contains("cpu"));
    EXPECT_TRUE(container["resources"]["requests"].contains("memory"));
    EXPECT_TRUE(container["resources"]["limits"].contains("memory"));
  }
}

TEST(Workloads, EveryContainerRunsUnprivilegedAndHostPathsAreReadOnly) {
  const DeployedWorkloads w = LoadWorkloads();
  ASSERT_TRUE(w.agent != nullptr && w.extender != nullptr);
  int host_path_mounts = 0;
  for (const json* workload : {w.agent, w.extender}) {
    const json& pod = PodSpec(*workload);
    EXPECT_FALSE(pod.value("hostNetwork", false));
    EXPECT_FALSE(pod.value("hostPID", false));
    std::set<std::string> host_path_volumes;
    for (const json& volume : pod.value("volumes", json::array())) {
      if (volume.contains("hostPath")) host_path_volumes.insert(volume["name"].get<std::string>());
    }
    const std::vector<const json*> containers = Containers(pod);
    ASSERT_FALSE(containers.empty());
    for (const json* container : containers) {
      SCOPED_TRACE((*workload)["metadata"]["name"].get<std::string>() + "/" +
                   (*container)["name"].get<std::string>());
      const json& sc = container->value("securityContext", json::object());
      EXPECT_EQ(sc.value("runAsNonRoot", false), true);
      EXPECT_EQ(sc.value("readOnlyRootFilesystem", false), true);
      EXPECT_EQ(sc.value("allowPrivilegeEscalation", true), false);
      EXPECT_EQ(sc.value("privileged", false), false);
      EXPECT_NE(sc.value("runAsUser", 0), 0);
      const json drop = sc.value("/capabilities/drop"_json_pointer, json::array());
      EXPECT_NE(std::find(drop.begin(), drop.end(), "ALL"), drop.end()) << "capabilities.drop lacks ALL";
      EXPECT_FALSE(sc.contains("capabilities") && sc["capabilities"].contains("add"));
      EXPECT_EQ(sc.value("/seccompProfile/type"_json_pointer, std::string()), "RuntimeDefault");
      for (const json& mount : container->value("volumeMounts", json::array())) {
        if (!host_path_volumes.count(mount["name"].get<std::string>())) continue;
        ++host_path_mounts;
        EXPECT_EQ(mount.value("readOnly", false), true) << "hostPath mount " << mount["mountPath"];
      }
    }
  }
  EXPECT_GE(host_path_mounts, 1) << "the agent mounts the host's /sys";
}

TEST(Workloads, AgentRunsOnGpuNodesAndKnowsItsNode) {
  const DeployedWorkloads w = LoadWorkloads();
  ASSERT_NE(w.agent, nullptr);
  const json& container = OnlyContainer(*w.agent);
  EXPECT_EQ(Args(container).at(0), "agent");
  const json* node_name = EnvVar(container, "NODE_NAME");
  ASSERT_NE(node_name, nullptr) << "the agent reads its node from $NODE_NAME";
  EXPECT_EQ(node_name->value("/valueFrom/fieldRef/fieldPath"_json_pointer, std::string()), "spec.nodeName");
  // hwloc reads the PCIe tree from the host's sysfs, at the default --sysfs-root.
  std::string sys_volume;
  for (const json& mount : container["volumeMounts"]) {
    if (mount["mountPath"] == "/sys") sys_volume = mount["name"].get<std::string>();
  }
  ASSERT_FALSE(sys_volume.empty()) << "no mount at /sys";
  bool host_sys = false;
  for (const json& volume : PodSpec(*w.agent)["volumes"]) {
    if (volume["name"] == sys_volume)
      host_sys = volume.value("/hostPath/path"_json_pointer, std::string()) == "/sys";
  }
  EXPECT_TRUE(host_sys) << "/sys is not the host's /sys";
  // Either GPU label selects the node: one nodeSelectorTerm each (terms are ORed, expressions
  // within a term ANDed).
  const json& terms = PodSpec(*w.agent).value(
      "/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms"_json_pointer,
      json::array());
  std::set<std::string> keys;
  for (const json& term : terms) {
    ASSERT_EQ(term["matchExpressions"].size(), 1u) << term;
    EXPECT_EQ(term["matchExpressions"][0]["operator"], "Exists");
    keys.insert(term["matchExpressions"][0]["key"].get<std::string>());
  }
  EXPECT_EQ(keys,
            (std::set<std::string>{"nvidia.com/gpu.present", "feature.node.kubernetes.io/pci-10de.present"}));
  EXPECT_EQ(terms.size(), 2u);
  const json expected_toleration = {
      {"key", "nvidia.com/gpu"}, {"operator", "Exists"}, {"effect", "NoSchedule"}};
  const json tolerations = PodSpec(*w.agent).value("tolerations", json::array());
  EXPECT_NE(std::find(tolerations.begin(), tolerations.end(), expected_toleration), tolerations.end());
}

TEST(Workloads, ExtenderServesKubernetesAndItsServiceRoutesToTheLabelledLeader) {
  const DeployedWorkloads w = LoadWorkloads();
  ASSERT_TRUE(w.extender != nullptr && w.service != nullptr);
  const json& container = OnlyContainer(*w.extender);
  const std::vector<std::string> args = Args(container);
  ASSERT_FALSE(args.empty());
  EXPECT_EQ(args[0], "serve");
  EXPECT_NE(std::find(args.begin(), args.end(), "--kube"), args.end());
  const std::string port = FlagValue(args, "--port");
  ASSERT_FALSE(port.empty()) << "pass --port explicitly: the probes and the Service depend on it";
  const int container_port = std::stoi(port);
  EXPECT_EQ(container["ports"][0]["containerPort"], container_port);
  EXPECT_EQ(container.value("/readinessProbe/httpGet/path"_json_pointer, std::string()), "/readyz");
  EXPECT_EQ(container.value("/readinessProbe/httpGet/port"_json_pointer, 0), container_port);
  EXPECT_EQ(container.value("/livenessProbe/httpGet/path"_json_pointer, std::string()), "/healthz");
  EXPECT_EQ(container.value("/livenessProbe/httpGet/port"_json_pointer, 0), container_port);
  // The Lease identity and the pod the leader labels: $POD_NAME and $POD_NAMESPACE from the
  // downward API (without both, serve falls back to "only the leader is ready").
  const json* pod_name = EnvVar(container, "POD_NAME");
  ASSERT_NE(pod_name, nullptr);
  EXPECT_EQ(pod_name->value("/valueFrom/fieldRef/fieldPath"_json_pointer, std::string()), "metadata.name");
  const json* pod_namespace = EnvVar(container, "POD_NAMESPACE");
  ASSERT_NE(pod_namespace, nullptr);
  EXPECT_EQ(pod_namespace->value("/valueFrom/fieldRef/fieldPath"_json_pointer, std::string()),
            "metadata.namespace");
  // Every $(VAR) in args is an env var the container defines (else Kubernetes passes it verbatim).
  for (const std::string& arg : args) {
    std::smatch m;
    if (std::regex_search(arg, m, std::regex(R"(\$\(([A-Za-z_][A-Za-z0-9_]*)\))"))) {
      EXPECT_NE(EnvVar(container, m[1].str()), nullptr) << arg;
    }
  }
  EXPECT_EQ(
      PodSpec(*w.extender)
          .value(
              "/affinity/podAntiAffinity/preferredDuringSchedulingIgnoredDuringExecution/0/podAffinityTerm/topologyKey"_json_pointer,
              std::string()),
      "kubernetes.io/hostname");
  EXPECT_GE((*w.extender)["spec"].value("replicas", 1), 2);
  // The Service selects the extender's pods, and of those only the leader (the label the
  // leader puts on its own pod at run time), and forwards to the port it serves on.
  const json& pod_labels = (*w.extender)["spec"]["template"]["metadata"]["labels"];
  ASSERT_FALSE((*w.service)["spec"]["selector"].empty());
  EXPECT_EQ((*w.service)["spec"]["selector"].value("toposched.io/leader", ""), "true");
  EXPECT_FALSE(pod_labels.contains("toposched.io/leader"))
      << "the template must not make every replica the leader";
  for (const auto& [key, value] : (*w.service)["spec"]["selector"].items()) {
    if (key == "toposched.io/leader") continue;
    EXPECT_EQ(pod_labels.value(key, ""), value) << key;
  }
  ASSERT_EQ((*w.service)["spec"]["ports"].size(), 1u);
  EXPECT_EQ((*w.service)["spec"]["ports"][0]["targetPort"], container_port);
}

// host:port of an http URL ("http://h.ns.svc:8888/scheduler" -> "h.ns.svc:8888").
std::string UrlAuthority(const std::string& url) {
  const std::size_t scheme = url.find("://");
  const std::size_t start = scheme == std::string::npos ? 0 : scheme + 3;
  return url.substr(start, url.find('/', start) - start);
}

// The scheduler configurations call the Service above by its in-cluster DNS name.
TEST(Workloads, SchedulerConfigurationsCallTheExtendersService) {
  const DeployedWorkloads w = LoadWorkloads();
  ASSERT_NE(w.service, nullptr);
  const std::string authority = w.service->value("/metadata/name"_json_pointer, std::string()) + "." +
                                kNamespace +
                                ".svc:" + std::to_string((*w.service)["spec"]["ports"][0]["port"].get<int>());
  const std::vector<json> kube = LoadYaml(kSourceDir / "deploy/kube-scheduler/scheduler-config.yaml");
  ASSERT_EQ(kube.size(), 1u);
  EXPECT_EQ(UrlAuthority(kube[0].value("/extenders/0/urlPrefix"_json_pointer, std::string())), authority);
  const std::vector<json> volcano = LoadYaml(kSourceDir / "deploy/volcano/volcano-scheduler.conf");
  ASSERT_EQ(volcano.size(), 1u);
  std::string volcano_url;
  for (const json& tier : volcano[0]["tiers"]) {
    for (const json& plugin : tier["plugins"]) {
      if (plugin["name"] == "extender") volcano_url = plugin["arguments"].value("extender.urlPrefix", "");
    }
  }
  EXPECT_EQ(UrlAuthority(volcano_url), authority);
}

// ---- the workloads' flags are the binary's flags -------------------------------------------------

// The help text of a subcommand, as the binary prints it (CLI11 generates it from the flags
// the subcommand declares, so it is the list of flags the binary accepts).
std::string HelpText(const std::string& subcommand) {
  const CliRun run = RunToposched(subcommand + " --help");
  return run.exit_code == 0 ? run.out : "";
}

// `flag` appears in `help` as a whole token: "--kube" is not mentioned by "--kubeconfig".
bool MentionsFlag(const std::string& help, const std::string& flag) {
  const std::regex token("(^|[^-A-Za-z0-9])" + flag + "($|[^-A-Za-z0-9])");
  return std::regex_search(help, token);
}

TEST(Workloads, HelpTextExtractionFindsWholeFlags) {
  const std::string serve = HelpText("serve"), agent = HelpText("agent");
  ASSERT_FALSE(serve.empty()) << "toposched serve --help failed";
  ASSERT_FALSE(agent.empty()) << "toposched agent --help failed";
  EXPECT_TRUE(MentionsFlag(serve, "--kube"));
  EXPECT_TRUE(MentionsFlag(serve, "--lease-namespace"));
  EXPECT_TRUE(MentionsFlag(agent, "--kubeconfig"));
  EXPECT_FALSE(MentionsFlag(agent, "--kube"));       // only --kubeconfig
  EXPECT_FALSE(MentionsFlag(serve, "--lease"));      // only --lease-name, --lease-duration, ...
  EXPECT_TRUE(MentionsFlag(agent, "--sysfs-root"));  // from the shared topology-source flags
  EXPECT_FALSE(MentionsFlag(serve, "--no-such-flag"));
}

TEST(Workloads, EveryFlagInArgsIsInTheSubcommandsHelp) {
  const DeployedWorkloads w = LoadWorkloads();
  ASSERT_TRUE(w.agent != nullptr && w.extender != nullptr);
  int flags = 0;
  for (const json* workload : {w.agent, w.extender}) {
    for (const json* container : Containers(PodSpec(*workload))) {
      const std::vector<std::string> args = Args(*container);
      ASSERT_FALSE(args.empty());
      const std::string help = HelpText(args[0]);
      ASSERT_FALSE(help.empty()) << "no help text for subcommand " << args[0];
      for (const std::string& arg : args) {
        if (arg.rfind("--", 0) != 0) continue;
        const std::string flag = arg.substr(0, arg.find('='));
        ASSERT_TRUE(std::regex_match(flag, std::regex("--[a-z0-9][-a-z0-9]*"))) << flag;
        EXPECT_TRUE(MentionsFlag(help, flag))
            << "toposched " << args[0] << " --help does not mention " << flag;
        ++flags;
      }
    }
  }
  EXPECT_GE(flags, 4);  // agent --log-format; serve --kube --port --log-format ...
}

}  // namespace
}  // namespace toposched::testing
