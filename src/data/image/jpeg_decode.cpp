// decode_jpeg through libjpeg(-turbo). Its default error_exit calls exit(); ours longjmps back to
// a function holding only plain C locals (no destructor is skipped) and the error becomes DataLoss.
#include <csetjmp>
#include <cstddef>
#include <cstdio>
#include <cstring>

// jpeglib.h uses size_t and FILE without including their headers.
#include <jpeglib.h>

#include "lockstep/core/check.h"
#include "lockstep/data/image.h"

namespace lockstep {
namespace {

struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void on_error_exit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Warnings (corrupt data, a premature end that libjpeg pads with grey) are kept, not printed.
void on_emit_message(j_common_ptr cinfo, int level) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  if (level < 0) {
    if (err->mgr.num_warnings == 0) (*cinfo->err->format_message)(cinfo, err->message);
    ++err->mgr.num_warnings;
  }
}

struct JpegHeader {
  JDIMENSION width, height;
  int channels;
};

bool read_header(jpeg_decompress_struct* cinfo, JpegError* err, const uint8_t* data, size_t size,
                 int channels, JpegHeader* out) {
  if (setjmp(err->jump)) return false;
  jpeg_create_decompress(cinfo);
  jpeg_mem_src(cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(cinfo, TRUE);
  if (cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK) {
    std::snprintf(err->message, sizeof err->message, "CMYK JPEGs are not supported");
    return false;
  }
  if (channels == 1) cinfo->out_color_space = JCS_GRAYSCALE;
  if (channels == 3) cinfo->out_color_space = JCS_RGB;
  jpeg_calc_output_dimensions(cinfo);
  out->width = cinfo->output_width;
  out->height = cinfo->output_height;
  out->channels = cinfo->out_color_components;
  return true;
}

bool read_pixels(jpeg_decompress_struct* cinfo, JpegError* err, uint8_t* dst, size_t rowbytes) {
  if (setjmp(err->jump)) return false;
  jpeg_start_decompress(cinfo);
  while (cinfo->output_scanline < cinfo->output_height) {
    JSAMPROW row = dst + static_cast<size_t>(cinfo->output_scanline) * rowbytes;
    jpeg_read_scanlines(cinfo, &row, 1);
  }
  jpeg_finish_decompress(cinfo);
  return true;
}

struct JpegReader {
  jpeg_decompress_struct cinfo{};
  JpegError err{};
  ~JpegReader() { jpeg_destroy_decompress(&cinfo); }
};

}  // namespace

bool is_jpeg(std::span<const uint8_t> bytes) {
  return bytes.size() >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF;
}

Tensor decode_jpeg(std::span<const uint8_t> bytes, int channels, const std::string& name) {
  LOCKSTEP_CHECK(channels == 0 || channels == 1 || channels == 3,
                 "decode_jpeg: expected channels 0, 1 or 3. Received ", channels, ".");
  LOCKSTEP_CHECK_AS(DataLoss, is_jpeg(bytes), "decode_jpeg: '", name,
                    "' is not a JPEG file (no FF D8 FF start).");
  JpegReader r;
  r.cinfo.err = jpeg_std_error(&r.err.mgr);
  r.err.mgr.error_exit = on_error_exit;
  r.err.mgr.emit_message = on_emit_message;
  JpegHeader h{};
  LOCKSTEP_CHECK_AS(DataLoss,
                    read_header(&r.cinfo, &r.err, bytes.data(), bytes.size(), channels, &h),
                    "decode_jpeg: '", name, "': ", r.err.message, ".");
  LOCKSTEP_CHECK_AS(DataLoss,
                    h.width <= kMaxImageDim && h.height <= kMaxImageDim &&
                        int64_t{h.width} * h.height <= kMaxImagePixels,
                    "decode_jpeg: '", name, "' is ", h.width, "x", h.height,
                    ", above the limit of ", kMaxImageDim, " per side and ", kMaxImagePixels,
                    " pixels.");
  Tensor out({int64_t{h.height}, int64_t{h.width}, h.channels}, DType::uint8);
  size_t rowbytes = size_t{h.width} * static_cast<size_t>(h.channels);
  LOCKSTEP_CHECK_AS(DataLoss, read_pixels(&r.cinfo, &r.err, out.data<uint8_t>(), rowbytes),
                    "decode_jpeg: '", name, "': ", r.err.message, ".");
  LOCKSTEP_CHECK_AS(DataLoss, r.err.mgr.num_warnings == 0, "decode_jpeg: '", name,
                    "' is corrupt or truncated: ", r.err.message, ".");
  return out;
}

}  // namespace lockstep
