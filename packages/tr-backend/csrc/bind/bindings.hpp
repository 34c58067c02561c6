// Entry points of the binding files; module.cpp calls them in order.
#pragma once

#include <nanobind/nanobind.h>

namespace tr::native::bind {

void register_errors(nanobind::module_& m);  // first: the others raise through it
void bind_device(nanobind::module_& m);
void bind_memory(nanobind::module_& m);
void bind_ops(nanobind::module_& m);  // CUDA builds only (bind/ops.cpp)
void bind_op_args(nanobind::module_& m);  // the native ops' argument records (generated: bind/op_args.cpp)

}  // namespace tr::native::bind
