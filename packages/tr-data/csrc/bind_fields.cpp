// FieldReader and the record protocol (bind_fields.hpp).
#include "bind_fields.hpp"

#include <cstring>

namespace trd::bind {

namespace {
std::string quoted_list(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "'" : ", '") + x + "'";
  return s;
}

bool is_bool(PyObject* o) {
  if (PyBool_Check(o)) return true;
  const char* t = Py_TYPE(o)->tp_name;  // numpy's bool scalar: "numpy.bool" (2.x) or "numpy.bool_" (1.x)
  return std::strcmp(t, "numpy.bool") == 0 || std::strcmp(t, "numpy.bool_") == 0;
}

// A list, tuple or array (not a str or bytes), as a list of its items.
bool as_items(const py::handle& v, py::list& out) {
  if (PyUnicode_Check(v.ptr()) || PyBytes_Check(v.ptr()) || !PySequence_Check(v.ptr())) return false;
  try {
    out = py::list(py::reinterpret_borrow<py::object>(v));
  } catch (const py::error_already_set&) {
    return false;
  }
  return true;
}

// Python int (or an object with __index__, not a bool) -> int64; false when it is none or out of range.
bool load_i64(const py::handle& v, int64_t& out) {
  if (is_bool(v.ptr()) || !PyIndex_Check(v.ptr())) return false;
  PyObject* i = PyNumber_Index(v.ptr());
  if (i == nullptr) {
    PyErr_Clear();
    return false;
  }
  int overflow = 0;
  const long long x = PyLong_AsLongLongAndOverflow(i, &overflow);
  Py_DECREF(i);
  if (overflow != 0 || (x == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    return false;
  }
  out = x;
  return true;
}

bool load_u64(const py::handle& v, uint64_t& out) {
  if (is_bool(v.ptr()) || !PyIndex_Check(v.ptr())) return false;
  PyObject* i = PyNumber_Index(v.ptr());
  if (i == nullptr) {
    PyErr_Clear();
    return false;
  }
  const unsigned long long x = PyLong_AsUnsignedLongLong(i);  // negative or too large: -1 and an error
  Py_DECREF(i);
  if (x == (unsigned long long)-1 && PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  out = x;
  return true;
}

bool load_f64(const py::handle& v, double& out) {
  if (is_bool(v.ptr()) || PyUnicode_Check(v.ptr()) || PyBytes_Check(v.ptr())) return false;
  const double x = PyFloat_AsDouble(v.ptr());  // a float, or __float__ / __index__ (an int too large: an error)
  if (x == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  out = x;
  return true;
}
}  // namespace

bool FieldNames::has(const std::string& name) const {
  for (const char* s : *this)
    if (name == s) return true;
  return false;
}

std::string FieldNames::joined() const {
  std::string s;
  for (const char* x : *this) s += (s.empty() ? "" : ", ") + std::string(x);
  return s;
}

std::string short_repr(const py::handle& value, size_t limit) {
  std::string s = py::repr(value);
  if (s.size() > limit) s = s.substr(0, limit) + "...";
  return s;
}

FieldReader::FieldReader(std::string label, std::string cls, FieldNames names, const py::args& args,
                         const py::kwargs& kw, FieldNames optional)
    : label_(std::move(label)), cls_(std::move(cls)), kw_(kw) {
  const std::string of = cls_ == label_ ? std::string() : " of " + cls_;
  if (!args.empty())
    throw py::type_error(cls_ + "() takes keyword arguments only (" + names.joined() + "), got " +
                         std::to_string(args.size()) + " positional");
  std::vector<std::string> unknown, missing;
  for (auto item : kw_) {
    const std::string k = py::str(item.first);
    if (!names.has(k)) unknown.push_back(k);
  }
  if (!unknown.empty())
    throw py::type_error(label_ + ": unknown field" + (unknown.size() > 1 ? "s " : " ") + quoted_list(unknown) + of +
                         " (its fields: " + names.joined() + ")");
  for (const char* n : names)
    if (!kw_.contains(n) && !optional.has(n)) missing.push_back(n);
  if (!missing.empty())
    throw py::type_error(label_ + ": missing field" + (missing.size() > 1 ? "s " : " ") + quoted_list(missing) + of +
                         " (its fields: " + names.joined() + ")");
}

bool FieldReader::given(const char* name) const { return kw_.contains(name) && !kw_[name].is_none(); }

py::object FieldReader::obj(const char* name) const {
  return kw_.contains(name) ? py::reinterpret_borrow<py::object>(kw_[name]) : py::none();
}

void FieldReader::bad_number(const char* name, const char* expected) const {
  throw ConfigErr(label_ + ": a parameter " + name + "=" + short_repr(obj(name)) + " is not a number in range (" +
                  expected + ")");
}

void FieldReader::bad(const char* name, const std::string& expected) const {
  throw ConfigErr(label_ + ": " + name + " must be " + expected + ", got " + short_repr(obj(name)));
}

int64_t FieldReader::i64(const char* name) const {
  int64_t x = 0;
  if (!load_i64(obj(name), x)) bad_number(name, "an int64");
  return x;
}

uint64_t FieldReader::u64(const char* name) const {
  uint64_t x = 0;
  if (!load_u64(obj(name), x)) bad_number(name, "a uint64");
  return x;
}

double FieldReader::f64(const char* name) const {
  double x = 0;
  if (!load_f64(obj(name), x)) bad_number(name, "a float");
  return x;
}

bool FieldReader::flag(const char* name) const {
  const py::object v = obj(name);
  if (!is_bool(v.ptr())) bad(name, "True or False");
  return v.cast<bool>();
}

std::vector<double> FieldReader::floats(const char* name) const {
  py::list items;
  if (!as_items(obj(name), items)) bad_number(name, "a sequence of floats");
  std::vector<double> out(items.size());
  for (size_t k = 0; k < out.size(); ++k)
    if (!load_f64(items[k], out[k])) bad_number(name, "a sequence of floats");
  return out;
}

std::vector<uint64_t> FieldReader::u64s(const char* name) const {
  py::list items;
  if (!as_items(obj(name), items)) bad_number(name, "a sequence of uint64");
  std::vector<uint64_t> out(items.size());
  for (size_t k = 0; k < out.size(); ++k)
    if (!load_u64(items[k], out[k])) bad_number(name, "a sequence of uint64");
  return out;
}

std::string FieldReader::str(const char* name) const {
  const py::object v = obj(name);
  if (!PyUnicode_Check(v.ptr())) bad(name, "a str");
  return v.cast<std::string>();
}

py::tuple record_fields(FieldNames names, FieldNames types) {
  py::tuple out(names.n);
  for (size_t k = 0; k < names.n; ++k) out[k] = py::make_tuple(names.p[k], types.p[k]);
  return out;
}

std::string record_repr(const py::handle& self, FieldNames names) {
  std::string s = py::str(py::type::of(self).attr("__name__")).cast<std::string>() + "(";
  for (size_t k = 0; k < names.n; ++k)
    s += (k ? ", " : "") + std::string(names.p[k]) + "=" + std::string(py::repr(self.attr(names.p[k])));
  return s + ")";
}

py::object record_eq(const py::handle& a, const py::handle& b, FieldNames names) {
  if (!py::type::of(a).is(py::type::of(b))) return py::reinterpret_borrow<py::object>(Py_NotImplemented);
  for (const char* n : names)
    if (!a.attr(n).equal(b.attr(n))) return py::bool_(false);
  return py::bool_(true);
}

}  // namespace trd::bind
