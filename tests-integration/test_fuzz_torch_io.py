"""Fuzzing the torch interop mapping (tr.task.torch_io): state_dicts given to load_torch with tensors of
permuted shapes, missing, extra or renamed, of other dtypes, the wrong ndim, 0-size, int values, values that are
not tensors, modules in another order; and nn.Modules with layers swapped, removed, inserted or of another type.

Accepted outcomes: a load whose weights, exported again (to_torch_state_dict with the same template), are the
template's values in float32 (a conv bias tr has no place for: folded into the next BN's running mean, as
documented), and for a module of the original layers the same logits as torch; or a ConfigError, ShapeError,
DTypeError or DataError naming a torch tensor or module (or tr's layer), with tr's arena as it was.
Non-finite values are a suite of their own (test_fuzz_non_finite_values). One compiled task per model.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from parser_fuzz import one_process, print_total, run_cases

torch = pytest.importorskip("torch")
nn = torch.nn

from tr.algo.optimizer import SGD  # noqa: E402
from tr.core.errors import ConfigError, DataError, DTypeError, ShapeError  # noqa: E402
from tr.core.settings import Settings  # noqa: E402
from tr.graph.blueprint import bn, conv, fc, flatten, maxpool, relu, seq  # noqa: E402
from tr.task.deep_learning import DeepLearningTask  # noqa: E402
from tr.task.feeder import ArrayFeeder  # noqa: E402
from tr.task.predict import predict  # noqa: E402
from tr.task.torch_io import load_torch, to_torch_state_dict  # noqa: E402

PLANNED = {"torch_io mlp": 1000, "torch_io cnn": 1200, "torch_io biased conv": 800, "torch_io non-finite": 150}
ACCEPT = (ConfigError, ShapeError, DTypeError, DataError)
FORWARD_EVERY = 4  # unmutated-architecture loads between two logits comparisons with torch
_counts: dict[str, int] = {}


# ---- the models: tr's BluePrint, its sample shape, and the torch model it maps to --------------------------
def _mlp():
    return (seq(fc(8), relu(), fc(3)), (2, 2, 3),
            lambda: nn.Sequential(nn.Flatten(), nn.Linear(12, 8), nn.ReLU(), nn.Linear(8, 3)))


def _cnn():  # torch's conv bias (tr's conv has none) is folded into the BN's running mean
    return (seq(conv(4, 3, 1, 1), bn(), relu(), maxpool(2, 2), flatten(), fc(3)), (4, 4, 3),
            lambda: nn.Sequential(nn.Conv2d(3, 4, 3, 1, 1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                                  nn.Flatten(), nn.Linear(16, 3)))


def _biased():
    return (seq(conv(4, 3, 1, 1, bias=True), relu(), flatten(), fc(3)), (4, 4, 3),
            lambda: nn.Sequential(nn.Conv2d(3, 4, 3, 1, 1), nn.ReLU(), nn.Flatten(), nn.Linear(64, 3)))


MODELS = {"torch_io mlp": _mlp, "torch_io cnn": _cnn, "torch_io biased conv": _biased}


class Model:
    """A compiled task and the torch model it maps to (with non-trivial BN statistics)."""

    def __init__(self, make: Callable) -> None:
        bp, self.hwc, self.torch_model = make()
        x = np.random.default_rng(3).standard_normal((4, *self.hwc)).astype(np.float32)
        feeder = ArrayFeeder((x, np.arange(4, dtype=np.int32) % 3), (x[:2], np.zeros(2, np.int32)), 2,
                             shuffle=False, num_classes=3)
        self.task = (DeepLearningTask(Settings().manual_seed(5).global_batch_size(2)).device("cpu").quiet()
                     .model(bp).optimizer(SGD()).total_epochs(1).data(feeder)).compile()
        self.x = x[:2]
        with torch.random.fork_rng(), torch.no_grad():  # the other tests' torch RNG stays as it was
            torch.manual_seed(0)
            self.base = self.torch_model().eval()
            for m in self.base.modules():
                if isinstance(m, nn.BatchNorm2d):
                    m.running_mean.copy_(torch.randn(m.num_features) * 0.1)
                    m.running_var.copy_(torch.rand(m.num_features) + 0.5)


# ---- mutations of a state_dict ---------------------------------------------------------------------------

def _prefix(key: Any) -> str:
    return key.rpartition(".")[0] if isinstance(key, str) else ""


def _float_keys(sd: dict) -> list[str]:
    return [k for k, v in sd.items() if torch.is_tensor(v) and v.is_floating_point()]


def mutate_state(sd: dict[str, Any], r: np.random.Generator) -> tuple[dict[str, Any], str, bool]:
    """One edit of a copy of ``sd`` (finite values only); returns (state_dict, recipe, whether the layout of
    tensors is still the original one)."""
    sd = {k: v.clone() if torch.is_tensor(v) else copy.deepcopy(v) for k, v in sd.items()}
    keys = list(sd)
    tensors = [k for k in keys if torch.is_tensor(sd[k]) and isinstance(k, str)]
    if not tensors:
        return sd, "no tensor left to edit", False
    key = tensors[int(r.integers(0, len(tensors)))]
    v = sd[key]
    k = int(r.integers(0, 13))
    if k == 0 and v.dim() >= 2:
        sd[key] = v.permute(*reversed(range(v.dim()))).contiguous()
        return sd, f"{key}: shape {tuple(v.shape)} permuted", False
    if k == 1:
        del sd[key]
        return sd, f"{key}: missing", False
    if k == 2:
        extra = [(f"{_prefix(key)}.extra", torch.ones(3)), ("extra.weight", torch.ones(3, 3)),
                 ("extra.weight", torch.ones(2, 2, 1, 1)), (f"{_prefix(key)}.running_mean", torch.zeros(5)),
                 ("head.bias", torch.ones(3))][int(r.integers(0, 5))]
        sd[extra[0]] = extra[1]
        return sd, f"{extra[0]}: added {tuple(extra[1].shape)}", False
    if k == 3:
        new = [f"{key}_", f"{_prefix(key)}x.{key.rpartition('.')[2]}", key.rpartition(".")[2],
               f"{_prefix(key)}.kernel"][int(r.integers(0, 4))]
        sd = {(new if kk == key else kk): vv for kk, vv in sd.items()}
        return sd, f"{key}: renamed {new}", False
    if k == 4:
        dt = [torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.uint8, torch.bool,
              torch.complex64][int(r.integers(0, 8))]
        sd[key] = v.to(dt)
        return sd, f"{key}: dtype {v.dtype} -> {dt}", True
    if k == 5:
        new = [v.unsqueeze(0), v.reshape(-1), v[0] if v.dim() and len(v) else v[None],
               v.reshape(()) if v.numel() == 1 else v[None, None]][int(r.integers(0, 4))]
        sd[key] = new
        return sd, f"{key}: ndim {v.dim()} -> {new.dim()}", False
    if k == 6:
        new = [torch.empty(0), v[:0] if v.dim() else v[None][:0],
               torch.empty(*(0 for _ in range(max(1, v.dim()))))][int(r.integers(0, 3))]
        sd[key] = new
        return sd, f"{key}: 0-size {tuple(new.shape)}", False
    if k == 7:
        new = [v.tolist(), v.numpy(), float(v.sum()), None, "weights", {"a": 1}, [[1.0, 2.0], [3.0]]][
            int(r.integers(0, 7))]
        sd[key] = new
        return sd, f"{key}: a {type(new).__name__} instead of a tensor", isinstance(new, (list, np.ndarray))
    if k == 8:
        sd[key] = (v * 4).round().long() if v.is_floating_point() else v
        return sd, f"{key}: int64 values", True
    if k == 9:  # module groups in another order (layers swapped)
        groups: dict[str, list[str]] = {}
        for kk in keys:
            groups.setdefault(_prefix(kk), []).append(kk)
        names = list(groups)
        i, j = sorted(int(x) for x in r.choice(len(names), 2, replace=len(names) < 2))
        names[i], names[j] = names[j], names[i]
        sd = {kk: sd[kk] for n in names for kk in groups[n]}
        return sd, f"modules {names[j]!r} and {names[i]!r} swapped", i == j
    if k == 10 and key.endswith("num_batches_tracked"):
        sd[key] = [torch.tensor(-1), torch.tensor(2.5), torch.tensor([1, 2])][int(r.integers(0, 3))]
        return sd, f"{key}: {sd[key]}", True
    if k == 11:  # another architecture's size: one dimension grown
        if v.dim():
            d = int(r.integers(0, v.dim()))
            sd[key] = torch.cat([v, v.narrow(d, 0, 1)], d)
            return sd, f"{key}: shape {tuple(v.shape)} -> {tuple(sd[key].shape)}", False
    if v.is_floating_point():  # valid: other finite values (BN variances kept positive)
        sd[key] = v * 2 + (0.5 if "var" in key else -0.25)
    return sd, f"{key}: values changed", True


# ---- mutations of a module -------------------------------------------------------------------------------
_EXTRA_LAYERS: list[Callable[[], Any]] = [
    lambda: nn.Linear(8, 8), lambda: nn.Conv2d(4, 4, 1), lambda: nn.BatchNorm2d(4), lambda: nn.BatchNorm1d(4),
    lambda: nn.LayerNorm(4), lambda: nn.Conv1d(4, 4, 1), lambda: nn.Embedding(4, 4), lambda: nn.GroupNorm(2, 4),
    lambda: nn.InstanceNorm2d(4, affine=True, track_running_stats=True), lambda: nn.ConvTranspose2d(4, 4, 3, 1, 1),
    lambda: nn.Identity(), lambda: nn.Dropout(), lambda: nn.AdaptiveAvgPool2d(2), lambda: nn.Tanh(),
]
_SAME_SHAPES: dict[type, list[Callable[[Any], Any]]] = {
    nn.BatchNorm2d: [lambda m: nn.BatchNorm1d(m.num_features), lambda m: nn.InstanceNorm2d(
        m.num_features, affine=True, track_running_stats=True), lambda m: nn.GroupNorm(1, m.num_features)],
    nn.Conv2d: [lambda m: nn.ConvTranspose2d(m.out_channels, m.in_channels, m.kernel_size, m.stride, m.padding),
                lambda m: nn.Conv2d(m.in_channels, m.out_channels, m.kernel_size, 2, m.padding)],
    nn.Linear: [lambda m: nn.Bilinear(m.in_features, 1, m.out_features)],
    nn.ReLU: [lambda m: nn.GELU(), lambda m: nn.Sigmoid()],
    nn.MaxPool2d: [lambda m: nn.AvgPool2d(2)],
}


def mutate_module(model: Any, r: np.random.Generator) -> tuple[Any, str, bool]:
    """One edit of a copy of an nn.Sequential; returns (module, recipe, whether its layers are the original)."""
    m = copy.deepcopy(model)
    layers = list(m)
    k = int(r.integers(0, 6))
    i, j = int(r.integers(0, len(layers))), int(r.integers(0, len(layers)))
    if k == 0 and i != j:
        layers[i], layers[j] = layers[j], layers[i]
        how = f"layers {i} and {j} swapped"
    elif k == 1:
        del layers[i]
        how = f"layer {i} ({type(model[i]).__name__}) removed"
    elif k == 2:
        extra = _EXTRA_LAYERS[int(r.integers(0, len(_EXTRA_LAYERS)))]()
        layers.insert(i, extra)
        how = f"{type(extra).__name__} inserted at {i}"
    elif k == 3 and type(layers[i]) in _SAME_SHAPES:
        alts = _SAME_SHAPES[type(layers[i])]
        new = alts[int(r.integers(0, len(alts)))](layers[i])
        how = f"layer {i} {type(layers[i]).__name__} -> {type(new).__name__}"
        layers[i] = new
    elif k == 4:
        dt = [torch.float64, torch.float16, torch.bfloat16][int(r.integers(0, 3))]
        return m.to(dt), f"module in {dt}", True
    else:
        return nn.Sequential(m), "wrapped in another Sequential", True
    return nn.Sequential(*layers).eval(), how, False


# ---- the oracle ------------------------------------------------------------------------------------------

def _f32(v: Any) -> np.ndarray:
    if torch.is_tensor(v):
        v = v.detach()
        return (v.real if v.is_complex() else v).to(torch.float64).numpy().astype(np.float32)
    return np.asarray(v).astype(np.float32)


def _names(template: Any) -> list[str]:
    sd = template.state_dict() if hasattr(template, "state_dict") else template
    out = ["layer L"]  # tr's side, when a module has no counterpart
    for k in sd:
        out += [f"'{k}", f"'{_prefix(k)}", f"{_prefix(k)}."] if isinstance(k, str) else [repr(k)]
    for name, _ in template.named_modules() if hasattr(template, "named_modules") else ():
        out.append(f"'{name}")
    return out


def check_exported(task, template: Any) -> None:
    """tr's weights, exported with ``template``, are the template's values (the documented folding aside)."""
    sd = template.state_dict() if hasattr(template, "state_dict") else template
    out = to_torch_state_dict(task, sd)  # (a module's layers were compared by the load)
    pending = None  # a conv bias folded into the next BN's running mean
    for key, got in out.items():
        if key.endswith("num_batches_tracked"):
            continue
        got, want = got.numpy(), _f32(sd[key])
        weight = sd.get(_prefix(key) + ".weight")
        folded = key.endswith(".bias") and weight is not None and np.ndim(weight) == 4 and not got.any()
        if folded and want.any():
            pending = want
            continue
        if key.endswith(".running_mean") and pending is not None:
            assert pending.shape == want.shape, f"a conv bias of shape {pending.shape} folded into {key} {want.shape}"
            want, pending = want - pending, None
        assert got.shape == want.shape and np.array_equal(got, want), f"{key}: {got} exported, {want} loaded"


def _arena(task) -> bytes:
    return task.backend.arena.tobytes()


def _load(task, source: Any) -> None:
    """load_torch(task, source); a refusal (one of ACCEPT, raised on) must leave tr's arena as it was."""
    before = _arena(task)
    try:
        load_torch(task, source)
    except ACCEPT:
        assert _arena(task) == before, "a refused load changed tr's arena"
        raise


def attempt(model: Model, source: Any, same_layout: bool, case: int) -> None:
    """load_torch(source): checked as loaded, or refused with the arena as it was."""
    task = model.task
    _load(task, source)
    check_exported(task, source)
    if same_layout and hasattr(source, "forward") and case % FORWARD_EVERY == 0:
        with torch.no_grad():
            ref = source.float().eval()(torch.from_numpy(model.x.transpose(0, 3, 1, 2).copy())).numpy()
        got = predict(task, model.x)
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-4 * float(np.abs(ref).max()) + 1e-5)


def _cases(model: Model, n: int, r: np.random.Generator):
    base_sd = model.base.state_dict()
    for i in range(n):
        if r.random() < 0.2:
            source, how, same = mutate_module(model.base, r)
        else:
            source, how, same = mutate_state(base_sd, r)
            if r.random() < 0.15:  # two edits
                source, how2, same2 = mutate_state(source, r)
                how, same = f"{how}; {how2}", same and same2
        yield how, (lambda source=source, same=same, i=i: attempt(model, source, same, i)), _names(source)


@pytest.fixture(scope="module")
def models():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: a pool of threads only waits on a busy machine
    try:
        yield {label: Model(make) for label, make in MODELS.items()}
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("label", list(MODELS))
def test_fuzz_load_torch(models, label):
    model = models[label]
    attempt(model, model.base, True, 0)  # the unmutated model loads
    r = np.random.default_rng(sum(map(ord, label)))
    out = run_cases(label, _cases(model, PLANNED[label], r), accept=ACCEPT)
    assert out.loaded > 0.05 * out.cases and out.rejected > 0.3 * out.cases, out
    _counts[label] = out.cases


def test_fuzz_non_finite_values(models):
    """NaN, +Inf or -Inf in one float value of a state_dict or a module: refused, or at least not loaded
    silently (tr's weights stay finite)."""
    label, r, silent = "torch_io non-finite", np.random.default_rng(7), []

    def case(model: Model, source: Any, how: str) -> None:
        task = model.task
        _load(task, source)
        if not all(np.isfinite(w).all() for w in task.weights().values()):
            silent.append(how)
        load_torch(task, model.base)  # finite weights again for the next case

    def cases():
        names = list(MODELS)
        for i in range(PLANNED[label]):
            model = models[names[i % len(names)]]
            sd = {k: v.clone() for k, v in model.base.state_dict().items()}
            key = _float_keys(sd)[int(r.integers(0, len(_float_keys(sd))))]
            flat = sd[key].reshape(-1)
            flat[int(r.integers(0, flat.numel()))] = [float("nan"), float("inf"), float("-inf")][i % 3]
            how = f"{key}: {['NaN', '+Inf', '-Inf'][i % 3]}"
            source: Any = sd
            if i % 4 == 3:  # the same value in a module
                source = copy.deepcopy(model.base)
                source.load_state_dict(sd)
                how += " (in the module)"
            yield how, (lambda model=model, source=source, how=how: case(model, source, how)), _names(source)

    out = run_cases(label, cases(), accept=ACCEPT)
    _counts[label] = out.cases
    assert not silent, f"{len(silent)} of {out.cases} non-finite values loaded silently, e.g. {silent[:3]}"


# ---- what the fuzzing found (fixed in torch_io since): the minimal cases -------------------------------------

def _refused_naming(model: Model, source: Any, name: str) -> None:
    before = _arena(model.task)
    with pytest.raises(ACCEPT, match=name):
        load_torch(model.task, source)
    assert _arena(model.task) == before


@pytest.mark.parametrize("value", [[[1.0, 2.0], [3.0]], ["x"] * 8])
def test_a_value_that_is_not_a_tensor_is_refused_naming_it(models, value):
    """Was: numpy's ValueError from np.shape / astype."""
    model = models["torch_io mlp"]
    _refused_naming(model, dict(model.base.state_dict(), **{"1.bias": value}), "1.bias")


def test_a_bfloat16_model_loads(models):
    """Was: TypeError from Tensor.numpy(), which has no bfloat16."""
    model = models["torch_io mlp"]
    source = copy.deepcopy(model.base).to(torch.bfloat16)
    load_torch(model.task, source)
    check_exported(model.task, source)


@pytest.mark.parametrize("value", [torch.ones(5), torch.ones(0), torch.ones(1, 1, 4), "weights"])
def test_a_folded_conv_bias_of_another_shape_is_refused(models, value):
    """tr's conv has no bias: torch's is folded into the next BN's running mean. Was: not shape-checked, so
    numpy's broadcasting failed, or spread a (1, 1, 4) bias silently."""
    model = models["torch_io cnn"]
    _refused_naming(model, dict(model.base.state_dict(), **{"0.bias": value}), "0.bias")


@one_process
def test_fuzz_torch_io_ran_every_planned_case():
    print_total("torch interop", _counts)
    assert _counts == PLANNED
