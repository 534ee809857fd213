// decode_png through libpng. libpng reports errors by longjmp; the functions that call it with a
// jump buffer set hold only plain C locals, so no destructor is ever skipped.
#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>

#include "lockstep/core/check.h"
#include "lockstep/data/image.h"

namespace lockstep {
namespace {

struct PngSource {
  const uint8_t* data;
  size_t size;
  size_t pos;
  char message[256];
};

void on_error(png_structp png, png_const_charp msg) {
  auto* src = static_cast<PngSource*>(png_get_error_ptr(png));
  std::snprintf(src->message, sizeof src->message, "%s", msg);
  png_longjmp(png, 1);
}
void on_warning(png_structp, png_const_charp) {}

void on_read(png_structp png, png_bytep out, png_size_t n) {
  auto* src = static_cast<PngSource*>(png_get_io_ptr(png));
  if (n > src->size - src->pos) png_error(png, "the file ends inside the image (truncated)");
  std::memcpy(out, src->data + src->pos, n);
  src->pos += n;
}

struct PngInfo {
  png_uint_32 width, height;
  int channels;
  size_t rowbytes;
  int passes;
};

// Reads the header and sets the transformations that give 8-bit samples with `channels`.
bool read_header(png_structp png, png_infop info, int channels, PngInfo* out) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_info(png, info);
  int color = png_get_color_type(png, info);
  if (png_get_bit_depth(png, info) == 16) png_set_strip_16(png);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && png_get_bit_depth(png, info) < 8) {
    png_set_expand_gray_1_2_4_to_8(png);
  }
  bool has_trns = png_get_valid(png, info, PNG_INFO_tRNS) != 0;
  if (has_trns) png_set_tRNS_to_alpha(png);
  bool colour = (color & PNG_COLOR_MASK_COLOR) != 0;
  bool alpha = (color & PNG_COLOR_MASK_ALPHA) != 0 || has_trns;
  if (channels == 1 || channels == 2) {
    if (colour) png_set_rgb_to_gray(png, 1, 0.299, 0.587);
    if (channels == 1 && alpha) png_set_strip_alpha(png);
    if (channels == 2 && !alpha) png_set_add_alpha(png, 0xFF, PNG_FILLER_AFTER);
  } else if (channels == 3 || channels == 4) {
    if (!colour) png_set_gray_to_rgb(png);
    if (channels == 3 && alpha) png_set_strip_alpha(png);
    if (channels == 4 && !alpha) png_set_add_alpha(png, 0xFF, PNG_FILLER_AFTER);
  }
  out->passes = png_set_interlace_handling(png);
  png_read_update_info(png, info);
  out->width = png_get_image_width(png, info);
  out->height = png_get_image_height(png, info);
  out->channels = png_get_channels(png, info);
  out->rowbytes = png_get_rowbytes(png, info);
  return true;
}

bool read_rows(png_structp png, uint8_t* dst, const PngInfo* info) {
  if (setjmp(png_jmpbuf(png))) return false;
  for (int pass = 0; pass < info->passes; ++pass) {
    for (png_uint_32 y = 0; y < info->height; ++y) {
      png_read_row(png, dst + static_cast<size_t>(y) * info->rowbytes, nullptr);
    }
  }
  return true;
}

struct PngReader {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~PngReader() { png_destroy_read_struct(&png, info ? &info : nullptr, nullptr); }
};

}  // namespace

bool is_png(std::span<const uint8_t> bytes) {
  return bytes.size() >= 8 && png_sig_cmp(bytes.data(), 0, 8) == 0;
}

Tensor decode_png(std::span<const uint8_t> bytes, int channels, const std::string& name) {
  LOCKSTEP_CHECK(channels == 0 || channels == 1 || channels == 2 || channels == 3 || channels == 4,
                 "decode_png: expected channels 0, 1, 2, 3 or 4. Received ", channels, ".");
  LOCKSTEP_CHECK_AS(DataLoss, is_png(bytes), "decode_png: '", name,
                    "' is not a PNG file (no PNG signature).");
  // IHDR must come first (PNG spec): check its dimensions before libpng reads further, so that a
  // hostile header is refused with the sizes it asked for.
  if (bytes.size() >= 24 && std::memcmp(bytes.data() + 12, "IHDR", 4) == 0) {
    auto be32 = [&](size_t at) {
      return uint32_t{bytes[at]} << 24 | uint32_t{bytes[at + 1]} << 16 |
             uint32_t{bytes[at + 2]} << 8 | bytes[at + 3];
    };
    int64_t w = be32(16), h = be32(20);
    LOCKSTEP_CHECK_AS(DataLoss, w <= kMaxImageDim && h <= kMaxImageDim && w * h <= kMaxImagePixels,
                      "decode_png: '", name, "' is ", w, "x", h, ", above the limit of ",
                      kMaxImageDim, " per side and ", kMaxImagePixels, " pixels.");
  }
  PngSource src{bytes.data(), bytes.size(), 0, {0}};
  PngReader r;
  r.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, on_error, on_warning);
  LOCKSTEP_CHECK_AS(Internal, r.png != nullptr, "decode_png: png_create_read_struct failed.");
  r.info = png_create_info_struct(r.png);
  LOCKSTEP_CHECK_AS(Internal, r.info != nullptr, "decode_png: png_create_info_struct failed.");
  png_set_read_fn(r.png, &src, on_read);
  // libpng's own limits, behind the check above and the one after the header.
  png_set_user_limits(r.png, kMaxImageDim, kMaxImageDim);
  png_set_chunk_malloc_max(r.png, 64 << 20);
  PngInfo info{};
  LOCKSTEP_CHECK_AS(DataLoss, read_header(r.png, r.info, channels, &info), "decode_png: '", name,
                    "': ", src.message, ".");
  LOCKSTEP_CHECK_AS(DataLoss,
                    info.width <= kMaxImageDim && info.height <= kMaxImageDim &&
                        int64_t{info.width} * info.height <= kMaxImagePixels,
                    "decode_png: '", name, "' is ", info.width, "x", info.height,
                    ", above the limit of ", kMaxImageDim, " per side and ", kMaxImagePixels,
                    " pixels.");
  LOCKSTEP_CHECK_AS(Internal,
                    info.rowbytes == size_t{info.width} * static_cast<size_t>(info.channels),
                    "decode_png: unexpected row size for '", name, "'.");
  // Deflate expands at most 1032:1, and libpng's transformations at most 32x (1-bit palette to
  // RGBA): a header asking for more than that could only be followed by a truncated file, so it is
  // refused before allocating (a 100-byte file cannot claim a gigabyte).
  const double most = (static_cast<double>(bytes.size()) + 1024.0) * 1032.0 * 32.0;
  LOCKSTEP_CHECK_AS(DataLoss, static_cast<double>(info.rowbytes) * info.height <= most,
                    "decode_png: '", name, "' claims ", info.width, "x", info.height,
                    " pixels, more than its ", bytes.size(), " bytes can hold (truncated).");
  Tensor out({int64_t{info.height}, int64_t{info.width}, info.channels}, DType::uint8);
  LOCKSTEP_CHECK_AS(DataLoss, read_rows(r.png, out.data<uint8_t>(), &info), "decode_png: '", name,
                    "': ", src.message, ".");
  return out;
}

}  // namespace lockstep
