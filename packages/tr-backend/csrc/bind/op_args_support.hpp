// What the generated bindings of the native op records (bind/op_args.cpp) call: the Dev class, the checks a
// field's value passes when a record is made, and the records' repr. Errors are BadArgument (ConfigError in
// Python) naming the op and the field.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "native/errors.hpp"
#include "ops/args/all.hpp"
#include "ops/dtype.hpp"

namespace tr::native::bind {

[[noreturn]] inline void bad_field(const char* op, const char* field, const std::string& message) {
  fail(ErrorKind::BadArgument, std::string("native op ") + op + ": field '" + field + "' " + message);
}

// Dev(ptr, dt): a device tensor's address (not null) and its dtype code (tr.core.dtype.DType.code).
inline void bind_dev(nanobind::module_& m) {
  namespace nb = nanobind;
  using namespace nb::literals;
  nb::class_<Dev>(m, "Dev", "A device tensor as a native op reads it: its address and its dtype code.")
      .def(
          "__init__",
          [](Dev* self, std::uintptr_t ptr, std::int64_t dt) {
            if (ptr == 0) fail(ErrorKind::BadArgument, "Dev: the address is null");
            if (dt < 0 || dt >= kNumDT) {
              fail(ErrorKind::BadArgument, "Dev: dtype code " + std::to_string(dt) + " is not one of 0.." +
                                               std::to_string(kNumDT - 1));
            }
            new (self) Dev{reinterpret_cast<void*>(ptr), static_cast<DT>(dt)};
          },
          "ptr"_a, "dt"_a)
      .def_prop_ro("ptr", [](const Dev& d) { return reinterpret_cast<std::uintptr_t>(d.ptr); })
      .def_prop_ro("dt", [](const Dev& d) { return static_cast<std::int64_t>(d.dt); })
      .def("__eq__", [](const Dev& a, const Dev& b) { return a.ptr == b.ptr && a.dt == b.dt; })
      .def("__hash__", [](const Dev& d) { return std::hash<void*>()(d.ptr) ^ static_cast<std::size_t>(d.dt); })
      .def("__repr__", [](const Dev& d) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "Dev(0x%llx, %s)", static_cast<unsigned long long>(
                                                             reinterpret_cast<std::uintptr_t>(d.ptr)), dtype_name(d.dt));
        return std::string(buf);
      });
}

inline Dev dev_of(const char* op, const char* field, const Dev& d) {
  if (d.ptr == nullptr) bad_field(op, field, "is a null tensor");
  return d;
}

inline void* address_of(const char* op, const char* field, std::uintptr_t v) {
  if (v == 0) bad_field(op, field, "is a null address");
  return reinterpret_cast<void*>(v);
}

template <class E>
E code_of(const char* op, const char* field, std::int64_t v, int count, const char* enum_name) {
  if (v < 0 || v >= count) {
    bad_field(op, field, "is " + std::to_string(v) + ", not a code of " + enum_name + " (0.." +
                             std::to_string(count - 1) + ")");
  }
  return static_cast<E>(v);
}

// A list of codes (extern_params): each checked as code_of checks one, the error naming its position.
template <class E>
std::vector<E> codes_of(const char* op, const char* field, const std::vector<std::int64_t>& v, int count,
                        const char* enum_name) {
  std::vector<E> out;
  out.reserve(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (v[i] < 0 || v[i] >= count) {
      bad_field(op, field, "entry " + std::to_string(i) + " is " + std::to_string(v[i]) + ", not a code of " +
                               enum_name + " (0.." + std::to_string(count - 1) + ")");
    }
    out.push_back(static_cast<E>(v[i]));
  }
  return out;
}

template <class E>
std::vector<std::int64_t> codes_back(const std::vector<E>& v) {
  std::vector<std::int64_t> out;
  out.reserve(v.size());
  for (E e : v) out.push_back(static_cast<std::int64_t>(e));
  return out;
}

inline nanobind::dict field_types(std::initializer_list<std::pair<const char*, const char*>> fields) {
  nanobind::dict d;
  for (const auto& [name, type] : fields) d[name] = type;
  return d;
}

inline std::string record_repr(const char* cls, nanobind::handle fields) {
  std::string s = std::string(cls) + "(";
  bool first = true;
  for (auto [k, v] : nanobind::cast<nanobind::dict>(fields)) {
    if (!first) s += ", ";
    first = false;
    s += nanobind::cast<std::string>(nanobind::str(k)) + "=" + nanobind::cast<std::string>(nanobind::repr(v));
  }
  return s + ")";
}

[[noreturn]] inline void not_a_record(nanobind::handle args) {
  fail(ErrorKind::BadArgument, "make_op takes a native op's argument record (ScaleFwdArgs, ...), not " +
                                   nanobind::cast<std::string>(nanobind::repr(nanobind::handle(args.type()))));
}

}  // namespace tr::native::bind
