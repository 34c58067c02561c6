// tr.data._native.Station (the double-buffered transfer zones) and Engine (the worker pool that fills them).
#include "bind_common.hpp"

#include <pybind11/stl.h>

#include <utility>
#include <vector>

namespace trd::bind {

void bind_workers(py::module_& m) {
  py::class_<PyStation>(m, "Station")
      .def(py::init([](int batch, size_t sample_bytes, py::buffer d0, py::buffer l0, py::buffer d1, py::buffer l1) {
        const size_t nd = size_t(batch) * sample_bytes, nl = size_t(batch) * 4;
        uint8_t* pd0 = writable(d0, nd, "data buffer A");
        uint8_t* pd1 = writable(d1, nd, "data buffer B");
        auto* pl0 = reinterpret_cast<int32_t*>(writable(l0, nl, "label buffer A"));
        auto* pl1 = reinterpret_cast<int32_t*>(writable(l1, nl, "label buffer B"));
        if ((reinterpret_cast<uintptr_t>(pl0) | reinterpret_cast<uintptr_t>(pl1)) % 4)
          throw ConfigErr("label buffers must be 4-byte aligned");
        PyStation s;
        s.s = std::make_shared<Station>(batch, sample_bytes, pd0, pl0, pd1, pl1);
        s.keep = py::make_tuple(d0, l0, d1, l1);
        return s;
      }))
      .def("acquire",
           [](PyStation& self, long long k, py::object timeout) {
             const double t = timeout.is_none() ? -1.0 : timeout.cast<double>();
             return acquire_interruptible(*self.s, k, t);
           },
           py::arg("k"), py::arg("timeout") = py::none())
      .def("release", [](PyStation& self, long long k) { self.s->release(k); })
      .def("abort", [](PyStation& self) { self.s->abort(); })
      .def("begin_epoch", [](PyStation& self, long long nb, int last) { self.s->begin_epoch(nb, last); })
      .def_property_readonly("num_batches", [](const PyStation& self) { return self.s->num_batches(); })
      .def("batch_size_of", [](const PyStation& self, long long k) { return self.s->batch_size_of(k); })
      .def("consumer_wait_ns", [](const PyStation& self) { return self.s->consumer_wait_ns(); })
      .def_property_readonly("batch", [](const PyStation& self) { return self.s->batch(); })
      .def_property_readonly("sample_bytes", [](const PyStation& self) { return self.s->sample_bytes(); });

  py::class_<PyEngine>(m, "Engine")
      .def(py::init([](long long workers) {
        if (workers < 1 || workers > kMaxWorkers)
          throw ConfigErr("preprocess_workers must be in [1, " + std::to_string(kMaxWorkers) + "], got " +
                          std::to_string(workers));
        auto e = std::make_unique<PyEngine>();
        e->e = std::make_unique<Engine>(int(workers));
        e->keep = py::none();
        return e;
      }))
      .def_property_readonly("workers", [](const PyEngine& self) { return self.e->workers(); })
      .def("busy", [](const PyEngine& self) { return self.e->busy(); })
      .def("cancel",
           [](PyEngine& self) {
             {
               py::gil_scoped_release nogil;
               self.e->cancel();
             }
             self.keep = py::none();
           })
      .def("wait_idle",
           [](PyEngine& self, double timeout) {
             py::gil_scoped_release nogil;
             return self.e->wait_idle(timeout);
           })
      .def("samples_done",
           [](const PyEngine& self) {
             auto j = self.e->current();
             return j ? j->samples_done.load() : 0LL;
           })
      .def(
          "worker_times",
          [](const PyEngine& self) {
            // the last epoch's (items, work_ns, wait_ns) per worker; read only when the workers are idle
            if (self.e->busy()) throw PhaseErr("worker times are read after the epoch's workers finished");
            py::list out;
            if (auto j = self.e->current())
              for (const WorkerTime& t : j->times) out.append(py::make_tuple(t.items, t.work_ns, t.wait_ns));
            return out;
          },
          "the last epoch's (items, work_ns, wait_ns) per worker")
      .def(
          "start",
          [](PyEngine& self, PyPipeline& pipe, py::array data, py::object offsets, py::object shapes,
             py::object uniform_shape, py::object labels, py::array_t<long long, py::array::c_style | py::array::forcecast> order,
             py::list stations, long long per_rank, long long num_batches, int last_size, uint64_t seed_prefix,
             py::object out_shape, py::object cache, int cache_mode, py::object sizes, py::object sdmp,
             py::object sdmp_filled, std::vector<uint64_t> sdmp_prefix, int sdmp_mode, int sdmp_slot,
             bool dct_scaling) {
            if (self.e->busy()) throw PhaseErr("the previous epoch is still running; finish or cancel it first");
            auto job = std::make_shared<Job>();
            job->pipe = pipe.p.get();
            job->pipe_hold = pipe.p;
            if (!(data.flags() & py::array::c_style) || data.dtype().kind() != 'u' || data.itemsize() != 1)
              throw ConfigErr("sample data must be a C-contiguous uint8 array");
            job->src.base = static_cast<const uint8_t*>(data.data());
            job->src.n = order.size();
            py::list keep;
            keep.append(data);
            keep.append(order);
            if (!sizes.is_none()) {  // encoded samples: bytes at offsets[i], sizes[i] long, decoded per sample
              auto off = offsets.cast<py::array_t<long long, py::array::c_style>>();
              auto siz = sizes.cast<py::array_t<long long, py::array::c_style>>();
              if (off.size() != job->src.n || siz.size() != job->src.n)
                throw ShapeErr("encoded sources need one offset and one size per sample");
              for (long long i = 0; i < job->src.n; ++i)
                if (off.data()[i] < 0 || siz.data()[i] < 0 || size_t(off.data()[i] + siz.data()[i]) > size_t(data.nbytes()))
                  throw ShapeErr("encoded sample " + std::to_string(i) + " lies outside the data buffer");
              job->src.offsets = off.data();
              job->src.sizes = siz.data();
              keep.append(off);
              keep.append(siz);
            } else if (!offsets.is_none()) {
              auto off = offsets.cast<py::array_t<long long, py::array::c_style>>();
              auto shp = shapes.cast<py::array_t<int32_t, py::array::c_style>>();
              if (off.size() != job->src.n || shp.size() != 3 * job->src.n)
                throw ShapeErr("ragged sources need one offset and one (h, w, c) per sample");
              job->src.offsets = off.data();
              job->src.shapes = shp.data();
              keep.append(off);
              keep.append(shp);
            } else {
              job->src.shape = to_shape(uniform_shape);
              if (size_t(data.nbytes()) < size_t(job->src.n) * job->src.shape.bytes())
                throw ShapeErr("sample data is smaller than n * h * w * c");
            }
            if (!labels.is_none()) {
              auto lab = labels.cast<py::array_t<int32_t, py::array::c_style>>();
              if (lab.size() != job->src.n) throw ShapeErr("need one label per sample");
              job->src.labels = lab.data();
              keep.append(lab);
            }
            job->order.assign(order.data(), order.data() + order.size());
            for (long long v : job->order)
              if (v < 0 || v >= job->src.n) throw ConfigErr("epoch order holds an index out of range: " + std::to_string(v));
            std::vector<std::shared_ptr<Station>> sts;
            for (auto s : stations) {
              auto& ps = s.cast<PyStation&>();
              sts.push_back(ps.s);
              job->stations.push_back(ps.s.get());
              job->station_hold.push_back(ps.s);
            }
            if (sts.empty()) throw ConfigErr("need at least one TransferStation");
            keep.append(stations);
            job->world = int(sts.size());
            job->per_rank = per_rank;
            job->batch = sts[0]->batch();
            job->num_batches = num_batches;
            job->seed_prefix = seed_prefix;
            job->out_shape = to_shape(out_shape);
            job->sample_bytes = sts[0]->sample_bytes();
            for (auto& s : sts)
              if (s->batch() != job->batch || s->sample_bytes() != job->sample_bytes)
                throw ConfigErr("all TransferStations of one Preprocessor need the same batch size and sample shape");
            const size_t need = job->out_shape.bytes() * pipe.p->fused().elem_bytes();
            if (need != job->sample_bytes)
              throw ShapeErr("the transforms produce " + job->out_shape.str() + " samples (" + std::to_string(need) +
                             " bytes) but the TransferStation holds " + std::to_string(job->sample_bytes) +
                             "-byte samples");
            if (!cache.is_none()) {
              job->cache = writable(cache.cast<py::buffer>(), size_t(job->src.n) * job->sample_bytes, "CPVS cache");
              keep.append(cache);
              job->cache_mode = cache_mode;
            }
            if (sdmp_mode != 0) {
              const size_t slots = sdmp_mode == 1 ? sdmp_prefix.size() : size_t(sdmp_slot) + 1;
              if (sdmp_mode < 0 || sdmp_mode > 2 || slots == 0 || sdmp_slot < 0)
                throw ConfigErr("SDMP mode " + std::to_string(sdmp_mode) + " with " + std::to_string(slots) +
                                " slots is not valid");
              job->sdmp = writable(sdmp.cast<py::buffer>(), slots * size_t(job->src.n) * job->sample_bytes, "SDMP cache");
              job->sdmp_filled = writable(sdmp_filled.cast<py::buffer>(), slots * size_t(job->src.n), "SDMP flags");
              keep.append(sdmp);
              keep.append(sdmp_filled);
              job->sdmp_prefix = std::move(sdmp_prefix);
              job->sdmp_mode = sdmp_mode;
              job->sdmp_slot = sdmp_slot;
            }
            job->dct_scaling = dct_scaling;
            for (auto& s : sts) s->begin_epoch(num_batches, last_size);
            self.keep = py::tuple(keep);
            self.e->start(job);
          },
          py::arg("pipeline"), py::arg("data"), py::arg("offsets"), py::arg("shapes"), py::arg("uniform_shape"),
          py::arg("labels"), py::arg("order"), py::arg("stations"), py::arg("per_rank"), py::arg("num_batches"),
          py::arg("last_size"), py::arg("seed_prefix"), py::arg("out_shape"), py::arg("cache") = py::none(),
          py::arg("cache_mode") = 0, py::arg("sizes") = py::none(), py::arg("sdmp") = py::none(),
          py::arg("sdmp_filled") = py::none(), py::arg("sdmp_prefix") = std::vector<uint64_t>{},
          py::arg("sdmp_mode") = 0, py::arg("sdmp_slot") = 0, py::arg("dct_scaling") = false);
}

}  // namespace trd::bind
