from tr_graph_testlib import mlp_spec

from tr.core.dtype import DType
from tr.core.shape import Shape
from tr.graph.compiler import compile_with_plan
from tr.graph.seed_scheme import seed_arena_bytes, seed_pooled_bytes
from tr.tensor.dtensor import slot_bytes_for


def test_mlp_seed_figure_by_hand(models):
    c = compile_with_plan(models.mlp_mnist, mlp_spec())
    shapes = {"train": {i: s.with_batch(128) for i, s in enumerate(c.arch.shapes)}}
    got = seed_pooled_bytes(c.arch, shapes, False, {"train": Shape(128, 28, 28, 1)})
    f = lambda c_: slot_bytes_for(Shape(128, 1, 1, c_), DType.FP32)  # noqa: E731
    m = lambda c_: slot_bytes_for(Shape(128, 1, 1, c_), DType.INT8, 8)  # noqa: E731
    # flatten output (28x28x1, C % 8 != 0), then per hidden layer: fc output, relu output, relu mask; logits
    expected = f(784) + sum(2 * f(k) + m(k) for k in (1024, 512, 256)) + f(10)
    assert got == expected
    meta = c.program.meta
    assert seed_arena_bytes(c.arch, mlp_spec(), c.program) - got == meta["arena_bytes"] - meta["pooled_bytes"]
    assert "seed_arena_bytes" not in meta  # not part of compiling


def test_seed_scheme_counts_cnn_extras(models):
    spec = mlp_spec(input_shape=(32, 32, 3), num_classes=1000, batch=2, amp=True)
    c = compile_with_plan(models.resnet50, spec)
    m, seed = c.program.meta, seed_arena_bytes(c.arch, spec, c.program)
    assert seed > m["arena_bytes"]
    assert m["no_reuse_bytes"] > seed  # gradients and inference tensors each with a slot
