#include "lockstep/data/image_directory.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <random>

#include "lockstep/core/check.h"
#include "lockstep/core/random.h"
#include "lockstep/data/bytes.h"
#include "lockstep/data/image.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;

bool is_image_name(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg";
}

std::vector<std::string> walk_images(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file() && is_image_name(e.path())) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

struct Index {
  std::vector<std::string> paths;
  std::vector<int64_t> labels;
  std::vector<std::string> class_names;
};

Index index_directory(const std::string& directory, const ImageDatasetOptions& o) {
  LOCKSTEP_CHECK_AS(NotFound, fs::is_directory(directory), "image_dataset_from_directory: '",
                    directory, "' is not a directory.");
  Index idx;
  if (o.labels == "inferred") {
    std::vector<std::string> found;
    for (const auto& e : fs::directory_iterator(directory)) {
      if (e.is_directory()) found.push_back(e.path().filename().string());
    }
    std::sort(found.begin(), found.end());
    idx.class_names = found;
    if (!o.class_names.empty()) {
      std::vector<std::string> given = o.class_names;
      std::sort(given.begin(), given.end());
      LOCKSTEP_CHECK(given == found,
                     "image_dataset_from_directory: class_names must name the "
                     "subdirectories of '",
                     directory, "' (", found.size(), " found). Received ", o.class_names.size(),
                     " names.");
      idx.class_names = o.class_names;
    }
    for (size_t k = 0; k < idx.class_names.size(); ++k) {
      for (std::string& p : walk_images(fs::path(directory) / idx.class_names[k])) {
        idx.paths.push_back(std::move(p));
        idx.labels.push_back(static_cast<int64_t>(k));
      }
    }
  } else {
    LOCKSTEP_CHECK(o.labels.empty(),
                   "image_dataset_from_directory: expected labels \"inferred\" or \"\" (with an "
                   "explicit label_list or none). Received: labels=\"",
                   o.labels, "\".");
    idx.paths = walk_images(directory);
    if (!o.label_list.empty()) {
      LOCKSTEP_CHECK(o.label_list.size() == idx.paths.size(),
                     "image_dataset_from_directory: expected one label per image (",
                     idx.paths.size(), " images found). Received ", o.label_list.size(),
                     " labels.");
      idx.labels = o.label_list;
      int64_t classes = *std::max_element(idx.labels.begin(), idx.labels.end()) + 1;
      for (size_t i = 0; i < idx.labels.size(); ++i) {
        LOCKSTEP_CHECK(
            idx.labels[i] >= 0 && (o.class_names.empty() ||
                                   idx.labels[i] < static_cast<int64_t>(o.class_names.size())),
            "image_dataset_from_directory: label ", idx.labels[i], " of '", idx.paths[i],
            "' is outside the ",
            o.class_names.empty() ? classes : static_cast<int64_t>(o.class_names.size()),
            " classes.");
      }
      idx.class_names = o.class_names;
      if (idx.class_names.empty()) {
        for (int64_t k = 0; k < classes; ++k) idx.class_names.push_back(std::to_string(k));
      }
    }
  }
  LOCKSTEP_CHECK_AS(NotFound, !idx.paths.empty(),
                    "image_dataset_from_directory: no images (.png, "
                    ".jpg, .jpeg) found under '",
                    directory, "'.");
  return idx;
}

int channels_of(const std::string& color_mode) {
  if (color_mode == "grayscale") return 1;
  if (color_mode == "rgb") return 3;
  if (color_mode == "rgba") return 4;
  throw InvalidArgument(
      "image_dataset_from_directory: expected color_mode \"grayscale\", \"rgb\" or \"rgba\". "
      "Received: color_mode=\"" +
      color_mode + "\".");
}

std::string read_whole(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  LOCKSTEP_CHECK_AS(NotFound, f.good(), "image_dataset_from_directory: cannot open '", path, "'.");
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

ImageDirectoryDataset build(Index idx, size_t begin, size_t end, const ImageDatasetOptions& o) {
  ImageDirectoryDataset out{Dataset(nullptr), idx.class_names, {}};
  out.file_paths.assign(idx.paths.begin() + static_cast<std::ptrdiff_t>(begin),
                        idx.paths.begin() + static_cast<std::ptrdiff_t>(end));
  auto n = static_cast<int64_t>(end - begin);
  int channels = channels_of(o.color_mode);
  auto [h, w] = o.image_size;
  bool labelled = !o.label_mode.empty() && !idx.labels.empty();
  auto classes = static_cast<int64_t>(idx.class_names.size());
  Dataset ds = Dataset::from_strings(out.file_paths);
  if (labelled) {
    Tensor labels({n}, DType::int64);
    std::copy(idx.labels.begin() + static_cast<std::ptrdiff_t>(begin),
              idx.labels.begin() + static_cast<std::ptrdiff_t>(end), labels.data<int64_t>());
    ds = Dataset::zip({ds, Dataset::from_tensor_slices(labels)});
  }
  if (o.shuffle) ds = ds.shuffle(std::max<int64_t>(o.batch_size, 1) * 8, o.seed);
  std::string mode = o.label_mode;
  ElementSpec spec{TensorSpec{{h, w, channels}, DType::float32}};
  if (labelled) {
    if (mode == "int") spec.push_back({{}, DType::int32});
    if (mode == "categorical") spec.push_back({{classes}, DType::float32});
    if (mode == "binary") spec.push_back({{1}, DType::float32});
  }
  ds = ds.map(
      [=](const Element& e) {
        std::string path = bytes_string(e[0]);
        std::string bytes = read_whole(path);
        Tensor img = decode_image(
            std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
            channels, path);
        Element result{resize(img, h, w)};
        if (!labelled) return result;
        int64_t label = static_cast<int64_t>(e[1].item());
        if (mode == "int") {
          result.push_back(Tensor::scalar(static_cast<double>(label), DType::int32));
        } else if (mode == "categorical") {
          Tensor one_hot = Tensor::zeros({classes});
          one_hot.data<float>()[label] = 1.0f;
          result.push_back(one_hot);
        } else {
          result.push_back(Tensor::full({1}, static_cast<double>(label)));
        }
        return result;
      },
      MapOptions{.num_parallel_calls = o.num_parallel_calls, .output_spec = spec});
  out.dataset = o.batch_size > 0 ? ds.batch(o.batch_size) : ds;
  return out;
}

void check_options(const ImageDatasetOptions& o, int64_t classes) {
  LOCKSTEP_CHECK(o.label_mode.empty() || o.label_mode == "int" || o.label_mode == "categorical" ||
                     o.label_mode == "binary",
                 "image_dataset_from_directory: expected label_mode \"int\", \"categorical\", "
                 "\"binary\" or \"\". Received: label_mode=\"",
                 o.label_mode, "\".");
  LOCKSTEP_CHECK(o.label_mode != "binary" || classes == 2,
                 "image_dataset_from_directory: label_mode \"binary\" needs exactly 2 classes. "
                 "Received ",
                 classes, " classes.");
  LOCKSTEP_CHECK(o.batch_size >= 0 && o.image_size.first > 0 && o.image_size.second > 0,
                 "image_dataset_from_directory: expected batch_size >= 0 and a positive "
                 "image_size.");
  channels_of(o.color_mode);
  if (!o.subset.empty() || o.validation_split != 0) {
    LOCKSTEP_CHECK(o.validation_split > 0 && o.validation_split < 1,
                   "image_dataset_from_directory: validation_split must be in (0, 1). Received ",
                   o.validation_split, ".");
    LOCKSTEP_CHECK(!o.shuffle || o.seed.has_value(),
                   "image_dataset_from_directory: with validation_split and shuffle, a seed is "
                   "required so that the training and validation subsets do not overlap.");
  }
}

Index shuffled_index(const std::string& directory, const ImageDatasetOptions& o) {
  Index idx = index_directory(directory, o);
  check_options(o, static_cast<int64_t>(idx.class_names.size()));
  if (o.shuffle) {
    uint64_t seed = o.seed ? *o.seed : Generator(std::random_device{}()).next_u64();
    Generator g(seed, /*stream=*/0x1DA7A5E7);
    for (size_t i = idx.paths.size(); i > 1; --i) {
      size_t j = g.uniform_int(i);
      std::swap(idx.paths[i - 1], idx.paths[j]);
      if (!idx.labels.empty()) std::swap(idx.labels[i - 1], idx.labels[j]);
    }
  }
  return idx;
}

}  // namespace

ImageDirectoryDataset image_dataset_from_directory(const std::string& directory,
                                                   const ImageDatasetOptions& o) {
  LOCKSTEP_CHECK(o.subset.empty() || o.subset == "training" || o.subset == "validation",
                 "image_dataset_from_directory: expected subset \"training\" or \"validation\" "
                 "(\"both\": image_dataset_from_directory_both). Received: subset=\"",
                 o.subset, "\".");
  LOCKSTEP_CHECK(o.validation_split == 0 || !o.subset.empty(),
                 "image_dataset_from_directory: a validation_split needs a subset.");
  Index idx = shuffled_index(directory, o);
  size_t n = idx.paths.size();
  auto n_val = static_cast<size_t>(o.validation_split * static_cast<double>(n));
  if (o.subset == "training") return build(std::move(idx), 0, n - n_val, o);
  if (o.subset == "validation") return build(std::move(idx), n - n_val, n, o);
  return build(std::move(idx), 0, n, o);
}

std::pair<ImageDirectoryDataset, ImageDirectoryDataset> image_dataset_from_directory_both(
    const std::string& directory, ImageDatasetOptions o) {
  o.subset = "training";
  Index idx = shuffled_index(directory, o);
  size_t n = idx.paths.size();
  auto n_val = static_cast<size_t>(o.validation_split * static_cast<double>(n));
  return {build(idx, 0, n - n_val, o), build(idx, n - n_val, n, o)};
}

}  // namespace lockstep
