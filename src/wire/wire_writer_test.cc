// The reply writers: the exact bytes, then a parse with nlohmann_json to check that the keys and
// types are what Go's decoder will look for (kube-scheduler extender/v1 types.go; Volcano
// argument.go).

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "toposched/wire/wire.h"

namespace toposched::extender {
namespace {

using nlohmann::json;

std::string JsonString(std::string_view s) {
  std::string out;
  AppendJsonString(out, s);
  return out;
}

TEST(AppendJsonStringTest, Escapes) {
  struct Case {
    const char* name;
    std::string in;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"empty", "", R"("")"},
      {"plain", "gpu-node-1", R"("gpu-node-1")"},
      {"quote and backslash", R"(a"b\c)", R"("a\"b\\c")"},
      {"short escapes", "\n\r\t\b\f", R"("\n\r\t\b\f")"},
      {"other controls", std::string("\x00\x01\x1f", 3), R"("\u0000\u0001\u001f")"},
      {"DEL passes", "\x7f", "\"\x7f\""},
      {"slash passes", "a/b", R"("a/b")"},
      {"UTF-8 passes", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
       "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\""},
      {"lone continuation byte", "a\x80z", R"("a\ufffdz")"},
      {"0xff", "\xff", R"("\ufffd")"},
      {"truncated 2-byte", "\xc3", R"("\ufffd")"},
      {"truncated 3-byte", "\xe2\x82z", R"("\ufffd\ufffdz")"},  // one per invalid byte, as Go
      {"overlong slash", "\xc0\xaf", R"("\ufffd\ufffd")"},
      {"overlong 3-byte", "\xe0\x80\x80", R"("\ufffd\ufffd\ufffd")"},
      {"surrogate", "\xed\xa0\x80", R"("\ufffd\ufffd\ufffd")"},
      {"above U+10FFFF", "\xf4\x90\x80\x80", R"("\ufffd\ufffd\ufffd\ufffd")"},
      {"largest code point", "\xf4\x8f\xbf\xbf", "\"\xf4\x8f\xbf\xbf\""},
      {"mixed", "x\"\xff\n\xc3\xa9",
       R"("x\"\ufffd\n)"
       "\xc3\xa9\""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string out = JsonString(c.in);
    EXPECT_EQ(out, c.want);
    // Always valid JSON (nlohmann rejects invalid UTF-8), and reads back as the input where the
    // input was valid UTF-8.
    json parsed;
    ASSERT_NO_THROW(parsed = json::parse(out));
    ASSERT_TRUE(parsed.is_string());
    if (c.want.find("\\ufffd") == std::string::npos) {
      EXPECT_EQ(parsed.get<std::string>(), c.in);
    }
  }
}

// Long strings are scanned 8 bytes at a time: a byte that needs escaping (or a UTF-8 check) at
// any offset of a long name comes out as it does alone, which the byte-by-byte path decides.
TEST(AppendJsonStringTest, EveryOffsetOfALongStringEscapesAsAlone) {
  const std::string plain = "gpu-node-rack-07-slot-12-abcdefgh";  // 33 bytes
  const std::vector<std::string> specials = {"\"",           "\\",   "\n",   std::string(1, '\0'),
                                             "\x1f",         " ",    "\x7f", "\xc3\xa9",
                                             "\xe2\x82\xac", "\x80", "\xff", "\xc3"};
  for (const std::string& special : specials) {
    const std::string alone = JsonString(special);
    const std::string_view escaped = std::string_view(alone).substr(1, alone.size() - 2);
    for (std::size_t at = 0; at <= plain.size(); ++at) {
      const std::string in = plain.substr(0, at) + special + plain.substr(at);
      const std::string want = "\"" + plain.substr(0, at) + std::string(escaped) + plain.substr(at) + "\"";
      EXPECT_EQ(JsonString(in), want) << "special " << testing::PrintToString(special) << " at " << at;
    }
  }
  EXPECT_EQ(JsonString(plain), "\"" + plain + "\"");
}

TEST(AppendJsonStringTest, Appends) {
  std::string out = "prefix:";
  AppendJsonString(out, "x");
  EXPECT_EQ(out, R"(prefix:"x")");
}

TEST(WriteFilterResultTest, NamesMode) {
  const std::vector<NodeRef> passed = {{"gpu-a", {}}, {"gpu-b", {}}};
  const std::vector<NodeFailure> failed = {{"gpu-c", "not enough GPUs on one NVLink island"}};
  const std::vector<NodeFailure> unresolvable = {{"cpu-1", "no GPUs"}};
  std::string out;
  WriteFilterResult(out, false, passed, failed, unresolvable, "");
  EXPECT_EQ(
      out,
      R"({"Nodes":null,"NodeNames":["gpu-a","gpu-b"],"FailedNodes":{"gpu-c":"not enough GPUs on one NVLink )"
      R"(island"},"FailedAndUnresolvableNodes":{"cpu-1":"no GPUs"},"Error":""})");
  const json j = json::parse(out);
  EXPECT_TRUE(j["Nodes"].is_null());
  EXPECT_EQ(j["NodeNames"], json({"gpu-a", "gpu-b"}));
  EXPECT_EQ(j["FailedNodes"]["gpu-c"], "not enough GPUs on one NVLink island");
  EXPECT_EQ(j["FailedAndUnresolvableNodes"]["cpu-1"], "no GPUs");
  EXPECT_EQ(j["Error"], "");
  EXPECT_EQ(j.size(), 5u);
}

TEST(WriteFilterResultTest, NamesModeNothingPassed) {
  // An empty list, not null: null NodeNames would read as "no answer" rather than "none pass".
  std::string out;
  WriteFilterResult(out, false, {}, {}, {}, "");
  EXPECT_EQ(out,
            R"({"Nodes":null,"NodeNames":[],"FailedNodes":{},"FailedAndUnresolvableNodes":{},"Error":""})");
}

TEST(WriteFilterResultTest, NodesModeEchoesTheObjects) {
  const std::string a = R"({"metadata":{"name":"gpu-a","labels":{"x":"y"}},"status":{}})";
  const std::vector<NodeRef> passed = {{"gpu-a", a}, {"gpu-b", {}}};  // gpu-b: no raw text
  std::string out;
  WriteFilterResult(out, true, passed, {}, {}, "");
  EXPECT_EQ(out, R"({"Nodes":{"items":[)" + a +
                     R"(,{"metadata":{"name":"gpu-b"}}]},"NodeNames":null,"FailedNodes":{},)"
                     R"("FailedAndUnresolvableNodes":{},"Error":""})");
  const json j = json::parse(out);
  EXPECT_TRUE(j["NodeNames"].is_null());
  ASSERT_EQ(j["Nodes"]["items"].size(), 2u);
  EXPECT_EQ(j["Nodes"]["items"][0]["metadata"]["labels"]["x"], "y");
  EXPECT_EQ(j["Nodes"]["items"][1]["metadata"]["name"], "gpu-b");
}

TEST(WriteFilterResultTest, ErrorDropsEverythingElse) {
  const std::vector<NodeRef> passed = {{"gpu-a", {}}};
  const std::vector<NodeFailure> failed = {{"gpu-c", "x"}};
  for (bool nodes_mode : {false, true}) {
    std::string out;
    WriteFilterResult(out, nodes_mode, passed, failed, failed, "pod \"ml/x\": bad annotation");
    EXPECT_EQ(out, R"({"Nodes":null,"NodeNames":null,"FailedNodes":{},"FailedAndUnresolvableNodes":{},)"
                   R"("Error":"pod \"ml/x\": bad annotation"})");
  }
}

TEST(WriteHostPriorityListTest, BareArray) {
  const std::vector<HostScore> scores = {{"gpu-a", 10}, {"gpu-b", 0}, {"gpu-\"c", 7}};
  std::string out;
  WriteHostPriorityList(out, scores);
  EXPECT_EQ(out, R"([{"Host":"gpu-a","Score":10},{"Host":"gpu-b","Score":0},{"Host":"gpu-\"c","Score":7}])");
  const json j = json::parse(out);
  ASSERT_TRUE(j.is_array());
  EXPECT_EQ(j[2]["Host"], "gpu-\"c");
  EXPECT_TRUE(j[0]["Score"].is_number_integer());
  std::string empty;
  WriteHostPriorityList(empty, {});
  EXPECT_EQ(empty, "[]");
}

TEST(WriteBindingResultTest, ErrorField) {
  std::string ok, failed;
  WriteBindingResult(ok, "");
  WriteBindingResult(failed, "conflict: GPU 3 on gpu-a is taken");
  EXPECT_EQ(ok, R"({"Error":""})");
  EXPECT_EQ(failed, R"({"Error":"conflict: GPU 3 on gpu-a is taken"})");
  EXPECT_EQ(json::parse(failed)["Error"], "conflict: GPU 3 on gpu-a is taken");
}

TEST(WritePreemptionResultTest, MetaVictims) {
  const std::vector<std::string_view> uids_a = {"v1", "v2"};
  const std::vector<std::string_view> uids_b = {"v3"};
  const std::vector<NodeVictimsOut> nodes = {{"gpu-a", uids_a, 1}, {"gpu-b", uids_b, 0}};
  std::string out;
  WritePreemptionResult(out, nodes);
  EXPECT_EQ(out,
            R"({"NodeNameToMetaVictims":{"gpu-a":{"Pods":[{"UID":"v1"},{"UID":"v2"}],"NumPDBViolations":1},)"
            R"("gpu-b":{"Pods":[{"UID":"v3"}],"NumPDBViolations":0}}})");
  const json j = json::parse(out);
  EXPECT_EQ(j["NodeNameToMetaVictims"]["gpu-a"]["Pods"][1]["UID"], "v2");
  EXPECT_TRUE(j["NodeNameToMetaVictims"]["gpu-a"]["NumPDBViolations"].is_number_integer());
  std::string empty;
  WritePreemptionResult(empty, {});
  EXPECT_EQ(empty, R"({"NodeNameToMetaVictims":{}})");
}

TEST(WriteVolcanoTest, PredicateResult) {
  std::string pass, fail;
  WriteVolcanoPredicateResult(pass, "", 0);
  WriteVolcanoPredicateResult(fail, "no NVLink island with 4 free GPUs", 2);  // Unschedulable
  EXPECT_EQ(pass, R"({"status":"","code":0})");
  EXPECT_EQ(fail, R"({"status":"no NVLink island with 4 free GPUs","code":2})");
  const json j = json::parse(fail);
  EXPECT_TRUE(j["status"].is_string());  // the message sits under "status" (argument.go)
  EXPECT_EQ(j["code"], 2);
}

TEST(WriteVolcanoTest, PrioritizeResult) {
  const std::vector<VolcanoNodeScore> scores = {
      {"gpu-a", 87.5}, {"gpu-b", 0}, {"gpu-c", 0.1}, {"gpu-d", 100}};
  std::string out;
  WriteVolcanoPrioritizeResult(out, scores, "");
  // Shortest round-trip text: 0.1 stays 0.1, whole numbers have no fraction.
  EXPECT_EQ(out, R"({"nodeScore":{"gpu-a":87.5,"gpu-b":0,"gpu-c":0.1,"gpu-d":100},"errorMessage":""})");
  const json j = json::parse(out);
  EXPECT_EQ(j["nodeScore"]["gpu-c"].get<double>(), 0.1);
  EXPECT_EQ(j["errorMessage"], "");

  std::string empty;
  WriteVolcanoPrioritizeResult(empty, {}, "");
  EXPECT_EQ(empty, R"({"nodeScore":{},"errorMessage":""})");  // {} and never null: null is an error

  // Not produced by construction; written as 0 so the reply stays JSON.
  const std::vector<VolcanoNodeScore> odd = {{"a", std::numeric_limits<double>::quiet_NaN()},
                                             {"b", std::numeric_limits<double>::infinity()},
                                             {"c", 1e300}};
  std::string out_odd;
  WriteVolcanoPrioritizeResult(out_odd, odd, "");
  EXPECT_EQ(out_odd, R"({"nodeScore":{"a":0,"b":0,"c":1e+300},"errorMessage":""})");
  EXPECT_EQ(json::parse(out_odd)["nodeScore"]["c"].get<double>(), 1e300);
}

TEST(WriteVolcanoTest, EventResult) {
  std::string ok, failed;
  WriteVolcanoEventResult(ok, "");
  WriteVolcanoEventResult(failed, "task t1 has no NodeName");
  EXPECT_EQ(ok, R"({"errorMessage":""})");
  EXPECT_EQ(failed, R"({"errorMessage":"task t1 has no NodeName"})");
}

TEST(WriteVolcanoTest, EvictResultEchoesVictims) {
  const std::vector<std::string_view> victims = {R"({"UID":"lo-1","Name":"a"})", "", R"({"UID":"lo-2"})"};
  std::string out;
  WriteVolcanoEvictResult(out, 1, victims);  // Permit
  EXPECT_EQ(out, R"({"status":1,"victims":[{"UID":"lo-1","Name":"a"},{"UID":"lo-2"}]})");
  const json j = json::parse(out);
  EXPECT_EQ(j["status"], 1);
  ASSERT_EQ(j["victims"].size(), 2u);
  EXPECT_EQ(j["victims"][1]["UID"], "lo-2");
  std::string abstain;
  WriteVolcanoEvictResult(abstain, 0, {});
  EXPECT_EQ(abstain, R"({"status":0,"victims":[]})");
  std::string reject;
  WriteVolcanoEvictResult(reject, -1, {});
  EXPECT_EQ(reject, R"({"status":-1,"victims":[]})");
}

TEST(WireRoundTripTest, ReaderReadsWhatTheWriterEscapes) {
  // A node name with every kind of escape goes out through the writer and back through the reader.
  const std::string name = std::string("n\"\\/\n\t\x01-\xc3\xa9", 10);
  std::string body = R"({"Pod":{},"NodeNames":[)";
  AppendJsonString(body, name);
  body += "]}";
  WireReader reader;
  Result<ExtenderArgsView> a = reader.ReadExtenderArgs(body);
  ASSERT_TRUE(a.ok()) << a.error().message();
  ASSERT_EQ(a->nodes.size(), 1u);
  EXPECT_EQ(a->nodes[0].name, name);
}

}  // namespace
}  // namespace toposched::extender
