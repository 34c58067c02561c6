"""Native op of csrc/ops/extern_kernel.cu: one launch of a kernel compiled outside tr (a CUfunction, e.g. CuPy's),
recorded into the captured graph (tr.backend.cuda.extern_kernel builds the fields)."""

from __future__ import annotations

from tr.backend.cuda.signatures._types import extern_params, f64s, i64, i64s, native_op, ptr

EXTERN_KERNEL = native_op(
    "extern_kernel", "cuLaunchKernel(function, grid, block, shared, the parameters), checked against what the "
    "driver says the function takes.",
    ptr("function", "the CUfunction, loaded on the context's device"),
    i64("grid_x", "blocks along x (1..2^31-1)"), i64("grid_y", "blocks along y (1..65535)"),
    i64("grid_z", "blocks along z (1..65535)"), i64("block_x", "threads along x (1..1024)"),
    i64("block_y", "threads along y (1..1024)"), i64("block_z", "threads along z (1..64)"),
    i64("shared", "bytes of dynamic shared memory"),
    extern_params("param_types", "each parameter's type, in order (up to 4096): tr.core.ops.EXTERN_PARAM_CODES "
                  "(pointer, int32, int64, float32, float64)"),
    i64s("param_ints", "one a parameter: a pointer's address (its 64 bits) or an integer; 0 for a float"),
    f64s("param_floats", "one a parameter: a float's value; 0.0 for the others"))

OPS = (EXTERN_KERNEL,)
