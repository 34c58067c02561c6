#include "jpeg_recode.hpp"

#include <string>

#include "common.hpp"

#ifdef TRD_HAVE_JPEG
#include <cstdlib>

#include "jpeg_err.hpp"
#endif

namespace trd {

#ifdef TRD_HAVE_JPEG
namespace {

// What the error path must release: the structs created so far and libjpeg's malloc'ed output buffer.
struct Recode {
  jpeg_detail::Err err;
  jpeg_decompress_struct in;
  jpeg_compress_struct out;
  bool have_in = false, have_out = false;
  unsigned char* buf = nullptr;
  unsigned long bytes = 0;

  void release() {
    if (have_out) jpeg_destroy_compress(&out);
    if (have_in) jpeg_destroy_decompress(&in);
    have_in = have_out = false;
    std::free(buf);  // jpeg_mem_dest's buffer is the caller's to free
    buf = nullptr;
  }
};

}  // namespace

std::vector<uint8_t> jpeg_recode_baseline(const uint8_t* data, size_t size) {
  Recode r;
  r.in.err = jpeg_detail::install(r.err);
  r.out.err = &r.err.pub;  // one error manager for both sides, as jpegtran
  if (setjmp(r.err.jump)) {
    r.release();
    throw DataErr(std::string("corrupt JPEG: ") + r.err.msg);
  }
  jpeg_create_decompress(&r.in);
  r.have_in = true;
  jpeg_create_compress(&r.out);
  r.have_out = true;
  jpeg_mem_src(&r.in, data, static_cast<unsigned long>(size));
  if (jpeg_read_header(&r.in, TRUE) != JPEG_HEADER_OK) {
    r.release();
    throw DataErr("not a JPEG image");
  }
  jvirt_barray_ptr* coefficients = jpeg_read_coefficients(&r.in);  // every scan, entropy-decoded only
  jpeg_copy_critical_parameters(&r.in, &r.out);  // quantisation tables, sampling, colour space; sequential
  r.out.optimize_coding = TRUE;
  r.out.arith_code = FALSE;
  jpeg_mem_dest(&r.out, &r.buf, &r.bytes);
  jpeg_write_coefficients(&r.out, coefficients);
  jpeg_finish_compress(&r.out);
  jpeg_finish_decompress(&r.in);
  std::vector<uint8_t> result;
  try {
    result.assign(r.buf, r.buf + r.bytes);
  } catch (...) {
    r.release();
    throw;
  }
  r.release();
  return result;
}

#else

std::vector<uint8_t> jpeg_recode_baseline(const uint8_t*, size_t) {
  throw ConfigErr("this tr-data was built without libjpeg-turbo, so it cannot re-code JPEG files");
}

#endif

}  // namespace trd
