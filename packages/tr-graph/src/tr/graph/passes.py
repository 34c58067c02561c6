"""The ArchPlan passes, in the order ``build_layers`` runs them; each is a small function over a layer list.

1. expand            composites -> leaves: seq, repeat, cbr, blocks (identity or projection shortcut), mbconv,
                     add2 -> begin/mid/end markers; checks empty seqs and repeat counts
2. check_params      every leaf's sizes / probabilities (kind.check)
3. wire              markers -> "add" layers; every layer gets its input references
4. remove_identity   identity layers and dropout(0) disappear; their readers read their input
5. check_flatten     no spatial layer (conv, pooling, cbr) after a flatten
6. name_bn           bn -> bn1d after fc/flatten/gap (through activations and dropout), else bn2d
7. append_loss       the task's loss layer (softmax_ce, bce_logits or mse) appended at the end
8. infer_shapes      per-sample shapes (also run per variant by the compiler)
9. place_flatten     drop flattens that only feed FCs (an FC reads [N, H*W*C] directly) or that are
                     no-ops, insert one where an FC would read channel-padded rows (AMP)
10. fuse             relu into fc and add (fused epilogues); with TR_FC_DRELU=1 an fc(relu) read only by an
                     fc hands that fc its relu mask, whose dx GEMM then applies the relu's backward (DRELU);
                     conv+bn2d+relu/relu6/silu and conv+bn2d+add(+relu) -> cbr (the activation and the
                     residual add run inside the BN kernels); cbr(relu) + maxpool -> one cbr that pools in
                     its BN kernels; add -> layernorm (the layernorm right after the add, reading it: a pre-norm
                     transformer's block boundary) -> the layernorm's ln_fwd computes the sum too
11. mark_first       layer 0 is the first layer (fc, conv, cbr or flatten); nothing else reads the input
12. renumber         uid = index
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from tr.core import env as tr_env
from tr.core.errors import CompileError
from tr.core.shape import Shape
from tr.graph.archplan import DATA, ArchLayer, layer_error, params
from tr.graph.blueprint import (
    BN,
    CBR,
    SE,
    Act,
    Add2,
    Block,
    Conv,
    DropPath,
    Identity,
    Layer,
    MBConv,
    Repeat,
    Seq,
    as_layer,
)
from tr.graph.layers import FIRST_KINDS, KINDS, LOSS_KINDS, NODE_KINDS, LayerProblem
from tr.graph.layers.cbr import CBR_ACTS

ADD2_BEGIN, ADD2_MID, ADD2_END, IDENTITY = "add2_begin", "add2_mid", "add2_end", "identity"
MARKERS = (ADD2_BEGIN, ADD2_MID, ADD2_END)


def _fail(layers: Sequence[ArchLayer], layer: ArchLayer, msg: str) -> CompileError:
    for i, L in enumerate(layers):
        if L is layer:
            return layer_error(i, layer, msg)
    return layer_error(-1, layer, msg)


# --- 1. expand ------------------------------------------------------------------------------------

def expand(root: Any, in_channels: int | None) -> list[ArchLayer]:
    """Flatten the layer tree. Channel counts are tracked so blocks can pick their shortcut."""
    out: list[ArchLayer] = []

    def emit(layer_kind: str, origin: str, **kw: Any) -> None:
        out.append(ArchLayer(layer_kind, params(**kw), origin, uid=len(out)))

    def walk(node: Layer, path: str, c: int | None) -> int | None:
        if isinstance(node, Seq):
            if not node.layers:
                raise CompileError(f"layer {len(out)} (seq at {path}): empty seq; a seq needs at least one "
                                   "layer (use identity() for an identity shortcut)")
            for i, child in enumerate(node.layers):
                c = walk(child, f"{path}[{i}]", c)
            return c
        if isinstance(node, Repeat):
            t = node.times
            if isinstance(t, bool) or not isinstance(t, int) or t < 1:
                raise CompileError(f"layer {len(out)} (repeat at {path}): times must be >= 1, got {t!r}")
            for r in range(t):
                c = walk(node.body, f"{path}.rep{r}", c)
            return c
        if isinstance(node, Add2):
            emit(ADD2_BEGIN, path)
            walk(node.shortcut, f"{path}.shortcut", c)
            emit(ADD2_MID, path)
            c = walk(node.stem, f"{path}.stem", c)
            emit(ADD2_END, path, join="add")
            return c
        if isinstance(node, SE):  # x * gate(x): an add2-like branch joined by "scale" instead of "add"
            if c is None:
                raise CompileError(f"layer {len(out)} (se at {path}): the channel count is not known here (after "
                                   "a flatten)")
            emit(ADD2_BEGIN, path)
            emit(IDENTITY, f"{path}.x")
            emit(ADD2_MID, path)
            emit("gap", f"{path}.squeeze")
            emit("fc", f"{path}.fc1", out=node.squeeze, bias=True, activation=None)
            emit("act", f"{path}.{node.act}", kind=node.act)
            emit("fc", f"{path}.fc2", out=c, bias=True, activation=None)
            emit("act", f"{path}.gate", kind="sigmoid")
            emit(ADD2_END, path, join="scale")
            return c
        if isinstance(node, Block):
            return _expand_block(node, path, c, walk)
        if isinstance(node, MBConv):
            if c is None:
                raise CompileError(f"layer {len(out)} (mbconv at {path}): the channel count is not known here "
                                   "(after a flatten)")
            return _expand_mbconv(node, path, c, walk)
        if isinstance(node, CBR):  # the DSL's conv -> bn -> relu, its parts named as such
            for part, leaf in (("conv", Conv(node.out, node.k, node.s, node.p)), ("bn", BN(node.momentum, node.eps)),
                               ("relu", Act("relu"))):
                c = walk(leaf, f"{path}.{part}", c)
            return c
        if isinstance(node, Identity):
            emit(IDENTITY, path)
            return c
        kind = NODE_KINDS.get(type(node))  # a leaf: its kind says what it becomes
        if kind is None:
            raise CompileError(f"layer {len(out)} ({type(node).__name__} at {path}): not a known layer")
        try:
            e = kind.expand(node, c)
        except LayerProblem as problem:  # (the kind says why; here is which layer)
            raise CompileError(f"layer {len(out)} ({node!r} at {path}): {problem}") from None
        emit(e.kind, path, **e.params)
        return e.channels

    walk(as_layer(root), "model", in_channels)
    return out


def _expand_block(b: Block, path: str, c: int | None, walk: Any) -> int | None:
    if b.kind == "basic":
        stem: list[Layer] = [Conv(b.out, 3, b.stride, 1), BN(b.momentum, b.eps), Act("relu"),
                             Conv(b.out, 3, 1, 1), BN(b.momentum, b.eps)]
    else:
        mid = b.mid if b.mid is not None else b.out // 4
        stem = [Conv(mid, 1, 1, 0), BN(b.momentum, b.eps), Act("relu"),
                Conv(mid, 3, b.stride, 1), BN(b.momentum, b.eps), Act("relu"),
                Conv(b.out, 1, 1, 0), BN(b.momentum, b.eps)]
    if b.drop_path:  # timm's place: the branch's end, before the join (and the relu after it)
        stem.append(DropPath(b.drop_path))
    if b.stride == 1 and c == b.out:
        shortcut: Layer = Identity()
    else:  # projection: the channel count or the resolution changes
        shortcut = Seq((Conv(b.out, 1, b.stride, 0), BN(b.momentum, b.eps)))
    walk(Seq((Add2(shortcut, Seq(tuple(stem))), Act("relu"))), f"{path}.{b.kind}", c)
    return b.out


def _expand_mbconv(m: MBConv, path: str, c: int, walk: Any) -> int:
    hidden = c * m.expand
    stem: list[Layer] = [Conv(hidden, 1), BN(m.momentum, m.eps), Act(m.act)] if m.expand != 1 else []
    stem += [Conv(hidden, m.k, m.stride, (m.k - 1) // 2, groups=hidden), BN(m.momentum, m.eps), Act(m.act)]
    if m.se > 0:
        stem.append(SE(max(1, int(c * m.se)), m.act))
    stem += [Conv(m.out, 1), BN(m.momentum, m.eps)]
    skip = m.stride == 1 and c == m.out
    if m.drop_path and not skip:  # torchvision ignores it there; a rate that changes nothing is refused
        raise CompileError(f"mbconv at {path}: drop_path={m.drop_path} needs the identity skip (stride 1 and "
                           f"{c} input channels = out {m.out}): there is no residual branch to drop")
    if m.drop_path:  # torchvision's place: the branch's end, before the join
        stem.append(DropPath(m.drop_path))
    body = Seq(tuple(stem))
    walk(Add2(Identity(), body) if skip else body, f"{path}.mbconv", c)
    return m.out


# --- 2. check_params ------------------------------------------------------------------------------

def check_params(layers: Sequence[ArchLayer]) -> None:
    for i, L in enumerate(layers):
        if L.kind in MARKERS or L.kind == IDENTITY or _is_loss(L):
            continue
        try:
            KINDS[L.kind].check(L)
        except LayerProblem as e:
            raise layer_error(i, L, str(e)) from None


# --- 3. wire --------------------------------------------------------------------------------------

def wire(layers: Sequence[ArchLayer]) -> list[ArchLayer]:
    """Resolve add2 markers into 'add' layers (or 'scale' ones: an se's join, inputs (x, factors)); give every
    layer its input references (uids)."""
    out: list[ArchLayer] = []
    cur = DATA
    stack: list[list[int]] = []  # [branch input, shortcut output]
    for L in layers:
        if L.kind == ADD2_BEGIN:
            stack.append([cur, DATA])
        elif L.kind == ADD2_MID:
            stack[-1][1] = cur
            cur = stack[-1][0]
        elif L.kind == ADD2_END:
            branch_in, short = stack.pop()
            if L.params["join"] == "scale":
                out.append(ArchLayer("scale", params(), L.origin, L.uid, (short, cur)))
            else:
                out.append(ArchLayer("add", params(activation=None), L.origin, L.uid, (short, cur)))
            cur = L.uid
        else:
            out.append(replace(L, inputs=(cur,)))
            cur = L.uid
    return out


def _redirect(layers: Sequence[ArchLayer], drop: Any) -> list[ArchLayer]:
    """Remove layers for which ``drop(layer, resolved_inputs)`` is true; readers read their first input."""
    repl: dict[int, int] = {}
    out: list[ArchLayer] = []
    for L in layers:
        ins = tuple(repl.get(u, u) for u in L.inputs)
        if drop(L, ins):
            repl[L.uid] = ins[0]
            continue
        out.append(L if ins == L.inputs else replace(L, inputs=ins))
    return out


# --- 4. remove_identity ---------------------------------------------------------------------------

def remove_identity(layers: Sequence[ArchLayer]) -> list[ArchLayer]:
    return _redirect(layers, lambda L, ins: L.kind == IDENTITY or KINDS[L.kind].is_identity(L))


# --- 5. check_flatten -----------------------------------------------------------------------------

def check_flatten(layers: Sequence[ArchLayer]) -> None:
    """A value that went through a flatten is [N,1,1,C]: convolutions and pooling make no sense on it."""
    flat_from: dict[int, int] = {}  # uid -> index of the flatten upstream
    for i, L in enumerate(layers):
        src = [flat_from[u] for u in L.inputs if u in flat_from]
        if L.kind == "flatten":
            flat_from[L.uid] = i
        elif src:
            if L.kind in KINDS and KINDS[L.kind].spatial:
                raise layer_error(i, L, f"{L.kind} after flatten (layer {src[0]}): spatial layers need an "
                                        "[N,H,W,C] input; move the flatten after them")
            flat_from[L.uid] = src[0]


# --- 6. name_bn -----------------------------------------------------------------------------------

def name_bn(layers: Sequence[ArchLayer]) -> list[ArchLayer]:
    by_uid = {L.uid: L for L in layers}
    out = []
    for L in layers:
        if L.kind == "bn":
            src = L.inputs[0]
            while src != DATA and KINDS[by_uid[src].kind].elementwise:
                src = by_uid[src].inputs[0]
            one_d = src != DATA and KINDS[by_uid[src].kind].flat_output
            L = replace(L, kind="bn1d" if one_d else "bn2d")
        out.append(L)
    return out


# --- 7. append_loss -------------------------------------------------------------------------------

def append_loss(layers: Sequence[ArchLayer], num_classes: int, loss: str = "softmax_ce") -> list[ArchLayer]:
    """Append the loss layer of kind ``loss``; a blueprint's own softmax_ce() may end the model (it is replaced)."""
    if loss not in LOSS_KINDS:
        raise CompileError(f"loss must be one of {', '.join(LOSS_KINDS)}, got {loss!r}")
    out = list(layers)
    for i, L in enumerate(out):
        if _is_loss(L) and i != len(out) - 1:
            raise layer_error(i, L, f"{L.kind} can only end the model (the loss is appended automatically)")
    if out and _is_loss(out[-1]):
        out.pop()
    if not out:
        raise CompileError("layer 0: the model has no layers before the loss")
    last = out[-1]
    uid = max(L.uid for L in out) + 1
    out.append(ArchLayer(loss, params(classes=num_classes), "loss", uid, (last.uid,)))
    return out


def _is_loss(L: ArchLayer) -> bool:
    return L.kind in KINDS and KINDS[L.kind].loss


# --- 8. infer_shapes ------------------------------------------------------------------------------

def infer_shapes(layers: Sequence[ArchLayer], x: Shape, where: str = "") -> dict[int, Shape]:
    """Output shape of every layer (by uid) for input ``x``; ``where`` is appended to error messages."""
    shapes: dict[int, Shape] = {DATA: x}
    by_uid = {L.uid: L for L in layers}
    for i, L in enumerate(layers):
        try:
            shapes[L.uid] = KINDS[L.kind].out_shape(L, [shapes[u] for u in L.inputs])
            KINDS[L.kind].check_producers(L, [by_uid.get(u) for u in L.inputs], shapes)
        except LayerProblem as e:
            raise layer_error(i, L, f"{e}{where}") from None
    return shapes


# --- 9. place_flatten -----------------------------------------------------------------------------

def place_flatten(layers: Sequence[ArchLayer], shapes: dict[int, Shape], amp: bool) -> list[ArchLayer]:
    readers: dict[int, list[ArchLayer]] = {}
    for L in layers:
        for u in L.inputs:
            readers.setdefault(u, []).append(L)

    def useless(L: ArchLayer, ins: tuple[int, ...]) -> bool:
        if L.kind != "flatten":
            return False
        x = shapes[ins[0]]
        return (x.h, x.w) == (1, 1) or all(KINDS[r.kind].reads_rows for r in readers.get(L.uid, []))

    kept = _redirect(layers, useless)
    if not amp:
        return kept
    # Under AMP features pad C to 8 (the input to 4); a reader of [N,H,W,C] as rows with H*W > 1 needs dense ones.
    out: list[ArchLayer] = []
    inserted: dict[int, int] = {}
    next_uid = max(L.uid for L in layers) + 1
    for L in kept:
        if KINDS[L.kind].reads_rows:
            u = L.inputs[0]
            x = shapes[u]
            pad = 4 if u == DATA else 8
            if x.h * x.w > 1 and x.c % pad:
                if u not in inserted:
                    out.append(ArchLayer("flatten", params(), f"{L.origin}.flatten", next_uid, (u,)))
                    inserted[u] = next_uid
                    next_uid += 1
                L = replace(L, inputs=(inserted[u],))
        out.append(L)
    return out


# --- 10. fuse -------------------------------------------------------------------------------------

def _readers(layers: Sequence[ArchLayer]) -> dict[int, int]:
    n: dict[int, int] = {}
    for L in layers:
        for u in L.inputs:
            n[u] = n.get(u, 0) + 1
    return n


def fuse(layers: Sequence[ArchLayer], amp: bool) -> list[ArchLayer]:
    """relu into fc/add (the ops have a relu epilogue), then conv+bn2d(+add)(+relu) into cbr layers, then a join
    into the normalisation after it (fuse_add_norm).

    ``amp`` is accepted for the pass signature; the fusions are exact on FP32 too, so they always apply."""
    return fuse_add_norm(fuse_pool(fuse_cbr(fuse_drelu(fuse_relu(layers)))))


def fuse_relu(layers: Sequence[ArchLayer]) -> list[ArchLayer]:
    by_uid = {L.uid: L for L in layers}
    n_readers = _readers(layers)
    dropped: set[int] = set()
    fused: dict[int, ArchLayer] = {}
    for L in layers:
        if L.kind != "act" or L.inputs[0] == DATA or n_readers.get(L.inputs[0]) != 1:
            continue
        p = by_uid[L.inputs[0]]
        act = L.params["kind"]
        if act in KINDS[p.kind].epilogue_acts and not p.params["activation"]:
            fused[L.uid] = replace(p, params=params(**{**p.params, "activation": act}), uid=L.uid)
            dropped.add(p.uid)
    return [fused.get(L.uid, L) for L in layers if L.uid not in dropped]


def fuse_drelu(layers: Sequence[ArchLayer]) -> list[ArchLayer]:
    """fc(relu) -> fc: the first writes its relu's bit mask (param relu_mask), the second's backward applies it
    to the dx it computes (param drelu), so the relu's backward is the dx GEMM's epilogue, not an op. Only
    where the second fc is the first one's sole reader: then dx is that relu's whole output gradient.

    Off unless TR_FC_DRELU=1: the MNIST MLP's step measured slower with it (benchmarks/RESULTS.md, issue [11]):
    cuBLASLt's DRELU GEMMs are slower than its plain ones plus tr's relu-backward kernels there."""
    if not tr_env.get("TR_FC_DRELU"):
        return list(layers)
    by_uid = {L.uid: L for L in layers}
    n_readers = _readers(layers)
    masked: set[int] = set()
    for L in layers:
        if L.kind != "fc" or L.inputs[0] == DATA or n_readers.get(L.inputs[0]) != 1:
            continue
        p = by_uid[L.inputs[0]]
        if p.kind == "fc" and p.params["activation"] == "relu":
            masked.add(p.uid)
    out = []
    for L in layers:
        if L.uid in masked:
            L = replace(L, params=params(**{**L.params, "relu_mask": True}))
        if L.kind == "fc" and L.inputs[0] in masked:
            L = replace(L, params=params(**{**L.params, "drelu": True}))
        out.append(L)
    return out


def fuse_cbr(layers: Sequence[ArchLayer]) -> list[ArchLayer]:
    """conv -> bn2d -> relu (relu6, silu) becomes cbr(act=that activation); conv -> bn2d -> add(+relu) (the stem
    of a residual block, or else its shortcut) becomes cbr(residual, act = the add's), whose second input is the add's
    other input. Each inner value must have one reader: the next layer of the pattern."""
    by_uid = {L.uid: L for L in layers}
    n_readers = _readers(layers)

    def conv_bn(u: int) -> tuple[ArchLayer, ArchLayer] | None:
        """(conv, bn) when value u is a bn2d read once whose input is a conv read once."""
        if u == DATA or n_readers.get(u) != 1 or by_uid[u].kind != "bn2d":
            return None
        bn = by_uid[u]
        c = bn.inputs[0]
        if c == DATA or n_readers.get(c) != 1 or by_uid[c].kind != "conv" or by_uid[c].params["bias"]:
            return None  # (a cbr has no bias: its BN's batch mean would cancel it, its running mean not)
        return by_uid[c], bn

    def cbr(conv: ArchLayer, bn: ArchLayer, uid: int, act: str | None, shortcut: int | None) -> ArchLayer:
        cp = conv.params
        return ArchLayer("cbr", params(out=cp["out"], k=cp["k"], s=cp["s"], p=cp["p"], g=cp["g"],
                                       momentum=bn.params["momentum"],
                                       eps=bn.params["eps"], act=act, residual=shortcut is not None),
                         conv.origin, uid, conv.inputs if shortcut is None else (conv.inputs[0], shortcut))

    dropped: set[int] = set()
    fused: dict[int, ArchLayer] = {}
    for L in layers:
        if L.kind == "act" and L.params["kind"] in CBR_ACTS:
            found = conv_bn(L.inputs[0])
            if found is not None:
                fused[L.uid] = cbr(*found, L.uid, L.params["kind"], None)
                dropped.update(x.uid for x in found)
        elif L.kind == "add":
            for k in (1, 0):  # the stem first
                found = conv_bn(L.inputs[k])
                if found is not None:
                    fused[L.uid] = cbr(*found, L.uid, L.params["activation"], L.inputs[1 - k])
                    dropped.update(x.uid for x in found)
                    break
    return [fused.get(L.uid, L) for L in layers if L.uid not in dropped]


def fuse_pool(layers: Sequence[ArchLayer]) -> list[ArchLayer]:
    """cbr(relu) -> maxpool becomes one cbr with the pool: its BN kernels pool as they normalise, so the
    full-resolution activation (and in the backward its gradient) is never a tensor of the plan."""
    by_uid = {L.uid: L for L in layers}
    n_readers = _readers(layers)
    dropped: set[int] = set()
    fused: dict[int, ArchLayer] = {}
    for L in layers:
        if L.kind != "maxpool" or L.inputs[0] == DATA or n_readers.get(L.inputs[0]) != 1:
            continue
        c = by_uid[L.inputs[0]]
        if c.kind == "cbr" and c.params["act"] == "relu" and not c.params["residual"] and c.params["pool"] is None:
            pool = (L.params["k"], L.params["s"], L.params["p"])
            fused[L.uid] = replace(c, params=params(**{**c.params, "pool": pool}), uid=L.uid)
            dropped.add(c.uid)
    return [fused.get(L.uid, L) for L in layers if L.uid not in dropped]


def fuse_add_norm(layers: Sequence[ArchLayer]) -> list[ArchLayer]:
    """add -> layernorm, where the layernorm comes right after the add (no other reader of the sum runs between
    them) and reads it: the add gets ``norm`` (no op of its own) and the layernorm ``residual`` (its ln_fwd reads
    the add's inputs and writes the sum beside y), and ``shared`` when other layers read the sum too (a pre-norm
    transformer's next join, on its skip path: inference then writes the sum as well). Exact in every dtype (the
    sum is rounded as add_fwd rounds it), so it always applies. An add with a fused relu is left alone."""
    n_readers = _readers(layers)
    out = list(layers)
    for j in range(1, len(out)):
        L, p = out[j], out[j - 1]
        if L.kind != "layernorm" or L.inputs != (p.uid,) or p.kind != "add" or p.params["activation"]:
            continue
        out[j - 1] = replace(p, params=params(**{**p.params, "norm": True}))
        out[j] = replace(L, params=params(**{**L.params, "residual": True, "shared": n_readers[p.uid] > 1}))
    return out


# --- 11. mark_first -------------------------------------------------------------------------------

def mark_first(layers: Sequence[ArchLayer]) -> list[ArchLayer]:
    first = layers[0]
    if first.kind not in FIRST_KINDS:
        raise layer_error(0, first, f"the first layer reads the input batch and must be one of {FIRST_KINDS}")
    for i, L in enumerate(layers[1:], 1):
        if DATA in L.inputs:
            raise layer_error(i, L, "reads the network input, which only the first layer may read "
                                    "(start the model with a conv or fc before a residual block)")
    return [replace(first, first=True), *layers[1:]]


# --- 12. renumber ---------------------------------------------------------------------------------

def renumber(layers: Sequence[ArchLayer]) -> list[ArchLayer]:
    index = {L.uid: i for i, L in enumerate(layers)}
    index[DATA] = DATA
    return [replace(L, uid=i, inputs=tuple(index[u] for u in L.inputs)) for i, L in enumerate(layers)]


def unfused(blueprint: Any, channels: int) -> list[ArchLayer]:
    """The passes before the loss and fusion: the BluePrint's layers expanded, checked, wired and named (what the
    model computes layer by layer, cbr as conv, bn and its activation: tr.task.torch_layers compares this)."""
    layers = expand(blueprint, channels)
    check_params(layers)
    layers = wire(layers)
    layers = remove_identity(layers)
    check_flatten(layers)
    return name_bn(layers)


def build_layers(blueprint: Any, x: Shape, num_classes: int, amp: bool,
                 loss: str = "softmax_ce") -> tuple[list[ArchLayer], list[Shape]]:
    """All passes; returns the final layers and their per-sample output shapes."""
    layers = append_loss(unfused(blueprint, x.c), num_classes, loss)
    shapes = infer_shapes(layers, x)
    layers = place_flatten(layers, shapes, amp)
    layers = fuse(layers, amp)
    layers = mark_first(layers)
    layers = renumber(layers)
    final = infer_shapes(layers, x)
    return layers, [final[i] for i in range(len(layers))]
