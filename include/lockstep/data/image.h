#pragma once
// Image decoding and resizing, as tf.io.decode_png / decode_jpeg / decode_image and
// tf.image.resize (bilinear).
//
// Decoders take the encoded bytes (a byte string uint8[n], or a span) and return uint8[height,
// width, channels]. `channels` 0 keeps the file's (PNG: 1 grey, 2 grey + alpha, 3 RGB, 4 RGBA;
// JPEG: 1 or 3); 1 converts to grey, 3 to RGB, 4 (PNG only) to RGBA (alpha 255 added). PNG:
// palette and low bit depths are expanded, 16-bit samples keep their high byte, interlaced files
// are read, colour to grey is libpng's rgb_to_gray with weights 0.299 / 0.587 / 0.114. JPEG:
// libjpeg-turbo with its defaults (islow DCT, fancy upsampling: djpeg's output); CMYK is refused.
//
// Bad input never crashes or exits: a corrupt, truncated or non-image file is DataLoss naming
// `name` (a file name, "record 7", ...) and the decoder's message; libjpeg's error handler (which
// calls exit()) is replaced, and its warnings (a truncated or corrupt scan it would pad with grey)
// are errors too. Dimensions are capped before anything is allocated: width and height at most
// kMaxImageDim and width * height at most kMaxImagePixels.
#include <cstdint>
#include <span>
#include <string>

#include "lockstep/core/tensor.h"

namespace lockstep {

inline constexpr int64_t kMaxImageDim = 32768;
inline constexpr int64_t kMaxImagePixels = int64_t{1} << 28;

Tensor decode_png(std::span<const uint8_t> bytes, int channels = 0,
                  const std::string& name = "<memory>");
Tensor decode_jpeg(std::span<const uint8_t> bytes, int channels = 0,
                   const std::string& name = "<memory>");
// PNG or JPEG, told by the first bytes (not by a file name); DataLoss for anything else. A JPEG
// asked for 2 or 4 channels gets an opaque alpha channel (255) after its grey / RGB ones.
Tensor decode_image(std::span<const uint8_t> bytes, int channels = 0,
                    const std::string& name = "<memory>");
// The same from a byte string tensor (uint8[n]).
Tensor decode_png(const Tensor& bytes, int channels = 0, const std::string& name = "<memory>");
Tensor decode_jpeg(const Tensor& bytes, int channels = 0, const std::string& name = "<memory>");
Tensor decode_image(const Tensor& bytes, int channels = 0, const std::string& name = "<memory>");

bool is_png(std::span<const uint8_t> bytes);
bool is_jpeg(std::span<const uint8_t> bytes);

// Bilinear resize of image [h, w, c] (any real dtype) to float32 [height, width, c], as
// tf.image.resize(method="bilinear", antialias=False): sample (y, x) of the output reads the
// input at ((y + 0.5) * h / height - 0.5, (x + 0.5) * w / width - 0.5), clamped to the edges.
Tensor resize(const Tensor& image, int64_t height, int64_t width);

}  // namespace lockstep
