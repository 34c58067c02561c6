"""Range ops: one closure per byte range of whole regions, however many layers the model has.

Spans other than ``range_clear``/``range_copy``/``range_cast`` hold FP32 elements (gradients, master
weights, moments, EMA weights); their element count is the span's bytes / 4, slot padding included (the
padding is zero and stays zero under every rule here).
"""

from tr.backend.cpu.ops.range import basic, lars, optimizer  # noqa: F401  (imported for registration)
