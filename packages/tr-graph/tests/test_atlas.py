from tr_graph_testlib import mlp_spec

from tr.core.graph_id import GraphId as G
from tr.core.shape import Shape
from tr.graph.atlas import GraphAtlas, batch_role
from tr.graph.compiler import compile_program
from tr.graph.graph import SymOp
from tr.tensor.program import SHAPE_INVARIANT, VariantInfo


def test_shape_invariant_graphs_stored_once(models):
    p = compile_program(models.mlp_mnist, mlp_spec(last_train_batch=32, val_batch=256, last_val_batch=16))
    keys = set(p.graphs)
    for gid in (G.TRANSFER_A, G.ZERO_GRAD, G.OPTIMIZER, G.NAN_CHECK_AND_GRAD_SCALING, G.CLEAR_METRICS):
        assert (SHAPE_INVARIANT, gid) in keys
        assert not any(k == (v, gid) for v in p.variants for k in keys)
    # the chains are per variant, and only where they run
    assert {v for v, g in keys if g == G.DEEP_FWD_BWD} == {"train", "train_last"}
    assert {v for v, g in keys if g == G.INF_MAIN_A} == {"val", "val_last"}
    assert p.calls("train_last", G.DEEP_FWD_BWD)[0].args["x"].shape == Shape(32, 1, 1, 1024)
    assert p.calls("val_last", G.INF_MAIN_B)[0].args["x"].shape == Shape(16, 28, 28, 1)
    # same tensors, same offsets in every variant
    a, b = p.calls("train", G.DEEP_FWD_BWD), p.calls("train_last", G.DEEP_FWD_BWD)
    assert [(x.op, [(t.id, t.offset) for t in x.args.values() if hasattr(t, "id")]) for x in a] == \
           [(x.op, [(t.id, t.offset) for t in x.args.values() if hasattr(t, "id")]) for x in b]


def test_identical_variants_collapse_to_any(models):
    p = compile_program(models.mlp_mnist, mlp_spec())  # last batches equal the batches
    assert (SHAPE_INVARIANT, G.DEEP_FWD_BWD) in p.graphs and ("train", G.DEEP_FWD_BWD) not in p.graphs
    assert p.calls("train_last", G.DEEP_FWD_BWD) == p.calls("train", G.DEEP_FWD_BWD)


def test_batch_roles():
    v = lambda name, train: VariantInfo(name, 1, 1, train)  # noqa: E731
    assert [batch_role(v(n, t)) for n, t in (("train", True), ("train_last", True), ("train_low", True),
                                             ("train_low_last", True), ("val", False), ("val_last", False))] == [
        "batch_train", "batch_train_last", "batch_train", "batch_train_last", "batch_val", "batch_val_last"]


def test_bind_reshapes_per_variant(models):
    p = compile_program(models.mlp_mnist, mlp_spec(last_train_batch=3))
    canon = {t.name: t for t in p.tensors}
    shapes = {"L0.y": {"train": Shape(128, 1, 1, 1024), "train_last": Shape(3, 1, 1, 1024)}}
    atlas = GraphAtlas(p.variants, canon, shapes)
    t = atlas.tensor("L0.y", "train_last")
    assert t.shape == Shape(3, 1, 1, 1024)
    assert (t.offset, t.slot_bytes) == (canon["L0.y"].offset, canon["L0.y"].slot_bytes)
    assert atlas.tensor("L0.y", "train") is canon["L0.y"]
    (call,) = atlas.bind([SymOp("act_fwd", {"x": "L0.y", "y": "L1.y"}, {"kind": "relu"})], SHAPE_INVARIANT)
    assert call.args["x"] is canon["L0.y"]
