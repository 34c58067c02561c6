// libjpeg's error manager for tr-data's decoder and recoder (internal): errors and corrupt-data warnings
// longjmp back to the calling frame, which holds nothing that needs a destructor between setjmp and the jump.
#pragma once

#ifdef TRD_HAVE_JPEG
#include <csetjmp>
#include <cstdio>

#include <jpeglib.h>

namespace trd::jpeg_detail {

struct Err {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char msg[JMSG_LENGTH_MAX];
};

inline void on_error(j_common_ptr cinfo) {
  Err* e = reinterpret_cast<Err*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->msg);
  std::longjmp(e->jump, 1);
}

inline void on_message(j_common_ptr cinfo, int level) {
  if (level < 0) on_error(cinfo);  // a warning (corrupt data): an error here
}

// ``err`` set up with the handlers above, for a (de)compress struct's err field.
inline jpeg_error_mgr* install(Err& err) {
  jpeg_error_mgr* mgr = jpeg_std_error(&err.pub);
  err.pub.error_exit = on_error;
  err.pub.emit_message = on_message;
  err.msg[0] = 0;
  return mgr;
}

}  // namespace trd::jpeg_detail
#endif
