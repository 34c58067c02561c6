#include "jpeg.hpp"

#include <stdexcept>
#include <string>

#ifdef TRD_HAVE_JPEG
#include <algorithm>
#include <atomic>
#include <string>

#include "jpeg_err.hpp"
#endif

namespace trd {

#ifdef TRD_HAVE_JPEG
namespace {

using jpeg_detail::Err;

// Runs fn(cinfo) with the source set up; DataErr with libjpeg's message when it fails. Returns fn's value.
template <class Fn>
auto with_decoder(const uint8_t* data, size_t size, bool keep_gray, Fn&& fn)
    -> decltype(fn(std::declval<jpeg_decompress_struct&>())) {
  jpeg_decompress_struct cinfo;
  Err err;
  cinfo.err = jpeg_detail::install(err);
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    throw DataErr(std::string("corrupt JPEG: ") + err.msg);
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  if (jpeg_read_header(&cinfo, TRUE) != JPEG_HEADER_OK) {
    jpeg_destroy_decompress(&cinfo);
    throw DataErr("not a JPEG image");
  }
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
    jpeg_destroy_decompress(&cinfo);
    throw DataErr("CMYK JPEG not supported");
  }
  cinfo.out_color_space = cinfo.num_components == 1 && keep_gray ? JCS_GRAYSCALE : JCS_RGB;
  auto result = fn(cinfo);
  jpeg_destroy_decompress(&cinfo);
  return result;
}

}  // namespace

bool jpeg_available() { return true; }

namespace {
// Reads up to `rows` output rows into base (row r at base + r * stride), several per call: libjpeg-turbo
// then colour-converts a whole row group at once instead of returning to us after every row. Returns the
// rows read (fewer when the data ends early; no C++ throw here, between setjmp and the decoder's destroy).
int read_rows(jpeg_decompress_struct& c, uint8_t* base, size_t stride, int rows) {
  constexpr int kBatch = 16;  // >= rec_outbuf_height (at most 4 in libjpeg-turbo) times a row group
  JSAMPROW ptrs[kBatch];
  int r = 0;
  while (r < rows) {
    const int n = std::min(kBatch, rows - r);
    for (int i = 0; i < n; ++i) ptrs[i] = base + size_t(r + i) * stride;
    const JDIMENSION got = jpeg_read_scanlines(&c, ptrs, JDIMENSION(n));
    if (got == 0) break;
    r += int(got);
  }
  return r;
}
}  // namespace

namespace {
void check_scale(int scale) {
  if (scale < 1 || scale > 8) throw ConfigErr("JPEG DCT scale must be 1..8 (eighths), got " + std::to_string(scale));
}
}  // namespace

Shape3 jpeg_shape(const uint8_t* data, size_t size, bool keep_gray) {
  return with_decoder(data, size, keep_gray, [&](jpeg_decompress_struct& c) {
    return Shape3{int(c.image_height), int(c.image_width), c.num_components == 1 && keep_gray ? 1 : 3};
  });
}

bool jpeg_needs_baseline(const uint8_t* data, size_t size) {
  return with_decoder(data, size, false, [](jpeg_decompress_struct& c) { return c.progressive_mode || c.arith_code; });
}

ImgC decode_jpeg(const uint8_t* data, size_t size, std::vector<uint8_t>& out, bool keep_gray, int scale,
                 bool interpolate_chroma) {
  check_scale(scale);
  // the buffer is sized before the decoder starts: no allocation between setjmp and a longjmp
  const Shape3 full = jpeg_shape(data, size, keep_gray);
  checked_shape("a JPEG", full.h, full.w, full.c);
  const Shape3 s = jpeg_scaled_shape(full, scale);
  out.resize(s.bytes());
  uint8_t* base = out.data();
  with_decoder(data, size, keep_gray, [&](jpeg_decompress_struct& c) {
    c.dct_method = JDCT_ISLOW;  // the accurate integer IDCT (Pillow's default too)
    c.do_fancy_upsampling = interpolate_chroma ? TRUE : FALSE;
    c.scale_num = unsigned(scale);
    c.scale_denom = 8;
    jpeg_start_decompress(&c);
    const size_t stride = size_t(c.output_width) * size_t(c.output_components);
    read_rows(c, base, stride, int(c.output_height));
    jpeg_finish_decompress(&c);
    return 0;
  });
  return ImgC{base, s.h, s.w, s.c};
}

ImgC decode_jpeg_window(const uint8_t* data, size_t size, const Shape3& full, int y, int x, int h, int w,
                        std::vector<uint8_t>& out, int& oy, int& ox, int scale, bool interpolate_chroma) {
  check_scale(scale);
  constexpr int kMargin = 16;  // beyond the upsampling context of any chroma subsampling
  const int y0 = std::max(0, y - kMargin), y1 = std::min(full.h, y + h + kMargin);
  const int x0 = std::max(0, x - kMargin), x1 = std::min(full.w, x + w + kMargin);
  if (y0 >= y1 || x0 >= x1) throw DataErr("the crop window lies outside the JPEG image");
  // the widest window libjpeg may return: [x0 rounded down to an iMCU, x1 rounded up]
  out.resize(size_t(y1 - y0) * size_t(full.w) * 3);
  uint8_t* base = out.data();
  int got_x = 0, got_w = 0;
  const int rows = with_decoder(data, size, false, [&](jpeg_decompress_struct& c) {
    c.dct_method = JDCT_ISLOW;
    c.do_fancy_upsampling = interpolate_chroma ? TRUE : FALSE;
    c.scale_num = unsigned(scale);
    c.scale_denom = 8;
    jpeg_start_decompress(&c);
    if (int(c.output_height) != full.h || int(c.output_width) != full.w) return -1;  // `full` is not this scale's
    JDIMENSION xoff = JDIMENSION(x0), width = JDIMENSION(x1 - x0);
    jpeg_crop_scanline(&c, &xoff, &width);
    got_x = int(xoff);
    got_w = int(width);
    if (y0 > 0) jpeg_skip_scanlines(&c, JDIMENSION(y0));
    const int r = read_rows(c, base, size_t(width) * 3, y1 - y0);
    if (r == y1 - y0 && y1 == full.h) {
      jpeg_finish_decompress(&c);  // to the end-of-image marker: damage after the last row is found too
    } else {
      jpeg_abort_decompress(&c);  // the rows below the window are not decoded (nor checked)
    }
    return r;
  });
  if (rows < 0) throw std::logic_error("decode_jpeg_window: `full` is not the image's size at this scale");
  if (rows != y1 - y0) throw DataErr("corrupt JPEG: it ended before row " + std::to_string(y0 + rows));
  oy = y0;
  ox = got_x;
  return ImgC{base, y1 - y0, got_w, 3};
}

namespace {
std::atomic<bool> g_window_decode{true};
}

void set_window_decode(bool on) { g_window_decode.store(on); }
bool window_decode() { return g_window_decode.load(); }

#else

bool jpeg_available() { return false; }
void set_window_decode(bool) {}
bool window_decode() { return false; }
ImgC decode_jpeg_window(const uint8_t*, size_t, const Shape3&, int, int, int, int, std::vector<uint8_t>&, int&,
                        int&, int, bool) {
  throw ConfigErr("this tr-data was built without libjpeg-turbo");
}

[[noreturn]] static void no_jpeg() {
  throw ConfigErr("this tr-data was built without libjpeg-turbo, so it cannot decode JPEG samples: install its "
                  "development files (Debian/Ubuntu: apt-get install libjpeg62-turbo-dev or libturbojpeg0-dev) and "
                  "reinstall tr-data from source");
}

Shape3 jpeg_shape(const uint8_t*, size_t, bool) { no_jpeg(); }
bool jpeg_needs_baseline(const uint8_t*, size_t) { no_jpeg(); }
ImgC decode_jpeg(const uint8_t*, size_t, std::vector<uint8_t>&, bool, int, bool) { no_jpeg(); }

#endif

Shape3 jpeg_scaled_shape(const Shape3& full, int scale) {
  return Shape3{int((long long)full.h * scale / 8 + ((long long)full.h * scale % 8 != 0)),
                int((long long)full.w * scale / 8 + ((long long)full.w * scale % 8 != 0)), full.c};
}

int jpeg_scale_for(int h, int w, int oh, int ow) {
  // Only 1/8, 1/4 and 1/2: libjpeg-turbo has SIMD IDCTs for those (and the 8/8 one); its 3/8, 5/8, 6/8 and 7/8
  // IDCTs are plain C and made a 300-500 px RandomResizedCrop(224) decode 10 % slower than the full size.
  for (int m : {1, 2, 4})
    if ((long long)h * m >= 8LL * oh && (long long)w * m >= 8LL * ow) return m;
  return 8;
}

}  // namespace trd
