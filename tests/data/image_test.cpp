#include "lockstep/data/image.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <sstream>

#include "file_test_util.h"
#include "lockstep/data/bytes.h"

namespace lockstep {
namespace {

using testing_data::data_loss_message;

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing_data::fixture;
using testing_data::read_file;

// The pixel formula of tests/data/fixtures/make_fixtures.{js,sh}, which pngjs and cjpeg encoded.
uint8_t value(int64_t x, int64_t y, int64_t c) {
  return static_cast<uint8_t>((x * 37 + y * 91 + c * 53 + 11) % 256);
}

std::span<const uint8_t> span_of(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// Expected pixels: (x, y, c) -> value, for an image of `channels` written with `file_channels`.
void expect_pixels(const Tensor& img, int64_t h, int64_t w, int64_t channels, int file_channels) {
  ASSERT_EQ(img.shape(), Shape({h, w, channels}));
  ASSERT_EQ(img.dtype(), DType::uint8);
  const uint8_t* p = img.data<uint8_t>();
  for (int64_t y = 0; y < h; ++y) {
    for (int64_t x = 0; x < w; ++x) {
      for (int64_t c = 0; c < channels; ++c) {
        uint8_t want = file_channels == 1 ? value(x, y, 0) : value(x, y, c);
        if (c == 3 && file_channels < 4) want = 255;  // alpha added
        ASSERT_EQ(p[(y * w + x) * channels + c], want) << x << "," << y << "," << c;
      }
    }
  }
}

TEST(DecodePng, ReadsPngjsFilesExactly) {
  expect_pixels(decode_png(span_of(read_file(fixture("grey_5x3.png")))), 3, 5, 1, 1);
  expect_pixels(decode_png(span_of(read_file(fixture("rgb_4x3.png")))), 3, 4, 3, 3);
  expect_pixels(decode_png(span_of(read_file(fixture("rgba_3x2.png")))), 2, 3, 4, 4);
}

TEST(DecodePng, ConvertsChannels) {
  std::string grey = read_file(fixture("grey_5x3.png")), rgba = read_file(fixture("rgba_3x2.png"));
  expect_pixels(decode_png(span_of(grey), 3), 3, 5, 3, 1);    // grey replicated
  expect_pixels(decode_png(span_of(grey), 4), 3, 5, 4, 1);    // plus opaque alpha
  expect_pixels(decode_png(span_of(rgba), 3), 2, 3, 3, 4);    // alpha dropped
  expect_pixels(decode_image(span_of(rgba), 0), 2, 3, 4, 4);  // sniffed as PNG
  Tensor g = decode_png(span_of(read_file(fixture("rgb_4x3.png"))), 1);
  EXPECT_EQ(g.shape(), Shape({3, 4, 1}));
  // 0.299 R + 0.587 G + 0.114 B of pixel (0, 0) = (11, 64, 117): 3.289 + 37.568 + 13.338 = 54.2
  // (libpng's fixed-point weights may round either way).
  EXPECT_NEAR(g.data<uint8_t>()[0], 54, 1);
  EXPECT_THROW(decode_png(span_of(grey), 5), InvalidArgument);
}

TEST(DecodePng, TruncatedCorruptAndNonPngAreDataLossNamingTheFile) {
  std::string png = read_file(fixture("rgb_4x3.png"));
  for (size_t cut : {size_t{10}, size_t{40}, png.size() - 20}) {
    std::string bytes = png.substr(0, cut);
    EXPECT_THAT(data_loss_message([&] { decode_png(span_of(bytes), 0, "cut.png"); }),
                HasSubstr("cut.png"))
        << cut;
  }
  std::string corrupt = png;
  corrupt[20] ^= 0x55;  // inside IHDR: its CRC no longer matches
  EXPECT_THAT(data_loss_message([&] { decode_png(span_of(corrupt), 0, "bad.png"); }),
              HasSubstr("bad.png"));
  EXPECT_THAT(data_loss_message([&] { decode_image(span_of(std::string("hello")), 0, "x.txt"); }),
              AllOf(HasSubstr("x.txt"), HasSubstr("neither a PNG nor a JPEG")));
}

TEST(DecodePng, HugeDimensionsAreRefusedBeforeAllocating) {
  // A PNG signature and an IHDR of 65535 x 65535 RGB with a valid CRC (zlib's crc32, as PNG's).
  std::string ihdr = std::string("IHDR") + std::string("\x00\x00\xFF\xFF\x00\x00\xFF\xFF", 8) +
                     std::string("\x08\x02\x00\x00\x00", 5);
  uint32_t crc = static_cast<uint32_t>(
      crc32(0, reinterpret_cast<const Bytef*>(ihdr.data()), static_cast<uInt>(ihdr.size())));
  std::string file =
      std::string("\x89PNG\r\n\x1a\n", 8) + std::string("\x00\x00\x00\x0D", 4) + ihdr;
  for (int i = 3; i >= 0; --i) file += static_cast<char>(crc >> (8 * i));
  EXPECT_THAT(data_loss_message([&] { decode_png(span_of(file), 0, "huge.png"); }),
              AllOf(HasSubstr("huge.png"), HasSubstr("65535x65535"), HasSubstr("limit")));
}

// A binary PGM/PPM as djpeg writes it.
Tensor read_pnm(const std::string& path) {
  std::istringstream in(read_file(path));
  std::string magic;
  int64_t w, h, maxval;
  in >> magic >> w >> h >> maxval;
  in.get();
  int64_t c = magic == "P5" ? 1 : 3;
  Tensor t({h, w, c}, DType::uint8);
  in.read(reinterpret_cast<char*>(t.raw_data()), static_cast<std::streamsize>(h * w * c));
  EXPECT_TRUE(in.good()) << path;
  return t;
}

TEST(DecodeJpeg, EqualsDjpegOnCjpegFiles) {
  for (auto [jpg, pnm] : {std::pair{"grey_9x7.jpg", "grey_9x7.djpeg.pgm"},
                          std::pair{"rgb_16x12.jpg", "rgb_16x12.djpeg.ppm"}}) {
    Tensor want = read_pnm(fixture(pnm));
    std::string bytes = read_file(fixture(jpg));
    Tensor got = decode_jpeg(span_of(bytes));
    ASSERT_EQ(got.shape(), want.shape()) << jpg;
    EXPECT_EQ(got.to_vector<uint8_t>(), want.to_vector<uint8_t>()) << jpg;
    EXPECT_EQ(decode_image(bytes_tensor(bytes)).to_vector<uint8_t>(), want.to_vector<uint8_t>());
  }
}

TEST(DecodeImage, JpegWithAlphaGetsAnOpaqueChannel) {
  Tensor want = read_pnm(fixture("rgb_16x12.djpeg.ppm"));
  Tensor rgba = decode_image(span_of(read_file(fixture("rgb_16x12.jpg"))), 4);
  ASSERT_EQ(rgba.shape(), Shape({12, 16, 4}));
  for (int64_t i = 0; i < 12 * 16; ++i) {
    for (int c = 0; c < 3; ++c)
      ASSERT_EQ(rgba.data<uint8_t>()[i * 4 + c], want.data<uint8_t>()[i * 3 + c]);
    ASSERT_EQ(rgba.data<uint8_t>()[i * 4 + 3], 255);
  }
}

TEST(DecodeJpeg, GreyToRgbReplicates) {
  Tensor want = read_pnm(fixture("grey_9x7.djpeg.pgm"));
  Tensor rgb = decode_jpeg(span_of(read_file(fixture("grey_9x7.jpg"))), 3);
  ASSERT_EQ(rgb.shape(), Shape({7, 9, 3}));
  for (int64_t i = 0; i < 63; ++i) {
    for (int c = 0; c < 3; ++c) EXPECT_EQ(rgb.data<uint8_t>()[i * 3 + c], want.data<uint8_t>()[i]);
  }
  EXPECT_EQ(decode_jpeg(span_of(read_file(fixture("rgb_16x12.jpg"))), 1).shape(),
            Shape({12, 16, 1}));
}

TEST(DecodeJpeg, TruncatedAndCorruptAreDataLossNotExit) {
  std::string jpg = read_file(fixture("rgb_16x12.jpg"));
  for (size_t cut : {size_t{3}, size_t{100}, jpg.size() / 2, jpg.size() - 2}) {
    std::string bytes = jpg.substr(0, cut);
    EXPECT_THAT(data_loss_message([&] { decode_jpeg(span_of(bytes), 0, "cut.jpg"); }),
                HasSubstr("cut.jpg"))
        << cut;
  }
  EXPECT_THAT(data_loss_message([&] {
                decode_jpeg(span_of(std::string("\xFF\xD8\xFF\x00junk", 8)), 0, "j.jpg");
              }),
              HasSubstr("j.jpg"));
}

TEST(DecodeJpeg, HugeDimensionsAreRefused) {
  std::string jpg = read_file(fixture("rgb_16x12.jpg"));
  size_t sof = jpg.find("\xFF\xC0");
  ASSERT_NE(sof, std::string::npos);
  // 65535 x 65535: libjpeg's own limit (65500) stops it.
  jpg[sof + 5] = jpg[sof + 6] = jpg[sof + 7] = jpg[sof + 8] = '\xFF';
  EXPECT_THAT(data_loss_message([&] { decode_jpeg(span_of(jpg), 0, "huge.jpg"); }),
              AllOf(HasSubstr("huge.jpg"), HasSubstr("65500")));
  // 40000 x 40000 (0x9C40): under libjpeg's limit, above Lockstep's.
  jpg[sof + 5] = jpg[sof + 7] = '\x9C';
  jpg[sof + 6] = jpg[sof + 8] = '\x40';
  EXPECT_THAT(data_loss_message([&] { decode_jpeg(span_of(jpg), 0, "huge.jpg"); }),
              AllOf(HasSubstr("huge.jpg"), HasSubstr("40000x40000"), HasSubstr("limit")));
}

// Worked out by hand with tf.image.resize's half-pixel centres (as TensorFlow prints for this
// input).
TEST(Resize, BilinearMatchesHandComputedValues) {
  Tensor img = Tensor::from_vector<uint8_t>({0, 10, 20, 30}, Shape({2, 2, 1}));
  Tensor r = resize(img, 4, 4);
  EXPECT_EQ(r.dtype(), DType::float32);
  EXPECT_EQ(r.to_vector<float>(), (std::vector<float>{0, 2.5, 7.5, 10, 5, 7.5, 12.5, 15, 15, 17.5,
                                                      22.5, 25, 20, 22.5, 27.5, 30}));
  Tensor same = resize(img, 2, 2);
  EXPECT_EQ(same.to_vector<float>(), (std::vector<float>{0, 10, 20, 30}));
  // Down to 1x1: the centre (0.5, 0.5) averages all four.
  EXPECT_EQ(resize(img, 1, 1).to_vector<float>(), (std::vector<float>{15}));
  EXPECT_THROW(resize(Tensor({2, 2}, DType::uint8), 1, 1), InvalidArgument);
}

}  // namespace
}  // namespace lockstep
