#include "toposched/topology/input_format.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

namespace toposched {
namespace {

struct FormatCase {
  const char* name;
  std::string content;
  std::optional<InputFormat> expected;  // nullopt: an error containing `error`
  const char* error = "";
};

TEST(InputFormatTest, Table) {
  const std::vector<FormatCase> cases = {
      {"hwloc v2",
       "<?xml version=\"1.0\"?>\n<!DOCTYPE topology SYSTEM \"hwloc2.dtd\">\n<topology version=\"2.0\">",
       InputFormat::kHwlocXml},
      {"hwloc v1 (no version)",
       "<?xml version=\"1.0\"?><!DOCTYPE topology SYSTEM \"hwloc.dtd\"><topology><object/>",
       InputFormat::kHwlocXml},
      {"hwloc v3", "<topology version=\"3.0\">", std::nullopt, "version 3.0"},
      {"nccl with leading comment", "<!--\n Copyright\n-->\n<system version=\"1\">", InputFormat::kNcclXml},
      {"nccl with BOM", "\xEF\xBB\xBF<system version=\"2\">", InputFormat::kNcclXml},
      {"json", "  {\"apiVersion\": \"toposched.io/v1alpha1\"}", InputFormat::kTopologyJson},
      {"empty", "", std::nullopt, "empty"},
      {"whitespace", " \n\t ", std::nullopt, "empty"},
      {"BOM and whitespace", "\xEF\xBB\xBF \r\n", std::nullopt, "empty"},  // read past the end once (fuzzing)
      {"BOM only", "\xEF\xBB\xBF", std::nullopt, "empty"},
      {"binary", std::string("\0\1\2\3garbage", 11), std::nullopt, "binary"},
      {"unknown root", "<html></html>", std::nullopt, "<html>"},
      {"unterminated comment", "<!-- never ends", std::nullopt, "root element"},
      {"nvidia-smi matrix", "\tGPU0\tGPU1\tNIC0\tCPU Affinity\nGPU0\t X \tNV18\n", std::nullopt,
       "nvidia-smi topo -m"},
      {"text", "hello", std::nullopt, "not a topology file"},
  };
  for (const FormatCase& c : cases) {
    SCOPED_TRACE(c.name);
    auto f = DetectInputFormat(c.content);
    if (c.expected) {
      ASSERT_TRUE(f.ok()) << f.error().message();
      EXPECT_EQ(*f, *c.expected);
    } else {
      ASSERT_FALSE(f.ok());
      EXPECT_NE(f.error().message().find(c.error), std::string::npos) << f.error().message();
    }
  }
}

}  // namespace
}  // namespace toposched
