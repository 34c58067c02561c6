"""tr.task.engines without a GPU: a task's description of its engines (the CPU backend has no choice to
record), pinning recorded engines before compile (the round trip through a stand-in CUDA backend, and through
the extension's pins where it has them), the checks on what is pinned, and comparing two descriptions."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tr.algo.optimizer import SGD
from tr.algo.scheduler import ConstantLR
from tr.backend.cuda import conv_engines
from tr.backend.cuda.attention_engines import AttentionEngine
from tr.backend.cuda.conv_engines import ConvEngine
from tr.backend.cuda.native import native_module
from tr.core.errors import ConfigError, PhaseError
from tr.core.phase import Phase
from tr.core.settings import Settings
from tr.graph.blueprint import conv, fc, flatten, relu, seq
from tr.task import engines
from tr.task.deep_learning import DeepLearningTask
from tr.task.feeder import ArrayFeeder

native = native_module()
FACTS = {"gpu": "NVIDIA H200", "capability": "9.0", "multiprocessors": 132, "cudnn": 92400, "cudnn_frontend": 13200,
         "cublaslt": 130101, "cudnn_workspace_cap_mb": 1024, "cublaslt_workspace_bytes": 1 << 25, "conv": "auto",
         "choice": "autotune", "pinned": 0}
RECORDS = [ConvEngine("fprop:n4:h8:w8:c3:k4:r3:s3:sh1:sw1:ph1:pw1:FP32,FP32,FP32:tf32=0", "fprop", "eng12_k2=1_k3=0",
                      "timed", 2, 4096, 8, "conv_fwd"),
           ConvEngine("wgrad:n4:h8:w8:c3:k4:r3:s3:sh1:sw1:ph1:pw1:FP32,FP32,FP32:tf32=0", "wgrad", "direct", "direct",
                      op="conv_bwd", note="direct conv wgrad (cuDNN: no deterministic engine without TF32)")]
ATTENTION = [AttentionEngine("bprop:FP16:n2:t197:h12:d64:qkv=453888,64,2304,1:o=151296,64,768,1:det=1:scale=0x3e000000",
                             "attention_bwd", "eng8_k3=1", "cudnn", workspace=1 << 20),
             AttentionEngine("fprop:FP32:n2:t197:h12:d64:qkv=453888,64,2304,1:o=151296,64,768,1:stats=1:"
                             "scale=0x3e000000", "attention_fwd", "kernel", "kernel", note="FP32 attention ...")]


def _task(device: str = "cpu") -> DeepLearningTask:
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((8, 8, 8, 3)).astype(np.float32), (np.arange(8) % 2).astype(np.int32)
    feeder = ArrayFeeder((x, y), None, 4, shuffle=False, num_classes=2)
    return (DeepLearningTask(Settings().manual_seed(1).global_batch_size(4)).device(device).quiet()
            .model(seq(conv(4, 3, p=1), relu(), flatten(), fc(2))).optimizer(SGD())
            .scheduler(ConstantLR(0.01)).data(feeder).total_epochs(1))


class _CudaBackend:
    """What used() reads of a CUDA backend: its name and the engines its captures recorded."""

    name = "cuda"

    def conv_engines(self) -> list[ConvEngine]:
        return list(RECORDS)

    def attention_engines(self) -> list[AttentionEngine]:
        return list(ATTENTION)


class _CompiledOnCuda:
    phase = Phase.COMPILED
    backend = _CudaBackend()


@pytest.fixture
def on_cuda(monkeypatch):
    monkeypatch.setattr(conv_engines, "facts", lambda backend: dict(FACTS))
    return _CompiledOnCuda()


@pytest.fixture
def pin_calls(monkeypatch) -> list[dict[str, str]]:
    calls: list[dict[str, str]] = []
    monkeypatch.setattr(conv_engines, "pin", lambda pins: calls.append(dict(pins)))
    return calls


def test_a_cpu_task_describes_no_engine_choice():
    t = _task()
    with pytest.raises(PhaseError, match="needs a compiled task; the task is in PLANNING"):
        engines.used(t)
    assert engines.used(t.compile()) == {"backend": "cpu", "convolutions": []}


def test_a_cuda_task_describes_its_engines_and_their_facts(on_cuda):
    d = engines.used(on_cuda)
    assert d == {"backend": "cuda", **FACTS, "convolutions": [r.as_dict() for r in RECORDS],
                 "attention": [r.as_dict() for r in ATTENTION]}
    assert d["convolutions"][0]["source"] == "timed" and d["convolutions"][1]["engine"] == "direct"
    assert engines.malformed(d) is None


def test_recorded_engines_are_pinned_before_compile(on_cuda, pin_calls):
    pins = engines.pin(_task("cuda"), engines.used(on_cuda))
    assert pins == {r.key: r.engine for r in RECORDS} and pin_calls == [pins]


def test_pinning_comes_before_compile_and_needs_a_description(pin_calls):
    compiled = _task().compile()
    with pytest.raises(PhaseError, match="must come before compile"):
        engines.pin(compiled, {"convolutions": []})
    with pytest.raises(ConfigError, match="a dict with a 'convolutions' list"):
        engines.pin(_task("cuda"), [RECORDS[0].as_dict()])
    with pytest.raises(ConfigError, match="recorded convolution 0"):
        engines.pin(_task("cuda"), {"convolutions": [{"engine": "eng1"}]})
    clash = [RECORDS[0].as_dict(), {**RECORDS[0].as_dict(), "engine": "eng7"}]
    with pytest.raises(ConfigError, match="two engines for convolution fprop:n4"):
        engines.pin(_task("cuda"), {"convolutions": clash})
    assert pin_calls == []


def test_a_task_on_the_cpu_backend_pins_nothing(on_cuda, pin_calls, monkeypatch):
    import tr.backend.registry as registry

    monkeypatch.setattr(registry, "cuda_available", lambda: True)  # "auto" would take CUDA here
    recorded = engines.used(on_cuda)
    assert engines.pin(_task("cpu"), recorded) == {} and pin_calls == []
    t = _task("auto")
    t.config.settings.use_cpu()  # the settings choose the CPU backend for an "auto" task
    assert engines.pin(t, recorded) == {} and pin_calls == []
    assert engines.pin(_task("auto"), recorded) != {} and len(pin_calls) == 1


def test_autotuned_says_whether_timing_chose_an_engine(on_cuda):
    d = engines.used(on_cuda)
    assert engines.autotuned(d)  # RECORDS[0] was timed
    by_rule = {**d, "convolutions": [{**c, "source": "heuristic"} for c in d["convolutions"]]}
    assert not engines.autotuned(by_rule) and not engines.autotuned({"backend": "cpu", "convolutions": []})
    assert engines.autotuned({**d, "convolutions": [{**d["convolutions"][0], "source": "cache"}]})


def test_differences_name_the_facts_then_the_engines(on_cuda):
    a = engines.used(on_cuda)
    assert engines.differences(a, a) == []
    b: dict[str, Any] = {**a, "gpu": "NVIDIA H100", "convolutions": [{**a["convolutions"][0], "engine": "eng3"}]}
    assert engines.differences(a, b) == [
        "gpu: 'NVIDIA H200' / 'NVIDIA H100'",
        f"{RECORDS[0].key}: eng12_k2=1_k3=0 / eng3",
        f"{RECORDS[1].key}: direct / not run"]
    timed_vs_pinned = {**a, "convolutions": [{**r, "source": "pinned"} for r in a["convolutions"]]}
    assert engines.differences(a, timed_vs_pinned) == []  # the engines are what decides the bytes


def test_differences_compare_the_attention_engines_where_both_record_them(on_cuda):
    a = engines.used(on_cuda)
    kernels = {**a, "attention": [{**r, "engine": "kernel", "source": "kernel"} for r in a["attention"]]}
    assert engines.differences(a, kernels) == [f"attention {ATTENTION[0].key}: eng8_k3=1 / kernel"]
    older = {k: v for k, v in a.items() if k != "attention"}  # a manifest from before attention was recorded
    assert engines.differences(older, a) == [] and engines.malformed(older) is None


def test_a_malformed_attention_list_is_named():
    d = {"backend": "cuda", "convolutions": [], "attention": {"key": "x"}}
    assert engines.malformed(d) == "'attention' is dict, not a list"
    d["attention"] = [{"key": "fprop:...", "engine": 3}]
    assert engines.malformed(d).startswith("attention op 0 is {'key': 'fprop:...', 'engine': 3}")


@pytest.mark.skipif(native is None or not hasattr(native, "set_cudnn_conv_pins"),
                    reason="tr.backend._native without engine pins (an older build)")
def test_pins_reach_the_extension_and_the_scoped_form_restores(on_cuda):
    recorded = engines.used(on_cuda)
    before = "dgrad:n4:h8:w8:c3:k4:r3:s3:sh1:sw1:ph1:pw1:FP32,FP32,FP32:tf32=0"
    conv_engines.pin({before: "eng1"})
    try:
        with engines.pinned(_task("cuda"), recorded) as pins:
            assert conv_engines.pins() == pins == {r.key: r.engine for r in RECORDS}
        assert conv_engines.pins() == {before: "eng1"}
        engines.unpin()
        assert conv_engines.pins() == {}
    finally:
        conv_engines.unpin()


def test_sources_counts_the_plans_by_how_their_engine_was_chosen():
    recorded = {"convolutions": [{"source": "heuristic"}, {"source": "timed"}, {"source": "heuristic"}]}
    assert engines.sources(recorded) == {"heuristic": 2, "timed": 1}
    assert engines.sources({"backend": "cpu", "convolutions": []}) == {}
