// Bilinear rotation of uint8 HWC images (RandomRotation): the float taps and weights of
// torch.nn.functional.grid_sample, with an AVX2 path for grey images that is bit-identical to the scalar one.
#include "rotate.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "simd.hpp"

namespace trd {

namespace {

// Bilinear sample of all channels at (sx, sy); taps outside the image read fill.
// Weights and their order follow torch.nn.functional.grid_sample (bilinear).
template <int C>
inline void sample_px(const ImgC& in, float sx, float sy, const float* fill, uint8_t* d, int Cr) {
  const int nc = C > 0 ? C : Cr;
  const float fx0 = std::floor(sx), fy0 = std::floor(sy);
  const int x0 = int(fx0), y0 = int(fy0);
  const float e = sx - fx0, f = sy - fy0;  // fractions
  const float w_nw = (1.f - e) * (1.f - f), w_ne = e * (1.f - f), w_sw = (1.f - e) * f, w_se = e * f;
  const size_t stride = size_t(in.w) * size_t(nc);
  if (x0 >= 0 && y0 >= 0 && x0 + 1 < in.w && y0 + 1 < in.h) {
    const uint8_t* p = in.p + size_t(y0) * stride + size_t(x0) * size_t(nc);
    for (int c = 0; c < nc; ++c) {
      const float v = w_nw * p[c] + w_ne * p[nc + c] + w_sw * p[stride + c] + w_se * p[stride + size_t(nc) + c];
      d[c] = uint8_t(v + 0.5f);
    }
    return;
  }
  const bool in_x0 = x0 >= 0 && x0 < in.w, in_x1 = x0 + 1 >= 0 && x0 + 1 < in.w;
  const bool in_y0 = y0 >= 0 && y0 < in.h, in_y1 = y0 + 1 >= 0 && y0 + 1 < in.h;
  for (int c = 0; c < nc; ++c) {
    const float fv = fill[c];
    const float a = (in_y0 && in_x0) ? in.p[size_t(y0) * stride + size_t(x0) * size_t(nc) + size_t(c)] : fv;
    const float b = (in_y0 && in_x1) ? in.p[size_t(y0) * stride + size_t(x0 + 1) * size_t(nc) + size_t(c)] : fv;
    const float cc = (in_y1 && in_x0) ? in.p[size_t(y0 + 1) * stride + size_t(x0) * size_t(nc) + size_t(c)] : fv;
    const float dd = (in_y1 && in_x1) ? in.p[size_t(y0 + 1) * stride + size_t(x0 + 1) * size_t(nc) + size_t(c)] : fv;
    const float v = w_nw * a + w_ne * b + w_sw * cc + w_se * dd;
    d[c] = round_u8(v);
  }
}

template <int C>
void rotate_row(const ImgC& in, uint8_t* d, int x_begin, int x_end, float ca, float sa, float cx, float bx, float by,
                const float* fill) {
  const int Cr = in.c;
  const int nc = C > 0 ? C : Cr;
  for (int x = x_begin; x < x_end; ++x) {
    const float xc = float(x) - cx;
    const float sx = ca * xc + bx;
    const float sy = sa * xc + by;
    uint8_t* dp = d + size_t(x) * size_t(nc);
    if (sx <= -1.f || sy <= -1.f || sx >= float(in.w) || sy >= float(in.h)) {
      for (int c = 0; c < nc; ++c) dp[c] = round_u8(fill[c]);
      continue;
    }
    sample_px<C>(in, sx, sy, fill, dp, Cr);
  }
}

#if TRD_HAVE_AVX2
// Eight grey pixels at a time, border pixels included; the float operations are the scalar ones
// (rotate_row<1>, sample_px<1>) in the same order, so the result is bit-identical to them (and so
// independent of the CPU). Each lane reads the 2x2 window at the clamped corner (x0c, y0c), always
// inside the image, and picks its taps from it; taps outside the image read the fill.
// Needs w, h >= 2; returns the number of pixels written (the row, or 0 when it is under 8 wide).
__attribute__((target("avx2"))) inline __m256i in_range(__m256i v, __m256i hi) {  // 0 <= v <= hi
  return _mm256_andnot_si256(_mm256_or_si256(_mm256_cmpgt_epi32(_mm256_setzero_si256(), v), _mm256_cmpgt_epi32(v, hi)),
                             _mm256_set1_epi32(-1));
}

__attribute__((target("avx2"))) inline __m256 pick(__m256i g, __m256i sh) {  // byte sh / 8 of g (0: sh > 31)
  return _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(g, sh), _mm256_set1_epi32(0xFF)));
}

__attribute__((target("avx2"))) int rotate_row_c1_avx2(const ImgC& in, uint8_t* d, int w_out, float ca, float sa,
                                                        float cx, float bx, float by, float fill) {
  const int W = in.w, H = in.h;
  const __m256 iota = _mm256_setr_ps(0.f, 1.f, 2.f, 3.f, 4.f, 5.f, 6.f, 7.f);
  const __m256 vca = _mm256_set1_ps(ca), vsa = _mm256_set1_ps(sa), vcx = _mm256_set1_ps(cx);
  const __m256 vbx = _mm256_set1_ps(bx), vby = _mm256_set1_ps(by), one = _mm256_set1_ps(1.f);
  const __m256 m1 = _mm256_set1_ps(-1.f), fW = _mm256_set1_ps(float(W)), fH = _mm256_set1_ps(float(H));
  const __m256 zero = _mm256_setzero_ps(), f255 = _mm256_set1_ps(255.f), half = _mm256_set1_ps(0.5f);
  const __m256 vfill = _mm256_set1_ps(fill);
  // round_u8(fill), as the scalar path writes for pixels wholly outside
  const __m256 fill_px = _mm256_add_ps(_mm256_min_ps(_mm256_max_ps(vfill, zero), f255), half);
  const __m256i izero = _mm256_setzero_si256(), ione = _mm256_set1_epi32(1);
  const __m256i wmax = _mm256_set1_epi32(W - 1), hmax = _mm256_set1_epi32(H - 1);
  const __m256i w2 = _mm256_set1_epi32(W - 2), h2 = _mm256_set1_epi32(H - 2);
  const __m256i vW = _mm256_set1_epi32(W), k16 = _mm256_set1_epi32(16);
  const int* base = reinterpret_cast<const int*>(in.p);
  if (w_out < 8) return 0;
  // a row whose width is not a multiple of 8 ends with an overlapping group (same values rewritten)
  for (int k = 0; k < w_out; k += 8) {
    const int x = std::min(k, w_out - 8);
    const __m256 xc = _mm256_sub_ps(_mm256_add_ps(_mm256_set1_ps(float(x)), iota), vcx);
    const __m256 sx = _mm256_add_ps(_mm256_mul_ps(vca, xc), vbx);
    const __m256 sy = _mm256_add_ps(_mm256_mul_ps(vsa, xc), vby);
    const __m256 outside = _mm256_or_ps(
        _mm256_or_ps(_mm256_cmp_ps(sx, m1, _CMP_LE_OQ), _mm256_cmp_ps(sy, m1, _CMP_LE_OQ)),
        _mm256_or_ps(_mm256_cmp_ps(sx, fW, _CMP_GE_OQ), _mm256_cmp_ps(sy, fH, _CMP_GE_OQ)));
    // wholly outside lanes may hold any coordinates: keep them finite and small
    const __m256 sxs = _mm256_blendv_ps(sx, zero, outside), sys = _mm256_blendv_ps(sy, zero, outside);
    const __m256 fx0 = _mm256_floor_ps(sxs), fy0 = _mm256_floor_ps(sys);
    const __m256i x0 = _mm256_cvttps_epi32(fx0), y0 = _mm256_cvttps_epi32(fy0);
    const __m256i x0c = _mm256_min_epi32(_mm256_max_epi32(x0, izero), w2);
    const __m256i y0c = _mm256_min_epi32(_mm256_max_epi32(y0, izero), h2);
    const __m256i idx = _mm256_add_epi32(_mm256_mullo_epi32(y0c, vW), x0c);
    // row y0c: bytes x0c..x0c+3; row y0c + 1: bytes x0c-2..x0c+1 (both inside the image)
    const __m256i g0 = _mm256_i32gather_epi32(base, idx, 1);
    const __m256i g1 = _mm256_i32gather_epi32(base, _mm256_add_epi32(idx, _mm256_sub_epi32(vW, _mm256_set1_epi32(2))), 1);
    const __m256i sa0 = _mm256_slli_epi32(_mm256_sub_epi32(x0, x0c), 3);  // column x0 in g0 (bits)
    const __m256i sb0 = _mm256_add_epi32(sa0, _mm256_set1_epi32(8));      // column x0 + 1
    const __m256i sa1 = _mm256_add_epi32(sa0, k16), sb1 = _mm256_add_epi32(sb0, k16);  // the same in g1
    const __m256 A0 = pick(g0, sa0), B0 = pick(g0, sb0), A1 = pick(g1, sa1), B1 = pick(g1, sb1);
    const __m256 top_is_g1 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(y0, y0c));  // y0 = H - 1
    const __m256 bot_is_g0 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(y0c, y0));  // y0 = -1
    __m256 a = _mm256_blendv_ps(A0, A1, top_is_g1), b = _mm256_blendv_ps(B0, B1, top_is_g1);
    __m256 c = _mm256_blendv_ps(A1, A0, bot_is_g0), dd = _mm256_blendv_ps(B1, B0, bot_is_g0);
    const __m256i x1 = _mm256_add_epi32(x0, ione), y1 = _mm256_add_epi32(y0, ione);
    const __m256 ix0 = _mm256_castsi256_ps(in_range(x0, wmax)), ix1 = _mm256_castsi256_ps(in_range(x1, wmax));
    const __m256 iy0 = _mm256_castsi256_ps(in_range(y0, hmax)), iy1 = _mm256_castsi256_ps(in_range(y1, hmax));
    a = _mm256_blendv_ps(vfill, a, _mm256_and_ps(iy0, ix0));
    b = _mm256_blendv_ps(vfill, b, _mm256_and_ps(iy0, ix1));
    c = _mm256_blendv_ps(vfill, c, _mm256_and_ps(iy1, ix0));
    dd = _mm256_blendv_ps(vfill, dd, _mm256_and_ps(iy1, ix1));
    const __m256 e = _mm256_sub_ps(sxs, fx0), f = _mm256_sub_ps(sys, fy0);
    const __m256 ie = _mm256_sub_ps(one, e), jf = _mm256_sub_ps(one, f);
    const __m256 w_nw = _mm256_mul_ps(ie, jf), w_ne = _mm256_mul_ps(e, jf);
    const __m256 w_sw = _mm256_mul_ps(ie, f), w_se = _mm256_mul_ps(e, f);
    __m256 v = _mm256_add_ps(_mm256_mul_ps(w_nw, a), _mm256_mul_ps(w_ne, b));
    v = _mm256_add_ps(v, _mm256_mul_ps(w_sw, c));
    v = _mm256_add_ps(v, _mm256_mul_ps(w_se, dd));
    // round_u8 (clamp, + 0.5, truncate); inside the image the clamp changes nothing (convex weights)
    v = _mm256_add_ps(_mm256_min_ps(_mm256_max_ps(v, zero), f255), half);
    v = _mm256_blendv_ps(v, fill_px, outside);
    const __m256i r = _mm256_cvttps_epi32(v);
    const __m128i r16 = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(d + x), _mm_packus_epi16(r16, r16));
  }
  return w_out;
}

#endif

template <int C>
void rotate_impl(const ImgC& in, const Img& out, double angle_deg, const float* fill) {
  const double th = angle_deg * M_PI / 180.0;
  const float ca = float(std::cos(th)), sa = float(std::sin(th));
  const float cx = 0.5f * float(in.w - 1), cy = 0.5f * float(in.h - 1);
  for (int y = 0; y < out.h; ++y) {
    const float yc = float(y) - cy;
    // source = R(theta) * (x - cx, y - cy) + centre; linear in x.
    const float bx = -sa * yc + cx, by = ca * yc + cy;
    uint8_t* d = out.row(y);
    int x = 0;
#if TRD_HAVE_AVX2
    if (C == 1 && cpu_avx2() && in.w >= 2 && in.h >= 2) x = rotate_row_c1_avx2(in, d, out.w, ca, sa, cx, bx, by, fill[0]);
#endif
    rotate_row<C>(in, d, x, out.w, ca, sa, cx, bx, by, fill);
  }
}

}  // namespace

void rotate_bilinear(const ImgC& in, const Img& out, double angle_deg, const float* fill) {
  switch (in.c) {
    case 1:
      return rotate_impl<1>(in, out, angle_deg, fill);
    case 3:
      return rotate_impl<3>(in, out, angle_deg, fill);
    case 4:
      return rotate_impl<4>(in, out, angle_deg, fill);
    default:
      return rotate_impl<0>(in, out, angle_deg, fill);
  }
}


}  // namespace trd
