"""tr.core.memory: roles in layout order with their traits, groups and their sort key, regions, spans."""

import dataclasses
import importlib
import importlib.util
import io
import pkgutil
import re
import tokenize
from pathlib import Path

import pytest

import tr.core
from tr.core import DType
from tr.core.memory import PLAIN, Group, Region, Role, Select, Span, dtype_group

LAYOUT_ORDER = ["running", "running_next", "folded", "param", "ema", "ema_fp16", "amp_copy", "grad", "result",
                "grad_fp16", "grad_accum", "moment1", "moment2", "trust_ratio", "input", "activation", "scalar", "mask",
                "temp", "predicted", "result_sum", "resident"]
SHARED = {"running", "running_next", "folded", "param", "ema", "ema_fp16"}
STATE = SHARED | {"amp_copy", "moment1", "moment2", "trust_ratio", "scalar", "result_sum"}
SCRATCH = {"activation", "mask", "temp"}


def test_roles_in_layout_order():
    assert [r.value for r in Role] == LAYOUT_ORDER
    assert [r.rank for r in Role] == list(range(len(LAYOUT_ORDER)))
    assert [r.name.lower() for r in Role] == LAYOUT_ORDER
    # the step result sits between the FP32 and the FP16 gradients: one clear, one collective with the gradients
    assert Role.GRAD.rank + 1 == Role.RESULT.rank == Role.GRAD_FP16.rank - 1


def test_role_traits():
    assert {r.value for r in Role if r.shared} == SHARED
    assert {r.value for r in Role if r.state} == STATE
    assert {r.value for r in Role if r.scratch} == SCRATCH
    # what ranks share is checkpointed; nothing checkpointed is rewritten every step
    assert all(r.state for r in Role if r.shared) and not any(r.state for r in Role if r.scratch)
    for r in (Role.GRAD, Role.GRAD_FP16, Role.RESULT, Role.INPUT, Role.PREDICTED, Role.RESIDENT):
        assert not (r.state or r.shared or r.scratch), r


# One group of each trait pattern, in the order the layout must put them.
BIAS_PLAIN = Group("zz_bias_plain")
BIAS_COPY = Group("aa_bias_copy", amp_copy=True)
DECAYED_COPY = Group("yy_decayed_copy", decayed=True, amp_copy=True)
DECAYED_COPY_FP16 = Group("bb_decayed_copy_fp16", decayed=True, amp_copy=True, fp16_grad=True)
DECAYED_PLAIN = Group("cc_decayed_plain", decayed=True)
EARLY_BIAS = Group("dd_early_bias", early=True)
EARLY_DECAYED = Group("ee_early_decayed", decayed=True, amp_copy=True, fp16_grad=True, early=True)
EXPECTED = [BIAS_PLAIN, BIAS_COPY, DECAYED_COPY, DECAYED_COPY_FP16, DECAYED_PLAIN, EARLY_BIAS, EARLY_DECAYED]


def test_group_sort_key_runs_bias_like_then_decayed_with_copies_adjacent():
    # the names run against the expected order, so only the traits can produce it
    assert sorted(reversed(EXPECTED), key=Group.sort_key) == EXPECTED
    ordered = sorted(reversed(EXPECTED), key=Group.sort_key)
    late = [g for g in ordered if not g.early]

    def one_run(pred):
        idx = [i for i, g in enumerate(late) if pred(g)]
        return idx == list(range(idx[0], idx[-1] + 1))

    assert one_run(lambda g: g.amp_copy) and one_run(lambda g: g.decayed) and one_run(lambda g: not g.decayed)
    assert all(g.early for g in ordered[len(late):])


def test_group_order_then_name_break_ties():
    groups = [Group("b", order=1), Group("a", order=1), Group("z", order=0)]
    assert [g.name for g in sorted(groups, key=Group.sort_key)] == ["z", "a", "b"]


def test_group_is_a_frozen_value():
    g = Group("w", decayed=True)
    assert g == Group("w", decayed=True) and hash(g) == hash(Group("w", decayed=True))
    assert g != Group("w")
    with pytest.raises(dataclasses.FrozenInstanceError):
        g.decayed = False  # type: ignore[misc]
    assert g.traits() == {"decayed": True, "amp_copy": False, "fp16_grad": False, "early": False, "norm": False}
    assert PLAIN == Group("") and PLAIN.traits() == dict.fromkeys(
        ("decayed", "amp_copy", "fp16_grad", "early", "norm"), False)


def test_dtype_groups():
    assert {d: dtype_group(d).name for d in DType} == {
        DType.FP32: "fp32", DType.FP16: "fp16", DType.BF16: "bf16", DType.INT32: "int32", DType.INT8: "int8",
        DType.UINT8: "uint8"}
    assert [g.name for g in sorted((dtype_group(d) for d in DType), key=Group.sort_key)] == [
        "fp32", "fp16", "bf16", "int32", "int8", "uint8"]
    assert not any(any(dtype_group(d).traits().values()) for d in DType)


def test_region_names_and_order():
    assert Region(Role.PARAM, Group("w", decayed=True)).name == "param/w"
    assert Region(Role.RESULT).name == "result" and Region(Role.RESULT).group is PLAIN
    assert Region(Role.SCALAR, dtype_group(DType.INT32)).name == "scalar/int32"
    assert repr(Region(Role.MOMENT1, Group("w"))) == "Region(moment1/w)"
    # role first: the last group of a role comes before the first of the next role
    assert Region(Role.PARAM, EARLY_DECAYED) < Region(Role.EMA, BIAS_PLAIN)
    assert Region(Role.GRAD, EARLY_DECAYED) < Region(Role.RESULT) < Region(Role.GRAD_FP16, BIAS_PLAIN)
    regions = [Region(role, g) for role in (Role.GRAD, Role.PARAM) for g in EXPECTED]
    assert sorted(regions) == [Region(role, g) for role in (Role.PARAM, Role.GRAD) for g in EXPECTED]
    assert Region(Role.PARAM, BIAS_PLAIN) == Region(Role.PARAM, Group("zz_bias_plain"))
    assert len({Region(Role.PARAM, BIAS_PLAIN), Region(Role.PARAM, Group("zz_bias_plain"))}) == 1


def test_span_of_selects_by_role_and_traits():
    s = Span.of(Role.PARAM, decayed=True)
    assert s.parts == (Select(Role.PARAM, decayed=True),)
    assert s.matches(Region(Role.PARAM, DECAYED_PLAIN)) and s.matches(Region(Role.PARAM, EARLY_DECAYED))
    assert not s.matches(Region(Role.PARAM, BIAS_COPY)) and not s.matches(Region(Role.GRAD, DECAYED_PLAIN))
    both = Span.of(Role.GRAD, fp16_grad=True, early=False)
    assert both.matches(Region(Role.GRAD, DECAYED_COPY_FP16))
    assert not both.matches(Region(Role.GRAD, EARLY_DECAYED)) and not both.matches(Region(Role.GRAD, DECAYED_COPY))
    every = Span.of(Role.GRAD)
    assert all(every.matches(Region(Role.GRAD, g)) for g in EXPECTED)
    assert every.matches(Region(Role.GRAD)) and not every.matches(Region(Role.GRAD_FP16))


def test_span_of_refuses_an_unknown_trait():
    with pytest.raises(TypeError, match=r"unknown group trait\(s\) \['decay'\]; traits are "
                                        r"\['decayed', 'amp_copy', 'fp16_grad', 'early'\]"):
        Span.of(Role.PARAM, decay=True)
    with pytest.raises(TypeError, match=r"\['name', 'order'\]"):  # fields of a group, but nothing to select by
        Span.of(Role.PARAM, order=0, name="x")


def test_span_concatenation_and_repr():
    a, b, c = Span.of(Role.GRAD), Span.of(Role.RESULT), Span.of(Role.GRAD_FP16)
    s = a + b + c
    assert s.parts == a.parts + b.parts + c.parts and len(s.parts) == 3
    assert s.matches(Region(Role.RESULT)) and s.matches(Region(Role.GRAD_FP16, BIAS_PLAIN))
    assert not s.matches(Region(Role.PARAM, BIAS_PLAIN))
    assert repr(s) == "<grad + result + grad_fp16>"
    assert repr(Span.of(Role.PARAM, decayed=True, amp_copy=False)) == "<param[decayed, not amp_copy]>"
    assert repr(Span.of(Role.GRAD, early=True) + Span.of(Role.RESULT)) == "<grad[early] + result>"
    # equal spans are one key (the layout caches resolved spans by span)
    assert Span.of(Role.PARAM, decayed=True) == Span.of(Role.PARAM, decayed=True)
    assert hash(a + b) == hash(Span.of(Role.GRAD) + Span.of(Role.RESULT)) and a + b != b + a


LAYER_WORDS = {"fc", "conv", "bn", "batchnorm", "linear"}


def _words(text: str) -> set[str]:
    """Words of a name or string: split on non-letters, each word also split at its camel-case humps."""
    out = set()
    for w in re.split(r"[^A-Za-z]+", text):
        if w:
            out |= {w.lower(), *(p.lower() for p in re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+", w))}
    return out


def test_tr_core_names_no_layer_kind():
    import tr.core.memory as memory

    src = Path(memory.__file__).read_text()
    found = set()
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type in (tokenize.NAME, tokenize.STRING):
            found |= _words(tok.string) & LAYER_WORDS
    assert not found, f"tr/core/memory.py names layer kinds: {sorted(found)}"
    vocabulary = [*(r.name for r in Role), *(r.value for r in Role), *(f.name for f in dataclasses.fields(Group)),
                  *(f.name for f in dataclasses.fields(Select)), *(f.name for f in dataclasses.fields(Span)),
                  *(f.name for f in dataclasses.fields(Region)), *(dtype_group(d).name for d in DType)]
    assert not {w for v in vocabulary for w in _words(v)} & LAYER_WORDS
    assert importlib.util.find_spec("tr.core.region") is None and not hasattr(tr.core, "region")
    assert not any(n.startswith("Region") and n != "Region" for n in dir(tr.core))  # no RegionSpan/RegionConditions


def test_tr_core_has_no_graph_ids():
    # the seed's bucket ids went with issue 33: the compiler's parts and named steps live in tr.graph.steps
    assert importlib.util.find_spec("tr.core.graph_id") is None and not hasattr(tr.core, "graph_id")
    modules = [importlib.import_module(f"tr.core.{m.name}") for m in pkgutil.iter_modules(tr.core.__path__)]
    assert len(modules) > 10 and all(m.__file__ for m in modules)
    found = {f"tr.core: {n}" for n in dir(tr.core) if "GraphId" in n}
    for m in modules:
        found |= {f"{m.__name__}: {n}" for n in dir(m) if "GraphId" in n}
        toks = tokenize.generate_tokens(io.StringIO(Path(m.__file__).read_text()).readline)
        found |= {f"{m.__name__} source: {t.string}" for t in toks if t.type == tokenize.NAME and "GraphId" in t.string}
    assert not found, sorted(found)


def test_word_splitting_would_catch_a_layer_name():
    # the check above is only as good as its tokenizer: a planted name in each token kind is found
    planted = 'FC_W = Group("first_conv")\nx = "BatchNorm scale"\nlinearBias = 1\n'
    found = set()
    for tok in tokenize.generate_tokens(io.StringIO(planted).readline):
        if tok.type in (tokenize.NAME, tokenize.STRING):
            found |= _words(tok.string) & LAYER_WORDS
    assert found == {"fc", "conv", "batchnorm", "linear"}
