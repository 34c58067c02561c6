// Element sizes and names of the dtypes (DT: codes.hpp, generated from tr.core.dtype), for the factories and the
// record bindings alike (the latter are built without CUDA too).
#pragma once

#include "ops/codes.hpp"

namespace tr::native {

inline int dtype_size(DT dt) {
  switch (dt) {
    case DT::F32:
    case DT::I32:
      return 4;
    case DT::F16:
    case DT::BF16:
      return 2;
    case DT::I8:
    case DT::U8:
      return 1;
  }
  return 0;
}

inline const char* dtype_name(DT dt) {
  switch (dt) {
    case DT::F32:
      return "FP32";
    case DT::F16:
      return "FP16";
    case DT::BF16:
      return "BF16";
    case DT::I8:
      return "INT8";
    case DT::I32:
      return "INT32";
    case DT::U8:
      return "UINT8";
  }
  return "?";
}

}  // namespace tr::native
