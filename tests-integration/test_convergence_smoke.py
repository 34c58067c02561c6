"""benchmarks/convergence.py (issue [14]): its CPU smoke mode trains both frameworks and writes one JSON with both
sides; the twin's pieces are tr's (the update rule, the initialisation, the architectures, the crop); the verdicts
follow the runs' numbers. The smoke run takes ~15 s on an idle 2-core machine (one model, FP32, 8 steps a side)."""

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import convergence as conv  # noqa: E402
import convergence_report as report  # noqa: E402
import convergence_torch as twin  # noqa: E402


@pytest.mark.parametrize("isolate", ["--no-isolate", "--isolate"])  # --isolate: each framework in its own process
def test_smoke_trains_both_frameworks_into_one_json(tmp_path, isolate):
    out = tmp_path / "conv.json"
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "convergence.py"), "--smoke", "--models", "vgg_bn",
                        isolate, "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    doc = json.loads(out.read_text())
    runs = {r["framework"]: r for r in doc["runs"]}
    assert sorted(runs) == ["pytorch", "tr"] and doc["smoke"] and doc["part"] == "mnist"
    steps = 256 // 32
    for r in runs.values():
        assert r["error"] is None and (r["model"], r["precision"], r["seed"]) == ("vgg_bn", "fp32", 0)
        assert r["steps_per_epoch"] == steps and len(r["epochs"]) == 1 and r["applied"]["ok"]
        e = r["epochs"][0]
        assert math.isfinite(e["train_loss"]) and e["train_loss"] > 0 and 0.0 <= e["val_top1"] <= 1.0
        assert e["skipped_steps"] == 0 and e["lr"] == 0.0  # the warm-up's first step
    assert runs["tr"]["params"] == runs["pytorch"]["params"] == doc["parameters"]["vgg_bn/fp32"]["pytorch"]
    assert runs["tr"]["lr_table"] == runs["pytorch"]["lr_table"] == doc["lr_table"]["id"]
    (row,) = doc["summary_top1"]
    assert row["tr"]["final_top1"]["n"] == row["pytorch"]["final_top1"]["n"] == 1
    want = 100 * (runs["tr"]["epochs"][0]["val_top1"] - runs["pytorch"]["epochs"][0]["val_top1"])
    assert row["diff_points"] == pytest.approx(want) and not row["complete"]
    assert "final top-1 % over seeds" in p.stdout


@pytest.mark.parametrize("nesterov", [False, True])
def test_the_twin_optimizer_is_trs_update_rule(nesterov):
    from tr.algo.optimizer import SGD
    from tr.algo.update import init_state, step_bias, step_weight

    rng = np.random.default_rng(3)
    w, b = rng.standard_normal((6, 5)).astype(np.float32), rng.standard_normal(5).astype(np.float32)
    grads = [(rng.standard_normal(w.shape).astype(np.float32), rng.standard_normal(b.shape).astype(np.float32))
             for _ in range(4)]
    cfg = SGD().momentum(0.9).nesterov(nesterov).weight_decay(5e-3)
    tw, tb = torch.nn.Parameter(torch.from_numpy(w.copy())), torch.nn.Parameter(torch.from_numpy(b.copy()))
    groups = [{"params": [tw], "weight_decay": 5e-3}, {"params": [tb], "weight_decay": 0.0}]
    opt = twin.TrSGD(groups, 0.0, 0.9, nesterov)
    sw, sb = init_state(cfg.kind, w), init_state(cfg.bias_kind, b)
    for k, (gw, gb) in enumerate(grads):
        lr = 0.05 * (k + 1)
        step_weight(cfg.kind, w, gw, sw, lr, cfg)
        step_bias(cfg.kind, b, gb, sb, lr, cfg)
        for g in opt.param_groups:
            g["lr"] = lr
        tw.grad, tb.grad = torch.from_numpy(gw), torch.from_numpy(gb)
        opt.step()
    np.testing.assert_allclose(tw.detach().numpy(), w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(tb.detach().numpy(), b, rtol=1e-5, atol=1e-6)


def test_both_frameworks_build_the_same_architectures(monkeypatch):
    for name in conv.MNIST_MODELS:
        for amp in (False, True):
            got = conv.check_params(conv.Arch(name), amp)
            assert got["tr"] == got["pytorch"] > 100_000 and got["tr_padding_weights"] == 0
    # ResNet-50 under AMP: tr's first conv reads RGB padded to 4 channels, 64 x 7 x 7 weights more
    r50 = conv.check_params(conv.Arch("resnet50", classes=10, in_channels=3, side=64), True)
    assert r50["tr_padding_weights"] == 3136 and r50["tr"] - 3136 == r50["pytorch"] == 23_528_522
    # a twin one BN short of the BluePrint is refused before anything trains
    short = lambda arch: torch.nn.Sequential(*list(twin.BasicBlock(1, 4, 1).stem)[:-1])  # noqa: E731
    monkeypatch.setattr(twin, "build_model", short)
    with pytest.raises(SystemExit, match="architectures differ"):
        conv.check_params(conv.Arch("vgg_bn"), False)


def test_twin_initialisation_draws_trs_distributions():
    from tr.algo.init import Initializer, fans, initialize

    torch.manual_seed(0)
    m = twin.build_model(conv.Arch("vgg_bn"))
    twin.tr_init_(m)
    convs = [x for x in m.modules() if isinstance(x, torch.nn.Conv2d)]
    big, fc = convs[-1], [x for x in m.modules() if isinstance(x, torch.nn.Linear)][0]
    policy = Initializer()
    for layer, family in ((big, "conv"), (fc, "fc")):
        w = layer.weight.detach().numpy()
        shape = (w.shape[0], w.shape[2], w.shape[3], w.shape[1]) if w.ndim == 4 else w.shape
        fi, fo = fans(shape)
        spec = policy.spec_for(family)
        ref = initialize(spec, shape, fi, fo, seed=1, stream_id=0)
        assert np.abs(w).max() <= spec.bound(fi, fo) + 1e-7
        assert w.std() == pytest.approx(ref.std(), rel=0.03)
    assert not fc.bias.detach().abs().sum() and all((b.weight == 1).all() for b in m.modules()
                                                     if isinstance(b, torch.nn.BatchNorm2d))


def test_the_twin_crop_is_an_exact_window_of_the_padded_image():
    side, pad, n = 8, 2, 400
    img = torch.arange(side * side, dtype=torch.int32).reshape(side, side) + 1
    xp = torch.nn.functional.pad(img, (pad, pad, pad, pad)).expand(n, -1, -1).contiguous()
    out = twin.random_crop(xp, side, torch.Generator().manual_seed(0))
    seen = set()
    for k in range(n):
        hits = [(i, j) for i in range(2 * pad + 1) for j in range(2 * pad + 1)
                if torch.equal(xp[k, i:i + side, j:j + side], out[k])]
        assert len(hits) == 1
        seen.add(hits[0])
    assert len(seen) == (2 * pad + 1) ** 2  # every offset drawn: RandomCrop(side, padding=pad)'s support


def _run(fw, seed, top1, losses=(1.0,), skipped=(0,), model="vgg_bn", part="mnist", precision="fp32"):
    epochs = [{"epoch": i + 1, "train_loss": loss, "val_top1": top1, "val_loss": 0.1, "seconds": 1.0,
               "skipped_steps": s} for i, (loss, s) in enumerate(zip(losses, skipped))]
    return {"part": part, "framework": fw, "model": model, "precision": precision, "seed": seed, "error": None,
            "epochs": epochs, "applied": report.steps_applied(epochs, 1000)}


def test_verdicts_follow_the_numbers():
    runs = [_run("tr", s, t) for s, t in enumerate((0.9950, 0.9953, 0.9947))]
    runs += [_run("pytorch", s, t) for s, t in enumerate((0.9952, 0.9958, 0.9949))]
    (row,) = report.summarize_top1(runs)
    assert row["diff_points"] == pytest.approx(-0.03) and row["complete"] and row["verdict"] == "PASS"
    runs[0] = _run("tr", 0, 0.9900)
    assert report.summarize_top1(runs)[0]["verdict"] == "FAIL"
    runs[0] = _run("tr", 0, 0.9950, losses=(1, 1, 1), skipped=(5, 0, 1))  # 2,000 later steps: one probe allowed
    assert runs[0]["applied"]["ok"] and report.summarize_top1(runs)[0]["verdict"] == "PASS"
    runs[0] = _run("tr", 0, 0.9950, losses=(1, 1), skipped=(5, 3))
    assert report.summarize_top1(runs)[0]["verdict"].startswith("invalid")
    curve = [_run("pytorch", s, 0.9, losses=(2.0 + 0.1 * s, 1.0 + 0.01 * s), skipped=(0, 0), part="imagenet")
             for s in range(3)]
    inside = [_run("tr", 0, 0.9, losses=(2.05, 1.01), skipped=(0, 0), part="imagenet")]
    (c,) = report.summarize_curves(curve + inside)
    assert c["verdict"] == "PASS" and [p["inside_band"] for p in c["curve"]] == [True, True]
    outside = [_run("tr", 0, 0.9, losses=(2.05, 1.2), skipped=(0, 0), part="imagenet")]
    assert report.summarize_curves(curve + outside)[0]["verdict"] == "FAIL at epochs [2]"
