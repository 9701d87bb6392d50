// The manifests in deploy/ (and the chart's CRD copy) are valid Kubernetes objects, the
// NodeTopology CRD's schema keeps every field the agent writes (the API server prunes what a
// schema does not list), and RBAC grants exactly what the code paths need.
//
// Kubernetes' own schemas come from ../shared/k8s-schemas (kubeconform's standalone-strict
// files); tests that need them skip without them. The CRD schema and RBAC checks need nothing.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "testing/k8s_schema.h"
#include "testing/shared_topologies.h"
#include "toposched/agent/discovery.h"
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

// What the agent will publish (kube::NodeTopologyObject, objects.h): the topology JSON plus
// status.summary / generation / heartbeatTime, the topology-class label and the Node as owner.
json NodeTopologyObject(const NodeTopology& topology) {
  json object = json::parse(EncodeTopologyJson(topology, -1));
  json& status = object["status"];
  json summary = {{"gpus", topology.gpus.size()},
                  {"nics", topology.nics.size()},
                  {"rdmaNics", topology.RdmaNicCount()},
                  {"numaNodes", topology.numa_nodes.size()}};
  for (const Gpu& gpu : topology.gpus) {
    if (!gpu.model.empty()) {
      summary["gpuModel"] = gpu.model;
      break;
    }
  }
  status["summary"] = std::move(summary);
  status["generation"] = 3;
  status["heartbeatTime"] = "2026-01-15T10:04:05Z";
  object["spec"] = json::object();
  json& metadata = object["metadata"];
  metadata["labels"] = {{"toposched.io/topology-class", topology.Fingerprint().substr(0, 12)}};
  metadata["ownerReferences"] = json::array(
      {{{"apiVersion", "v1"}, {"kind", "Node"}, {"name", topology.node_name}, {"uid", "0b6f3c1e-uid"}}});
  return object;
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
  CollectPaths(NodeTopologyObject(EveryFieldTopology())["status"], "", &written);
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
    const SchemaViolations violations = ValidateCrdSchema(NodeTopologyObject(Preset(name)), CrdSchema());
    EXPECT_TRUE(violations.empty()) << Describe(violations);
  }
  const SchemaViolations violations =
      ValidateCrdSchema(NodeTopologyObject(EveryFieldTopology()), CrdSchema());
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
    const json object = NodeTopologyObject(topology.value());
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
  const json valid = NodeTopologyObject(Preset("hgx-h100-8gpu"));
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

}  // namespace
}  // namespace toposched::testing
