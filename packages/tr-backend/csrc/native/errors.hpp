// The one C++ exception type of the native core. Its kind picks the Python class it becomes
// (tr.core.errors, see bind/errors.cpp), so the core never includes Python or nanobind headers.
#pragma once

#include <stdexcept>
#include <string>

namespace tr::native {

enum class ErrorKind {
  DeviceUnavailable,  // no driver, no device, built without CUDA -> DeviceUnavailableError
  OutOfMemory,        // an allocation failed -> OutOfMemoryError
  Backend,            // any other CUDA failure -> BackendError
  BadArgument,        // a caller passed an invalid value -> ConfigError
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const noexcept { return kind_; }

 private:
  ErrorKind kind_;
};

[[noreturn]] inline void fail(ErrorKind kind, const std::string& message) { throw Error(kind, message); }

}  // namespace tr::native
