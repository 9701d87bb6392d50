// ReadFileBounded on real files: what it refuses (and with which words), and that the bound holds
// whatever the file's size claims.

#include "toposched/common/file.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

namespace toposched {
namespace {

namespace fs = std::filesystem;

class ReadFileBoundedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("toposched-file-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& content) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << content;
    return p.string();
  }

  fs::path dir_;
};

// The error's message, or "ok: <content size>" when there was none.
std::string Outcome(const Result<std::string>& r) {
  return r.ok() ? "ok: " + std::to_string(r->size()) : r.error().message();
}

TEST_F(ReadFileBoundedTest, ReadsTheWholeFileUpToAndAtTheLimit) {
  using namespace std::string_literals;
  const std::string content = "apiVersion: v1\n\0binary\xff\n"s;  // bytes as they are, NUL included
  auto r = ReadFileBounded(Write("a.yaml", content), 100);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(*r, content);

  const std::string at_limit(1000, 'x');
  r = ReadFileBounded(Write("at.txt", at_limit), 1000);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(*r, at_limit);
}

TEST_F(ReadFileBoundedTest, AnEmptyFileIsEmptyContentNotAnError) {
  const std::string path = Write("empty", "");
  auto r = ReadFileBounded(path, 10);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(*r, "");
  r = ReadFileBounded(path, 0);  // a zero limit still admits nothing at all
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(*r, "");
}

TEST_F(ReadFileBoundedTest, OneBytePastTheLimitIsRefusedNamingTheLimitExactly) {
  struct Case {
    const char* name;
    std::size_t limit;
    const char* want;
  };
  // The largest unit that divides the limit: 1 << 20 is 1 MiB, 3 << 10 is 3 KiB,
  // 1536 KiB is not a whole number of MiB, 1500 is not a whole number of KiB.
  const Case cases[] = {
      {"zero", 0, "larger than 0 bytes"},        {"one", 1, "larger than 1 byte"},
      {"bytes", 1000, "larger than 1000 bytes"}, {"not whole KiB", 1500, "larger than 1500 bytes"},
      {"KiB", 3u << 10, "larger than 3 KiB"},    {"not whole MiB", 1536u << 10, "larger than 1536 KiB"},
      {"MiB", 1u << 20, "larger than 1 MiB"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = Write(c.name, std::string(c.limit + 1, 'x'));
    EXPECT_EQ(Outcome(ReadFileBounded(path, c.limit)), c.want);
    EXPECT_EQ(Outcome(ReadFileBounded(path, c.limit + 1)), "ok: " + std::to_string(c.limit + 1));
  }
}

TEST_F(ReadFileBoundedTest, AMissingFileSaysWhyWithoutNamingThePath) {
  EXPECT_EQ(Outcome(ReadFileBounded((dir_ / "nope.yaml").string(), 10)),
            "cannot open: No such file or directory");
}

TEST_F(ReadFileBoundedTest, OnlyRegularFilesAreRead) {
  EXPECT_EQ(Outcome(ReadFileBounded(dir_.string(), 1 << 20)), "is a directory");
  EXPECT_EQ(Outcome(ReadFileBounded("/dev/null", 1 << 20)), "not a regular file");

  const std::string target = Write("target", "through a link");
  fs::create_symlink(target, dir_ / "link");
  EXPECT_EQ(Outcome(ReadFileBounded((dir_ / "link").string(), 100)), "ok: 14");
}

TEST_F(ReadFileBoundedTest, AFifoIsRefusedWithoutWaitingForAWriter) {
  const std::string fifo = (dir_ / "pipe").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  // A blocking open would wait here forever: no one ever opens the other end.
  EXPECT_EQ(Outcome(ReadFileBounded(fifo, 1 << 20)), "not a regular file");
}

TEST_F(ReadFileBoundedTest, TheSizeOnDiskIsNotTrusted) {
  // /proc files are regular and report size 0 but have content: reading stops at EOF, or one
  // byte past the limit, not at what fstat said.
  const std::string proc = "/proc/self/status";
  if (!fs::exists(proc)) GTEST_SKIP() << "no /proc";
  const auto whole = ReadFileBounded(proc, 1 << 20);
  ASSERT_TRUE(whole.ok()) << whole.error().message();
  EXPECT_NE(whole->find("Name:"), std::string::npos) << *whole;
  EXPECT_EQ(Outcome(ReadFileBounded(proc, 16)), "larger than 16 bytes");
}

TEST_F(ReadFileBoundedTest, AFileThatGrowsWhileItIsReadIsStillBounded) {
  // A writer appends until the file is well past the limit; every read along the way is either
  // the content so far (within the limit) or refused, and the last one is refused.
  constexpr std::size_t kLimit = 256u << 10;
  const std::string path = Write("growing.log", "");
  std::atomic<bool> done{false};
  std::thread writer([&] {
    std::ofstream out(path, std::ios::binary | std::ios::app);
    const std::string block(4096, 'g');
    for (std::size_t written = 0; written <= 4 * kLimit; written += block.size()) {
      out.write(block.data(), static_cast<std::streamsize>(block.size())).flush();
    }
    done = true;
  });
  std::string last;
  for (;;) {
    const bool writer_finished = done.load();
    const auto r = ReadFileBounded(path, kLimit);
    last = Outcome(r);
    if (!r.ok()) break;
    EXPECT_LE(r->size(), kLimit);
    if (writer_finished) break;  // read whole though past the limit: the check below fails
  }
  writer.join();
  EXPECT_EQ(last, "larger than 256 KiB");
}

}  // namespace
}  // namespace toposched
