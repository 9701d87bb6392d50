#pragma once
// Runs the `toposched` binary from tests: stdout, stderr and the exit code. The binary is
// $TOPOSCHED_BIN, else the build's own (TOPOSCHED_BIN_PATH, a compile definition of the test).

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "testing/shared_topologies.h"

namespace toposched::testing {

struct CliRun {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

inline std::string ToposchedBinary() {
  const char* bin = std::getenv("TOPOSCHED_BIN");
  return bin != nullptr ? bin : TOPOSCHED_BIN_PATH;
}

// Single-quotes `s` for /bin/sh.
inline std::string ShellQuote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// `toposched <args>`; `args` is shell text (quote paths with ShellQuote).
inline CliRun RunToposched(const std::string& args) {
  static int counter = 0;
  namespace fs = std::filesystem;
  const fs::path err_file = fs::temp_directory_path() / ("toposched-cli-" + std::to_string(::getpid()) + "-" +
                                                         std::to_string(counter++) + ".err");
  const std::string cmd = ShellQuote(ToposchedBinary()) + " " + args + " 2>" + ShellQuote(err_file.string());
  CliRun run;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return run;
  std::array<char, 65536> buf;
  for (std::size_t n; (n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0;) run.out.append(buf.data(), n);
  const int status = ::pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  run.err = ReadFile(err_file);
  fs::remove(err_file);
  return run;
}

}  // namespace toposched::testing
