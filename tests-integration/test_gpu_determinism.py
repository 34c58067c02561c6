"""Cross-machine determinism on the GPU: the convolutions' engines are chosen by a rule of the GPU model, the
library versions and the shape, so two fresh processes with empty plan caches (what two fresh machines are)
choose the same engines and train VGG16-BN and ResNet-50 to the same bytes over 20 steps; an autotuning cache
left by an earlier run does not move that choice; autotuned engines recorded by one run and pinned on a second
compile give the first run's bytes; and a pinned engine that cannot run is an error naming the convolution.

Each run is benchmarks/cross_machine.py in a process of its own (the plans of one process are shared in
memory), with TR_CONV=cudnn so that nothing falls back to the direct kernels unseen. GPU-only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tr.algo.optimizer import SGD
from tr.algo.scheduler import ConstantLR
from tr.core.errors import ConfigError
from tr.core.settings import Settings
from tr.graph.blueprint import cbr, fc, gap, seq
from tr.task import engines
from tr.task.deep_learning import DeepLearningTask
from tr.task.feeder import ArrayFeeder

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "cross_machine.py"


def _run(out: Path, cache: Path, *args: str, autotune: bool = False) -> dict:
    """One fresh process of cross_machine.py with its plan cache in ``cache``; its JSON."""
    env = {k: v for k, v in os.environ.items() if k not in ("TR_CUDNN_AUTOTUNE", "TR_CUDNN_CACHE")}
    env.update(TR_CONV="cudnn", TR_CUDNN_AUTOTUNE="1" if autotune else "0")
    cmd = [sys.executable, str(SCRIPT), "--cache-dir", str(cache), "--json", str(out), *args]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
    assert p.returncode == 0, f"cross_machine.py failed:\n{p.stdout}\n{p.stderr[-4000:]}"
    print(p.stdout)
    return json.loads(out.read_text())["runs"]


def _same_bytes(a: dict, b: dict) -> None:
    for key in a:
        diff = engines.differences(a[key]["engines"], b[key]["engines"])
        assert diff == [], f"{key}: the engines differ: {diff}"
        assert a[key]["losses"] == b[key]["losses"], key
        differing = [t for t in a[key]["state_tensors"] if a[key]["state_tensors"][t] != b[key]["state_tensors"][t]]
        assert a[key]["state_sha256"] == b[key]["state_sha256"], f"{key}: tensors differ: {differing[:5]}"
        assert a[key]["weights_sha256"] == b[key]["weights_sha256"]


@pytest.mark.parametrize("name", ["vgg16_bn", "resnet50"])
def test_two_fresh_processes_choose_the_same_engines_and_bytes(tmp_path, name):
    a = _run(tmp_path / "a.json", tmp_path / "cache_a", "--models", name)
    b = _run(tmp_path / "b.json", tmp_path / "cache_b", "--models", name)
    assert set(a) == {f"{name}/amp", f"{name}/fp32"}
    for key, r in a.items():
        assert r["steps"] == 20 and np.all(np.isfinite(r["losses"])), key
        assert r["sources"] == {"heuristic": len(r["engines"]["convolutions"])}, (key, r["sources"])  # no timing
    _same_bytes(a, b)
    assert not any((tmp_path / d).exists() and any((tmp_path / d).iterdir()) for d in ("cache_a", "cache_b")), \
        "the deterministic rule wrote a plan cache"


def test_an_autotuning_cache_does_not_move_the_deterministic_choice(tmp_path):
    shared = tmp_path / "shared"
    tuned = _run(tmp_path / "tuned.json", shared, "--models", "vgg16_bn", "--precision", "amp", autotune=True)
    assert tuned["vgg16_bn/amp"]["sources"].get("timed", 0) > 0  # it searched, and wrote its winners
    assert any(f.name.startswith("cudnn_plans-") for f in shared.iterdir())
    beside = _run(tmp_path / "beside.json", shared, "--models", "vgg16_bn", "--precision", "amp")
    fresh = _run(tmp_path / "fresh.json", tmp_path / "fresh", "--models", "vgg16_bn", "--precision", "amp")
    _same_bytes(beside, fresh)
    print("autotuned vs the rule:", engines.differences(tuned["vgg16_bn/amp"]["engines"],
                                                         fresh["vgg16_bn/amp"]["engines"])[:10])


@pytest.mark.parametrize("name", ["vgg16_bn", "resnet50"])
def test_autotuned_engines_pinned_on_a_second_compile_give_its_bytes(tmp_path, name):
    tuned = _run(tmp_path / "tuned.json", tmp_path / "cache_a", "--models", name, "--precision", "amp",
                 autotune=True)
    again = _run(tmp_path / "again.json", tmp_path / "cache_b", "--models", name, "--precision", "amp",
                 "--pin-from", str(tmp_path / "tuned.json"), autotune=True)
    r = again[f"{name}/amp"]
    assert r["sources"] == {"pinned": len(r["engines"]["convolutions"])}, r["sources"]  # nothing timed or cached
    _same_bytes(tuned, again)


def _small_task() -> DeepLearningTask:
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((8, 16, 16, 8)).astype(np.float32), (np.arange(8) % 4).astype(np.int32)
    feeder = ArrayFeeder((x, y), None, 4, shuffle=False, num_classes=4)
    return (DeepLearningTask(Settings().manual_seed(3).global_batch_size(4)).device("cuda").quiet()
            .model(seq(cbr(16, 3, p=1), cbr(16, 3, s=2, p=1), gap(), fc(4))).optimizer(SGD())
            .scheduler(ConstantLR(0.01)).data(feeder).total_epochs(1))


def test_a_pinned_engine_that_cannot_run_names_the_convolution(monkeypatch):
    from tr.backend.cuda import conv_engines

    monkeypatch.setenv("TR_CONV", "cudnn")
    monkeypatch.delenv("TR_CUDNN_AUTOTUNE", raising=False)
    recorded = engines.used(_small_task().compile())
    assert recorded["convolutions"] and {c["source"] for c in recorded["convolutions"]} == {"heuristic"}
    victim = recorded["convolutions"][0]
    bogus = {**recorded, "convolutions": [{**victim, "engine": "eng99999"}]}
    t = _small_task()
    with pytest.raises(ConfigError, match=f"cuDNN conv {victim['key']}: the pinned engine 'eng99999' cannot run"):
        with engines.pinned(t, bogus):
            t.compile()
    # the recorded engines themselves pin fine, and the pins are gone after the block
    t = _small_task()
    with engines.pinned(t, recorded):
        t.compile()
    assert {c["source"] for c in engines.used(t)["convolutions"]} == {"pinned"}
    assert engines.differences(engines.used(t), recorded) == []
    assert conv_engines.pins() == {}
