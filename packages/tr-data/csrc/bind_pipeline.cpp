// tr.data._native.Pipeline: one sample's chain, applied, shaped and described.
#include "bind_common.hpp"
#include "bind_fields.hpp"

#include <pybind11/stl.h>

#include <cstring>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace trd::bind {

namespace {

constexpr const char* kOpSpecFields[] = {"params", "slot", "name"};

// `h` as the OpParams alternative whose class it is; false when it is none of them.
template <size_t I = 0>
bool load_op_params(const py::handle& h, OpParams& out) {
  if constexpr (I < std::variant_size_v<OpParams>) {
    using P = std::variant_alternative_t<I, OpParams>;
    if (py::isinstance<P>(h)) {
      out = h.cast<const P&>();
      return true;
    }
    return load_op_params<I + 1>(h, out);
  } else {
    return false;
  }
}

template <class P>
std::string class_name() {
  return py::str(py::type::of<P>().attr("__name__"));
}

template <size_t... I>
std::string op_params_classes(std::index_sequence<I...>) {
  std::string s;
  ((s += (I ? ", " : "") + class_name<std::variant_alternative_t<I, OpParams>>()), ...);
  return s;
}

OpSpec make_op_spec(const py::args& args, const py::kwargs& kw) {
  FieldReader r("OpSpec", "OpSpec", FieldNames(kOpSpecFields), args, kw);
  const std::string name = r.str("name");
  r.set_label(name);  // what the op's other messages start with
  OpParams params;
  if (!load_op_params(r.obj("params"), params))
    throw py::type_error(name + ": OpSpec params must be one of " +
                         op_params_classes(std::make_index_sequence<std::variant_size_v<OpParams>>()) + ", got " +
                         short_repr(r.obj("params")));
  // slot 0 is the fused stage's stream (flip at offset 0, erasing from 16): a transform's slot is its position + 1
  const int64_t slot = r.i64("slot");
  if (slot < 1 || slot > INT32_MAX)
    throw ConfigErr(name + ": slot must be in [1, " + std::to_string(INT32_MAX) + "], got " + std::to_string(slot));
  return OpSpec(std::move(params), int(slot), name);
}

}  // namespace

void bind_pipeline(py::module_& m) {
  py::class_<OpSpec>(m, "OpSpec",
                     "One transform of a chain, by keyword: params (its kind's record, e.g. ResizeParams), slot (its "
                     "Philox stream: its position in the chain + 1) and name (for messages).")
      .def(py::init(&make_op_spec))
      .def_property_readonly(
          "kind", [](const OpSpec& o) { return std::visit([](const auto& x) { return x.kind_name; }, o.params); })
      .def_property_readonly("params", [](const OpSpec& o) { return o.params; })
      .def_readonly("slot", &OpSpec::slot)
      .def_readonly("name", &OpSpec::name)
      .def("__repr__", [](const py::handle& self) { return record_repr(self, FieldNames(kOpSpecFields)); })
      .def("__eq__", [](const py::handle& a, const py::handle& b) { return record_eq(a, b, FieldNames(kOpSpecFields)); });

  py::class_<PyPipeline>(m, "Pipeline")
      .def(py::init([](const py::sequence& ops, const py::handle& fused) {
             std::vector<OpSpec> v;
             for (size_t k = 0; k < ops.size(); ++k) {
               const py::object o = ops[k];
               if (!py::isinstance<OpSpec>(o))
                 throw py::type_error("Pipeline: ops[" + std::to_string(k) + "] must be an OpSpec(params=..., slot=..., "
                                      "name=...), got " + short_repr(o));
               v.push_back(o.cast<const OpSpec&>());
             }
             if (!py::isinstance<FusedStage>(fused))
               throw py::type_error("Pipeline: fused must be a FusedStage(...), got " + short_repr(fused));
             return PyPipeline{std::make_shared<Pipeline>(std::move(v), fused_spec(fused.cast<const FusedStage&>()))};
           }),
           py::arg("ops"), py::arg("fused"))
      .def_property_readonly(
          "ops", [](const PyPipeline& self) { return self.p->ops(); }, "the chain's OpSpecs, in the order they run")
      .def("apply",
           [](const PyPipeline& self, U8Array img, uint64_t seed) {
             const ImgC in = image_view(img);
             const Shape3 os = self.p->out_shape(in.shape(), seed);
             py::array out = out_array(os, self.p->fused().dtype);
             void* dst = out.mutable_data();
             {
               py::gil_scoped_release nogil;
               Workspace ws;
               self.p->run(in, seed, ws, dst, os);
             }
             return out;
           })
      .def("apply_uint8",
           [](const PyPipeline& self, U8Array img, uint64_t seed) {
             const ImgC in = image_view(img);
             Workspace ws;
             ImgC r;
             {
               py::gil_scoped_release nogil;
               r = self.p->run_uint8(in, seed, ws);
             }
             py::array_t<uint8_t> out({py::ssize_t(r.h), py::ssize_t(r.w), py::ssize_t(r.c)});
             std::memcpy(out.mutable_data(), r.p, r.shape().bytes());
             return out;
           })
      .def("out_shape", [](const PyPipeline& self, py::object shape,
                           uint64_t seed) { return shape_tuple(self.p->out_shape(to_shape(shape), seed)); })
      .def(
          "plan_first_resample",
          [](const PyPipeline& self, py::array_t<int32_t, py::array::c_style | py::array::forcecast> shapes,
             py::array_t<uint64_t, py::array::c_style | py::array::forcecast> seeds) {
            // per sample, what decoding on the device needs of the chain (tr.data.jpeg_plan): the first
            // RandomResizedCrop's / Resize's box (top, left, height, width) in the full image and the size it
            // resizes to; the window a CenterCrop right after it keeps (y0, x0, height, width; the whole resized
            // image without one); then the fused stage's flip and erase box (y, x, height, width; height 0: none)
            // drawn for the final sample; then a ColorJitter right after them: the float32 bits its kernels compute
            // with (the brightness, contrast, saturation and hue factors, then 1 - factor for contrast and
            // saturation, each rounded from the double as color.cpp does), and its order and switches (bits 0-7:
            // the order, two bits an op; bits 8-11: which ops are on)
            if (shapes.ndim() != 2 || shapes.shape(1) != 3 || seeds.ndim() != 1 || seeds.shape(0) != shapes.shape(0))
              throw ShapeErr("plan_first_resample takes shapes (n, 3) and seeds (n,)");
            const auto& ops = self.p->ops();
            const bool center = ops.size() > 1 && ops[1].kind == OpKind::CenterCrop;
            const size_t jk = center ? 2 : 1;  // where a ColorJitter would follow
            const bool jitter = ops.size() > jk && ops[jk].kind == OpKind::ColorJitter;
            const py::ssize_t n = shapes.shape(0);
            py::array_t<int32_t> out({n, py::ssize_t(22)});
            auto sh = shapes.unchecked<2>();
            auto sd = seeds.unchecked<1>();
            auto o = out.mutable_unchecked<2>();
            for (py::ssize_t i = 0; i < n; ++i) {
              const Shape3 full{int(sh(i, 0)), int(sh(i, 1)), int(sh(i, 2))};
              int box[4], os[2];
              if (!self.p->first_resample(full, sd(i), box, os))
                throw ConfigErr("the chain does not start with a RandomResizedCrop or Resize that resamples");
              int win[4] = {0, 0, os[0], os[1]};
              if (center) {
                Stream rng(sd(i), uint64_t(ops[1].slot) << 32);
                Params p;
                const Shape3 resized{os[0], os[1], full.c};
                op_draw(ops[1], rng, resized, p);
                const Shape3 cs = op_out_shape(ops[1], p, resized);
                win[0] = int(p.y0);
                win[1] = int(p.x0);
                win[2] = cs.h;
                win[3] = cs.w;
              }
              FusedParams fp;
              fused_draw(self.p->fused(), sd(i), Shape3{win[2], win[3], full.c}, fp);
              const int v[15] = {box[0], box[1], box[2], box[3], os[0], os[1], win[0], win[1], win[2], win[3],
                                 fp.flip ? 1 : 0, fp.erase ? fp.ei : 0, fp.erase ? fp.ej : 0, fp.erase ? fp.eh : 0,
                                 fp.erase ? fp.ew : 0};
              for (int k = 0; k < 15; ++k) o(i, k) = v[k];
              int jit[7] = {0, 0, 0, 0, 0, 0, 0};
              if (jitter) {
                Stream rng(sd(i), uint64_t(ops[jk].slot) << 32);
                Params p;
                op_draw(ops[jk], rng, Shape3{win[2], win[3], full.c}, p);
                const auto& s = ops[jk].as<ColorJitterParams>();
                const double b = p.factor[kBrightness], c = p.factor[kContrast], sat = p.factor[kSaturation];
                const float f[6] = {float(b), float(c), float(sat), float(p.factor[kHue]), float(1.0 - c),
                                    float(1.0 - sat)};
                for (int k = 0; k < 6; ++k) std::memcpy(&jit[k], &f[k], 4);
                const bool on[4] = {s.brightness_on, s.contrast_on, s.saturation_on, s.hue_on};  // by JitterOp
                for (int k = 0; k < 4; ++k) {
                  jit[6] |= (p.order[size_t(k)] & 3) << (2 * k);
                  jit[6] |= (on[k] ? 1 : 0) << (8 + k);
                }
              }
              for (int k = 0; k < 7; ++k) o(i, 15 + k) = jit[k];
            }
            return out;
          },
          py::arg("shapes"), py::arg("seeds"))
      .def("describe", [](const PyPipeline& self, py::object shape, uint64_t seed) {
        py::list out;
        for (const auto& r : self.p->describe(to_shape(shape), seed)) {
          py::dict params;
          for (const auto& kv : r.values) params[py::str(kv.first)] = kv.second;
          py::dict d;
          d["name"] = r.name;
          d["applied"] = r.applied;
          d["in_shape"] = shape_tuple(r.in);
          d["out_shape"] = shape_tuple(r.out);
          d["params"] = params;
          out.append(d);
        }
        return out;
      });
}

}  // namespace trd::bind
