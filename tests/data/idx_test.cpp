#include "lockstep/data/idx.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

namespace lockstep {
namespace {

using ::testing::HasSubstr;
using Bytes = std::vector<uint8_t>;

std::filesystem::path temp_dir(const std::string& name) {
  auto p = std::filesystem::temp_directory_path() /
           ("lockstep_idx_test_" + std::to_string(::getpid()) + "_" + name);
  std::filesystem::create_directories(p);
  return p;
}

void write_bytes(const std::filesystem::path& p, const Bytes& b) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

// Compressed with zlib directly, independently of the reader under test.
void write_gzip(const std::filesystem::path& p, const Bytes& b) {
  gzFile f = gzopen(p.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, b.data(), static_cast<unsigned>(b.size())), static_cast<int>(b.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

// uint8 [2, 3] = 1..6
const Bytes kImages = {0, 0, 0x08, 2, 0, 0, 0, 2, 0, 0, 0, 3, 1, 2, 3, 4, 5, 6};

TEST(Idx, ParsesUint8WithShape) {
  Tensor t = parse_idx(kImages);
  EXPECT_EQ(t.dtype(), DType::uint8);
  EXPECT_EQ(t.shape(), Shape({2, 3}));
  EXPECT_EQ(t.to_vector<int>(), (std::vector<int>{1, 2, 3, 4, 5, 6}));
}

TEST(Idx, ParsesBigEndianInt32Float32AndWidensInt16) {
  Tensor i = parse_idx(Bytes{0, 0, 0x0C, 1, 0, 0, 0, 2, 0, 0, 1, 2, 0xFF, 0xFF, 0xFF, 0xFE});
  EXPECT_EQ(i.to_vector<int32_t>(), (std::vector<int32_t>{258, -2}));
  Tensor f = parse_idx(Bytes{0, 0, 0x0D, 1, 0, 0, 0, 1, 0x3F, 0xC0, 0, 0});  // 1.5f
  EXPECT_EQ(f.dtype(), DType::float32);
  EXPECT_EQ(f.to_vector<float>(), std::vector<float>{1.5f});
  Tensor s = parse_idx(Bytes{0, 0, 0x0B, 1, 0, 0, 0, 2, 0x01, 0x00, 0xFF, 0xFF});
  EXPECT_EQ(s.dtype(), DType::int32);
  EXPECT_EQ(s.to_vector<int32_t>(), (std::vector<int32_t>{256, -1}));
}

TEST(Idx, ReadsRawAndGzipFiles) {
  auto dir = temp_dir("rw");
  write_bytes(dir / "raw-idx", kImages);
  write_gzip(dir / "gz-idx.gz", kImages);
  EXPECT_EQ(read_idx(dir / "raw-idx").to_vector<int>(), (std::vector<int>{1, 2, 3, 4, 5, 6}));
  Tensor g = read_idx(dir / "gz-idx.gz");
  EXPECT_EQ(g.shape(), Shape({2, 3}));
  EXPECT_EQ(g.to_vector<int>(), (std::vector<int>{1, 2, 3, 4, 5, 6}));
  std::filesystem::remove_all(dir);
}

TEST(Idx, WriteThenReadRoundTrips) {
  auto dir = temp_dir("roundtrip");
  Tensor t = Tensor::from_vector<float>({1.25f, -2, 3, 4.5f}, {2, 2});
  write_idx(dir / "f.gz", t, true);
  EXPECT_EQ(read_idx(dir / "f.gz").to_vector<float>(), t.to_vector<float>());
  EXPECT_EQ(encode_idx(Tensor::from_vector<uint8_t>({1, 2, 3, 4, 5, 6}, {2, 3})), kImages);
  std::filesystem::remove_all(dir);
}

void expect_data_loss(const Bytes& b, const std::string& must_contain) {
  try {
    parse_idx(b, "test.idx");
    ADD_FAILURE() << "no error for " << must_contain;
  } catch (const DataLoss& e) {
    EXPECT_THAT(e.what(), HasSubstr("test.idx"));
    EXPECT_THAT(e.what(), HasSubstr("offset"));
    EXPECT_THAT(e.what(), HasSubstr(must_contain));
  }
}

TEST(Idx, TruncatedDataIsDataLossWithTheOffset) {
  Bytes b(kImages.begin(), kImages.end() - 2);
  expect_data_loss(b, "offset 16");
  expect_data_loss(Bytes{0, 0}, "truncated header");
  expect_data_loss(Bytes{0, 0, 8, 3, 0, 0, 0, 1}, "truncated header");
}

TEST(Idx, WrongMagicIsDataLoss) {
  Bytes b = kImages;
  b[0] = 0x12;
  expect_data_loss(b, "bad magic");
  expect_data_loss(Bytes{0x1f, 0x8b, 8, 0}, "gzip");
}

TEST(Idx, UnknownTypeAndBadRankAreDataLoss) {
  Bytes b = kImages;
  b[2] = 0x07;
  expect_data_loss(b, "unknown element type 0x07");
  expect_data_loss(Bytes{0, 0, 8, 0}, "rank 0");
  expect_data_loss(Bytes{0, 0, 8, 9}, "rank 9");
}

TEST(Idx, OversizedDimensionIsDataLossNotAnAllocation) {
  expect_data_loss(Bytes{0, 0, 8, 2, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
                         0xFF, 0xFF, 1, 2},
                   "oversized dimension");
  expect_data_loss(Bytes{0, 0, 0x0E, 1, 0x7F, 0xFF, 0xFF, 0xFF, 1, 2, 3}, "need");
}

TEST(Idx, TrailingBytesAreDataLoss) {
  Bytes b = kImages;
  b.push_back(7);
  expect_data_loss(b, "trailing");
}

TEST(Idx, TruncatedGzipIsDataLossNamingTheFile) {
  auto dir = temp_dir("truncgz");
  write_gzip(dir / "x.gz", Bytes(4000, 0));
  std::ifstream in(dir / "x.gz", std::ios::binary);
  Bytes gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  gz.resize(gz.size() / 2);
  write_bytes(dir / "x.gz", gz);
  try {
    read_idx(dir / "x.gz");
    FAIL();
  } catch (const DataLoss& e) {
    EXPECT_THAT(e.what(), HasSubstr("x.gz"));
    EXPECT_THAT(e.what(), HasSubstr("offset"));
  }
  std::filesystem::remove_all(dir);
}

TEST(Idx, GunzipRespectsTheOutputLimit) {
  auto dir = temp_dir("bomb");
  write_gzip(dir / "z.gz", Bytes(100000, 0));
  std::ifstream in(dir / "z.gz", std::ios::binary);
  Bytes gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THROW(gunzip(gz, "z.gz", 1000), DataLoss);
  EXPECT_EQ(gunzip(gz, "z.gz").size(), 100000u);
  std::filesystem::remove_all(dir);
}

TEST(Idx, MissingFileIsNotFound) {
  EXPECT_THROW(read_idx("/nonexistent/lockstep/file.idx"), NotFound);
}

}  // namespace
}  // namespace lockstep
