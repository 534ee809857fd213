// TFRecords of tf.train.Example written by another program (@roboflow/tfrecords in Node.js, see
// tests/data/fixtures/make_fixtures.js), read back exactly.
#include <gtest/gtest.h>

#include "file_test_util.h"
#include "lockstep/data/bytes.h"
#include "lockstep/data/example.h"
#include "lockstep/data/image.h"
#include "lockstep/data/tfrecord.h"

namespace lockstep {
namespace {

using testing_data::fixture;
using testing_data::read_file;

TEST(ForeignTFRecord, ExamplesFromRoboflowTfrecordsReadBackExactly) {
  FeatureSpecs spec = {{"label", FixedLenFeature{.shape = {}, .dtype = FeatureType::int64}},
                       {"name", FixedLenFeature{.shape = {}, .dtype = FeatureType::bytes}},
                       {"image", FixedLenFeature{.shape = {}, .dtype = FeatureType::bytes}},
                       {"weights", VarLenFeature{FeatureType::float32}},
                       {"ids", VarLenFeature{FeatureType::int64}}};
  std::vector<ParsedFeatures> got;
  for (Element& e : TFRecordDataset({fixture("examples.tfrecord")})) {
    got.push_back(parse_single_example(e[0], spec));
  }
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].at("label").values.item(), 0);
  EXPECT_EQ(got[1].at("label").values.item(), 7);
  EXPECT_EQ(got[2].at("label").values.item(), -5);
  EXPECT_EQ(got[0].at("name").bytes_at(0), "grey");
  EXPECT_EQ(got[2].at("name").bytes_at(0), "caf\xC3\xA9");  // UTF-8
  EXPECT_EQ(got[0].at("image").bytes_at(0), read_file(fixture("grey_5x3.png")));
  EXPECT_EQ(got[1].at("image").bytes_at(0), read_file(fixture("rgb_4x3.png")));
  EXPECT_EQ(got[2].at("image").bytes_at(0), std::string("\x00\xFF\x01", 3));
  EXPECT_EQ(got[0].at("weights").values.to_vector<float>(), (std::vector<float>{0.5f, -1.25f}));
  EXPECT_EQ(got[1].at("weights").values.to_vector<float>(), (std::vector<float>{3.0f}));
  EXPECT_EQ(got[2].at("weights").values.num_elements(), 0);
  EXPECT_EQ(got[0].at("ids").values.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(got[1].at("ids").values.num_elements(), 0);
  EXPECT_EQ(got[2].at("ids").values.to_vector<int64_t>(), (std::vector<int64_t>{int64_t{1} << 40}));
  // The embedded PNG decodes to pngjs's pixels: (x, y) -> (x * 37 + y * 91 + 11) % 256.
  Tensor img = decode_image(got[0].at("image").bytes_tensor_at(0));
  ASSERT_EQ(img.shape(), Shape({3, 5, 1}));
  EXPECT_EQ(img.data<uint8_t>()[1 * 5 + 2], (2 * 37 + 1 * 91 + 11) % 256);
}

}  // namespace
}  // namespace lockstep
