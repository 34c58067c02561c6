"""The relu's backward in the next fc's dx GEMM (TR_FC_DRELU=1, tr.graph.passes.fuse_drelu) trains as the
unfused plan does: on the CPU backend bit for bit in FP32 (the mask is the FP32 pre-activation's sign, the
unfused act_bwd reads the same sign from y) and within FP16 rounding under AMP; on CUDA (GPU test) within the
GEMMs' own differences (cuBLASLt's DRELU kernels are other algorithms than its plain ones)."""

import numpy as np
import pytest

from tr.algo.optimizer import SGD
from tr.algo.scheduler import ConstantLR
from tr.core.settings import Settings
from tr.graph.blueprint import BluePrint, fc, flatten, relu, seq
from tr.graph.steps import Part
from tr.task.deep_learning import DeepLearningTask
from tr.task.feeder import ArrayFeeder

STEPS, BATCH, CLASSES = 6, 32, 10
MODEL = BluePrint(seq(flatten(), fc(200), relu(), fc(130), relu(), fc(CLASSES)), name="mlp", num_classes=CLASSES)


def _train(device: str, amp: bool, fused: bool, monkeypatch) -> tuple[list[float], dict]:
    monkeypatch.setenv("TR_FC_DRELU", "1" if fused else "0")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((STEPS * BATCH, 6, 6, 2)).astype(np.float32)
    y = rng.integers(0, CLASSES, STEPS * BATCH).astype(np.int32)
    dt = np.float16 if amp else np.float32
    feeder = ArrayFeeder((x.astype(dt), y), None, BATCH, shuffle=False, num_classes=CLASSES, dtype=dt)
    s = Settings().manual_seed(7).global_batch_size(BATCH).amp(amp).loss_scaling("dynamic", init=1024.0)
    t = (DeepLearningTask(s).device(device).quiet().model(MODEL)
         .optimizer(SGD().momentum(0.9).weight_decay(1e-4)).scheduler(ConstantLR().base_lr(0.05))
         .total_epochs(1).data(feeder))
    losses: list[float] = []
    t.on_step(lambda k, r: losses.append(float(r[0])))
    t.compile()
    deep = t.program.step("train_a").calls_of(Part.DEEP_FWD_BWD.value)
    masks = sum(c.op == "fc_bwd" and c.args.get("mask") is not None for c in deep)
    assert masks == (2 if fused else 0) and any(c.op == "act_bwd" for c in deep) == (not fused)
    t.run()
    return losses, {"weights": t.weights()}


@pytest.mark.parametrize("amp", [False, True], ids=["fp32", "amp"])
def test_drelu_fusion_trains_as_the_unfused_plan_on_the_cpu(amp, monkeypatch):
    lf, f = _train("cpu", amp, True, monkeypatch)
    lu, u = _train("cpu", amp, False, monkeypatch)
    assert len(lf) == len(lu) == STEPS and np.all(np.isfinite(lf))
    if amp:  # a pre-activation that rounds to an FP16 zero passes the mask but not y > 0: rounding-level apart
        np.testing.assert_allclose(lf, lu, rtol=2e-3)
        for k in f["weights"]:
            np.testing.assert_allclose(f["weights"][k], u["weights"][k], rtol=0, atol=2e-3, err_msg=k)
    else:
        assert lf == lu
        assert all(f["weights"][k].tobytes() == u["weights"][k].tobytes() for k in f["weights"])


@pytest.mark.gpu
@pytest.mark.parametrize("amp", [False, True], ids=["fp32", "amp"])
def test_drelu_fusion_trains_as_the_unfused_plan_on_cuda(amp, monkeypatch):
    lf, f = _train("cuda", amp, True, monkeypatch)
    lu, u = _train("cuda", amp, False, monkeypatch)
    assert len(lf) == len(lu) == STEPS and np.all(np.isfinite(lf))
    np.testing.assert_allclose(lf, lu, rtol=2e-3 if amp else 1e-5)
