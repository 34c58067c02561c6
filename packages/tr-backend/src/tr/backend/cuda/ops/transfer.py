"""h2d_copy: two host-to-device copies from host staging buffer A or B (the first N samples, N the batch of
the ``data`` DTensor; ``packed``: its first N x H x W x C elements, progressive resizing's smaller sides). The
copies are captured as graph nodes reading the bound buffers' addresses; binding other buffers later re-points
those nodes (CudaBackend.bind_host_buffers)."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.backend.cuda.signatures.transfer import H2D_COPY
from tr.backend.rules import transfer as rules


@cuda_op("h2d_copy")
def h2d_copy(b: CudaBinder) -> Any:
    buffer, _, packed = rules.h2d_copy(b)
    site = b.backend.add_host_site(b, buffer, packed)
    return b.make(H2D_COPY, src_labels=site.src[0], src_data=site.src[1], labels=b.dev("labels"), data=b.dev("data"),
                  label_bytes=site.label_bytes, data_bytes=site.data_bytes)
