"""Native ops of csrc/ops/transfer.cpp: host-to-device copies of the input batch, captured as memcpy nodes that
the backend re-points when other host buffers are bound."""

from __future__ import annotations

from tr.backend.cuda.signatures._types import i64, native_op, ptr, tensor

H2D_COPY = native_op(
    "h2d_copy", "labels = the host bytes at src_labels, data = those at src_data (two cudaMemcpyAsync).",
    ptr("src_labels", "host address (pinned or registered) of label_bytes bytes"),
    ptr("src_data", "host address (pinned or registered) of data_bytes bytes"),
    tensor("labels", "the device labels"), tensor("data", "the device input"),
    i64("label_bytes", "bytes of labels to copy; 0: none"), i64("data_bytes", "bytes of data to copy; 0: none"))

OPS = (H2D_COPY,)
