#include "lockstep/data/tfrecord.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>
#include <limits>

#include "file_test_util.h"
#include "lockstep/data/bytes.h"
#include "lockstep/data/crc32c.h"

namespace lockstep {
namespace {

using testing_data::data_loss_message;

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing_data::ScratchDir;

// The record "123456789" framed by hand: length 9, the masked CRC-32C of the 8 length bytes
// (0x3971F937) and of the data (0xC78AB0E5, from the standard check value 0xE3069283), both worked
// out with a bit-at-a-time implementation written from the TFRecord description, little-endian.
const std::vector<uint8_t> kRecord123 = {0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x37,
                                         0xF9, 0x71, 0x39, '1',  '2',  '3',  '4',  '5',  '6',
                                         '7',  '8',  '9',  0xE5, 0xB0, 0x8A, 0xC7};

std::vector<uint8_t> concat(std::initializer_list<std::vector<uint8_t>> parts) {
  std::vector<uint8_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}
std::vector<uint8_t> framed(std::string_view s) {
  return encode_tfrecord({reinterpret_cast<const uint8_t*>(s.data()), s.size()});
}

std::vector<std::string> records_of(const Dataset& ds) {
  std::vector<std::string> out;
  for (Element& e : ds) out.emplace_back(bytes_view(e.at(0)));
  return out;
}

// gzip through zlib's own writer, as a member of its own (several calls: concatenated members).
std::vector<uint8_t> gzip_member(const std::vector<uint8_t>& data) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::vector<uint8_t> out(deflateBound(&z, data.size()));
  z.next_in = const_cast<uint8_t*>(data.data());
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

class TFRecord : public ScratchDir {};

TEST_F(TFRecord, ReadsAHandFramedRecord) {
  std::string p = write("a.tfrecord", kRecord123);
  EXPECT_EQ(records_of(TFRecordDataset({p})), std::vector<std::string>{"123456789"});
}

TEST_F(TFRecord, EncodesTheHandFramedBytes) {
  EXPECT_EQ(framed("123456789"), kRecord123);
}

TEST_F(TFRecord, ReadsEmptyRecordsAndFilesInOrder) {
  std::string a = write("a.tfrecord", concat({framed(""), framed("x"), framed("yz")}));
  std::string b = write("b.tfrecord", "");
  std::string c = write("c.tfrecord", kRecord123);
  TFRecordDataset ds({a, b, c});
  EXPECT_EQ(records_of(ds), (std::vector<std::string>{"", "x", "yz", "123456789"}));
  EXPECT_EQ(ds.element_spec(), (ElementSpec{TensorSpec{{-1}, DType::uint8}}));
  EXPECT_EQ(ds.cardinality(), Dataset::kUnknown);
}

TEST_F(TFRecord, WriterRoundTripsPlainAndGzip) {
  for (std::string compression : {"", "GZIP"}) {
    std::string p = path("w" + compression + ".tfrecord");
    {
      TFRecordWriter w(p, compression);
      w.write("first");
      w.write(std::string(100000, 'z'));
      w.close();
    }
    auto got = records_of(TFRecordDataset({p}, compression));
    ASSERT_EQ(got.size(), 2u) << compression;
    EXPECT_EQ(got[0], "first");
    EXPECT_EQ(got[1], std::string(100000, 'z'));
  }
}

TEST_F(TFRecord, ReadsGzipWrittenByZlibWithConcatenatedMembers) {
  auto gz = concat({gzip_member(kRecord123), gzip_member(framed("second"))});
  std::string p = write("a.tfrecord.gz", gz);
  EXPECT_EQ(records_of(TFRecordDataset({p}, "GZIP")),
            (std::vector<std::string>{"123456789", "second"}));
}

TEST_F(TFRecord, RejectsAnUnknownCompression) {
  EXPECT_THROW(TFRecordDataset({"x"}, "ZLIB"), InvalidArgument);
}

TEST_F(TFRecord, MissingFileIsNotFound) {
  EXPECT_THROW(records_of(TFRecordDataset({path("nope.tfrecord")})), NotFound);
}

TEST_F(TFRecord, LengthCrcMismatchNamesFileRecordAndOffset) {
  auto bad = kRecord123;
  bad[8] ^= 1;
  std::string p = write("bad.tfrecord", concat({framed("ok"), bad}));
  std::string msg = data_loss_message([&] { records_of(TFRecordDataset({p})); });
  EXPECT_THAT(msg, AllOf(HasSubstr(p), HasSubstr("record 1"), HasSubstr("byte offset 18"),
                         HasSubstr("corrupt length")));
}

TEST_F(TFRecord, DataCrcMismatchNamesFileRecordAndOffset) {
  auto bad = kRecord123;
  bad[14] = 'X';
  std::string p = write("bad.tfrecord", bad);
  std::string msg = data_loss_message([&] { records_of(TFRecordDataset({p})); });
  EXPECT_THAT(msg, AllOf(HasSubstr(p), HasSubstr("record 0"), HasSubstr("byte offset 0"),
                         HasSubstr("corrupt data")));
}

TEST_F(TFRecord, HugeLengthWithAValidCrcIsAnErrorNotAnAllocation) {
  std::vector<uint8_t> header(12, 0xFF);  // length 2^64 - 1
  uint32_t masked = crc32c_mask(crc32c({header.data(), 8}));
  for (int i = 0; i < 4; ++i) header[8 + i] = static_cast<uint8_t>(masked >> (8 * i));
  std::string p = write("huge.tfrecord", header);
  std::string msg = data_loss_message([&] { records_of(TFRecordDataset({p})); });
  EXPECT_THAT(msg, AllOf(HasSubstr(p), HasSubstr("record 0"), HasSubstr("18446744073709551615"),
                         HasSubstr("max_record_bytes")));
}

TEST_F(TFRecord, LengthBeyondTheFileIsTruncationWithoutAllocatingIt) {
  std::vector<uint8_t> header(12, 0);
  header[4] = 0x40;  // 2^38 bytes claimed, under a raised limit
  uint32_t masked = crc32c_mask(crc32c({header.data(), 8}));
  for (int i = 0; i < 4; ++i) header[8 + i] = static_cast<uint8_t>(masked >> (8 * i));
  std::string p = write("long.tfrecord", concat({header, {1, 2, 3}}));
  std::string msg = data_loss_message([&] {
    records_of(TFRecordDataset({p}, TFRecordOptions{.max_record_bytes = uint64_t{1} << 40}));
  });
  EXPECT_THAT(msg, AllOf(HasSubstr(p), HasSubstr("truncated record"), HasSubstr("3 present")));
}

TEST_F(TFRecord, EveryTruncationIsDataLossNamingTheRecord) {
  auto whole = concat({framed("first"), kRecord123});
  size_t second = framed("first").size();
  for (size_t cut = second + 1; cut < whole.size(); ++cut) {
    std::string p = write("cut" + std::to_string(cut) + ".tfrecord",
                          std::vector<uint8_t>(whole.begin(), whole.begin() + cut));
    std::string msg = data_loss_message([&] { records_of(TFRecordDataset({p})); });
    EXPECT_THAT(msg, AllOf(HasSubstr(p), HasSubstr("record 1"), HasSubstr("truncated")))
        << "cut at " << cut;
  }
}

TEST_F(TFRecord, TruncatedGzipIsDataLoss) {
  auto gz = gzip_member(concat({framed("a"), framed("b")}));
  gz.resize(gz.size() - 6);
  std::string p = write("cut.tfrecord.gz", gz);
  std::string msg = data_loss_message([&] { records_of(TFRecordDataset({p}, "GZIP")); });
  EXPECT_THAT(msg, HasSubstr(p));
}

TEST_F(TFRecord, ReaderFromMemoryCountsRecordsAndOffsets) {
  auto bytes = concat({framed("ab"), kRecord123});
  TFRecordReader r = TFRecordReader::from_memory(bytes, "mem");
  std::vector<uint8_t> rec;
  ASSERT_TRUE(r.read(rec));
  EXPECT_EQ(r.offset(), 18u);
  ASSERT_TRUE(r.read(rec));
  EXPECT_EQ(std::string(rec.begin(), rec.end()), "123456789");
  EXPECT_FALSE(r.read(rec));
  EXPECT_EQ(r.records_read(), 2);
}

TEST_F(TFRecord, RestoredIteratorContinuesMidFile) {
  std::string a = write("a.tfrecord", concat({framed("0"), framed("1"), framed("2")}));
  std::string b = write("b.tfrecord", concat({framed("3"), framed("4")}));
  TFRecordDataset ds({a, b});
  Iterator it = ds.make_iterator();
  Element e;
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(it.next(e));
  Iterator resumed = ds.make_iterator(it.state());
  ASSERT_TRUE(resumed.next(e));
  EXPECT_EQ(bytes_string(e[0]), "4");
  EXPECT_FALSE(resumed.next(e));
}

}  // namespace
}  // namespace lockstep
