"""ComputationGraph: the op calls of a plan, by part (tr.graph.steps.Part), naming tensors by key (no shapes,
no offsets).

Built once for all variants; the GraphAtlas later binds keys to each variant's DTensors, and tr.graph.steps
assembles the parts into the named steps a task captures.

Training chain: FIRST_FWD_{A,B} (label copy + layer 0 forward on data_{a,b}) -> DEEP_FWD_BWD
(forward of layers 1..L including the loss, loss backward, backward L..1) -> FIRST_BWD_{A,B}
(layer 0 backward, no input gradient). Gradients flow backwards through the ArchPlan's DAG: a value read
by several layers (a residual branch point) receives its contributions in reverse layer order and the
compiler sums them with ``accumulate``, unless a kind adds them as it reads them (``takes_second_gradient``: a
cbr's dy2) or as it writes its input gradient (``adds_input_gradient``: a normalisation's dx2); input gradients
are only computed where some layer upstream has parameters. Inference: INFER_{A,B}, the inference ops of every
layer, dropout omitted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tr.core.dtype import DType
from tr.core.errors import ConfigError
from tr.core.memory import Group, Region, Role, Span
from tr.core.optim import BIAS_RULE, WEIGHT_RULE, ParamGroup
from tr.graph.archplan import ArchLayer, ArchPlan
from tr.graph.layers import KINDS
from tr.graph.layers.base import FEATURE, GRAD, INF, IO, TRAIN
from tr.graph.spec import CompileSpec
from tr.graph.steps import Part
from tr.graph.symop import SymOp
from tr.graph.symop import sym_op as _op

A, B = "a", "b"
FIRST_FWD = {A: Part.FIRST_FWD_A, B: Part.FIRST_FWD_B}
FIRST_BWD = {A: Part.FIRST_BWD_A, B: Part.FIRST_BWD_B}
INFER = {A: Part.INFER_A, B: Part.INFER_B}


# the spans range ops cover (tr.core.memory: each must be contiguous in the layout, which the layout checks)
GRADS = Span.of(Role.GRAD)
ALL_GRADS = GRADS + Span.of(Role.RESULT) + Span.of(Role.GRAD_FP16)  # cleared before each step, one range
EARLY_BUCKET = Span.of(Role.GRAD, early=True) + Span.of(Role.RESULT)  # reduced while the first layer's backward runs
LATE_BUCKET = Span.of(Role.GRAD, early=False)
RUNNING, RUNNING_NEXT = Span.of(Role.RUNNING), Span.of(Role.RUNNING_NEXT)
RESULT_SUM = Span.of(Role.RESULT_SUM)


class ComputationGraph:
    """Symbolic op lists per part."""

    def __init__(self) -> None:
        self.graphs: dict[Part, list[SymOp]] = {}
        self.value_keys: dict[str, tuple[int, str, str]] = {}  # key -> (value index, cls, phase)
        self.logits_inf = ""
        self.train_metrics_weight: str | None = None  # what training steps' metric sums weigh by (None: the batch)

    def sink(self, part: Part) -> list[SymOp]:
        return self.graphs.setdefault(part, [])

    def ops(self, part: Part) -> list[SymOp]:
        return self.graphs.get(part, [])

    def timeline(self, parts: tuple[Part, ...]) -> list[SymOp]:
        return [op for p in parts for op in self.ops(p)]


def need_grad(arch: ArchPlan) -> list[bool]:
    """need[i]: whether value i (output of layer i) needs its gradient (something upstream is trained)."""
    need: list[bool] = []
    for L in arch.layers:
        need.append(KINDS[L.kind].has_params(L) or any(u >= 0 and need[u] for u in L.inputs))
    return need


class ChainBuilder:
    """Emits the training and inference chains of one ArchPlan into a ComputationGraph."""

    def __init__(self, arch: ArchPlan, spec: CompileSpec, has: Callable[[str], bool]) -> None:
        self.arch = arch
        self.spec = spec
        self.has = has
        self.cg = ComputationGraph()

    @staticmethod
    def y(i: int) -> str:
        return f"L{i}.y"

    def _input(self, ab: str, sink: list[SymOp], train: bool) -> str:
        """The key the first layer reads, as the plan's input makes it (tr.graph.input_plan)."""
        return self.spec.input_plan.first_input(ab, train, sink)

    def _value_key(self, key: str, value: int, cls: str, phase: str) -> str:
        self.cg.value_keys[key] = (value, cls, phase)
        return key

    def _io(self, i: int, sink: list[SymOp], **kw: Any) -> IO:
        def emit(op: str, args: dict[str, Any], attrs: dict[str, Any], layer: int, label: str) -> None:
            sink.append(SymOp(op, args, attrs, layer, label))
        return IO(i, self.arch.layers[i], amp=self.spec.amp, spec=self.spec, emit=emit, has=self.has, **kw)

    def build(self) -> ComputationGraph:
        self._train()
        self._inference()
        return self.cg

    # --- training ---------------------------------------------------------------------------------
    def _train(self) -> None:
        layers = self.arch.layers
        n = len(layers)
        last = n - 1
        for i in range(last):
            self._value_key(self.y(i), i, FEATURE, TRAIN)
        k0, l0 = KINDS[layers[0].kind], layers[0]
        x0 = {}  # the key the first layer reads, per input buffer
        for ab in (A, B):
            sink = self.cg.sink(FIRST_FWD[ab])
            sink.append(SymOp("copy", {"x": f"labels_{ab}", "y": "labels"}, {}, -1, "labels for the loss"))
            x0[ab] = self._input(ab, sink, True)
            mix = self.spec.mixup
            if mix is not None:  # mixed in place, before the first layer reads it (tr.core.mixup)
                sink.append(SymOp("mixup", {"x": x0[ab], "seed": "dropout_seed", "lam": "mixup_lam"},
                                  {"mixup_alpha": mix.mixup_alpha, "cutmix_alpha": mix.cutmix_alpha,
                                   "prob": mix.prob, "switch_prob": mix.switch_prob}, -1,
                                  "Mixup / CutMix of the batch with its reverse"))
            k0.forward(l0, self._io(0, sink, x=[x0[ab]], y=self.y(0)))
        deep = self.cg.sink(Part.DEEP_FWD_BWD)
        for i in range(1, n):
            L = layers[i]
            KINDS[L.kind].forward(L, self._io(i, deep, x=[self.y(u) for u in L.inputs],
                                              y=self.y(i) if i < last else "", terms=self._terms(L, self.y)))
        need = need_grad(self.arch)
        grads: dict[int, list[tuple[str, bool]]] = {}  # value -> its gradient's contributions (key, owned)
        for i in range(last, 0, -1):
            L = layers[i]
            kind = KINDS[L.kind]
            need_in = [u >= 0 and need[u] for u in L.inputs]
            if not any(need_in) and not kind.has_params(L):
                continue
            dx = [self._value_key(f"L{i}.dx" if len(L.inputs) == 1 else f"L{i}.dx{k}", max(u, 0), GRAD, TRAIN)
                  for k, u in enumerate(L.inputs)]
            dy = dy2 = dx2 = ""
            if i < last:
                parts = grads[i]
                if len(parts) == 2 and kind.takes_second_gradient(L):
                    (dy, _), (dy2, _) = parts  # the layer's backward adds them as it reads them
                else:
                    dy = self._sum(deep, parts, i, i)
            u0 = L.inputs[0]
            if need_in[0] and kind.adds_input_gradient(L) and grads.get(u0):
                # what the readers after this one gave its input (a skip path's gradient): added as dx is written
                dx2 = self._sum(deep, grads.pop(u0), u0, i)
            io = self._io(i, deep, x=[self.y(u) for u in L.inputs], y=self.y(i) if i < last else "",
                          dy=dy, dy2=dy2, dx=dx, dx2=dx2, need=need_in)
            for k, c in enumerate(kind.backward(L, io)):
                if c is not None and need_in[k]:
                    grads.setdefault(L.inputs[k], []).append((c, c == dx[k]))
        if k0.has_params(l0):
            dy0 = self._sum(deep, grads[0], 0, 1)
            for ab in (A, B):
                k0.backward(l0, self._io(0, self.cg.sink(FIRST_BWD[ab]), x=[x0[ab]], y=self.y(0),
                                         dy=dy0, dx=[""], need=[False]))

    def _terms(self, L: ArchLayer, key: Callable[[int], str]) -> list[str]:
        """For a layer that computes its input itself (a normalisation with the residual join before it fused in:
        tr.graph.passes.fuse_add_norm), the keys of what that input's producer reads; else none."""
        if not KINDS[L.kind].computes_input(L):
            return []
        return [key(u) for u in self.arch.layers[L.inputs[0]].inputs]

    def _sum(self, sink: list[SymOp], parts: list[tuple[str, bool]], u: int, layer: int) -> str:
        """The key holding the sum of value u's gradient contributions (accumulated into an owned one where
        there is one, else into a fresh tensor); ``layer`` labels the ops."""
        key, owned = parts[0]
        label = f"gradient of L{u} (branch point)"
        for c, c_owned in parts[1:]:
            if owned:
                sink.append(SymOp("accumulate", {"x": c, "y": key}, {}, layer, label))
            elif c_owned:
                sink.append(SymOp("accumulate", {"x": key, "y": c}, {}, layer, label))
                key, owned = c, True
            else:  # both borrowed: sum into a fresh tensor
                s = self._value_key(f"L{u}.dsum", u, GRAD, TRAIN)
                sink.append(SymOp("copy", {"x": key, "y": s}, {}, layer, label))
                sink.append(SymOp("accumulate", {"x": c, "y": s}, {}, layer, label))
                key, owned = s, True
        return key

    # --- inference --------------------------------------------------------------------------------
    def _inference(self) -> None:
        layers = self.arch.layers
        for ab in (A, B):
            sink = self.cg.sink(INFER[ab])
            vals = {-1: self._input(ab, sink, False)}
            for i, L in enumerate(layers):
                y = self._value_key(f"L{i}.y@inf", i, FEATURE, INF) if i < len(layers) - 1 else ""
                io = self._io(i, sink, x=[vals[u] for u in L.inputs], y=y, labels=f"labels_{ab}",
                              terms=self._terms(L, vals.__getitem__))
                vals[i] = KINDS[L.kind].inference(L, io)
            self.cg.logits_inf = vals[layers[-1].inputs[0]]


# --- the range-op graphs ------------------------------------------------------------------------------

def add_update_graphs(cg: ComputationGraph, arch: ArchPlan, spec: CompileSpec, nonempty: set[Region],
                      trained: list[tuple[int, str, Group]]) -> None:
    """Everything around the chains: transfers, clears, casts, collectives, NaN check, optimizer, stats.

    ``nonempty``: regions holding bytes (spans over nothing are not emitted, except the collectives);
    ``trained``: (layer, key, memory group) of every trained tensor, in plan order (per-tensor updates: LARS's
    decayed weights, the layer-wise rate decay).
    """
    g = cg.graphs

    def has(s: Span) -> bool:
        return any(s.matches(r) for r in nonempty)

    inputs = spec.input_plan  # how each batch arrives, and the input's own parts (tr.graph.input_plan)
    for ab, buf, gid in ((A, 0, Part.TRANSFER_A), (B, 1, Part.TRANSFER_B)):
        g[gid] = inputs.transfer(spec, ab, buf)
    g.update(inputs.epoch_parts(spec))
    g[Part.ZERO_GRAD] = [_op("range_clear", span=ALL_GRADS, label="all gradients and the step result")]
    low = spec.low_dtype  # AMP's 16-bit type
    fp16, fp32 = {"src_dtype": low, "dst_dtype": DType.FP32}, {"src_dtype": DType.FP32, "dst_dtype": low}
    for early, gid in ((True, Part.CAST_EARLY), (False, Part.CAST_LATE)):
        src = Span.of(Role.GRAD_FP16, early=early)  # (groups without an FP16 gradient, the FCs', have none here)
        if spec.amp and has(src):
            g[gid] = [_op("range_cast", fp16, src=src, dst=Span.of(Role.GRAD, fp16_grad=True, early=early))]
    g[Part.REDUCE_LATE] = [_op("range_allreduce_mean", span=LATE_BUCKET, label="late gradient groups")]
    g[Part.REDUCE_EARLY] = [_op("range_allreduce_mean", span=EARLY_BUCKET,
                                label="early gradient groups and the step result")]
    by_value = spec.grad_clip if spec.grad_clip_mode == "value" else 0.0
    nan = [_op("range_check_finite", {"clip": by_value}, span=GRADS, flag="nan_flag")]
    if has(RUNNING_NEXT):  # an overflowed running statistic skips the step too (after REDUCE_RUNNING)
        nan.append(_op("range_check_finite", {"clip": 0.0, "accumulate": True}, span=RUNNING_NEXT,
                       flag="nan_flag", label="BN running statistics"))
    if clips_norm(spec):  # after the flag is known and before the loss scale moves: the optimizer divides by it
        nan.append(_op("clip_grad_norm", {"max_norm": spec.grad_clip}, "the global gradient norm", g=GRADS,
                       scale="loss_scale", flag="nan_flag", divisor="grad_divisor", norm="grad_norm"))
    if spec.grad_clip_mode == "agc" and spec.grad_clip > 0:  # each tensor but the head's (timm's exclude_head)
        head = max(layer for layer, _, _ in trained)
        for layer, key, group in trained:
            if layer != head:
                nan.append(_op("clip_agc", {"clip": spec.grad_clip, "eps": 1e-3, "per_unit": group.decayed},
                               layer=layer, w=key, g=key + ".grad", scale="loss_scale", flag="nan_flag"))
    nan.append(_op("count_flag", flag="nan_flag", count="skipped", label="skipped steps"))
    g[Part.CHECK_FINITE] = nan
    if spec.loss_scaled:  # after the optimizer: this step's gradients are divided by the scale they were made with
        g[Part.LOSS_SCALE] = [_loss_scale_update(spec)]
    if has(RUNNING_NEXT):
        g[Part.REDUCE_RUNNING] = [_op("range_allreduce_mean", span=RUNNING_NEXT, label="BN statistics")]
        # Flagged: a skipped (non-finite) step keeps the previous statistics.
        g[Part.UPDATE_RUNNING] = [_op("range_copy", src=RUNNING_NEXT, dst=RUNNING, flag="nan_flag")]
    params = [r.group for r in sorted(nonempty) if r.role is Role.PARAM]
    g[Part.OPTIMIZER] = _optimizer(spec, has, trained, params)
    if spec.freeze_first_layer:  # every trained tensor but the first trained layer's, one update each
        first = min(layer for layer, _, _ in trained)
        g[Part.OPTIMIZER_FROZEN] = _optimizer(spec, has, trained, params, frozen=first)
    amp_copies = Span.of(Role.AMP_COPY)
    if spec.amp and has(amp_copies):  # every group with a working copy, one range
        g[Part.CAST_WORKING] = [_op("range_cast", fp32, src=Span.of(Role.PARAM, amp_copy=True),
                                                 dst=amp_copies)]
    g[Part.ACCUM_METRICS_TRAIN_LAST] = accum_metrics("batch_train_last", train=True)
    g[Part.ACCUM_METRICS_VAL_LAST] = accum_metrics("batch_val_last", train=False)
    g[Part.REDUCE_RESULT_SUM] = [_op("range_allreduce_mean", span=RESULT_SUM)]
    g[Part.CLEAR_METRICS] = [_op("range_clear", span=RESULT_SUM)]
    eq = []
    for i, L in enumerate(arch.layers):
        if KINDS[L.kind].bn_stats:
            p = f"L{i}."
            eq.append(_op("bn_update_eq", {"eps": L.params["eps"]}, layer=i, gamma=p + "gamma", beta=p + "beta",
                          mean=p + "prev_mean", var=p + "prev_var", scale=p + "eq_scale", bias=p + "eq_bias"))
    if eq:
        g[Part.FOLD_RUNNING] = eq


def accum_metrics(batch_role: str, train: bool) -> list[SymOp]:
    """ACCUM_METRICS of one variant: weighted by that variant's batch-size scalar. A training step skipped for
    a non-finite value adds nothing, and the applied steps' samples are counted (the epoch's mean divides by
    them); validation has no skip flag."""
    if not train:
        return [_op("accum_metrics", result="result", accum="accum", batch=batch_role)]
    return [_op("accum_metrics", result="result", accum="accum", batch=batch_role, flag="nan_flag",
                samples="accum_samples")]


def tensor_settings(spec: CompileSpec, trained: list[tuple[int, str, Group]]) -> dict[str, tuple[float, float]]:
    """{key: (lr multiplier, weight decay)} of every trained tensor under the spec's param_groups (by kind, memory
    group or tensor name; see group_settings); one that picks no tensor is a ConfigError naming it."""
    for pg in spec.param_groups:
        if not any(pg.picks_tensor(key, g) for _, key, g in trained):
            raise ConfigError(f"param_group({pg.select!r}) selects no parameter of this model: its trained tensors "
                              f"are {[key for _, key, _ in trained]}, its groups "
                              f"{sorted({g.name for _, _, g in trained})}")
    return {key: _settled(spec, g, lambda pg, key=key, g=g: pg.picks_tensor(key, g)) for _, key, g in trained}


def group_settings(spec: CompileSpec, params: list[Group]) -> list[tuple[Group, tuple[float, float]]]:
    """(memory group, (lr multiplier, weight decay)) of every parameter group of the plan under the spec's
    param_groups: the optimizer's decay on decayed groups, none on bias-like ones, each ParamGroup that picks a group
    overriding (in order); a ParamGroup that picks no group of the plan is a ConfigError naming it."""
    for pg in spec.param_groups:
        if not any(pg.picks(g) for g in params):
            raise ConfigError(f"param_group({pg.select!r}) selects no parameter of this model: its parameter groups "
                              f"are {[g.name for g in params]} (kinds 'weight', 'bias', 'norm', or a name pattern)")
    return [(g, _settled(spec, g, lambda pg, g=g: pg.picks(g))) for g in params]


def _settled(spec: CompileSpec, g: Group, picks: Callable[[ParamGroup], bool]) -> tuple[float, float]:
    """(lr multiplier, weight decay) of a tensor or group of memory group ``g``: the optimizer's decay on a decayed
    group, none on a bias-like one, then every ParamGroup that ``picks`` it, in order."""
    s = (1.0, spec.weight_decay if g.decayed else 0.0)
    for pg in spec.param_groups:
        if picks(pg):
            s = pg.settings(s)
    return s


def layer_factors(decay: float, layers: list[int]) -> dict[int, float]:
    """Each trained layer's rate factor under the layer-wise decay: decay ** (the layers after it), counting the
    layers that own trained tensors in model order, so the last (the head) trains at the full rate."""
    order = sorted(set(layers))
    return {layer: decay ** (len(order) - 1 - k) for k, layer in enumerate(order)}


def clips_norm(spec: CompileSpec) -> bool:
    """Whether the plan clips the gradients by their global norm (and declares grad_divisor and grad_norm)."""
    return spec.grad_clip_mode == "norm" and spec.grad_clip > 0


def _loss_scale_update(spec: CompileSpec) -> SymOp:
    if spec.loss_scale_rule == "static":
        return _op("loss_scale_update", {"rule": "static"}, flag="nan_flag", scale="loss_scale")
    return _op("loss_scale_update", {"rule": "dynamic", "growth_interval": spec.loss_scale_growth_interval},
               flag="nan_flag", scale="loss_scale", tracker="loss_scale_tracker", label="dynamic loss scale")


def _optimizer(spec: CompileSpec, has: Callable[..., bool], trained: list[tuple[int, str, Group]],
               params: list[Group], frozen: int | None = None) -> list[SymOp]:
    """The optimizer part; with ``frozen``, one update a trained tensor but layer ``frozen``'s (whose settings and
    rate factors are those of the whole model's, so the other tensors train as in the step without it)."""
    # the step's learning rate from the device table (the host never writes lr): table[min(step, len - 1)]
    ops = [_op("lr_lookup", table="lr_table", step="step", lr="lr", label="learning rate of this step")]
    m, v = spec.momentum_slot, spec.second_moment_slot
    divisor = "grad_divisor" if clips_norm(spec) else "loss_scale"  # what the gradients are divided by
    common = {"lr": "lr", "flag": "nan_flag", "grad_scale": divisor, "step": "step" if v else None}

    def rng(rule: str, wd: float, decayed: bool, label: str) -> SymOp:
        return _op("range_optimizer",
                   {"rule": rule, "beta1": spec.beta1, "beta2": spec.beta2, "eps": spec.eps, "weight_decay": wd},
                   label=label, w=Span.of(Role.PARAM, decayed=decayed), g=Span.of(Role.GRAD, decayed=decayed),
                   m=Span.of(Role.MOMENT1, decayed=decayed) if m else None,
                   v=Span.of(Role.MOMENT2, decayed=decayed) if v else None, **common)

    if frozen is not None or spec.layer_decay is not None or any(pg.by_name for pg in spec.param_groups):
        # one update a trained tensor: its groups' settings, its layer's rate factor
        settings = tensor_settings(spec, trained)
        factors = layer_factors(spec.layer_decay or 1.0, [layer for layer, _, _ in trained])
        for layer, key, group in trained:
            if layer == frozen:
                continue
            mult, wd = settings[key]
            rule = (WEIGHT_RULE if group.decayed or wd > 0 else BIAS_RULE)[spec.optimizer]
            ops.append(_op("tensor_optimizer", {"rule": rule, "beta1": spec.beta1, "beta2": spec.beta2,
                                                "eps": spec.eps, "weight_decay": wd,
                                                "lr_scale": mult * factors[layer]},
                           layer=layer, w=key, g=key + ".grad", m=key + ".m" if m else None,
                           v=key + ".v" if v else None, **common))
        ops.append(_op("scalar_increment", x="step", label="completed optimizer steps"))
        return ops
    if spec.param_groups:  # one update a memory group, each with its group's rate and decay
        for group, (mult, wd) in group_settings(spec, params):
            rule = (WEIGHT_RULE if group.decayed or wd > 0 else BIAS_RULE)[spec.optimizer]
            ops.append(_op("range_optimizer", {"rule": rule, "beta1": spec.beta1, "beta2": spec.beta2,
                                               "eps": spec.eps, "weight_decay": wd, "lr_scale": mult},
                           label=f"parameter group {group.name}", w=Span.of(Role.PARAM, group=group.name),
                           g=Span.of(Role.GRAD, group=group.name),
                           m=Span.of(Role.MOMENT1, group=group.name) if m else None,
                           v=Span.of(Role.MOMENT2, group=group.name) if v else None, **common))
        ops.append(_op("scalar_increment", x="step", label="completed optimizer steps"))
        return ops
    if not spec.lars:
        ops.append(rng(WEIGHT_RULE[spec.optimizer], spec.weight_decay, True, "decayed weights"))
    if has(Span.of(Role.PARAM, decayed=False)):
        ops.append(rng(BIAS_RULE[spec.optimizer], 0.0, False, "bias-like parameters, no decay"))
    if spec.lars:
        attrs = {"nesterov": spec.optimizer == "lars_nesterov", "momentum": spec.beta1,
                 "weight_decay": spec.weight_decay, "trust_coefficient": spec.trust_coefficient, "eps": spec.eps,
                 "trust_clip": spec.trust_clip}
        for layer, p, group in trained:
            if not group.decayed:
                continue
            ops.append(_op("lars_update", attrs, layer=layer, w=p, g=p + ".grad", m=p + ".m", lr="lr",
                           flag="nan_flag", grad_scale=divisor, ratio=p + ".ratio"))
    ops.append(_op("scalar_increment", x="step", label="completed optimizer steps"))
    return ops
