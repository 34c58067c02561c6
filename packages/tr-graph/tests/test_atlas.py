from tr_graph_testlib import compile_bound, mlp_spec, part_calls

from tr.core.shape import Shape
from tr.graph.atlas import PER_VARIANT, GraphAtlas, batch_role, lookup
from tr.graph.graph import SymOp
from tr.graph.steps import Part as P
from tr.tensor.program import SHAPE_INVARIANT, VariantInfo


def _ids(calls):
    return [(x.op, [(t.id, t.offset) for t in x.args.values() if hasattr(t, "id")]) for x in calls]


def test_shape_invariant_parts_bound_once(models):
    p, bound = compile_bound(models.mlp_mnist, mlp_spec(last_train_batch=32, val_batch=256, last_val_batch=16))
    keys = set(bound)
    for part in (P.TRANSFER_A, P.ZERO_GRAD, P.OPTIMIZER, P.CHECK_FINITE, P.CLEAR_METRICS):
        assert (SHAPE_INVARIANT, part) in keys
        assert not any(k == (v, part) for v in p.variants for k in keys)
    # the chains are per variant, and only where they run
    assert {v for v, g in keys if g == P.DEEP_FWD_BWD} == {"train", "train_last"}
    assert {v for v, g in keys if g == P.INFER_A} == {"val", "val_last"}
    assert lookup(bound, "val", P.FIRST_FWD_A) == () == lookup(bound, "train", P.INFER_A)
    assert lookup(bound, "train_last", P.DEEP_FWD_BWD)[0].args["x"].shape == Shape(32, 1, 1, 1024)
    assert lookup(bound, "val_last", P.INFER_B)[0].args["x"].shape == Shape(16, 28, 28, 1)
    # same tensors, same offsets in every variant
    a, b = lookup(bound, "train", P.DEEP_FWD_BWD), lookup(bound, "train_last", P.DEEP_FWD_BWD)
    assert _ids(a) == _ids(b)
    # the steps hold exactly these bound calls: the full batch's in train_*, the last batch's in train_last_*
    assert part_calls(p, "train_a", P.DEEP_FWD_BWD) == part_calls(p, "train_b", P.DEEP_FWD_BWD) == a
    assert part_calls(p, "train_last_a", P.DEEP_FWD_BWD) == b and a != b
    assert part_calls(p, "val_last_b", P.INFER_B) == lookup(bound, "val_last", P.INFER_B)
    assert part_calls(p, "transfer_a", P.TRANSFER_A) == bound[(SHAPE_INVARIANT, P.TRANSFER_A)]


def test_identical_variants_collapse_to_any(models):
    _, bound = compile_bound(models.mlp_mnist, mlp_spec())  # last batches equal the batches
    assert (SHAPE_INVARIANT, P.DEEP_FWD_BWD) in bound and ("train", P.DEEP_FWD_BWD) not in bound
    assert lookup(bound, "train_last", P.DEEP_FWD_BWD) == lookup(bound, "train", P.DEEP_FWD_BWD)
    assert lookup(bound, "train", P.DEEP_FWD_BWD) == bound[(SHAPE_INVARIANT, P.DEEP_FWD_BWD)]
    # the metric sums weigh by each variant's own batch scalar, so they never collapse
    assert {v for v, g in bound if g == P.ACCUM_METRICS} == {"train", "train_last", "val", "val_last"}


def test_lookup_of_an_absent_part_is_empty(models):
    _, bound = compile_bound(models.mlp_mnist, mlp_spec())  # FP32, no BN, no EMA
    for part in (P.CAST_WORKING, P.FOLD_RUNNING, P.EMA_UPDATE, P.INFER_EMA_A):
        assert lookup(bound, "train", part) == () and not any(g == part for _, g in bound)


def test_every_bound_call_carries_its_part(models):
    _, bound = compile_bound(models.resnet50, mlp_spec(input_shape=(64, 64, 3), num_classes=1000, batch=2, amp=True,
                                                       last_train_batch=1, ema_decay=0.9))
    assert {g for _, g in bound} >= {P.DEEP_FWD_BWD, P.CAST_EARLY, P.CAST_LATE, P.PREPARE_EMA, P.INFER_EMA_B,
                                     P.FOLD_RUNNING, P.EMA_START, P.SEMA_SWITCH}
    for (variant, part), calls in bound.items():
        assert calls and {c.part for c in calls} == {part.value}, (variant, part)
        assert variant == SHAPE_INVARIANT or part in PER_VARIANT


def test_batch_roles():
    v = lambda name, train: VariantInfo(name, 1, 1, train)  # noqa: E731
    assert [batch_role(v(n, t)) for n, t in (("train", True), ("train_last", True), ("val", False),
                                             ("val_last", False))] == [
        "batch_train", "batch_train_last", "batch_val", "batch_val_last"]


def test_bind_reshapes_per_variant(models):
    p, _ = compile_bound(models.mlp_mnist, mlp_spec(last_train_batch=3))
    canon = {t.name: t for t in p.tensors}
    shapes = {"L0.y": {"train": Shape(128, 1, 1, 1024), "train_last": Shape(3, 1, 1, 1024)},
              "L1.y": {"train": Shape(128, 1, 1, 512), "train_last": Shape(3, 1, 1, 512)}}
    atlas = GraphAtlas(p.variants, canon, shapes)
    t = atlas.tensor("L0.y", "train_last")
    assert t.shape == Shape(3, 1, 1, 1024)
    assert (t.offset, t.slot_bytes) == (canon["L0.y"].offset, canon["L0.y"].slot_bytes)
    assert atlas.tensor("L0.y", "train") is canon["L0.y"]
    op = SymOp("act_fwd", {"x": "L0.y", "y": "L1.y"}, {"kind": "relu"})
    (call,) = atlas.bind([op], SHAPE_INVARIANT)
    assert call.args["x"] is canon["L0.y"] and call.part == ""
    (labelled,) = atlas.bind([op], "train_last", P.DEEP_FWD_BWD)
    assert labelled.part == "deep_fwd_bwd" and labelled.args["x"].shape == Shape(3, 1, 1, 1024)
    assert labelled.args["y"].shape == Shape(3, 1, 1, 512) and labelled.args["y"].offset == canon["L1.y"].offset
