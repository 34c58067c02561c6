// tr.data._native.EpochJob: one epoch's description for Engine.start, built by keyword (FieldReader) and checked
// when it is made; the arrays it points into are kept alive with it.
#include "bind_common.hpp"
#include "bind_fields.hpp"

#include <pybind11/stl.h>

#include <utility>
#include <vector>

namespace trd::bind {

namespace {

constexpr const char* kJobFields[] = {
    "pipeline", "data", "order", "stations", "per_rank", "num_batches", "last_size", "seed_prefix", "out_shape",
    "uniform_shape", "offsets", "shapes", "sizes", "labels", "cache", "cache_mode", "sdmp", "sdmp_filled",
    "sdmp_prefix", "sdmp_mode", "sdmp_slot", "dct_scaling"};
// absent means None (or 0 / False / no slots): the source's other layouts, no CPVS, no SDMP, no DCT scaling
constexpr const char* kJobOptional[] = {"uniform_shape", "offsets", "shapes", "sizes", "labels", "cache",
                                        "cache_mode", "sdmp", "sdmp_filled", "sdmp_prefix", "sdmp_mode",
                                        "sdmp_slot", "dct_scaling"};

using I64Array = py::array_t<long long, py::array::c_style>;
using I32Array = py::array_t<int32_t, py::array::c_style>;

int to_int(const FieldReader& r, const char* name) {
  const int64_t v = r.i64(name);
  if (v < INT32_MIN || v > INT32_MAX) r.bad_number(name, "an int32");
  return int(v);
}

// The source: one uniform (n, h, w, c) block, ragged images (offsets, shapes), or encoded ones (offsets, sizes).
void read_source(const FieldReader& r, const py::array& data, long long n, JobSpec& j, py::list& keep) {
  j.src.base = static_cast<const uint8_t*>(data.data());
  j.src.n = n;
  if (r.given("sizes")) {  // encoded samples: bytes at offsets[i], sizes[i] long, decoded per sample
    if (!r.given("offsets")) throw ConfigErr("EpochJob: encoded samples (sizes) need their offsets");
    auto off = r.obj("offsets").cast<I64Array>();
    auto siz = r.obj("sizes").cast<I64Array>();
    if (off.size() != n || siz.size() != n) throw ShapeErr("encoded sources need one offset and one size per sample");
    for (long long i = 0; i < n; ++i)
      if (off.data()[i] < 0 || siz.data()[i] < 0 || size_t(off.data()[i] + siz.data()[i]) > size_t(data.nbytes()))
        throw ShapeErr("encoded sample " + std::to_string(i) + " lies outside the data buffer");
    j.src.offsets = off.data();
    j.src.sizes = siz.data();
    keep.append(off);
    keep.append(siz);
  } else if (r.given("offsets")) {
    if (!r.given("shapes")) throw ConfigErr("EpochJob: ragged samples (offsets) need their shapes");
    auto off = r.obj("offsets").cast<I64Array>();
    auto shp = r.obj("shapes").cast<I32Array>();
    if (off.size() != n || shp.size() != 3 * n)
      throw ShapeErr("ragged sources need one offset and one (h, w, c) per sample");
    j.src.offsets = off.data();
    j.src.shapes = shp.data();
    keep.append(off);
    keep.append(shp);
  } else {
    if (!r.given("uniform_shape"))
      throw ConfigErr("EpochJob: a source without offsets is one (n, h, w, c) block and needs uniform_shape");
    j.src.shape = to_shape(r.obj("uniform_shape"));
    if (size_t(data.nbytes()) < size_t(n) * j.src.shape.bytes())
      throw ShapeErr("sample data is smaller than n * h * w * c");
  }
  if (r.given("labels")) {
    auto lab = r.obj("labels").cast<I32Array>();
    if (lab.size() != n) throw ShapeErr("need one label per sample");
    j.src.labels = lab.data();
    keep.append(lab);
  }
}

// CPVS and SDMP buffers.
void read_caches(const FieldReader& r, JobSpec& j, py::list& keep) {
  const size_t n = size_t(j.src.n);
  const int cache_mode = r.given("cache_mode") ? to_int(r, "cache_mode") : 0;
  if (cache_mode < 0 || cache_mode > 2)
    throw ConfigErr("EpochJob: cache_mode must be 0 (off), 1 (fill) or 2 (replay), got " + std::to_string(cache_mode));
  if (r.given("cache")) {
    j.cache = writable(r.obj("cache").cast<py::buffer>(), n * j.sample_bytes, "CPVS cache");
    keep.append(r.obj("cache"));
    j.cache_mode = cache_mode;
  } else if (cache_mode != 0) {
    throw ConfigErr("EpochJob: cache_mode " + std::to_string(cache_mode) + " needs a cache");
  }
  const int mode = r.given("sdmp_mode") ? to_int(r, "sdmp_mode") : 0;
  if (mode == 0) return;
  std::vector<uint64_t> prefix = r.given("sdmp_prefix") ? r.u64s("sdmp_prefix") : std::vector<uint64_t>{};
  const int slot = r.given("sdmp_slot") ? to_int(r, "sdmp_slot") : 0;
  const size_t slots = mode == 1 ? prefix.size() : size_t(slot) + 1;
  if (mode < 0 || mode > 2 || slots == 0 || slot < 0)
    throw ConfigErr("SDMP mode " + std::to_string(mode) + " with " + std::to_string(slots) + " slots is not valid");
  if (!r.given("sdmp") || !r.given("sdmp_filled")) throw ConfigErr("EpochJob: SDMP needs sdmp and sdmp_filled");
  j.sdmp = writable(r.obj("sdmp").cast<py::buffer>(), slots * n * j.sample_bytes, "SDMP cache");
  j.sdmp_filled = writable(r.obj("sdmp_filled").cast<py::buffer>(), slots * n, "SDMP flags");
  keep.append(r.obj("sdmp"));
  keep.append(r.obj("sdmp_filled"));
  j.sdmp_prefix = std::move(prefix);
  j.sdmp_mode = mode;
  j.sdmp_slot = slot;
}

PyEpochJob make_job(const py::args& args, const py::kwargs& kw) {
  const FieldReader r("EpochJob", "EpochJob", FieldNames(kJobFields), args, kw, FieldNames(kJobOptional));
  PyEpochJob out;
  JobSpec& j = out.spec;
  py::list keep;
  const py::object pipe = r.obj("pipeline");
  if (!py::isinstance<PyPipeline>(pipe)) r.bad("pipeline", "a Pipeline");
  j.pipe_hold = pipe.cast<const PyPipeline&>().p;
  j.pipe = j.pipe_hold.get();
  const py::object data_obj = r.obj("data");
  if (!py::isinstance<py::array>(data_obj)) r.bad("data", "a numpy array");
  const auto data = py::reinterpret_borrow<py::array>(data_obj);
  if (!(data.flags() & py::array::c_style) || data.dtype().kind() != 'u' || data.itemsize() != 1)
    throw ConfigErr("sample data must be a C-contiguous uint8 array");
  const auto order = py::array_t<long long, py::array::c_style | py::array::forcecast>::ensure(r.obj("order"));
  if (!order) r.bad("order", "an array of int64 dataset indices");
  keep.append(data);
  keep.append(order);
  read_source(r, data, order.size(), j, keep);
  j.order.assign(order.data(), order.data() + order.size());
  for (long long v : j.order)
    if (v < 0 || v >= j.src.n) throw ConfigErr("epoch order holds an index out of range: " + std::to_string(v));
  const py::object stations = r.obj("stations");
  if (!py::isinstance<py::sequence>(stations)) r.bad("stations", "a list of Stations");
  for (auto s : py::reinterpret_borrow<py::sequence>(stations)) {
    if (!py::isinstance<PyStation>(s)) r.bad("stations", "a list of Stations");
    auto& ps = s.cast<PyStation&>();
    j.station_hold.push_back(ps.s);
    j.stations.push_back(ps.s.get());
  }
  if (j.stations.empty()) throw ConfigErr("need at least one TransferStation");
  keep.append(stations);
  j.world = int(j.stations.size());
  j.per_rank = r.i64("per_rank");
  j.batch = j.stations[0]->batch();
  j.num_batches = r.i64("num_batches");
  j.last_size = to_int(r, "last_size");
  j.seed_prefix = r.u64("seed_prefix");
  j.out_shape = to_shape(r.obj("out_shape"));
  j.sample_bytes = j.stations[0]->sample_bytes();
  for (const Station* s : j.stations)
    if (s->batch() != j.batch || s->sample_bytes() != j.sample_bytes)
      throw ConfigErr("all TransferStations of one Preprocessor need the same batch size and sample shape");
  const size_t need = j.out_shape.bytes() * j.pipe->fused().elem_bytes();
  if (need != j.sample_bytes)
    throw ShapeErr("the transforms produce " + j.out_shape.str() + " samples (" + std::to_string(need) +
                   " bytes) but the TransferStation holds " + std::to_string(j.sample_bytes) + "-byte samples");
  read_caches(r, j, keep);
  j.dct_scaling = r.flag_or("dct_scaling", false);
  out.keep = py::tuple(keep);
  return out;
}

}  // namespace

void bind_job(py::module_& m) {
  py::class_<PyEpochJob>(m, "EpochJob",
                         "One epoch's work for Engine.start, by keyword: pipeline, data, order (dataset indices, one "
                         "per sample of the source), stations, per_rank, num_batches, last_size, seed_prefix, "
                         "out_shape; the source's layout: uniform_shape (one (n, h, w, c) block), offsets + shapes "
                         "(ragged) or offsets + sizes (encoded), and labels; optional cache + cache_mode (CPVS), "
                         "sdmp + sdmp_filled + sdmp_prefix + sdmp_mode + sdmp_slot (SDMP), dct_scaling.")
      .def(py::init(&make_job))
      .def_property_readonly("num_samples", [](const PyEpochJob& j) { return j.spec.src.n; })
      .def_property_readonly("world", [](const PyEpochJob& j) { return j.spec.world; })
      .def_property_readonly("per_rank", [](const PyEpochJob& j) { return j.spec.per_rank; })
      .def_property_readonly("num_batches", [](const PyEpochJob& j) { return j.spec.num_batches; })
      .def_property_readonly("last_size", [](const PyEpochJob& j) { return j.spec.last_size; })
      .def_property_readonly("seed_prefix", [](const PyEpochJob& j) { return j.spec.seed_prefix; })
      .def_property_readonly("out_shape", [](const PyEpochJob& j) { return shape_tuple(j.spec.out_shape); })
      .def_property_readonly("cache_mode", [](const PyEpochJob& j) { return j.spec.cache_mode; })
      .def_property_readonly("sdmp_mode", [](const PyEpochJob& j) { return j.spec.sdmp_mode; })
      .def_property_readonly("dct_scaling", [](const PyEpochJob& j) { return j.spec.dct_scaling; });
}

}  // namespace trd::bind
