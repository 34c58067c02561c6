"""tools/plan_identity.py, the fingerprint a memory-layout refactor is checked with: deterministic, non-trivial (every
plan's tensors, its steps' branches, ops and spans, every initialised weight), training moves what it hashes, a
program with named steps is described by them, and --compare names what differs with exit code 1 (0 when equal, 2
for a file that is no fingerprint)."""

from __future__ import annotations

import copy
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tr.core.errors import ConfigError

TOOL = Path(__file__).resolve().parents[1] / "tools" / "plan_identity.py"


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("plan_identity", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules["plan_identity"] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("plan_identity", None)


@pytest.fixture(scope="module")
def plans(tool):
    """The compile-only fingerprint, taken twice in one process."""
    return tool.fingerprint(train=False), tool.fingerprint(train=False)


def _compare(a: Path, b: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), "--compare", str(a), str(b)], capture_output=True, text=True,
                          timeout=60)


def test_compile_only_fingerprints_are_deterministic_and_non_trivial(tool, plans):
    a, b = plans
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    spec_plans = [n for n in a["configs"] if n.startswith("spec_")]  # compile-only: no task, no weights
    assert list(a["configs"]) == list(tool.CONFIGS) + spec_plans and len(spec_plans) == 8 and a["trained"] is False
    for name, c in a["configs"].items():
        p, arena = c["plan"], c["plan"]["arena_bytes"]
        assert arena > 0, name
        placed = {(t[0], t[1]) for t in p["tensors"] if t[5]}
        assert len(placed) > 10, name
        assert all(0 <= off and off + slot <= arena for _, off, slot, *_ in (t for t in p["tensors"] if t[5])), name
        steps = p["steps"]
        for step in ("train_a", "train_b", "train_last_a", "val_a", "val_last_b", "transfer_a", "clear_metrics",
                     "val_end"):
            assert any(br["calls"] for br in steps[step]), (name, step)
        # the training step is its branches: the deep gradients' cast and all-reduce on the side, the rest after both
        assert [(br["stream"], br["after"]) for br in steps["train_a"]] == [
            ("COMP_1", []), ("UPDATE", [0]), ("COMP_1", [0]), ("COMP_1", [1, 2])], name
        ops = [o for parts in steps.values() for br in parts for o in br["calls"]]
        assert len(ops) > 20 and all("label" not in o and "part" not in o for o in ops), name
        args = [v for o in ops for v in o["args"].values() if v is not None]
        tensor_args = [v for v in args if v[0] != "span"]
        # an op's tensor is one of the plan's placed tensors, at the plan's offset
        assert tensor_args and all((v[0], v[1]) in placed for v in tensor_args), name
        spans = [v for v in args if v[0] == "span" and v[1] != "empty"]
        assert spans and all(0 <= v[1] < v[2] <= arena for v in spans), name
        if name in spec_plans:
            assert set(c) == {"plan"}, name
            continue
        assert len(c["initial"]) == len(p["inits"]) > 0, name
        assert all(len(h) == 64 for h in c["initial"].values()) and "trained" not in c, name
    by_config = {name: set(c["plan"]["steps"]) for name, c in a["configs"].items()}
    assert {"val_ema_a", "val_ema_last_b", "ema_prepare", "epoch_begin"} <= by_config["resnet_amp"]  # EMA, AMP
    assert {"val_transfer_a", "epoch_order", "val_begin"} <= by_config["resident_mnist"]  # the device's batches
    assert not {"val_transfer_a", "val_ema_a", "epoch_begin"} & by_config["mlp_mnist"]


def test_a_program_with_named_steps_is_described_by_them(tool):
    """The tree after the refactor: Program.steps (no per-GraphId buckets) gives the same description, a step with
    no calls is left out, an empty branch is kept, a call's label and part are not part of it."""
    from tr.core.phase import StreamKind

    t = tool.CONFIGS["resnet_amp"]()
    try:
        t.compile()
        program = t.program
        parts = tool.plan_steps(program)
        named = {name: SimpleNamespace(name=name, branches=tuple(
                     SimpleNamespace(stream=stream, after=after, calls=tuple(calls)) for stream, after, calls in p))
                 for name, p in parts.items()}
        named["nothing"] = SimpleNamespace(name="nothing", branches=(SimpleNamespace(
            stream=StreamKind.COMP_1, after=(), calls=()),))
        stepped = SimpleNamespace(steps=named, layout=program.layout, tensors=program.tensors,
                                  variants=program.variants, inits=program.inits)
        assert tool.describe_plan(stepped) == tool.describe_plan(program)

        train_a = named["train_a"].branches
        named["train_a"] = SimpleNamespace(name="train_a", branches=train_a + (
            SimpleNamespace(stream=StreamKind.UPDATE, after=(0,), calls=()),))
        got = tool.describe_plan(stepped)["steps"]["train_a"]
        assert got[-1] == {"stream": "UPDATE", "after": [0], "calls": []} and len(got) == len(train_a) + 1
    finally:
        t.feeder.close()


def test_training_is_deterministic_and_moves_every_weight(tool):
    names = ["conv_bias", "residual_bce"]
    a, b = tool.fingerprint(True, names), tool.fingerprint(True, names)
    assert a == b and list(a["configs"]) == names
    for name, c in a["configs"].items():
        assert [h["epoch"] for h in c["history"]] == [1, 2], name
        weights = [i[0] for i in c["plan"]["inits"] if i[1] in ("weight", "bias")]
        assert weights, name
        for w in weights:  # in the checkpoint, under the same name, and trained away from its initial bytes
            assert c["trained"][w] != c["initial"][w], (name, w)
        assert len(c["trained"]) > len(weights), name  # optimizer moments and counters too


def test_compare_names_a_changed_offset(tool, plans, tmp_path):
    a = plans[0]
    pa, pb, pc = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    pa.write_text(json.dumps(a))
    same = _compare(pa, pa)
    weights = sum(len(c.get("initial", {})) for c in a["configs"].values())
    assert same.returncode == 0, same.stdout + same.stderr
    assert same.stdout.strip() == f"identical: {len(a['configs'])} plans, {weights} weight tensors (0 configurations " \
                                  f"trained)"

    b = copy.deepcopy(a)
    tensors = b["configs"]["resnet_amp"]["plan"]["tensors"]
    k = next(i for i, t in enumerate(tensors) if t[5])
    tensors[k][1] += 256
    pb.write_text(json.dumps(b))
    moved = _compare(pa, pb)
    assert moved.returncode == 1, moved.stdout + moved.stderr
    off = a["configs"]["resnet_amp"]["plan"]["tensors"][k][1]
    assert moved.stdout.splitlines() == ["resnet_amp: 1 difference(s) (plan.tensors 1)",
                                         f"  plan.tensors[{k}][1]: A={off} B={off + 256}"]

    pc.write_text(json.dumps({"configs": {}}))
    bad = _compare(pa, pc)
    assert bad.returncode == 2 and "is not a format-2 fingerprint" in bad.stderr
    pc.write_text(json.dumps({**a, "format": 1}))  # the per-bucket fingerprint before plan.steps
    old = _compare(pa, pc)
    assert old.returncode == 2 and "(format 1)" in old.stderr


def test_compare_names_a_changed_call_inside_a_step(tool, plans, tmp_path):
    a = plans[0]
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    pa.write_text(json.dumps(a))
    b = copy.deepcopy(a)
    calls = b["configs"]["mobilenet_amp"]["plan"]["steps"]["val_b"][0]["calls"]
    k = next(i for i, c in enumerate(calls) if c["attrs"])
    attr = sorted(calls[k]["attrs"])[0]
    was = calls[k]["attrs"][attr]
    calls[k]["attrs"][attr] = "changed"
    pb.write_text(json.dumps(b))
    changed = _compare(pa, pb)
    assert changed.returncode == 1, changed.stdout + changed.stderr
    assert changed.stdout.splitlines() == ["mobilenet_amp: 1 difference(s) (plan.steps 1)",
                                           f"  plan.steps.val_b[0].calls[{k}].attrs.{attr}: A={was!r} B='changed'"]

    # a side branch dropped from the training step (its calls and waits moved) is a difference, however small
    b = copy.deepcopy(a)
    train = b["configs"]["conv_bias"]["plan"]["steps"]["train_b"]
    train[0]["calls"] += train.pop(1)["calls"]
    train[-1]["after"] = [1]
    rows = tool.differences(a, b)["conv_bias"]["plan.steps"]
    assert "plan.steps.train_b.<length>: A=4 B=3" in rows and len(rows) > 3
    assert list(tool.differences(a, b)) == ["conv_bias"]


def test_an_unknown_configuration_is_refused(tool):
    with pytest.raises(ConfigError, match=r"unknown configuration\(s\) \['vgg'\]; expected some of \['mlp_mnist'"):
        tool.fingerprint(False, ["vgg"])


RESULTS = TOOL.parents[1] / "benchmarks" / "results"
REFERENCE = RESULTS / "plan_identity_reference.json"
BEFORE_ROLES = RESULTS / "plan_identity_84bb0c5.json"  # the tree before the memory roles and named steps
# Plans moved on purpose since 84bb0c5 (benchmarks/RESULTS.md says why): AMP's loss-scale update went after the
# optimizer (the steps of every AMP plan), and range_ema gained an optional step argument (the EMA plans' steps
# list it, absent); nothing else moved.
MOVED_SINCE_84BB0C5 = {"conv_bias.steps", "mlp_mnist.steps", "mobilenet_amp.steps", "resident_mnist.steps",
                       "residual_bce.steps", "resnet_amp.steps", "spec_jpeg_amp_w2.steps", "spec_jpeg_jitter.steps",
                       "spec_mlp_amp_w2.steps", "spec_resident_w2.steps", "spec_resnet_amp_w2_ema.steps",
                       "spec_vgg_adam_w2_ema.steps", "spec_vgg_lars_amp.steps", "spec_vgg_lars_amp_ema_w4.steps",
                       "vgg_lars.steps"}


def test_the_plans_are_the_reference_trees(tool, plans):
    """Every configuration's plan (arena, tensors and offsets, every step's branches, calls and span bytes, init
    specs, variants) is byte for byte the reference's (`python tools/plan_identity.py --digest`), which is
    84bb0c5's, the tree before the memory roles and named steps, except for the plans moved on purpose since. A
    change that moves a plan on purpose refreshes the reference with that command, names the moved sections in
    MOVED_SINCE_84BB0C5 and says why in benchmarks/RESULTS.md."""
    ref, before = json.loads(REFERENCE.read_text()), json.loads(BEFORE_ROLES.read_text())
    assert {f"{n}.{s}" for n, d in ref["plans"].items() for s, h in d.items()
            if before["plans"][n][s] != h} == MOVED_SINCE_84BB0C5
    got = tool.plan_digests(plans[0])
    assert ref["format"] == tool.FORMAT and set(got) == set(ref["plans"])
    moved = {f"{name}.{s}" for name, d in got.items() for s, h in d.items() if ref["plans"][name][s] != h}
    assert not moved, f"plans differ from the reference's in {sorted(moved)}"
