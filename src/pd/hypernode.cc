// Node positions from Volcano HyperNode objects (topology.volcano.sh/v1alpha1).
//
// The schema read here follows volcano-sh/volcano@a5379e6
// staging/src/volcano.sh/apis/pkg/apis/topology/v1alpha1/hypernode_types.go (mirrored in
// volcano-sh/apis pkg/apis/topology/v1alpha1/hypernode_types.go):
//   spec.tier        int, minimum 0 (an older v1alpha1 had a string; a string of digits is accepted)
//   spec.members[]   {type: Node | HyperNode, selector: {exactMatch: {name}} | {regexMatch: {pattern}}
//                     | {labelMatch: metav1.LabelSelector}}; exactly one selector (CRD CEL rules)
// and the semantics of Volcano's scheduler cache (pkg/scheduler/api/hyper_node_info.go,
// BuildHyperNodeCache / getMembers), which we match rather than copy:
//   - a regexMatch pattern selects node names it matches anywhere (Go regexp.MatchString is an
//     unanchored search); patterns are written "^node-[0-9]+$" when they mean the whole name;
//   - HyperNode members are named by exactMatch only ("HyperNode member does not support regex
//     match"); labelMatch applies to Node members only;
//   - a HyperNode member naming a HyperNode that does not exist is skipped (it may not be created yet).
// Where Volcano logs and goes on (a bad regex, a selector it cannot use) we skip that member too
// and say so in `warnings`: one bad member must not take every other domain with it. Patterns are
// Go regexp (RE2) syntax, compiled with RE2 ((?i), \pL, \z work as in Volcano). spec.tier is
// omitempty: absent means 0.
//
// A node held by two HyperNodes of one tier (Volcano's webhook does not forbid overlapping
// selectors) gets the one whose name sorts first, so the answer does not depend on list order.

#include <nlohmann/json.hpp>

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <re2/re2.h>

#include "../common/json_errors.h"
#include "toposched/pd/network.h"

namespace toposched::pd {
namespace {

using json = nlohmann::json;
using json_errors::Expected;
using json_errors::Quote;

// kubectl's output carries managedFields and status; real HyperNodes nest about 8 deep.
constexpr int kMaxNestingDepth = 64;
constexpr std::size_t kMaxJsonValues = std::size_t{1} << 21;
// A node-name pattern is short; RE2 bounds its own memory too.
constexpr std::size_t kMaxPatternLength = 1024;

struct LabelRequirement {
  std::string key;
  enum class Op { kIn, kNotIn, kExists, kDoesNotExist } op = Op::kIn;
  std::set<std::string> values;
};

struct NodeSelector {
  enum class Kind { kExact, kRegex, kLabels } kind = Kind::kExact;
  std::string name;                                 // kExact
  std::shared_ptr<const re2::RE2> regex;            // kRegex
  std::map<std::string, std::string> match_labels;  // kLabels
  std::vector<LabelRequirement> expressions;        // kLabels
};

struct HyperNode {
  std::string name;
  int tier = 0;
  std::vector<NodeSelector> node_members;
  std::vector<std::string> child_hyper_nodes;
};

Result<std::string> NonEmptyString(const json& v, const std::string& path) {
  if (!v.is_string() || v.get_ref<const std::string&>().empty())
    return Expected(path, "a non-empty string", v);
  return v.get<std::string>();
}

// A LabelSelector (k8s.io/apimachinery metav1): matchLabels ANDed with matchExpressions.
Status ParseLabelSelector(const json& v, const std::string& path, NodeSelector& out) {
  if (!v.is_object()) return Expected(path, "an object with matchLabels or matchExpressions", v);
  for (const auto& [key, value] : v.items()) {
    if (key != "matchLabels" && key != "matchExpressions") {
      return Error(path + "." + key + ": unknown key (known: matchLabels, matchExpressions)");
    }
  }
  if (const auto it = v.find("matchLabels"); it != v.end() && !it->is_null()) {
    if (!it->is_object()) return Expected(path + ".matchLabels", "an object of label values", *it);
    for (const auto& [key, value] : it->items()) {
      if (!value.is_string()) return Expected(path + ".matchLabels." + key, "a string", value);
      out.match_labels.emplace(key, value.get<std::string>());
    }
  }
  if (const auto it = v.find("matchExpressions"); it != v.end() && !it->is_null()) {
    if (!it->is_array()) return Expected(path + ".matchExpressions", "an array", *it);
    for (std::size_t i = 0; i < it->size(); ++i) {
      const json& e = (*it)[i];
      const std::string epath = path + ".matchExpressions[" + std::to_string(i) + "]";
      if (!e.is_object()) return Expected(epath, "an object {key, operator, values}", e);
      LabelRequirement req;
      TOPOSCHED_ASSIGN_OR_RETURN(req.key, NonEmptyString(e.value("key", json()), epath + ".key"));
      TOPOSCHED_ASSIGN_OR_RETURN(const std::string op,
                                 NonEmptyString(e.value("operator", json()), epath + ".operator"));
      if (op == "In") {
        req.op = LabelRequirement::Op::kIn;
      } else if (op == "NotIn") {
        req.op = LabelRequirement::Op::kNotIn;
      } else if (op == "Exists") {
        req.op = LabelRequirement::Op::kExists;
      } else if (op == "DoesNotExist") {
        req.op = LabelRequirement::Op::kDoesNotExist;
      } else {
        return Error(epath + ".operator: " + Quote(op) + " is not In, NotIn, Exists or DoesNotExist");
      }
      const json values = e.value("values", json::array());
      if (!values.is_array()) return Expected(epath + ".values", "an array of strings", values);
      for (const json& s : values) {
        if (!s.is_string()) return Expected(epath + ".values[]", "a string", s);
        req.values.insert(s.get<std::string>());
      }
      const bool set_op = req.op == LabelRequirement::Op::kIn || req.op == LabelRequirement::Op::kNotIn;
      if (set_op == req.values.empty()) {
        return Error(epath + ".values: " + op + (set_op ? " needs values" : " takes no values"));
      }
      out.expressions.push_back(std::move(req));
    }
  }
  return Status::Ok();
}

Status ParseMember(const json& m, const std::string& path, HyperNode& hn) {
  if (!m.is_object()) return Expected(path, "an object {type, selector}", m);
  TOPOSCHED_ASSIGN_OR_RETURN(const std::string type, NonEmptyString(m.value("type", json()), path + ".type"));
  if (type != "Node" && type != "HyperNode") {
    return Error(path + ".type: " + Quote(type) + " is not Node or HyperNode");
  }
  const auto sel_it = m.find("selector");
  if (sel_it == m.end() || sel_it->is_null()) return Error(path + ": a member needs a selector");
  const json& sel = *sel_it;
  const std::string spath = path + ".selector";
  if (!sel.is_object()) return Expected(spath, "an object", sel);
  std::vector<std::string> given;
  for (const char* key : {"exactMatch", "regexMatch", "labelMatch"}) {
    if (const auto it = sel.find(key); it != sel.end() && !it->is_null()) given.emplace_back(key);
  }
  if (given.size() != 1) {
    return Error(spath + ": needs exactly one of exactMatch, regexMatch, labelMatch (got " +
                 std::to_string(given.size()) + ")");
  }
  const std::string& kind = given.front();
  if (type == "HyperNode" && kind != "exactMatch") {
    // As in Volcano: a HyperNode member is one named HyperNode.
    return Error(spath + "." + kind + ": a HyperNode member is selected by exactMatch only");
  }
  const json& body = sel[kind];
  if (!body.is_object()) return Expected(spath + "." + kind, "an object", body);
  NodeSelector ns;
  if (kind == "exactMatch") {
    TOPOSCHED_ASSIGN_OR_RETURN(std::string name,
                               NonEmptyString(body.value("name", json()), spath + ".exactMatch.name"));
    if (type == "HyperNode") {
      hn.child_hyper_nodes.push_back(std::move(name));
      return Status::Ok();
    }
    ns.kind = NodeSelector::Kind::kExact;
    ns.name = std::move(name);
  } else if (kind == "regexMatch") {
    const std::string ppath = spath + ".regexMatch.pattern";
    TOPOSCHED_ASSIGN_OR_RETURN(const std::string pattern,
                               NonEmptyString(body.value("pattern", json()), ppath));
    if (pattern.size() > kMaxPatternLength) {
      return Error(ppath + ": " + std::to_string(pattern.size()) + " characters is over the limit of " +
                   std::to_string(kMaxPatternLength));
    }
    re2::RE2::Options options;
    options.set_log_errors(false);
    auto regex = std::make_shared<const re2::RE2>(pattern, options);
    if (!regex->ok()) {
      return Error(ppath + ": " + Quote(pattern) + " is not a valid regular expression (" + regex->error() +
                   ")");
    }
    ns.regex = std::move(regex);
    ns.kind = NodeSelector::Kind::kRegex;
  } else {
    ns.kind = NodeSelector::Kind::kLabels;
    TOPOSCHED_RETURN_IF_ERROR(ParseLabelSelector(body, spath + ".labelMatch", ns));
  }
  hn.node_members.push_back(std::move(ns));
  return Status::Ok();
}

Result<HyperNode> ParseHyperNode(const json& item, const std::string& path,
                                 std::vector<std::string>* warnings) {
  if (!item.is_object()) return Expected(path, "a HyperNode object", item);
  if (const auto it = item.find("kind"); it != item.end() && *it != "HyperNode") {
    return Expected(path + ".kind", "\"HyperNode\"", *it);
  }
  if (const auto it = item.find("apiVersion"); it != item.end()) {
    if (!it->is_string() || it->get_ref<const std::string&>().rfind("topology.volcano.sh/", 0) != 0) {
      return Expected(path + ".apiVersion", "topology.volcano.sh/<version>", *it);
    }
  }
  HyperNode hn;
  const json metadata = item.value("metadata", json::object());
  if (!metadata.is_object()) return Expected(path + ".metadata", "an object", metadata);
  TOPOSCHED_ASSIGN_OR_RETURN(hn.name,
                             NonEmptyString(metadata.value("name", json()), path + ".metadata.name"));
  const std::string where = "HyperNode " + Quote(hn.name);
  const auto spec_it = item.find("spec");
  if (spec_it == item.end() || !spec_it->is_object()) {
    return Expected(where + ": spec", "an object {tier, members}", spec_it == item.end() ? json() : *spec_it);
  }
  const json& spec = *spec_it;
  const json tier = spec.value("tier", json(0));  // omitempty: absent is 0
  constexpr int kMaxTier = 1000;
  if (tier.is_null()) {
    hn.tier = 0;
  } else if (tier.is_number_integer() && tier.get<std::int64_t>() >= 0 &&
             tier.get<std::int64_t>() <= kMaxTier) {
    hn.tier = tier.get<int>();
  } else if (tier.is_string() && !tier.get_ref<const std::string&>().empty() &&
             tier.get_ref<const std::string&>().size() <= 4 &&
             tier.get_ref<const std::string&>().find_first_not_of("0123456789") == std::string::npos) {
    hn.tier = std::stoi(tier.get<std::string>());
  } else {
    return Expected(where + ": spec.tier", "an integer 0.." + std::to_string(kMaxTier), tier);
  }
  const json members = spec.value("members", json::array());
  if (!members.is_array()) return Expected(where + ": spec.members", "an array", members);
  for (std::size_t j = 0; j < members.size(); ++j) {
    if (Status s = ParseMember(members[j], "spec.members[" + std::to_string(j) + "]", hn); !s.ok()) {
      if (warnings != nullptr) {
        warnings->push_back(where + ": " + s.error().message() + " (member skipped, as Volcano does)");
      }
    }
  }
  return hn;
}

bool Matches(const NodeSelector& s, const std::string& node,
             const std::map<std::string, std::string>& labels) {
  switch (s.kind) {
    case NodeSelector::Kind::kExact:
      return node == s.name;
    case NodeSelector::Kind::kRegex:
      return re2::RE2::PartialMatch(node, *s.regex);  // Go's MatchString: unanchored
    case NodeSelector::Kind::kLabels: {
      // As in Volcano, an empty selector selects nothing (a LabelSelector would select everything).
      if (s.match_labels.empty() && s.expressions.empty()) return false;
      for (const auto& [k, v] : s.match_labels) {
        const auto it = labels.find(k);
        if (it == labels.end() || it->second != v) return false;
      }
      for (const LabelRequirement& r : s.expressions) {
        const auto it = labels.find(r.key);
        const bool has = it != labels.end();
        switch (r.op) {
          case LabelRequirement::Op::kIn:
            if (!has || !r.values.contains(it->second)) return false;
            break;
          case LabelRequirement::Op::kNotIn:
            if (has && r.values.contains(it->second)) return false;
            break;
          case LabelRequirement::Op::kExists:
            if (!has) return false;
            break;
          case LabelRequirement::Op::kDoesNotExist:
            if (has) return false;
            break;
        }
      }
      return true;
    }
  }
  return false;
}

// Nodes each HyperNode holds, directly or through its HyperNode members. Depth-first with three
// colours; a grey child is a cycle, reported along the path that closes it.
class Resolver {
 public:
  Resolver(const std::map<std::string, HyperNode>& hyper_nodes, const NodeLabels& nodes)
      : hyper_nodes_(hyper_nodes), nodes_(nodes) {}

  Status Resolve() {
    for (const auto& [name, hn] : hyper_nodes_) {
      TOPOSCHED_RETURN_IF_ERROR(Visit(hn));
    }
    return Status::Ok();
  }

  const std::set<std::string>& Held(const std::string& name) const { return held_.at(name); }

 private:
  Status Visit(const HyperNode& hn) {
    if (held_.contains(hn.name)) return Status::Ok();
    if (const auto grey = std::find(stack_.begin(), stack_.end(), hn.name); grey != stack_.end()) {
      std::string cycle;
      for (auto it = grey; it != stack_.end(); ++it) cycle += *it + " -> ";
      return Error("HyperNode cycle: " + cycle + hn.name);
    }
    stack_.push_back(hn.name);
    std::set<std::string> held;
    for (const NodeSelector& s : hn.node_members) {
      if (s.kind == NodeSelector::Kind::kExact) {
        held.insert(s.name);  // Volcano takes an exact name as given, listed node or not
        continue;
      }
      for (const auto& [node, labels] : nodes_) {
        if (Matches(s, node, labels)) held.insert(node);
      }
    }
    for (const std::string& child : hn.child_hyper_nodes) {
      const auto it = hyper_nodes_.find(child);
      if (it == hyper_nodes_.end()) continue;  // not created yet: Volcano skips it too
      TOPOSCHED_RETURN_IF_ERROR(Visit(it->second));
      const std::set<std::string>& below = held_.at(child);
      held.insert(below.begin(), below.end());
    }
    stack_.pop_back();
    held_.emplace(hn.name, std::move(held));
    return Status::Ok();
  }

  const std::map<std::string, HyperNode>& hyper_nodes_;
  const NodeLabels& nodes_;
  std::map<std::string, std::set<std::string>> held_;  // black: done
  std::vector<std::string> stack_;                     // grey: on the current path
};

}  // namespace

Result<std::map<std::string, Location>> ResolveHyperNodes(const NetworkConfig& config,
                                                          std::string_view list_json, const NodeLabels& nodes,
                                                          std::vector<std::string>* warnings) {
  const auto fail = [](const std::string& msg) { return Error("hyperNodes: " + msg); };
  if (list_json.size() > kMaxHyperNodeJsonBytes) {
    return fail(std::to_string(list_json.size()) + " bytes is over the limit of " +
                std::to_string(kMaxHyperNodeJsonBytes));
  }
  const json_errors::Shape shape = json_errors::ScanShape(list_json);
  if (shape.max_depth > kMaxNestingDepth) {
    return fail("not valid JSON: nested deeper than " + std::to_string(kMaxNestingDepth) + " levels");
  }
  if (shape.values > kMaxJsonValues) {
    return fail("more than " + std::to_string(kMaxJsonValues) + " JSON values");
  }
  json doc;
  try {
    doc = json::parse(list_json.begin(), list_json.end());
  } catch (const json::parse_error& e) {
    return fail("not valid JSON (byte " + std::to_string(e.byte) +
                "): " + json_errors::StripExceptionTag(e.what()));
  } catch (const json::exception& e) {
    return fail("not valid JSON: " + json_errors::StripExceptionTag(e.what()));
  }

  const json* items = nullptr;
  std::string items_path;
  if (doc.is_array()) {
    items = &doc;
  } else if (doc.is_object() && doc.contains("items") && doc["items"].is_array()) {
    items = &doc["items"];
    items_path = "items";
  } else if (doc.is_object() && doc.contains("items") && doc["items"].is_null()) {
    return std::map<std::string, Location>{};  // an empty list as the API server writes it
  } else {
    return fail(json_errors::Expected("document", "a HyperNodeList (an object with items) or an array", doc)
                    .message());
  }

  std::map<std::string, HyperNode> hyper_nodes;  // by name: the tie-break order
  for (std::size_t i = 0; i < items->size(); ++i) {
    Result<HyperNode> hn = ParseHyperNode((*items)[i], items_path + "[" + std::to_string(i) + "]", warnings);
    if (!hn.ok()) return fail(hn.error().message());
    const std::string name = hn->name;
    if (!hyper_nodes.emplace(name, std::move(*hn)).second) {
      return fail("HyperNode " + Quote(name) + " is listed twice");
    }
  }

  Resolver resolver(hyper_nodes, nodes);
  if (Status s = resolver.Resolve(); !s.ok()) return fail(s.error().message());

  // Only nodes held at a configured tier get a Location; the rest fall back to their labels.
  const std::size_t tiers = config.tiers.size();
  std::map<std::string, Location> out;
  for (const auto& [name, hn] : hyper_nodes) {  // name order: the first name of a tier wins
    if (hn.tier < 1 || static_cast<std::size_t>(hn.tier) > tiers) continue;
    for (const std::string& node : resolver.Held(name)) {
      Location& loc = out[node];
      if (loc.node.empty()) {
        loc.node = node;
        loc.domains.assign(tiers, std::string());
      }
      std::string& domain = loc.domains[static_cast<std::size_t>(hn.tier - 1)];
      if (domain.empty()) domain = name;
    }
  }
  return out;
}

}  // namespace toposched::pd
