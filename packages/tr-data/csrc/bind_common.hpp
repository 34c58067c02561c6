// What the pybind11 bindings of tr.data._native share (module.cpp and bind_*.cpp): the conversions of Python specs
// and buffers, the objects Python holds, and the mapping of C++ errors to tr.core.errors.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <string>

#include "engine.hpp"
#include "fused_norm.hpp"
#include "jpeg.hpp"
#include "pipeline.hpp"

namespace trd::bind {

namespace py = pybind11;

// raises tr.core.errors.<cls>(msg) as the pending Python error
void set_tr_error(const char* cls, const char* msg);

// the fused stage as tr/data/transforms.py describes it (a FusedStage record), checked by FusedSpec::build()
FusedSpec fused_spec(const FusedStage& s);

using U8Array = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>;
ImgC image_view(const U8Array& a);  // a (height, width, channels) uint8 array, its sides checked
py::tuple shape_tuple(const Shape3& s);
Shape3 to_shape(const py::handle& t);  // (height, width, channels), each side in [1, kMaxSide]
py::array out_array(const Shape3& s, OutDType dt);
// A writable, C-contiguous buffer of at least `need` bytes.
uint8_t* writable(const py::buffer& b, size_t need, const char* what);

// ---- Python-facing objects ---------------------------------------------------------------------
struct PyPipeline {
  std::shared_ptr<Pipeline> p;
};

struct PyStation {
  std::shared_ptr<Station> s;
  py::object keep;  // the four buffers
};

struct PyEpochJob {
  JobSpec spec;
  py::object keep;  // the arrays and stations the spec points into
};

struct PyEngine {
  std::unique_ptr<Engine> e;
  py::object keep;  // what the running job points into (arrays, stations, pipeline)
  ~PyEngine() {
    {
      py::gil_scoped_release nogil;
      e.reset();  // cancels and joins the workers
    }
    // `keep` is released after this, with the GIL held
  }
};

// acquire in slices so that Ctrl-C reaches Python while a consumer waits
int acquire_interruptible(Station& st, long long k, double timeout);

// the parts of the module, each in its own file
void bind_jpeg(py::module_& m);      // bind_jpeg.cpp: headers, single decodes, baseline re-coding
void bind_pipeline(py::module_& m);  // bind_pipeline.cpp: Pipeline (one sample's chain)
void bind_workers(py::module_& m);   // bind_workers.cpp: Station (the transfer zones), Engine (the worker pool)
void bind_job(py::module_& m);       // bind_job.cpp: EpochJob (what Engine.start runs)
void bind_op_params(py::module_& m);  // bind_op_params.cpp (generated): the typed parameters of each op kind

}  // namespace trd::bind
