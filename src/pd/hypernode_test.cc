#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "toposched/pd/network.h"

namespace toposched::pd {
namespace {

using nlohmann::json;

// Builders for HyperNode objects as `kubectl get hypernodes -o json` writes them.
json Exact(const std::string& type, const std::string& name) {
  return {{"type", type}, {"selector", {{"exactMatch", {{"name", name}}}}}};
}
json Regex(const std::string& pattern) {
  return {{"type", "Node"}, {"selector", {{"regexMatch", {{"pattern", pattern}}}}}};
}
json Labels(const json& match_labels) {
  return {{"type", "Node"}, {"selector", {{"labelMatch", {{"matchLabels", match_labels}}}}}};
}
json Hn(const std::string& name, const json& tier, std::vector<json> members) {
  return {{"apiVersion", "topology.volcano.sh/v1alpha1"},
          {"kind", "HyperNode"},
          {"metadata", {{"name", name}}},
          {"spec", {{"tier", tier}, {"members", members}}}};
}
std::string List(std::vector<json> items) {
  return json{{"apiVersion", "v1"}, {"kind", "List"}, {"items", items}}.dump();
}

// Tier 1 = leaf, 2 = spine, 3 = zone; the labels are not read when positions come from HyperNodes.
NetworkConfig ThreeTiers() {
  NetworkConfig c;
  c.tiers = {{"toposched.io/leaf", PathKind::kLeaf},
             {"toposched.io/spine", PathKind::kSpine},
             {"topology.kubernetes.io/zone", PathKind::kZone}};
  return c;
}

const NodeLabels kNodes = {
    {"n1", {}},
    {"n2", {}},
    {"n3", {}},
    {"n4", {}},
    {"n5", {{"rack", "r3"}}},
    {"n6", {{"rack", "r3"}, {"gpu", "h100"}}},
    {"n7", {{"rack", "r4"}}},
};

// zone
//  +- spine-1: leaf-a {n1, n2 by exactMatch}, leaf-b {n3, n4 by regexMatch}
//  +- spine-2: leaf-c {n5, n6 by labelMatch rack=r3}
// n7 is in no HyperNode.
std::vector<json> Fabric() {
  return {Hn("zone", 3, {Exact("HyperNode", "spine-1"), Exact("HyperNode", "spine-2")}),
          Hn("spine-1", 2, {Exact("HyperNode", "leaf-a"), Exact("HyperNode", "leaf-b")}),
          Hn("spine-2", 2, {Exact("HyperNode", "leaf-c")}),
          Hn("leaf-a", 1, {Exact("Node", "n1"), Exact("Node", "n2")}),
          Hn("leaf-b", 1, {Regex("^n[34]$")}),
          Hn("leaf-c", 1, {Labels({{"rack", "r3"}})})};
}

TEST(HyperNodeTest, ThreeTiersWithEverySelector) {
  Result<std::map<std::string, Location>> got = ResolveHyperNodes(ThreeTiers(), List(Fabric()), kNodes);
  ASSERT_TRUE(got.ok()) << got.error().message();
  const std::map<std::string, Location> want = {
      {"n1", {"n1", {"leaf-a", "spine-1", "zone"}}}, {"n2", {"n2", {"leaf-a", "spine-1", "zone"}}},
      {"n3", {"n3", {"leaf-b", "spine-1", "zone"}}}, {"n4", {"n4", {"leaf-b", "spine-1", "zone"}}},
      {"n5", {"n5", {"leaf-c", "spine-2", "zone"}}}, {"n6", {"n6", {"leaf-c", "spine-2", "zone"}}},
  };
  EXPECT_EQ(*got, want);  // n7 is absent: its position falls back to labels
  // The positions feed the path model: n1-n2 leaf, n1-n3 spine, n1-n5 zone.
  const NetworkConfig c = ThreeTiers();
  EXPECT_EQ(PathBetween(c, got->at("n1"), got->at("n2")), PathKind::kLeaf);
  EXPECT_EQ(PathBetween(c, got->at("n1"), got->at("n3")), PathKind::kSpine);
  EXPECT_EQ(PathBetween(c, got->at("n1"), got->at("n5")), PathKind::kZone);
}

TEST(HyperNodeTest, BareArrayEqualsList) {
  Result<std::map<std::string, Location>> list = ResolveHyperNodes(ThreeTiers(), List(Fabric()), kNodes);
  Result<std::map<std::string, Location>> array =
      ResolveHyperNodes(ThreeTiers(), json(Fabric()).dump(), kNodes);
  ASSERT_TRUE(list.ok() && array.ok());
  EXPECT_EQ(*list, *array);
}

TEST(HyperNodeTest, Cases) {
  struct Case {
    const char* name;
    NetworkConfig config;
    std::vector<json> items;
    std::map<std::string, std::vector<std::string>> want;  // node -> domains
  };
  NetworkConfig two = ThreeTiers();
  two.tiers.pop_back();
  const Case cases[] = {
      // Two tier-1 HyperNodes hold n1: the first by name wins, whatever the list order.
      {"overlap, first name wins",
       ThreeTiers(),
       {Hn("leaf-z", 1, {Exact("Node", "n1")}), Hn("leaf-a", 1, {Exact("Node", "n1"), Exact("Node", "n2")})},
       {{"n1", {"leaf-a", "", ""}}, {"n2", {"leaf-a", "", ""}}}},
      // Tier 3 is past the two configured tiers: dropped, and a node held only there is absent.
      {"tiers past the config are dropped",
       two,
       {Hn("zone", 3, {Exact("HyperNode", "leaf-a"), Exact("Node", "n7")}),
        Hn("leaf-a", 1, {Exact("Node", "n1")})},
       {{"n1", {"leaf-a", ""}}}},
      // A tier-0 HyperNode has no position but passes its nodes up.
      {"tier 0 nests",
       ThreeTiers(),
       {Hn("block", 0, {Exact("Node", "n1")}), Hn("leaf-a", 1, {Exact("HyperNode", "block")})},
       {{"n1", {"leaf-a", "", ""}}}},
      // Volcano's regexMatch is Go's MatchString: a search. "[12]" finds n1 and n2 (a whole-name match would
      // not).
      {"regex is a search",
       ThreeTiers(),
       {Hn("leaf-a", 1, {Regex("[12]")})},
       {{"n1", {"leaf-a", "", ""}}, {"n2", {"leaf-a", "", ""}}}},
      {"regex anchored", ThreeTiers(), {Hn("leaf-a", 1, {Regex("^n$")})}, {}},
      // Volcano takes an exact name as given, even one not in the node list.
      {"exact name of an unlisted node",
       ThreeTiers(),
       {Hn("leaf-a", 1, {Exact("Node", "gone")})},
       {{"gone", {"leaf-a", "", ""}}}},
      // A HyperNode member that does not exist (yet) is skipped, as in Volcano.
      {"missing child skipped",
       ThreeTiers(),
       {Hn("spine-1", 2, {Exact("HyperNode", "leaf-x"), Exact("HyperNode", "leaf-a")}),
        Hn("leaf-a", 1, {Exact("Node", "n1")})},
       {{"n1", {"leaf-a", "spine-1", ""}}}},
      // The older v1alpha1 wrote the tier as a string.
      {"string tier",
       ThreeTiers(),
       {Hn("spine-1", "2", {Exact("Node", "n1")})},
       {{"n1", {"", "spine-1", ""}}}},
      // A node held directly at tier 2 and through a leaf at tier 1.
      {"direct and nested",
       ThreeTiers(),
       {Hn("spine-1", 2, {Exact("HyperNode", "leaf-a"), Exact("Node", "n3")}),
        Hn("leaf-a", 1, {Exact("Node", "n1")})},
       {{"n1", {"leaf-a", "spine-1", ""}}, {"n3", {"", "spine-1", ""}}}},
      // matchLabels and matchExpressions together: rack in {r3, r4}, gpu label absent -> n5, n7.
      {"label expressions",
       ThreeTiers(),
       {Hn("leaf-a", 1,
           {{{"type", "Node"},
             {"selector",
              {{"labelMatch",
                {{"matchExpressions",
                  {{{"key", "rack"}, {"operator", "In"}, {"values", {"r3", "r4"}}},
                   {{"key", "gpu"}, {"operator", "DoesNotExist"}}}}}}}}}})},
       {{"n5", {"leaf-a", "", ""}}, {"n7", {"leaf-a", "", ""}}}},
      {"label NotIn and Exists",
       ThreeTiers(),
       {Hn("leaf-a", 1,
           {{{"type", "Node"},
             {"selector",
              {{"labelMatch",
                {{"matchLabels", {{"rack", "r3"}}},
                 {"matchExpressions",
                  {{{"key", "gpu"}, {"operator", "NotIn"}, {"values", {"a100"}}},
                   {{"key", "rack"}, {"operator", "Exists"}}}}}}}}}})},
       {{"n5", {"leaf-a", "", ""}}, {"n6", {"leaf-a", "", ""}}}},
      // As in Volcano, an empty label selector selects nothing.
      {"empty label selector", ThreeTiers(), {Hn("leaf-a", 1, {Labels(json::object())})}, {}},
      {"no HyperNodes", ThreeTiers(), {}, {}},
  };
  for (const Case& tc : cases) {
    SCOPED_TRACE(tc.name);
    Result<std::map<std::string, Location>> got = ResolveHyperNodes(tc.config, List(tc.items), kNodes);
    ASSERT_TRUE(got.ok()) << got.error().message();
    std::map<std::string, Location> want;
    for (const auto& [node, domains] : tc.want) want[node] = Location{node, domains};
    EXPECT_EQ(*got, want);
  }
}

TEST(HyperNodeTest, EmptyListFromTheApiServer) {
  Result<std::map<std::string, Location>> got =
      ResolveHyperNodes(ThreeTiers(), R"({"kind":"HyperNodeList","items":null})", kNodes);
  ASSERT_TRUE(got.ok()) << got.error().message();
  EXPECT_TRUE(got->empty());
}

TEST(HyperNodeTest, Errors) {
  struct Case {
    const char* name;
    std::string input;
    std::string want;  // the whole message
  };
  const Case cases[] = {
      {"not JSON", "{", "hyperNodes: not valid JSON (byte 2): "},
      {"too deep", std::string(100, '[') + std::string(100, ']'),
       "hyperNodes: not valid JSON: nested deeper than 64 levels"},
      {"a number", "42",
       "hyperNodes: document: expected a HyperNodeList (an object with items) or an array, got 42"},
      {"item not an object", "[1]", "hyperNodes: [0]: expected a HyperNode object, got 1"},
      {"wrong kind", List({json{{"kind", "Node"}, {"metadata", {{"name", "x"}}}}}),
       "hyperNodes: items[0].kind: expected \"HyperNode\", got \"Node\""},
      {"wrong apiVersion", List({json{{"apiVersion", "v1"}, {"metadata", {{"name", "x"}}}}}),
       "hyperNodes: items[0].apiVersion: expected topology.volcano.sh/<version>, got \"v1\""},
      {"no name", List({json{{"spec", {{"tier", 1}}}}}),
       "hyperNodes: items[0].metadata.name: expected a non-empty string, got null"},
      {"no spec", List({json{{"metadata", {{"name", "x"}}}}}),
       "hyperNodes: HyperNode \"x\": spec: expected an object {tier, members}, got null"},
      {"listed twice", List({Hn("leaf-a", 1, {}), Hn("leaf-a", 2, {})}),
       "hyperNodes: HyperNode \"leaf-a\" is listed twice"},
      {"cycle",
       List({Hn("a", 2, {Exact("HyperNode", "b")}), Hn("b", 1, {Exact("HyperNode", "c")}),
             Hn("c", 1, {Exact("HyperNode", "a")})}),
       "hyperNodes: HyperNode cycle: a -> b -> c -> a"},
      {"self cycle", List({Hn("a", 1, {Exact("HyperNode", "a")})}), "hyperNodes: HyperNode cycle: a -> a"},
  };
  for (const Case& tc : cases) {
    SCOPED_TRACE(tc.name);
    Result<std::map<std::string, Location>> got = ResolveHyperNodes(ThreeTiers(), tc.input, kNodes);
    ASSERT_FALSE(got.ok());
    // Parse errors carry nlohmann's wording after our prefix; compare the prefix only there.
    if (std::string_view(tc.name) == "not JSON") {
      EXPECT_EQ(got.error().message().rfind(tc.want, 0), 0u) << got.error().message();
    } else {
      EXPECT_EQ(got.error().message(), tc.want);
    }
  }
}

// Issue 15 (4): where Volcano skips a member (and logs), so do we, with a warning: one bad member
// must not drop every other domain. Each bad member here sits beside a good one (n1).
TEST(HyperNodeTest, ABadMemberIsSkippedWithAWarningNotTheWholeSet) {
  json no_selector = {{"type", "Node"}};
  json two_selectors = {{"type", "Node"},
                        {"selector", {{"exactMatch", {{"name", "n1"}}}, {"regexMatch", {{"pattern", "n"}}}}}};
  json bad_op = {
      {"type", "Node"},
      {"selector", {{"labelMatch", {{"matchExpressions", {{{"key", "k"}, {"operator", "Gt"}}}}}}}}};
  json in_without_values = {
      {"type", "Node"},
      {"selector", {{"labelMatch", {{"matchExpressions", {{{"key", "k"}, {"operator", "In"}}}}}}}}};
  json misspelt = Labels({{"rack", "r3"}});
  misspelt["selector"]["labelMatch"] = {{"matchLabelz", {{"rack", "r3"}}}};
  struct Case {
    const char* name;
    json member;
    std::string warning;  // the whole warning
  };
  const std::string at = "HyperNode \"leaf-a\": spec.members[0]";
  const std::string skipped = " (member skipped, as Volcano does)";
  const Case cases[] = {
      {"member without selector", no_selector, at + ": a member needs a selector" + skipped},
      {"two selectors", two_selectors,
       at + ".selector: needs exactly one of exactMatch, regexMatch, labelMatch (got 2)" + skipped},
      {"bad member type", Exact("Pod", "p"), at + ".type: \"Pod\" is not Node or HyperNode" + skipped},
      {"empty exact name", Exact("Node", ""),
       at + ".selector.exactMatch.name: expected a non-empty string, got \"\"" + skipped},
      {"HyperNode member by regex",
       {{"type", "HyperNode"}, {"selector", {{"regexMatch", {{"pattern", "leaf-.*"}}}}}},
       at + ".selector.regexMatch: a HyperNode member is selected by exactMatch only" + skipped},
      {"bad label operator", bad_op,
       at +
           ".selector.labelMatch.matchExpressions[0].operator: \"Gt\" is not In, NotIn, Exists or "
           "DoesNotExist" +
           skipped},
      {"In without values", in_without_values,
       at + ".selector.labelMatch.matchExpressions[0].values: In needs values" + skipped},
      {"unknown labelMatch key", misspelt,
       at + ".selector.labelMatch.matchLabelz: unknown key (known: matchLabels, matchExpressions)" + skipped},
      {"bad regex", Regex("n["),
       at + ".selector.regexMatch.pattern: \"n[\" is not a valid regular expression (missing ]: [)" +
           skipped},
  };
  for (const Case& tc : cases) {
    SCOPED_TRACE(tc.name);
    std::vector<std::string> warnings;
    Result<std::map<std::string, Location>> got = ResolveHyperNodes(
        ThreeTiers(), List({Hn("leaf-a", 1, {tc.member, Exact("Node", "n1")})}), kNodes, &warnings);
    ASSERT_TRUE(got.ok()) << got.error().message();
    ASSERT_TRUE(got->contains("n1"));
    EXPECT_EQ(got->at("n1").domains[0], "leaf-a");
    EXPECT_EQ(warnings, std::vector<std::string>{tc.warning});
  }
}

// Patterns are Go regexp (RE2) syntax, as Volcano compiles them: std::regex refused these.
TEST(HyperNodeTest, GoRegexpSyntaxMatchesAsVolcanoDoes) {
  struct Case {
    const char* name;
    std::string pattern;
    std::set<std::string> held;
  };
  const Case cases[] = {
      {"case-insensitive flag", "(?i)^N[12]$", {"n1", "n2"}},
      {"unicode letter class", "^\\pL\\d$", {"n1", "n2", "n3", "n4", "n5", "n6", "n7"}},
      {"end of text", "3\\z", {"n3"}},
  };
  for (const Case& tc : cases) {
    SCOPED_TRACE(tc.name);
    std::vector<std::string> warnings;
    Result<std::map<std::string, Location>> got =
        ResolveHyperNodes(ThreeTiers(), List({Hn("leaf-a", 1, {Regex(tc.pattern)})}), kNodes, &warnings);
    ASSERT_TRUE(got.ok()) << got.error().message();
    EXPECT_TRUE(warnings.empty()) << warnings.front();
    std::set<std::string> held;
    for (const auto& [node, loc] : *got) held.insert(node);
    EXPECT_EQ(held, tc.held);
  }
}

// spec.tier is omitempty in Volcano's types: a HyperNode without it is tier 0 (no position, its
// nodes pass up to the HyperNodes that hold it).
TEST(HyperNodeTest, AnAbsentTierIsZero) {
  json leaf = Hn("leaf-a", 1, {Exact("Node", "n1")});
  json no_tier = Hn("group", 1, {Exact("Node", "n2")});
  no_tier["spec"].erase("tier");
  json spine = Hn("spine-1", 2, {Exact("HyperNode", "leaf-a"), Exact("HyperNode", "group")});
  Result<std::map<std::string, Location>> got =
      ResolveHyperNodes(ThreeTiers(), List({leaf, no_tier, spine}), kNodes);
  ASSERT_TRUE(got.ok()) << got.error().message();
  EXPECT_EQ(got->at("n2").domains[0], "");
  EXPECT_EQ(got->at("n2").domains[1], "spine-1");
}

TEST(HyperNodeTest, OversizedInputIsRefusedBeforeParsing) {
  const std::string big(kMaxHyperNodeJsonBytes + 1, ' ');
  Result<std::map<std::string, Location>> got = ResolveHyperNodes(ThreeTiers(), big, kNodes);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().message(), "hyperNodes: 16777217 bytes is over the limit of 16777216");
}

}  // namespace
}  // namespace toposched::pd
