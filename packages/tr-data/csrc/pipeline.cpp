#include "pipeline.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace trd {

Pipeline::Pipeline(std::vector<OpSpec> ops, FusedSpec fused) : ops_(std::move(ops)), fused_(std::move(fused)) {
  for (const auto& op : ops_) op_check(op);
  fused_.build();
}

bool Pipeline::first_resample(const Shape3& full, uint64_t sample_seed, int box[4], int out[2]) const {
  if (ops_.empty() || (ops_[0].kind != OpKind::RandomResizedCrop && ops_[0].kind != OpKind::Resize)) return false;
  const OpSpec& op = ops_[0];
  Stream rng(sample_seed, uint64_t(op.slot) << 32);
  Params p;
  op_draw(op, rng, full, p);
  if (!p.apply) return false;
  box[0] = int(p.box.top);
  box[1] = int(p.box.left);
  box[2] = int(p.box.height);
  box[3] = int(p.box.width);
  const Shape3 os = op_out_shape(op, p, full);
  out[0] = os.h;
  out[1] = os.w;
  return true;
}

ImgC Pipeline::run_ops(const ImgC& src, uint64_t sample_seed, Workspace& ws, const Roi* roi) const {
  if (src.h < 1 || src.w < 1 || src.c < 1 || src.c > kMaxChannels || src.h > kMaxSide || src.w > kMaxSide)
    throw DataErr("cannot transform an image of shape " + src.shape().str() + " (need 1 <= h, w <= " +
                  std::to_string(kMaxSide) + " and 1..64 channels)");
  ImgC cur = src;
  int which = -1;  // -1: cur is the (read-only) source
  for (const auto& op : ops_) {
    Stream rng(sample_seed, uint64_t(op.slot) << 32);
    Params p;
    if (roi != nullptr && &op == &ops_[0]) {  // drawn for the full image, applied to its window
      op_draw(op, rng, roi->full, p);
      Box& b = p.box;  // the resampled box (the first op is a RandomResizedCrop or Resize)
      if (roi->scale != 8) {
        scale_span(b.top, b.height, roi->scale);
        scale_span(b.left, b.width, roi->scale);
      }
      b.top -= roi->y0;
      b.left -= roi->x0;
      if (b.top < 0 || b.left < 0 || b.top + b.height > cur.h || b.left + b.width > cur.w)
        throw std::logic_error("decoded window does not hold " + op.name + "'s crop");
    } else {
      op_draw(op, rng, cur.shape(), p);
    }
    if (!p.apply) continue;
    const Shape3 os = op_out_shape(op, p, cur.shape());  // checked against the limits
    const int nb = which == 0 ? 1 : 0;
    auto& buf = ws.img[nb];
    if (buf.size() < os.bytes()) buf.resize(os.bytes());
    const Img out{buf.data(), os.h, os.w, os.c};
    op_apply(op, p, cur, out, ws);
    cur = out;
    which = nb;
  }
  return cur;
}

Shape3 Pipeline::uint8_shape(const Shape3& in, uint64_t sample_seed) const {
  Shape3 cur = in;
  for (const auto& op : ops_) {
    Stream rng(sample_seed, uint64_t(op.slot) << 32);
    Params p;
    op_draw(op, rng, cur, p);
    cur = op_out_shape(op, p, cur);
  }
  return cur;
}

Shape3 Pipeline::out_shape(const Shape3& in, uint64_t sample_seed) const {
  Shape3 s = uint8_shape(in, sample_seed);
  s.c = fused_.out_channels(s.c);
  return s;
}

void Pipeline::run(const ImgC& src, uint64_t sample_seed, Workspace& ws, void* dst, const Shape3& expect,
                   const Roi* roi) const {
  const ImgC img = run_ops(src, sample_seed, ws, roi);
  const Shape3 os{img.h, img.w, fused_.out_channels(img.c)};
  if (os != expect)
    throw ShapeErr("the transforms turn a " + (roi ? roi->full : src.shape()).str() + " image into a " + os.str() +
                   " sample, but the batch buffer holds " + expect.str() + " samples");
  FusedParams fp;
  fused_draw(fused_, sample_seed, img.shape(), fp);
  fused_write(fused_, fp, img, dst, ws.fused);
}

ImgC Pipeline::run_uint8(const ImgC& src, uint64_t sample_seed, Workspace& ws) const {
  ImgC img = run_ops(src, sample_seed, ws);
  const size_t C_ = size_t(img.c);
  if (fused_.mean.size() != 1 && fused_.mean.size() != C_)
    throw ShapeErr("normalization has " + std::to_string(fused_.mean.size()) + " channels but the image has " +
                   std::to_string(C_) + " (shape " + img.shape().str() + ")");
  if (fused_.erase_value.size() != 1 && fused_.erase_value.size() != C_)
    throw ShapeErr("RandomErasing has " + std::to_string(fused_.erase_value.size()) + " values but the image has " +
                   std::to_string(C_) + " channels");
  FusedParams fp;
  fused_draw(fused_, sample_seed, img.shape(), fp);
  if (!fp.flip && !fp.erase) return img;
  // Copy into the buffer img does not live in (it may be the source itself).
  const bool in0 = !ws.img[0].empty() && img.p == ws.img[0].data();
  auto& buf = ws.img[in0 ? 1 : 0];
  const size_t n = img.shape().bytes();
  if (buf.size() < n) buf.resize(n);
  const Img out{buf.data(), img.h, img.w, img.c};
  const size_t C = size_t(img.c);
  for (int y = 0; y < img.h; ++y) {
    const uint8_t* s = img.row(y);
    uint8_t* d = out.row(y);
    if (fp.flip) {
      for (int x = 0; x < img.w; ++x) std::memcpy(d + size_t(x) * C, s + size_t(img.w - 1 - x) * C, C);
    } else {
      std::memcpy(d, s, size_t(img.w) * C);
    }
  }
  if (fp.erase) {
    // The erase value lives in normalised space; in uint8 space it is the pixel that normalises to it.
    uint8_t v[kMaxChannels];
    for (size_t c = 0; c < C; ++c) {
      const size_t k = fused_.mean.size() == 1 ? 0 : c;
      const double ev = fused_.erase_value.size() == 1 ? fused_.erase_value[0] : fused_.erase_value[c];
      v[c] = clip_u8(int(std::lround((ev * fused_.std[k] + fused_.mean[k]) * 255.0)));
    }
    for (int y = fp.ei; y < fp.ei + fp.eh; ++y)
      for (int x = fp.ej; x < fp.ej + fp.ew; ++x) std::memcpy(out.row(y) + size_t(x) * C, v, C);
  }
  return out;
}

std::vector<OpRecord> Pipeline::describe(const Shape3& in, uint64_t sample_seed) const {
  std::vector<OpRecord> recs;
  Shape3 cur = in;
  for (const auto& op : ops_) {
    Stream rng(sample_seed, uint64_t(op.slot) << 32);
    Params p;
    op_draw(op, rng, cur, p);
    OpRecord r;
    r.name = op.name;
    r.applied = p.apply;
    r.in = cur;
    cur = op_out_shape(op, p, cur);
    r.out = cur;
    r.values = op_describe(op, p);
    recs.push_back(std::move(r));
  }
  FusedParams fp;
  fused_draw(fused_, sample_seed, cur, fp);
  if (fused_.has_flip) {
    OpRecord r;
    r.name = "RandomHorizontalFlip";
    r.applied = fp.flip;
    r.in = r.out = cur;
    recs.push_back(r);
  }
  if (fused_.has_erase) {
    OpRecord r;
    r.name = "RandomErasing";
    r.applied = fp.erase;
    r.in = r.out = cur;
    r.values = {{"top", double(fp.ei)}, {"left", double(fp.ej)}, {"height", double(fp.eh)}, {"width", double(fp.ew)}};
    recs.push_back(r);
  }
  return recs;
}

}  // namespace trd
