// decode_image (format sniffing), the tensor overloads and bilinear resize.
#include <algorithm>
#include <cmath>

#include "lockstep/core/check.h"
#include "lockstep/data/bytes.h"
#include "lockstep/data/image.h"

namespace lockstep {
namespace {

std::span<const uint8_t> span_of(const Tensor& t, const char* op) {
  std::string_view v = bytes_view(t, op);
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size()};
}

}  // namespace

Tensor decode_image(std::span<const uint8_t> bytes, int channels, const std::string& name) {
  if (is_png(bytes)) return decode_png(bytes, channels, name);
  if (is_jpeg(bytes)) {
    if (channels != 2 && channels != 4) return decode_jpeg(bytes, channels, name);
    // JPEG has no alpha: decode grey / RGB and add an opaque alpha channel, as a PNG without one.
    Tensor colour = decode_jpeg(bytes, channels - 1, name);
    int64_t pixels = colour.dim(0) * colour.dim(1), c = channels - 1;
    Tensor out({colour.dim(0), colour.dim(1), channels}, DType::uint8);
    const uint8_t* src = colour.data<uint8_t>();
    uint8_t* dst = out.data<uint8_t>();
    for (int64_t i = 0; i < pixels; ++i) {
      for (int64_t k = 0; k < c; ++k) dst[i * channels + k] = src[i * c + k];
      dst[i * channels + c] = 255;
    }
    return out;
  }
  throw DataLoss("decode_image: '" + name + "' is neither a PNG nor a JPEG file (" +
                 std::to_string(bytes.size()) + " bytes).");
}

Tensor decode_png(const Tensor& bytes, int channels, const std::string& name) {
  return decode_png(span_of(bytes, "decode_png"), channels, name);
}
Tensor decode_jpeg(const Tensor& bytes, int channels, const std::string& name) {
  return decode_jpeg(span_of(bytes, "decode_jpeg"), channels, name);
}
Tensor decode_image(const Tensor& bytes, int channels, const std::string& name) {
  return decode_image(span_of(bytes, "decode_image"), channels, name);
}

Tensor resize(const Tensor& image, int64_t height, int64_t width) {
  LOCKSTEP_CHECK(image.defined() && image.rank() == 3,
                 "resize: expected an image [height, width, channels]. Received ",
                 image.defined() ? image.describe() : std::string("an undefined tensor"), ".");
  LOCKSTEP_CHECK(height > 0 && width > 0 && image.dim(0) > 0 && image.dim(1) > 0,
                 "resize: expected positive sizes. Received ", image.describe(), " to ", height,
                 "x", width, ".");
  int64_t h = image.dim(0), w = image.dim(1), c = image.dim(2);
  Tensor in = image.dtype() == DType::float32 ? image : image.to(DType::float32);
  const float* src = in.data<float>();
  Tensor out({height, width, c}, DType::float32);
  float* dst = out.data<float>();
  // tf.image.resize's half-pixel centres: lower/upper neighbours clamped to the image.
  auto axis = [](int64_t o, int64_t in_size, int64_t out_size, int64_t& lo, int64_t& hi,
                 float& frac) {
    float pos = (static_cast<float>(o) + 0.5f) * static_cast<float>(in_size) /
                    static_cast<float>(out_size) -
                0.5f;
    float fl = std::floor(pos);
    lo = std::max<int64_t>(static_cast<int64_t>(fl), 0);
    hi = std::min<int64_t>(static_cast<int64_t>(std::ceil(pos)), in_size - 1);
    frac = pos - fl;
  };
  for (int64_t y = 0; y < height; ++y) {
    int64_t y0, y1;
    float fy;
    axis(y, h, height, y0, y1, fy);
    for (int64_t x = 0; x < width; ++x) {
      int64_t x0, x1;
      float fx;
      axis(x, w, width, x0, x1, fx);
      for (int64_t k = 0; k < c; ++k) {
        float tl = src[(y0 * w + x0) * c + k], tr = src[(y0 * w + x1) * c + k];
        float bl = src[(y1 * w + x0) * c + k], br = src[(y1 * w + x1) * c + k];
        float top = tl + (tr - tl) * fx, bottom = bl + (br - bl) * fx;
        dst[(y * width + x) * c + k] = top + (bottom - top) * fy;
      }
    }
  }
  return out;
}

}  // namespace lockstep
