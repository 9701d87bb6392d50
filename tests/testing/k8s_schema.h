#pragma once
// Offline checks of Kubernetes manifests and objects (a test helper, not shipped):
//
// - ValidateJsonSchema: a document against a kubeconform-style JSON Schema, the
//   "standalone-strict" files in ../shared/k8s-schemas (every $ref inlined, `type` lists with
//   "null", `additionalProperties: false`, int-or-string as `oneOf`, kind/apiVersion pinned by
//   `enum`).
// - ValidateCrdSchema: an object against a CRD version's openAPIV3Schema, as the API server
//   applies it. A field the API server would prune (not in `properties`, no
//   `additionalProperties`, no `x-kubernetes-preserve-unknown-fields`) or drop (null where the
//   schema is not `nullable`) is a violation: for us it is silent data loss.
// - CheckStructuralSchema: the openAPIV3Schema itself is structural (what apiextensions/v1
//   requires) and uses only keywords these checks understand.
// - YamlToJson: YAML text to JSON values, resolving plain scalars per the YAML 1.2 core schema.
//
// Every violation names the JSON path of the offending value ("status.gpus[3].index") and says
// what was expected. A schema keyword the validators do not implement is itself reported, so a
// schema can never pass because a rule was silently skipped.

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "toposched/common/status.h"

namespace toposched::testing {

struct SchemaViolation {
  std::string path;  // "" is the document itself
  std::string message;
  std::string ToString() const;  // "status.gpus[0].index: expected integer, got string \"0\""
};
using SchemaViolations = std::vector<SchemaViolation>;

// One line per violation, for test failure messages.
std::string Describe(const SchemaViolations& violations);

SchemaViolations ValidateJsonSchema(const nlohmann::json& document, const nlohmann::json& schema);
SchemaViolations ValidateCrdSchema(const nlohmann::json& object, const nlohmann::json& open_api_v3_schema);
// Paths here point into the schema ("properties.status.properties.gpus.items").
SchemaViolations CheckStructuralSchema(const nlohmann::json& open_api_v3_schema);

// The file in ../shared/k8s-schemas for a kind, by kubeconform's naming rule: lower-case kind,
// the group's first label (none for the core group), the version:
// ("rbac.authorization.k8s.io/v1", "ClusterRole") -> "clusterrole-rbac-v1.json".
std::string K8sSchemaFileName(std::string_view api_version, std::string_view kind);

// Every document of a YAML stream as JSON; empty documents (a trailing `---`) are skipped.
// Plain scalars become null, bool, integer or float per the YAML 1.2 core schema, anything
// else a string; quoted and block scalars are always strings. Refused, because Kubernetes'
// YAML 1.1 reader (sigs.k8s.io/yaml) would read them differently: plain yes/no/on/off/y/n
// (booleans there, strings here) and integers with a leading zero (octal there, decimal here).
// Also refused: duplicate keys, non-scalar keys, unknown tags, .inf/.nan (no JSON form).
Result<std::vector<nlohmann::json>> YamlToJson(std::string_view yaml_text);

}  // namespace toposched::testing
