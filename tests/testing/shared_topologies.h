#pragma once
// Access to ../shared/topologies (real hwloc and NCCL exports) from tests. The files are read
// from there, never copied into the repository; tests skip with a clear message without them.

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace toposched::testing {

inline std::filesystem::path SharedTopologiesDir() {
  if (const char* env = std::getenv("TOPOSCHED_SHARED_TOPOLOGIES")) return env;
  return TOPOSCHED_SHARED_TOPOLOGIES;
}

inline std::filesystem::path SharedTopology(const std::string& name) {
  return SharedTopologiesDir() / name;
}

inline bool HaveSharedTopologies() {
  return std::filesystem::is_directory(SharedTopologiesDir());
}

inline std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

}  // namespace toposched::testing

#define TOPOSCHED_SKIP_WITHOUT_SHARED_TOPOLOGIES()                                                           \
  do {                                                                                                       \
    if (!::toposched::testing::HaveSharedTopologies()) {                                                     \
      GTEST_SKIP() << "shared topology exports not found at " << ::toposched::testing::SharedTopologiesDir() \
                   << " (set TOPOSCHED_SHARED_TOPOLOGIES to the folder of ../shared/topologies)";            \
    }                                                                                                        \
  } while (0)
