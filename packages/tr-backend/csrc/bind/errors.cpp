// tr::native::Error -> the classes of tr.core.errors (DeviceUnavailableError, OutOfMemoryError,
// BackendError, ConfigError). If tr.core cannot be imported the module still loads, with stand-in classes
// derived from RuntimeError / ValueError; the classes in use are exposed as module attributes.
#include <Python.h>
#include <nanobind/nanobind.h>

#include <exception>
#include <string>

#include "bind/bindings.hpp"
#include "native/errors.hpp"

namespace nb = nanobind;

namespace tr::native::bind {

namespace {

// Borrowed from the module's attributes, which keep them alive as long as the module.
struct ErrorClasses {
  PyObject* device_unavailable = nullptr;
  PyObject* out_of_memory = nullptr;
  PyObject* backend = nullptr;
  PyObject* bad_argument = nullptr;
};
ErrorClasses g_classes;

nb::object stand_in(const char* name, PyObject* base) {
  const std::string qualified = std::string("tr.backend._native.") + name;
  PyObject* cls = PyErr_NewException(qualified.c_str(), base, nullptr);
  if (cls == nullptr) throw nb::python_error();
  return nb::steal(cls);
}

PyObject* class_for(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::DeviceUnavailable:
      return g_classes.device_unavailable;
    case ErrorKind::OutOfMemory:
      return g_classes.out_of_memory;
    case ErrorKind::BadArgument:
      return g_classes.bad_argument;
    case ErrorKind::Backend:
    default:
      return g_classes.backend;
  }
}

void translate(const std::exception_ptr& exception, void*) {
  try {
    std::rethrow_exception(exception);
  } catch (const Error& error) {
    PyErr_SetString(class_for(error.kind()), error.what());
  }
}

}  // namespace

void register_errors(nb::module_& m) {
  nb::object backend, device_unavailable, out_of_memory, bad_argument;
  try {
    nb::module_ errors = nb::module_::import_("tr.core.errors");
    backend = errors.attr("BackendError");
    device_unavailable = errors.attr("DeviceUnavailableError");
    out_of_memory = errors.attr("OutOfMemoryError");
    bad_argument = errors.attr("ConfigError");
    m.attr("ERRORS_FROM") = "tr.core.errors";
  } catch (const nb::python_error&) {
    // The python_error took the pending exception with it; fall back to stand-ins.
    backend = stand_in("BackendError", PyExc_RuntimeError);
    device_unavailable = stand_in("DeviceUnavailableError", backend.ptr());
    out_of_memory = stand_in("OutOfMemoryError", backend.ptr());
    bad_argument = stand_in("ConfigError", PyExc_ValueError);
    m.attr("ERRORS_FROM") = "stand-ins (tr.core.errors could not be imported)";
  }
  m.attr("BackendError") = backend;
  m.attr("DeviceUnavailableError") = device_unavailable;
  m.attr("OutOfMemoryError") = out_of_memory;
  m.attr("ConfigError") = bad_argument;
  g_classes = {device_unavailable.ptr(), out_of_memory.ptr(), backend.ptr(), bad_argument.ptr()};
  nb::register_exception_translator(translate);
}

}  // namespace tr::native::bind
