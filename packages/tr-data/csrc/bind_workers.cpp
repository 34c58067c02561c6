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
          [](PyEngine& self, const PyEpochJob& job) {
            if (self.e->busy()) throw PhaseErr("the previous epoch is still running; finish or cancel it first");
            auto live = std::make_shared<Job>(job.spec);
            for (Station* s : live->stations) s->begin_epoch(live->num_batches, live->last_size);
            self.keep = job.keep;
            self.e->start(std::move(live));
          },
          py::arg("job"), "run `job` (an EpochJob) on the workers; PhaseError while the previous epoch runs");
}

}  // namespace trd::bind
