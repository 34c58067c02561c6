"""VGG16-BN, ResNet-50, MobileNetV2 and EfficientNet-B0 (examples/models.py, 10 classes) on the CUDA backend
against the CPU backend from the same weights and batches at small resolutions, FP32 and AMP, and
byte-identical reruns on the GPU. GPU-only.

Why the tolerances are what they are (measured on the H200, 2026-12-01). The op kernels agree with the CPU
to rounding on identical inputs (packages/tr-backend/tests/test_cuda_*.py). A whole network does not see
identical inputs: the two backends' forwards part by rounding (ResNet-50 at 64x64, FP32: the last block's
output 5e-5 apart after 53 convolutions and batch norms), and where that moves a pre-activation across zero
the relu's mask differs (19 of 65,536 elements of that output), or, in FP16, two window values of a max pool
tie on one side only; the backward then routes those gradients differently, and batch norm over a few values
spreads the difference over its whole layer. First-step gradients, worst tensor by relative norm (_errors:
floored at 1e-2 of the largest gradient): VGG16-BN 32x32 (4 a batch) FP32 1.5e-5; ResNet-50 FP32 0.166 at
32x32 (its last stage normalises over 4 values a channel), 0.018 at 64x64 with 8 a batch (32 values);
MobileNetV2 FP32 at 64x64 0.0051 (H200, 2026-12-02). AMP against the FP32 gradients of the same FP16-rounded
images, CPU / GPU (2026-12-02, the gradients unscaled: before, the test read them loss-scaled and compared two
~1000x errors): VGG16-BN 0.196 / 0.198, ResNet-50 0.96 / 0.98, MobileNetV2 0.68 / 0.60 (BN gammas and betas).
A fixed AMP bound cannot tell a kernel's error from AMP's own rounding, so the AMP tests hold the GPU's AMP
gradients to the CPU's AMP distance from FP32 gradients. The FP32 bounds sit above those figures. Over 20 SGD
steps the trajectories part further (VGG FP32: 1e-6 at step 1, 5e-3 at step 3; VGG AMP 2026-12-02: 0.1 %,
0.3 %, 4.8 % at steps 1-3, and cuDNN's engines, autotuned by timing, may differ between machines): the first
loss is held tightly, every loss must be finite, and the spread is printed.

Why VGG16-BN's FP32 bound moved from 1e-3 to 5e-2 (2026-12-04): the H200 gave 0.025 on L1.beta.grad, every
tensor near 0.022, on two machines. Nothing tr runs changed since the tree that measured 1.5e-5 (58f8ceb): the
kernels' SASS (compiled and compared here, sm_90), the builders' arguments and the plan are the same; the cuDNN
engines were autotuned in both runs and may have differed. The CPU reproduces the figure with every op right:
layer 8's relu pre-activation at [0, 2, 2, 123] lies 1.1e-6 of its rms from zero, within the 2e-6 that two valid
FP32 summation orders move that conv output; taken the other way it moves every gradient from layer 8 down by
2.2 % (0.02338 on L1.beta), with a second such flip in layer 1 0.025125 (tests-integration/test_forward_flips.py).
Noise of 3e-7 on the conv outputs gives 0.009-0.030 in 4 of 6 draws. So the end-to-end bound holds rounding-tipped
decisions; the kernels are held where rounding cannot tip by test_cnn_backward_from_one_forward_matches_cpu (both
backwards from the GPU's forward, 1e-3), test_gpu_op_by_op.py (each op, 1e-4) and test_gpu_forward_flips.py (every
decision the two forwards take differently lies within rounding of its threshold). Those three confirm the
explanation on the GPU; written on 2026-12-04 without a GPU, they first run on the next H200 session. VGG's losses
after the first step part by the same flips, so, as ResNet's, only the first is held.
"""

import numpy as np
import pytest
from op_diff import backward_from_test_forward, build_task, epoch_calls, example, fill_batch

from tr.algo.optimizer import SGD
from tr.algo.scheduler import ConstantLR
from tr.core.bf16 import round_bf16
from tr.core.memory import Role
from tr.core.settings import Settings
from tr.task.deep_learning import DeepLearningTask
from tr.task.feeder import ArrayFeeder

pytestmark = pytest.mark.gpu
STEPS, BATCH, RES, CLASSES = 20, 4, 32, 10
LOSS_SCALE = 1024.0  # AMP's first loss scale (the default 65536 overflows these nets' first step)
LR = 1e-4  # small: 20 steps of a deep net on random labels stay near-linear, so rounding does not grow chaotically


STAGED = {False: "float32", True: "float16", "bf16": "bfloat16"}  # amp -> the feeder's type


def _task(name, device, amp, steps=STEPS, res=RES, batch=BATCH, fp16_inputs=False, rounding_seed=None,
          batches=None):
    """``amp``: False, True (FP16) or "bf16"; ``fp16_inputs``: the images rounded as that AMP run stages them (True:
    FP16, "bf16": BF16), for an FP32 run on the AMP run's images; ``rounding_seed``: BF16 images each rounded up or
    down at random (from this seed) instead of to nearest; ``batches``: train on only the first of the ``steps``
    batches drawn."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((steps * batch, res, res, 3)).astype(np.float32)
    if fp16_inputs:  # an FP32 run on the AMP run's (16-bit-rounded) images
        x = round_bf16(x) if fp16_inputs == "bf16" else x.astype(np.float16).astype(np.float32)
    y = rng.integers(0, CLASSES, steps * batch).astype(np.int32)
    if rounding_seed is not None:
        x = bf16_rounded_at_random(x, rounding_seed)
    if batches is not None:
        x, y = x[:batches * batch], y[:batches * batch]
    feeder = ArrayFeeder((x, y), None, batch, shuffle=False, num_classes=CLASSES, dtype=STAGED[amp])
    s = Settings().manual_seed(11).global_batch_size(batch).amp(amp)
    if amp is True:  # a first loss scale that does not overflow the first FP16 step (the default 65536 does)
        s.loss_scaling("dynamic", init=LOSS_SCALE)
    t = (DeepLearningTask(s).device(device).quiet().model(example(name, CLASSES))
         .optimizer(SGD().momentum(0.9).nesterov(True).weight_decay(1e-4))
         .scheduler(ConstantLR().base_lr(LR)).total_epochs(1).data(feeder))
    losses = []
    t.on_step(lambda k, r: losses.append(float(r[0])))
    return t, losses


def bf16_rounded_at_random(x, seed):
    """Each FP32 value replaced by one of the two BF16 values around it, picked at random: an equally valid BF16
    rounding (off by one BF16 ulp from round-to-nearest in about half the elements)."""
    raw = np.ascontiguousarray(x, np.float32).view(np.uint32)
    bits = raw & np.uint32(0xFFFF0000)
    up = (np.random.default_rng(seed).random(x.shape) < 0.5) & (bits != raw)  # (a BF16 value stays itself)
    return (bits + up.astype(np.uint32) * np.uint32(0x10000)).view(np.float32)


def _gradients(task, amp):
    """The FP32 gradient of every trained tensor (AMP's FP16 ones are cast into these), by name, unscaled: under
    AMP the gradient regions hold the loss-scaled gradients (the optimizer divides by the scale), so they are
    divided by the step's scale here; the step must have been applied (its scale unchanged, not halved)."""
    scale = 1.0
    if amp is True:  # FP16 (BF16 has no loss scale)
        (t,) = [t for t in task.program.tensors if t.name == "loss_scale"]
        scale = float(task.backend.read(t).ravel()[0])
        assert scale == LOSS_SCALE, f"the first AMP step was skipped (loss scale now {scale})"
    return {t.name: task.backend.read(t).astype(np.float64) / scale for t in task.program.tensors
            if t.region.role is Role.GRAD and t.allocated}


def _first_step(name, device, amp, **size):
    task, losses = _task(name, device, amp, steps=1, **size)
    task.compile().run()
    assert task.backend.name == device
    return _gradients(task, amp), losses[0]


def _errors(got, want):
    """Each tensor's relative error ||got - want|| / max(||want||, 1e-2 * the largest ||want||), worst first.
    The floor is for gradients that are zero in exact arithmetic, where a relative error measures only
    rounding: in MobileNetV2 the beta of a BN whose output feeds a 1x1 conv and a training-mode BN (the linear
    bottleneck into the next expansion) has the gradient sum_k W[k, c] * sum(dL/dz_k) = 0, since a
    training-mode BN's input gradient sums to zero over its positions."""
    floor = 1e-2 * max(float(np.linalg.norm(w)) for w in want.values())
    errs = {k: float(np.linalg.norm(got[k] - want[k]) / max(np.linalg.norm(want[k]), floor, 1e-30)) for k in want}
    return sorted(errs.items(), key=lambda kv: -kv[1])


def _norms(want, names):
    return {k: float(np.linalg.norm(want[k])) for k in names}


# (model, resolution, batch, bound on the worst tensor's relative FP32 gradient error): see the docstring
FIRST_STEP = [("vgg16_bn", 32, 4, 5e-2), ("resnet50", 64, 8, 5e-2), ("mobilenet_v2", 64, 8, 2e-2),
              ("efficientnet_b0", 64, 8, 2e-2)]


@pytest.mark.parametrize("name,res,batch,bound", FIRST_STEP, ids=[f"{m}-fp32-{r}px" for m, r, _, _ in FIRST_STEP])
def test_cnn_first_step_gradients_match_cpu(name, res, batch, bound):
    gc, lc = _first_step(name, "cpu", False, res=res, batch=batch)
    gg, lg = _first_step(name, "cuda", False, res=res, batch=batch)
    assert lg == pytest.approx(lc, rel=1e-4)
    worst = _errors(gg, gc)[:8]
    print(name, f"FP32 {res}px", "worst relative gradient errors", worst, "their CPU norms",
          _norms(gc, [k for k, _ in worst]), "largest norm", max(_norms(gc, gc).values()))
    assert worst[0][1] <= bound, f"worst relative gradient errors: {worst}"


@pytest.mark.parametrize("name,res,batch", [(m, r, b) for m, r, b, _ in FIRST_STEP],
                         ids=[f"{m}-amp-{r}px" for m, r, _, _ in FIRST_STEP])
def test_cnn_first_step_amp_gradients_are_as_close_to_fp32_as_the_cpus(name, res, batch):
    """AMP's FP16 activations put each backend's gradients some way from the FP32 ones by rounding alone (and
    flip relu masks and pool ties differently on each side), so the GPU's AMP gradients are held to the CPU's
    AMP error: against the CPU's FP32 gradients of the same FP16-rounded images, the GPU's worst tensor is no
    farther than twice the CPU's worst (two draws of the same rounding noise), plus 0.01."""
    ref, _ = _first_step(name, "cpu", False, res=res, batch=batch, fp16_inputs=True)
    gc, lc = _first_step(name, "cpu", True, res=res, batch=batch)
    gg, lg = _first_step(name, "cuda", True, res=res, batch=batch)
    assert lg == pytest.approx(lc, rel=5e-2)
    cpu_err, gpu_err = _errors(gc, ref), _errors(gg, ref)
    print(name, f"AMP {res}px: worst relative errors against FP32, CPU", cpu_err[:4], "GPU", gpu_err[:4],
          "GPU against CPU", _errors(gg, gc)[:4])
    assert gpu_err[0][1] <= 2 * cpu_err[0][1] + 0.01, f"GPU {gpu_err[:8]}, CPU {cpu_err[:8]}"


@pytest.mark.parametrize("amp", [False, True], ids=["fp32", "amp"])
@pytest.mark.parametrize("name", ["vgg16_bn", "resnet50"])
def test_cnn_cuda_matches_cpu_over_20_steps(name, amp):
    cpu, lc = _task(name, "cpu", amp)
    gpu, lg = _task(name, "cuda", amp)
    cpu.compile().run()
    gpu.compile().run()
    assert gpu.backend.name == "cuda" and len(lg) == len(lc) == STEPS
    assert np.all(np.isfinite(lg)) and np.all(np.isfinite(lc))
    # the same weights: only the forward differs (ResNet-50 at 32x32 normalises its last stage over 4 values a
    # channel, which magnifies the forward's rounding: 1.2e-4 apart in FP32, and in AMP 10 % (3.579 against
    # 3.256), measured on the H200 2026-12-01); AMP's first loss is held to the CPU's AMP distance from the FP32
    # loss of the same FP16-rounded images, as the first-step gradients are
    if amp:
        fp32, lf = _task(name, "cpu", False, fp16_inputs=True)  # the same batches (and labels) as the AMP runs
        fp32.compile().run()
        ref = lf[0]
        assert abs(lg[0] - ref) <= 2 * abs(lc[0] - ref) + 1e-2 * abs(ref), (lg[0], lc[0], ref)
    else:
        assert lg[0] == pytest.approx(lc[0], rel=1e-3 if name == "resnet50" else 1e-4)
    print(f"{name} {'AMP' if amp else 'FP32'}: relative loss differences by step",
          np.round(np.abs(np.array(lg) - lc) / np.abs(lc), 4).tolist())


@pytest.mark.parametrize("name", ["vgg16_bn", "resnet50", "mobilenet_v2"])
def test_two_cuda_runs_are_byte_identical(name):
    a, la = _task(name, "cuda", amp=True)
    b, lb = _task(name, "cuda", amp=True)
    a.compile().run()
    b.compile().run()
    assert la == lb
    wa, wb = a.weights(), b.weights()
    assert all(wa[k].tobytes() == wb[k].tobytes() for k in wa)


@pytest.mark.parametrize("name,res,batch", [(m, r, b) for m, r, b, _ in FIRST_STEP],
                         ids=[f"{m}-fp32-{r}px" for m, r, _, _ in FIRST_STEP])
def test_cnn_backward_from_one_forward_matches_cpu(name, res, batch):
    """The first step's gradients, both backends' backwards run from the GPU's forward (the CPU's arena takes the
    GPU's after the forward: tools/testkit/op_diff.backward_from_test_forward), so a relu or pool decision that
    rounding tipped the other way in one forward cannot part them: every gradient within 1e-3 of the CPU's
    (_errors), what the end-to-end test held VGG16-BN to before such a flip was found."""
    cpu = build_task(example(name, CLASSES), "cpu", False, res, batch, CLASSES)
    gpu = build_task(example(name, CLASSES), "cuda", False, res, batch, CLASSES)
    fill_batch(gpu, CLASSES)
    grads = backward_from_test_forward(cpu, gpu, epoch_calls(gpu.program))
    want = {k: r.astype(np.float64) for k, (r, _) in grads.items()}
    got = {k: t.astype(np.float64) for k, (_, t) in grads.items()}
    worst = _errors(got, want)[:8]
    print(name, f"FP32 {res}px, backwards from the GPU's forward: worst relative gradient errors", worst)
    assert worst[0][1] <= 1e-3, f"worst relative gradient errors: {worst}"
