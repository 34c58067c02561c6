"""Vision Transformers out of tr and in (tr.task.torch_io) against torchvision's VisionTransformer: a small ViT
(examples/models.py vit_net: image 28, patch 7, width 32, 2 blocks of 4 heads, MLP 64, 10 classes) round-trips
tr -> torch -> tr byte for byte; torchvision's weights loaded into tr give torchvision's logits (FP32 on both
sides: tr within 3x torch FP32's own distance from torch in float64; measured on the CPU, 2026-12-05: 3.1e-7 to
torch FP32's 3.7e-7, logits up to 1.4), also from FP16/BF16 plans; torchvision's vit_b_16 pairs with
examples/models.py's tensor for tensor and layer for layer (on the meta device: no weights); a hand-written ViT
(no class token, mean pooling, its position embedding registered before the patch embedding) maps too.
A torchvision model of other heads, LayerNorm eps, depth, GELU approximation, attention layout (batch_first),
add_bias_kv, patch size, width or MLP size, and NaN/Inf weights, are refused both ways naming the torch module or
tensor, tr's layer and both values, with tr's weights unchanged.
"""

import sys
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")

from tr.algo.optimizer import SGD  # noqa: E402
from tr.algo.scheduler import ConstantLR  # noqa: E402
from tr.core.errors import ConfigError, DataError, ShapeError  # noqa: E402
from tr.core.settings import Settings  # noqa: E402
from tr.graph.blueprint import add2, attention, conv, fc, gap, identity, layernorm, seq, tokens  # noqa: E402
from tr.graph.compiler import compile_program  # noqa: E402
from tr.graph.spec import CompileSpec  # noqa: E402
from tr.task.deep_learning import DeepLearningTask  # noqa: E402
from tr.task.feeder import ArrayFeeder  # noqa: E402
from tr.task.predict import predict  # noqa: E402
from tr.task.torch_io import load_torch, pair, save_torch, to_torch_state_dict  # noqa: E402
from tr.task.torch_layers import check_depth, check_layers  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from models import vit_b_16, vit_net  # noqa: E402

IMAGE, PATCH, DEPTH, WIDTH, HEADS, MLP, CLASSES, BATCH = 28, 7, 2, 32, 4, 64, 10, 2
HWC = (IMAGE, IMAGE, 3)
nn = torch.nn


def _torchvision(**change):
    """torchvision's VisionTransformer of the task's sizes; ``change``: other constructor arguments."""
    args = dict(image_size=IMAGE, patch_size=PATCH, num_layers=DEPTH, num_heads=HEADS, hidden_dim=WIDTH, mlp_dim=MLP,
                num_classes=CLASSES)
    return torchvision.models.VisionTransformer(**{**args, **change})


def _randomize(model):
    """Every parameter drawn (torchvision starts with a zero class token and a zero head: the logits would not
    depend on them)."""
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return model


@pytest.fixture(scope="module")
def task():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((BATCH, *HWC)).astype(np.float32)
    y = rng.integers(0, CLASSES, BATCH).astype(np.int32)
    feeder = ArrayFeeder((x, y), (x, y), BATCH, shuffle=False, num_classes=CLASSES)
    t = (DeepLearningTask(Settings().manual_seed(5).global_batch_size(BATCH)).device("cpu").quiet()
         .model(vit_net(PATCH, DEPTH, WIDTH, HEADS, MLP // WIDTH, CLASSES)).optimizer(SGD().momentum(0.9))
         .scheduler(ConstantLR().base_lr(0.1)).total_epochs(1).data(feeder)).compile()
    t.run()  # one step: the class token (zeros at the start) and the head move
    return t


def _compile(bp, x, amp="off", device="cpu"):
    feeder = ArrayFeeder((x, np.zeros(len(x), np.int32)), (x, np.zeros(len(x), np.int32)), BATCH, shuffle=False,
                         num_classes=CLASSES, dtype="bfloat16" if amp == "bf16" else "float32")
    t = (DeepLearningTask(Settings().manual_seed(5).global_batch_size(BATCH).amp(amp)).device(device).quiet()
         .model(bp).optimizer(SGD()).total_epochs(1).data(feeder)).compile()
    assert t.backend.name == device
    return t


def _batch(n=8, seed=11):
    return np.random.default_rng(seed).standard_normal((n, *HWC)).astype(np.float32)


def _logits(model, x, dtype=torch.float32):
    model.eval()
    with torch.no_grad():
        return model.to(dtype)(torch.from_numpy(x.transpose(0, 3, 1, 2).copy()).to(dtype)).double().numpy()


def _bytes(task):
    return {k: v.tobytes() for k, v in task.weights().items()}


def test_tr_to_torch_to_tr_is_byte_identical(task, tmp_path):
    before = _bytes(task)
    model = _torchvision()
    state = to_torch_state_dict(task, model)
    assert set(state) == set(model.state_dict())  # every tensor, no other
    model.load_state_dict(state)  # strict
    assert torch.count_nonzero(model.class_token) > 0 and torch.count_nonzero(model.heads.head.weight) > 0
    x = _batch()
    ref = _logits(model, x)
    np.testing.assert_allclose(predict(task, x), ref, rtol=0, atol=1e-5 * float(np.abs(ref).max()))
    load_torch(task, model)
    assert _bytes(task) == before
    save_torch(task, model, str(tmp_path / "vit.pt"))
    load_torch(task, torch.load(tmp_path / "vit.pt", weights_only=True))  # a bare state_dict, from the file
    assert _bytes(task) == before


def test_torchvision_weights_give_torchvisions_logits(task):
    model = _randomize(_torchvision())
    load_torch(task, model)
    x = _batch()
    ours, t32 = predict(task, x).astype(np.float64), _logits(model, x)
    t64 = _logits(model, x, torch.float64)
    assert np.isfinite(ours).all() and np.abs(t64).max() > 1.0
    assert np.abs(ours - t64).max() <= 3 * np.abs(t32 - t64).max(), (np.abs(ours - t64).max(), np.abs(t32 - t64).max())
    assert (ours.argmax(1) == t64.argmax(1)).all()
    back = to_torch_state_dict(task, model)  # and out again: the same tensors
    for k, v in model.float().state_dict().items():
        assert torch.equal(back[k], v), k


@pytest.mark.gpu
def test_torchvision_weights_on_cuda():
    """The same from a plan compiled for the CUDA backend (FP32, TF32 off): torchvision's weights in, its logits
    out (test_torch_io.py's FP32 bound: not yet run on a GPU), and out again unchanged."""
    x = _batch(BATCH)
    t = _compile(vit_net(PATCH, DEPTH, WIDTH, HEADS, MLP // WIDTH, CLASSES), x, device="cuda")
    model = _randomize(_torchvision())
    load_torch(t, model)
    ref = _logits(model, x)
    np.testing.assert_allclose(predict(t, x), ref, rtol=0, atol=1e-4 * float(np.abs(ref).max()) + 1e-5)
    back = to_torch_state_dict(t, model)
    for k, v in model.state_dict().items():
        assert torch.equal(back[k], v), k


@pytest.mark.parametrize("amp", ["fp16", "bf16"])
def test_amp_plan_loads_and_exports_the_fp32_masters(amp):
    """Under AMP the tokens and LayerNorms keep FP32 masters only, the linear layers 16-bit working copies (refreshed
    from the loaded masters). Measured (CPU): max |logit error| / max |logit| 5.8e-4 (FP16), 4.6e-3 (BF16): held
    to 4e-3 and 3.2e-2 (BF16's 8 bits of mantissa to FP16's 11, 8x)."""
    x = _batch(BATCH)
    t = _compile(vit_net(PATCH, DEPTH, WIDTH, HEADS, MLP // WIDTH, CLASSES), x, amp)
    model = _randomize(_torchvision())
    load_torch(t, model)
    ref = _logits(model, x)
    tol = 4e-3 if amp == "fp16" else 3.2e-2
    np.testing.assert_allclose(predict(t, x), ref, rtol=0, atol=tol * float(np.abs(ref).max()))
    back = to_torch_state_dict(t, model)
    for k, v in model.state_dict().items():
        assert torch.equal(back[k], v), k


class _MeanPooled(nn.Module):
    """A hand-written ViT without a class token: its position embedding a root parameter (registered before the
    patch embedding), mean pooling over the tokens; functional calls, MultiheadAttention given (y, y, y)."""

    def __init__(self, act=None):
        super().__init__()
        self.pos_embedding = nn.Parameter(torch.zeros(1, (IMAGE // PATCH) ** 2, WIDTH))
        self.patch = nn.Conv2d(3, WIDTH, PATCH, PATCH)
        self.norm, self.attn = nn.LayerNorm(WIDTH), nn.MultiheadAttention(WIDTH, HEADS, batch_first=True)
        self.head = nn.Linear(WIDTH, CLASSES)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2) + self.pos_embedding
        y = self.norm(x)
        return self.head(self.pool(x + self.attn(y, y, y, need_weights=False)[0]))

    def pool(self, x):
        return x.mean(1)


def test_a_hand_written_vit_without_class_token_maps_too():
    x = _batch(BATCH)
    block = seq(layernorm(), conv(3 * WIDTH, 1, bias=True), attention(HEADS), conv(WIDTH, 1, bias=True))
    t = _compile(seq(conv(WIDTH, PATCH, PATCH, bias=True), tokens(cls=False), add2(identity(), block), gap(),
                     fc(CLASSES)), x)
    model = _randomize(_MeanPooled())
    load_torch(t, model)
    np.testing.assert_allclose(predict(t, x), ref := _logits(model, x), rtol=0, atol=1e-5 * float(np.abs(ref).max()))
    before = _bytes(t)
    load_torch(t, to_torch_state_dict(t, model))
    assert _bytes(t) == before

    class ClassPooled(_MeanPooled):  # token 0 where tr's gap averages the tokens
        def pool(self, x):
            return x[:, 0]

    with pytest.raises(ConfigError, match=r"the torch model's forward \(ClassPooled: x\[:, 0\]\) computes "
                                          r"class-token pooling where tr's layer 'gap' at model\[3\] computes a "
                                          r"global average pool"):
        load_torch(t, ClassPooled())


def test_vit_b_16_pairs_with_torchvisions():
    """examples/models.py's vit_b_16 against torchvision's, without weights: every tensor pairs by shape (76
    modules) and every layer compares equal."""
    spec = CompileSpec(input_shape=(224, 224, 3), num_classes=1000, batch=1)
    with torch.device("meta"):
        model = torchvision.models.vit_b_16()
    pairs = pair(compile_program(vit_b_16.root, spec), model.state_dict())
    assert len(pairs) == 2 + 12 * 6 + 2
    assert [b.prefix for _, b in pairs[:3]] == ["conv_proj", "class_token, encoder.pos_embedding",
                                                 "encoder.layers.encoder_layer_0.ln_1"]
    like_a_task = SimpleNamespace(spec=spec, config=SimpleNamespace(task=SimpleNamespace(model=vit_b_16.root)))
    check_depth(like_a_task, model)
    check_layers(like_a_task, model, pairs)


def _tanh_gelu():
    model = _torchvision()
    model.encoder.layers[1].mlp[1] = nn.GELU(approximate="tanh")
    return model


def _bias_kv():
    model = _torchvision()
    model.encoder.layers[0].self_attention = nn.MultiheadAttention(WIDTH, HEADS, batch_first=True, add_bias_kv=True)
    return model


def _sequence_first():
    model = _torchvision()
    model.encoder.layers[0].self_attention = nn.MultiheadAttention(WIDTH, HEADS, batch_first=False)
    return model


BLOCK0, BLOCK1 = "encoder.layers.encoder_layer_0", "encoder.layers.encoder_layer_1"
REFUSED = {  # a torchvision model, the error and what it says
    "heads": (lambda: _torchvision(num_heads=2), ConfigError,
              rf"torch module '{BLOCK0}.self_attention' \(MultiheadAttention\) has num_heads=2 where tr's layer "
              r"'attention heads=4' at model\[2\]\.rep0\[0\]\.stem\[2\] has num_heads=4"),
    "eps": (lambda: _torchvision(norm_layer=partial(nn.LayerNorm, eps=1e-5)), ConfigError,
            rf"torch module '{BLOCK0}.ln_1' \(LayerNorm\) has eps=1e-05 where tr's layer 'layernorm eps=1e-06' at "
            r"model\[2\]\.rep0\[0\]\.stem\[0\] has eps=1e-06"),
    "depth": (lambda: _torchvision(num_layers=3), ConfigError,
              r"torch module 'encoder.layers.encoder_layer_2.self_attention' \(MultiheadAttention\) is attention "
              r"layer 3 of 3, where tr's model has 2 \(the last, tr's layer 'attention heads=4' at "
              r"model\[2\]\.rep1\[0\]\.stem\[2\]\): another depth, num_layers=3 in torch where tr has 2"),
    "shallower": (lambda: _torchvision(num_layers=1), ConfigError,
                  r"tr's layer 'attention heads=4' at model\[2\]\.rep1\[0\]\.stem\[2\] is attention layer 2 of 2, "
                  rf"where the torch model has 1 .*'{BLOCK0}.self_attention'\): .*num_layers=1 in torch where tr "
                  r"has 2"),
    "tanh gelu": (_tanh_gelu, ConfigError,
                  rf"torch module '{BLOCK1}.mlp.1' \(GELU\) has approximate='tanh' where tr's layer 'gelu' at "
                  r"model\[2\]\.rep1\[1\]\.stem\[2\] has approximate='none'"),
    "batch_first": (_sequence_first, ConfigError,
                    rf"torch module '{BLOCK0}.self_attention' \(MultiheadAttention\) has tokens=1 where tr's layer "
                    r"'attention heads=4' .* has tokens=17 \(its batch_first=False reads the tokens as \[T, N, D\]\)"),
    "patch": (lambda: _torchvision(patch_size=4), ShapeError,
              r"torch parameter 'conv_proj.weight' has shape \(32, 3, 4, 4\), tr's layer L0 \(conv\) needs "
              r"\(32, 3, 7, 7\)"),
    "width": (lambda: _torchvision(hidden_dim=64), ShapeError,
              r"torch parameter 'conv_proj.weight' has shape \(64, 3, 7, 7\), tr's layer L0 \(conv\) needs "
              r"\(32, 3, 7, 7\)"),
    "mlp": (lambda: _torchvision(mlp_dim=128), ShapeError,
            rf"torch parameter '{BLOCK0}.mlp.0.weight' has shape \(128, 32\), tr's layer L8 \(conv\) needs "
            r"\(64, 32\)"),
    "add_bias_kv": (_bias_kv, ConfigError,
                    rf"torch parameters \['{BLOCK0}.self_attention.bias_k', '{BLOCK0}.self_attention.bias_v'\] of a "
                    r"MultiheadAttention have no counterpart in tr"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_another_vit_is_refused_both_ways_naming_it(task, case):
    make, error, message = REFUSED[case]
    model = make()
    before = _bytes(task)
    with pytest.raises(error, match=message):
        load_torch(task, model)
    with pytest.raises(error, match=message):
        to_torch_state_dict(task, model)
    assert _bytes(task) == before


def test_a_bare_state_dict_of_another_depth_is_refused_by_its_shapes(task):
    before = _bytes(task)
    with pytest.raises(ShapeError, match=r"torch parameter 'encoder.layers.encoder_layer_2.self_attention.in_proj_"
                                         r"weight' has shape \(96, 32\), tr's layer L24 \(fc\) needs \(10, 32\)"):
        load_torch(task, _torchvision(num_layers=3).state_dict())
    assert _bytes(task) == before


def test_non_finite_weights_are_refused_both_ways(task):
    before = _bytes(task)
    for key, index in ((f"{BLOCK1}.self_attention.in_proj_weight", (70, 3)), ("encoder.pos_embedding", (0, 16, 31))):
        state = _torchvision().state_dict()
        state[key][index] = float("nan")
        with pytest.raises(DataError, match=rf"torch tensor '{key}' holds 1 non-finite value\(s\) \(the first, nan, "
                                            rf"at index \({', '.join(map(str, index))}\)\)"):
            load_torch(task, state)
    assert _bytes(task) == before
    pos = next(i.tensor for i in task.program.inits if i.tensor.region.name == "param/tokens" and
               i.tensor.name.endswith(".pos"))
    saved = task.backend.read(pos).copy()
    bad = saved.copy()
    bad.reshape(-1)[40] = np.inf
    task.backend.write(pos, bad)
    try:
        with pytest.raises(DataError, match=rf"tr's layer L1 \(tokens\) tensor '{pos.name}' \(for torch's "
                                            r"'encoder.pos_embedding'\) holds 1 non-finite value\(s\) \(the first, "
                                            r"inf, at index \(0, 1, 8\)\)"):
            to_torch_state_dict(task, _torchvision())
    finally:
        task.backend.write(pos, saved)
