#include "lockstep/data/image_directory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "file_test_util.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;
using testing_data::fixture;
using testing_data::read_file;
using S = std::vector<std::string>;

class ImageDirectory : public testing_data::ScratchDir {
 protected:
  void SetUp() override {
    ScratchDir::SetUp();
    write("root/a/grey_5x3.png", read_file(fixture("grey_5x3.png")));
    write("root/a/x.JPG", read_file(fixture("rgb_16x12.jpg")));
    write("root/b/rgb_4x3.png", read_file(fixture("rgb_4x3.png")));
    write("root/b/sub/grey_9x7.jpeg", read_file(fixture("grey_9x7.jpg")));
    write("root/b/notes.txt", "not an image, skipped by its extension");
    root_ = path("root");
  }
  std::string root_;
};

TEST_F(ImageDirectory, InfersClassesAndLabelsInSortedOrder) {
  auto r = image_dataset_from_directory(
      root_, {.color_mode = "grayscale", .batch_size = 0, .image_size = {3, 5}, .shuffle = false});
  EXPECT_EQ(r.class_names, (S{"a", "b"}));
  EXPECT_EQ(r.file_paths, (S{path("root/a/grey_5x3.png"), path("root/a/x.JPG"),
                             path("root/b/rgb_4x3.png"), path("root/b/sub/grey_9x7.jpeg")}));
  EXPECT_EQ(r.dataset.element_spec(),
            (ElementSpec{TensorSpec{{3, 5, 1}, DType::float32}, TensorSpec{{}, DType::int32}}));
  std::vector<Element> els;
  for (Element& e : r.dataset) els.push_back(e);
  ASSERT_EQ(els.size(), 4u);
  EXPECT_EQ(els[0][1].item(), 0);
  EXPECT_EQ(els[1][1].item(), 0);
  EXPECT_EQ(els[2][1].item(), 1);
  EXPECT_EQ(els[3][1].item(), 1);
  // The 5x3 grey PNG at its own size: pngjs's pixels (x * 37 + y * 91 + 11) % 256, as float32.
  ASSERT_EQ(els[0][0].shape(), Shape({3, 5, 1}));
  for (int64_t y = 0; y < 3; ++y) {
    for (int64_t x = 0; x < 5; ++x) {
      EXPECT_EQ(els[0][0].data<float>()[y * 5 + x],
                static_cast<float>((x * 37 + y * 91 + 11) % 256));
    }
  }
}

TEST_F(ImageDirectory, LabelModesAndBatches) {
  auto cat = image_dataset_from_directory(
      root_,
      {.label_mode = "categorical", .batch_size = 3, .image_size = {8, 8}, .shuffle = false});
  std::vector<Element> b;
  for (Element& e : cat.dataset) b.push_back(e);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0][0].shape(), Shape({3, 8, 8, 3}));
  EXPECT_EQ(b[0][1].to_vector<float>(), (std::vector<float>{1, 0, 1, 0, 0, 1}));
  EXPECT_EQ(b[1][1].to_vector<float>(), (std::vector<float>{0, 1}));
  auto bin = image_dataset_from_directory(
      root_, {.label_mode = "binary", .batch_size = 4, .image_size = {2, 2}, .shuffle = false});
  for (Element& e : bin.dataset)
    EXPECT_EQ(e[1].to_vector<float>(), (std::vector<float>{0, 0, 1, 1}));
  auto none = image_dataset_from_directory(
      root_, {.label_mode = "", .color_mode = "rgba", .batch_size = 4, .image_size = {2, 2}});
  for (Element& e : none.dataset) {
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].shape(), Shape({4, 2, 2, 4}));
  }
}

TEST_F(ImageDirectory, SeededSplitPartitionsTheFiles) {
  ImageDatasetOptions o{
      .batch_size = 2, .image_size = {4, 4}, .seed = 42, .validation_split = 0.25};
  auto [train, val] = image_dataset_from_directory_both(root_, o);
  EXPECT_EQ(train.file_paths.size(), 3u);
  EXPECT_EQ(val.file_paths.size(), 1u);
  S all = train.file_paths;
  all.push_back(val.file_paths[0]);
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all.size(), 4u);
  EXPECT_EQ(std::unique(all.begin(), all.end()), all.end());
  o.subset = "validation";
  EXPECT_EQ(image_dataset_from_directory(root_, o).file_paths, val.file_paths);
  o.subset = "training";
  EXPECT_EQ(image_dataset_from_directory(root_, o).file_paths, train.file_paths);
}

TEST_F(ImageDirectory, BadOptionsAreInvalidArgument) {
  write("three/a/1.png", read_file(fixture("grey_5x3.png")));
  write("three/b/1.png", read_file(fixture("grey_5x3.png")));
  write("three/c/1.png", read_file(fixture("grey_5x3.png")));
  EXPECT_THROW(image_dataset_from_directory(path("three"), {.label_mode = "binary"}),
               InvalidArgument);
  EXPECT_THROW(image_dataset_from_directory(root_, {.class_names = {"a", "zzz"}}), InvalidArgument);
  EXPECT_THROW(image_dataset_from_directory(root_, {.validation_split = 0.2, .subset = "training"}),
               InvalidArgument);  // shuffling without a seed
  EXPECT_THROW(image_dataset_from_directory(root_, {.color_mode = "cmyk"}), InvalidArgument);
  EXPECT_THROW(image_dataset_from_directory(path("nothing")), NotFound);
  try {
    image_dataset_from_directory(
        root_, {.labels = "", .label_list = {0, 1, 5, 1}, .class_names = {"a", "b"}});
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("label 5"));
  }
}

TEST_F(ImageDirectory, NonImageWithAnImageNameIsDataLossNamingTheFile) {
  std::string bad = write("root/b/fake.png", "this is text");
  auto r = image_dataset_from_directory(root_,
                                        {.batch_size = 0, .image_size = {2, 2}, .shuffle = false});
  try {
    for (Element& e : r.dataset) (void)e;
    FAIL() << "expected DataLoss";
  } catch (const DataLoss& e) {
    EXPECT_THAT(e.what(), HasSubstr(bad));
  }
}

}  // namespace
}  // namespace lockstep
