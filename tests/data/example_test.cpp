#include "lockstep/data/example.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

namespace lockstep {
namespace {

using ::testing::HasSubstr;
using S = std::vector<std::string>;

// A protobuf wire-format writer written here from the encoding rules (varint keys, length-delimited
// fields), independent of libprotobuf, to build Examples byte by byte.
std::string varint(uint64_t v) {
  std::string s;
  while (v >= 0x80) {
    s += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  return s + static_cast<char>(v);
}
std::string field(int number, const std::string& payload) {  // wire type 2
  return varint(static_cast<uint64_t>(number) << 3 | 2) + varint(payload.size()) + payload;
}
std::string int64_list_packed(std::initializer_list<int64_t> v) {
  std::string p;
  for (int64_t x : v) p += varint(static_cast<uint64_t>(x));
  return field(3, field(1, p));
}
std::string int64_list_unpacked(std::initializer_list<int64_t> v) {  // as proto2 writers emit
  std::string p;
  for (int64_t x : v) p += varint(1 << 3 | 0) + varint(static_cast<uint64_t>(x));
  return field(3, p);
}
std::string float_list(std::initializer_list<float> v) {
  std::string p;
  for (float x : v) {
    char b[4];
    std::memcpy(b, &x, 4);  // little-endian IEEE 754, as the wire format
    p.append(b, 4);
  }
  return field(2, field(1, p));
}
std::string bytes_list(const S& v) {
  std::string p;
  for (const auto& x : v) p += field(1, x);
  return field(1, p);
}
std::string example(const std::vector<std::pair<std::string, std::string>>& features) {
  std::string entries;
  for (const auto& [k, feature] : features) entries += field(1, field(1, k) + field(2, feature));
  return field(1, entries);
}
std::span<const uint8_t> span_of(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST(ParseSingleExample, HandEncodedBytesMatchTheWorkedOutLayout) {
  // Example{features{feature{"a": int64_list{1, 2}}}}, laid out by hand.
  const std::string want =
      "\x0A\x0D\x0A\x0B\x0A\x01"
      "a"
      "\x12\x06\x1A\x04\x0A\x02\x01\x02";
  EXPECT_EQ(example({{"a", int64_list_packed({1, 2})}}), want);
  auto f = parse_single_example(
      span_of(want), {{"a", FixedLenFeature{.shape = {2}, .dtype = FeatureType::int64}}});
  EXPECT_EQ(f.at("a").values.to_vector<int64_t>(), (std::vector<int64_t>{1, 2}));
}

TEST(ParseSingleExample, EveryFixedLenKind) {
  std::string ex = example({{"i", int64_list_unpacked({-3, 300, 7, 8})},
                            {"f", float_list({1.5f, -2.25f})},
                            {"b", bytes_list({"hi", ""})},
                            {"s", bytes_list({"one"})}});
  auto f = parse_single_example(
      span_of(ex), {{"i", FixedLenFeature{.shape = {2, 2}, .dtype = FeatureType::int64}},
                    {"f", FixedLenFeature{.shape = {2}, .dtype = FeatureType::float32}},
                    {"b", FixedLenFeature{.shape = {2}, .dtype = FeatureType::bytes}},
                    {"s", FixedLenFeature{.shape = {}, .dtype = FeatureType::bytes}}});
  EXPECT_EQ(f.at("i").values.shape(), Shape({2, 2}));
  EXPECT_EQ(f.at("i").values.to_vector<int64_t>(), (std::vector<int64_t>{-3, 300, 7, 8}));
  EXPECT_EQ(f.at("f").values.to_vector<float>(), (std::vector<float>{1.5f, -2.25f}));
  EXPECT_EQ(f.at("b").bytes.to_strings(), (S{"hi", ""}));
  EXPECT_EQ(f.at("s").bytes_at(0), "one");
}

TEST(ParseSingleExample, EveryVarLenKindIsASparseTriple) {
  std::string ex = example(
      {{"i", int64_list_packed({5, 6, 7})}, {"f", float_list({})}, {"b", bytes_list({"x", "yz"})}});
  auto f = parse_single_example(span_of(ex), {{"i", VarLenFeature{FeatureType::int64}},
                                              {"f", VarLenFeature{FeatureType::float32}},
                                              {"b", VarLenFeature{FeatureType::bytes}},
                                              {"missing", VarLenFeature{FeatureType::int64}}});
  EXPECT_EQ(f.at("i").values.to_vector<int64_t>(), (std::vector<int64_t>{5, 6, 7}));
  EXPECT_EQ(f.at("i").indices.shape(), Shape({3, 1}));
  EXPECT_EQ(f.at("i").indices.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(f.at("i").dense_shape.to_vector<int64_t>(), (std::vector<int64_t>{3}));
  EXPECT_EQ(f.at("f").values.num_elements(), 0);
  EXPECT_EQ(f.at("b").bytes.to_strings(), (S{"x", "yz"}));
  EXPECT_EQ(f.at("missing").dense_shape.to_vector<int64_t>(), (std::vector<int64_t>{0}));
}

TEST(ParseSingleExample, DefaultsFillMissingFeatures) {
  auto f = parse_single_example(
      span_of(example({})),
      {{"l",
        FixedLenFeature{
            .shape = {}, .dtype = FeatureType::int64, .default_value = std::vector<int64_t>{-1}}},
       {"s",
        FixedLenFeature{.shape = {}, .dtype = FeatureType::bytes, .default_value = S{"none"}}}});
  EXPECT_EQ(f.at("l").values.item(), -1);
  EXPECT_EQ(f.at("s").bytes_at(0), "none");
}

TEST(ParseSingleExample, ErrorsNameTheFeatureAndWhere) {
  std::string ex = example({{"a", int64_list_packed({1, 2})}});
  auto msg = [&](const FeatureSpecs& spec) {
    try {
      parse_single_example(span_of(ex), spec, "f.tfrecord, record 4");
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(msg({{"a", FixedLenFeature{.shape = {3}, .dtype = FeatureType::int64}}}),
              AllOf(HasSubstr("f.tfrecord, record 4"), HasSubstr("'a'"), HasSubstr("expected 3"),
                    HasSubstr("received 2")));
  EXPECT_THAT(msg({{"a", FixedLenFeature{.shape = {2}, .dtype = FeatureType::float32}}}),
              AllOf(HasSubstr("'a'"), HasSubstr("int64"), HasSubstr("float32")));
  EXPECT_THAT(msg({{"b", FixedLenFeature{.shape = {}, .dtype = FeatureType::int64}}}),
              AllOf(HasSubstr("'b'"), HasSubstr("required")));
}

TEST(ParseSingleExample, GarbageIsDataLoss) {
  std::string bad = "\x0A\x7F\x01";  // a length beyond the end
  EXPECT_THROW(parse_single_example(span_of(bad), {}), DataLoss);
}

TEST(ParseExample, BatchesFixedAndVarLen) {
  std::vector<Tensor> batch = {
      bytes_tensor(example({{"l", int64_list_packed({4})}, {"v", float_list({1, 2})}})),
      bytes_tensor(example({{"l", int64_list_packed({9})}, {"v", float_list({3, 4, 5})}}))};
  auto f = parse_example(batch, {{"l", FixedLenFeature{.shape = {}, .dtype = FeatureType::int64}},
                                 {"v", VarLenFeature{FeatureType::float32}}});
  EXPECT_EQ(f.at("l").values.shape(), Shape({2}));
  EXPECT_EQ(f.at("l").values.to_vector<int64_t>(), (std::vector<int64_t>{4, 9}));
  EXPECT_EQ(f.at("v").indices.to_vector<int64_t>(),
            (std::vector<int64_t>{0, 0, 0, 1, 1, 0, 1, 1, 1, 2}));
  EXPECT_EQ(f.at("v").values.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5}));
  EXPECT_EQ(f.at("v").dense_shape.to_vector<int64_t>(), (std::vector<int64_t>{2, 3}));
}

TEST(SerializeExample, RoundTripsThroughTheParser) {
  std::string s = serialize_example({{"img", S{"\x89PNG"}}, {"label", std::vector<int64_t>{3}}});
  auto f = parse_single_example(
      span_of(s), {{"img", FixedLenFeature{.shape = {}, .dtype = FeatureType::bytes}},
                   {"label", FixedLenFeature{.shape = {}, .dtype = FeatureType::int64}}});
  EXPECT_EQ(f.at("img").bytes_at(0), "\x89PNG");
  EXPECT_EQ(f.at("label").values.item(), 3);
}

}  // namespace
}  // namespace lockstep
