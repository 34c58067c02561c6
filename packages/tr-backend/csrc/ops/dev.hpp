// A device tensor as a native op's record holds it (ops/args/<family>.hpp, generated).
#pragma once

#include "ops/codes.hpp"

namespace tr::native {

// Its address (null: an optional tensor not given) and element type.
struct Dev {
  void* ptr = nullptr;
  DT dt = DT::F32;
  explicit operator bool() const { return ptr != nullptr; }
};

}  // namespace tr::native
