// AtomicFileWriter: the destination holds the old content or the complete new one, never a part.
#include "lockstep/core/atomic_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "lockstep/core/error.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;

class AtomicFile : public testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "lockstep-atomic-XXXXXX").string();
    dir_ = mkdtemp(pattern.data());
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  static std::string read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  int files() const {
    int n = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_)) ++n;
    return n;
  }
  fs::path dir_;
};

TEST_F(AtomicFile, TheDestinationAppearsOnlyAtCommit) {
  AtomicFileWriter w(path("a.bin"), "test");
  w.write("hello ", 6);
  w.write("world", 5);
  EXPECT_FALSE(fs::exists(path("a.bin")));
  EXPECT_TRUE(fs::exists(w.temporary_path()));
  w.commit();
  EXPECT_EQ(read(path("a.bin")), "hello world");
  EXPECT_FALSE(fs::exists(w.temporary_path()));
}

TEST_F(AtomicFile, AnUncommittedWriterLeavesTheOldFileAndNoTemporary) {
  std::ofstream(path("a.bin")) << "old";
  {
    AtomicFileWriter w(path("a.bin"), "test");
    w.write("new content", 11);
  }
  EXPECT_EQ(read(path("a.bin")), "old");
  EXPECT_EQ(files(), 1);
}

TEST_F(AtomicFile, CommitReplacesAnExistingFile) {
  std::ofstream(path("a.bin")) << "old";
  AtomicFileWriter w(path("a.bin"), "test");
  w.write("new", 3);
  w.commit();
  EXPECT_EQ(read(path("a.bin")), "new");
  EXPECT_EQ(files(), 1);
}

TEST_F(AtomicFile, LargeAndSmallWritesKeepTheirOrder) {
  std::string big(3 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>('a' + i % 26);
  AtomicFileWriter w(path("big.bin"), "test");
  w.write("<", 1);
  w.write(big.data(), big.size());
  w.write(">", 1);
  w.commit();
  EXPECT_EQ(read(path("big.bin")), "<" + big + ">");
}

TEST_F(AtomicFile, AMissingDirectoryIsNotFoundNamingTheFileAndTheOperation) {
  try {
    AtomicFileWriter w(path("no/such/dir/a.bin"), "save_weights");
    FAIL() << "expected NotFound";
  } catch (const NotFound& e) {
    EXPECT_THAT(e.what(), testing::HasSubstr("save_weights: cannot create"));
    EXPECT_THAT(e.what(), testing::HasSubstr("no/such/dir/a.bin"));
  }
}

TEST_F(AtomicFile, WritingAfterCommitIsFailedPrecondition) {
  AtomicFileWriter w(path("a.bin"), "test");
  w.commit();
  EXPECT_THROW(w.write("x", 1), FailedPrecondition);
  EXPECT_THROW(w.commit(), FailedPrecondition);
}

}  // namespace
}  // namespace lockstep
