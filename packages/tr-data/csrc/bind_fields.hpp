// Keyword-only records at the native boundary: FieldReader reads a constructor's keyword arguments by name
// (the generated op parameter classes, OpSpec, EpochJob), so a misspelt, missing or positional field is a
// TypeError at the Python call that builds the record, and a value of the wrong type a ConfigError naming it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bind_common.hpp"

namespace trd::bind {

// The names of a record's fields: a view of a static array of C strings.
struct FieldNames {
  const char* const* p = nullptr;
  size_t n = 0;
  FieldNames() = default;
  template <size_t N>
  FieldNames(const char* const (&a)[N]) : p(a), n(N) {}
  const char* const* begin() const { return p; }
  const char* const* end() const { return p + n; }
  bool has(const std::string& name) const;
  std::string joined() const;  // "a, b, c"
};

class FieldReader {
 public:
  // `label` starts the messages about values (an op kind, as op_check's messages do); `cls` is the class.
  // Refuses positional arguments, names outside `names` and absent names not in `optional` (TypeError).
  FieldReader(std::string label, std::string cls, FieldNames names, const py::args& args, const py::kwargs& kw,
              FieldNames optional = {});

  bool given(const char* name) const;       // passed, and not None
  py::object obj(const char* name) const;   // the value as passed (None when an optional field is absent)
  int64_t i64(const char* name) const;      // an int (not a bool) in the int64 range
  uint64_t u64(const char* name) const;     // an int in [0, 2^64)
  double f64(const char* name) const;       // an int or a float (not a bool); inf and nan pass (the checks name them)
  bool flag(const char* name) const;        // True or False (numpy's bool too)
  std::vector<double> floats(const char* name) const;     // a list, tuple or array of numbers
  std::vector<uint64_t> u64s(const char* name) const;     // a list, tuple or array of ints in [0, 2^64)
  std::string str(const char* name) const;
  // A record of class T (`cls` its Python name), or None.
  template <class T>
  std::optional<T> record_or_none(const char* name, const char* cls) const {
    if (!given(name)) return std::nullopt;
    const py::object v = obj(name);
    if (!py::isinstance<T>(v)) bad(name, std::string("a ") + cls + " or None");
    return v.cast<const T&>();
  }
  // An optional field's value, or `dflt` when it is absent or None.
  int64_t i64_or(const char* name, int64_t dflt) const { return given(name) ? i64(name) : dflt; }
  bool flag_or(const char* name, bool dflt) const { return given(name) ? flag(name) : dflt; }

  // ConfigErr "<label>: a parameter <name>=<value> is not a number in range (<expected>)".
  [[noreturn]] void bad_number(const char* name, const char* expected) const;
  // ConfigErr "<label>: <name> must be <expected>, got <value>".
  [[noreturn]] void bad(const char* name, const std::string& expected) const;
  const std::string& label() const { return label_; }
  void set_label(std::string label) { label_ = std::move(label); }  // e.g. once the record's name is read

 private:
  std::string label_, cls_;
  py::dict kw_;
};

// repr(value), cut to `limit` characters (an array's repr can be megabytes).
std::string short_repr(const py::handle& value, size_t limit = 100);

// The record protocol of a generated class: fields() -> ((name, type), ...), repr, == by field values.
py::tuple record_fields(FieldNames names, FieldNames types);
std::string record_repr(const py::handle& self, FieldNames names);
py::object record_eq(const py::handle& a, const py::handle& b, FieldNames names);

template <class T>
void add_record_protocol(py::class_<T>& c, FieldNames names, FieldNames types) {
  c.def_static("fields", [names, types] { return record_fields(names, types); },
               "((name, type), ...) of the keyword-only fields, in declaration order");
  c.def("__repr__", [names](const py::handle& self) { return record_repr(self, names); });
  c.def("__eq__", [names](const py::handle& a, const py::handle& b) { return record_eq(a, b, names); });
}

}  // namespace trd::bind
