// GaussianBlur's kernel (ops.cpp draws sigma and dispatches here).
#pragma once

#include "common.hpp"

namespace trd {

struct Workspace;  // pipeline.hpp

// out = in blurred by a kx x ky Gaussian of `sigma` (odd kx, ky <= kMaxKernel), reflect borders; out has in's shape.
void gaussian_blur(const ImgC& in, const Img& out, int kx, int ky, double sigma, Workspace& ws);

}  // namespace trd
