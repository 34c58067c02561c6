"""The one declaration of what crosses tr.data's native boundary for a transform: each op kind's typed
parameters (and the fused stage's), and the generator of their C++ structs and pybind11 classes.

``python packages/tr-data/tools/gen_op_params.py`` rewrites ``csrc/op_params.hpp`` (the structs, OpKind, the
OpParams variant) and ``csrc/bind_op_params.cpp`` (one keyword-only class per record, ``_native.ResizeParams``
etc.); ``--check`` exits 1 when either is stale (tests/test_op_params.py runs that). Edit the table below, run
the script, rebuild the extension. The C++ reads the fields by name (ops.cpp); the Python side builds each
record by keyword (tr/data/transforms.py), and a misspelt, missing or positional field is a TypeError at that
call naming the kind and the field.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

CSRC = Path(__file__).resolve().parents[1] / "csrc"
HEADER = "op_params.hpp"
BINDINGS = "bind_op_params.cpp"

# field types: the C++ type, the FieldReader call that reads the Python value (csrc/bind_fields.hpp) and the
# member's initialiser; "X | None" (X a record declared above it) is std::optional<X>
TYPES = {
    "int": ("int64_t", "i64({n})", " = 0"),
    "float": ("double", "f64({n})", " = 0.0"),
    "bool": ("bool", "flag({n})", " = false"),
    "floats": ("std::vector<double>", "floats({n})", ""),
    "str": ("std::string", "str({n})", ""),
}


def ctype(t: str) -> tuple[str, str, str]:
    if t.endswith(" | None"):
        rec = t[: -len(" | None")]
        return f"std::optional<{rec}>", f"record_or_none<{rec}>({{n}}, {_cstr(rec)})", ""
    return TYPES[t]


@dataclass(frozen=True)
class Field:
    name: str
    type: str  # a key of TYPES
    doc: str


@dataclass(frozen=True)
class Record:
    cls: str  # the C++ struct and the Python class
    doc: str
    fields: tuple[Field, ...]
    label: str  # what messages about its values start with: the transform's name, as op_check's messages do
    kind_id: int = 0  # OpKind's value; 0: not a native op kind (a part of the fused stage)

    @property
    def kind(self) -> str | None:
        return self.label if self.kind_id else None


def kind(name: str, kind_id: int, doc: str, *fields: Field) -> Record:
    """The parameters of native op kind ``name`` (OpKind::name = kind_id; an alternative of OpParams)."""
    return Record(f"{name}Params", doc, fields, name, kind_id)


def stage(name: str, doc: str, *fields: Field) -> Record:
    """The parameters of transform ``name`` that the fused stage runs (not an op kind)."""
    return Record(f"{name}Params", doc, fields, name)


def f(name: str, type_: str, doc: str) -> Field:
    return Field(name, type_, doc)


FILL = f("fill", "floats", "border value 0..255: one for every channel or one per channel")
PAD_MODE = f("padding_mode", "int", "0 constant (fill), 1 edge, 2 reflect, 3 symmetric")

RECORDS: tuple[Record, ...] = (
    kind("Pad", 1, "Pad each side by its own amount.",
         f("left", "int", "columns added on the left"),
         f("top", "int", "rows added on top"),
         f("right", "int", "columns added on the right"),
         f("bottom", "int", "rows added at the bottom"),
         PAD_MODE, FILL),
    kind("RandomCrop", 2, "A uniformly placed height x width crop of the image padded by pad_* (torchvision's).",
         f("height", "int", "crop height"),
         f("width", "int", "crop width"),
         f("pad_left", "int", "columns of padding on the left"),
         f("pad_top", "int", "rows of padding on top"),
         f("pad_right", "int", "columns of padding on the right"),
         f("pad_bottom", "int", "rows of padding at the bottom"),
         PAD_MODE,
         f("pad_if_needed", "bool", "pad both sides by the shortfall when the image is smaller than the crop"),
         FILL),
    kind("CenterCrop", 3, "The centred height x width crop; zero padding where the image is smaller.",
         f("height", "int", "crop height"),
         f("width", "int", "crop width")),
    kind("Resize", 4, "Antialiased bilinear resize.",
         f("mode", "int", "0: to height x width; 1: the short side becomes size (the long side at most max_size "
                          "when > 0); 2: the centred square of the short side, then size x size"),
         f("height", "int", "output height (mode 0)"),
         f("width", "int", "output width (mode 0)"),
         f("size", "int", "the short side (mode 1) or the square's side (mode 2)"),
         f("max_size", "int", "mode 1's limit of the long side; 0: none")),
    kind("RandomResizedCrop", 5, "torchvision's RandomResizedCrop box, resampled to height x width.",
         f("height", "int", "output height"),
         f("width", "int", "output width"),
         f("scale_lo", "float", "smallest area fraction of the box"),
         f("scale_hi", "float", "largest area fraction of the box"),
         f("ratio_lo", "float", "smallest aspect ratio (width / height) of the box"),
         f("ratio_hi", "float", "largest aspect ratio of the box")),
    kind("RandomRotation", 6, "Rotation by an angle uniform in [degrees_lo, degrees_hi], bilinear.",
         f("degrees_lo", "float", "smallest angle, degrees counter-clockwise"),
         f("degrees_hi", "float", "largest angle"),
         FILL),
    kind("RandomScale", 7, "Scale by s uniform in [scale_lo, scale_hi], then centre crop or pad to the input size.",
         f("scale_lo", "float", "smallest factor"),
         f("scale_hi", "float", "largest factor"),
         FILL),
    kind("ColorJitter", 8, "torchvision's ColorJitter: each enabled factor uniform in [lo, hi], in a random order.",
         f("brightness_on", "bool", "draw and apply a brightness factor"),
         f("brightness_lo", "float", "smallest brightness factor"),
         f("brightness_hi", "float", "largest brightness factor"),
         f("contrast_on", "bool", "draw and apply a contrast factor"),
         f("contrast_lo", "float", "smallest contrast factor"),
         f("contrast_hi", "float", "largest contrast factor"),
         f("saturation_on", "bool", "draw and apply a saturation factor"),
         f("saturation_lo", "float", "smallest saturation factor"),
         f("saturation_hi", "float", "largest saturation factor"),
         f("hue_on", "bool", "draw and apply a hue shift"),
         f("hue_lo", "float", "smallest hue shift (turns)"),
         f("hue_hi", "float", "largest hue shift")),
    kind("GaussianBlur", 9, "Separable Gaussian blur, sigma uniform in [sigma_lo, sigma_hi], reflect borders.",
         f("kernel_x", "int", "odd kernel width"),
         f("kernel_y", "int", "odd kernel height"),
         f("sigma_lo", "float", "smallest sigma"),
         f("sigma_hi", "float", "largest sigma")),
    kind("GaussianNoise", 10, "Adds N(mean, sigma^2) noise in pixel units, rounded and clipped.",
         f("mean", "float", "noise mean"),
         f("sigma", "float", "noise standard deviation")),
    kind("RandomGrayscale", 11, "With probability p, RGB to luma on all three channels.",
         f("p", "float", "probability")),
    kind("RandomAutocontrast", 12, "With probability p, stretch each channel's [min, max] to [0, 255].",
         f("p", "float", "probability")),
    kind("RandAugment", 13, "torchvision's RandAugment: num_ops random ops at bin magnitude, random signs.",
         f("num_ops", "int", "operations applied one after the other"),
         f("magnitude", "int", "the magnitude bin, 0 .. num_magnitude_bins - 1"),
         f("num_magnitude_bins", "int", "bins of each op's magnitude range"),
         FILL),
    kind("TrivialAugmentWide", 14, "torchvision's TrivialAugmentWide: one random op, bin and sign.",
         f("num_magnitude_bins", "int", "bins of each op's magnitude range"),
         FILL),
    stage("RandomHorizontalFlip", "Mirror left-right with probability p (in the fused stage).",
          f("p", "float", "probability")),
    stage("RandomErasing", "torchvision's RandomErasing rectangle (in the fused stage, after the flip).",
          f("p", "float", "probability"),
          f("scale_lo", "float", "smallest area fraction of the rectangle"),
          f("scale_hi", "float", "largest area fraction"),
          f("ratio_lo", "float", "smallest aspect ratio of the rectangle"),
          f("ratio_hi", "float", "largest aspect ratio"),
          f("value", "floats", "the value written, in normalised space: one, or one per channel")),
    Record("FusedStage", "The chain's last stage: normalisation to float32/float16/bfloat16, the flip and erasing "
                         "folded in.", (
        f("mean", "floats", "mean in [0, 1] units: one, or one per channel"),
        f("std", "floats", "standard deviation: one, or one per channel"),
        f("dtype", "str", "output dtype: 'float32', 'float16' or 'bfloat16' (uint16 bit patterns)"),
        f("pad_channels_to", "int", "at least this many output channels (the extra ones 0); 0: no padding"),
        f("flip", "RandomHorizontalFlipParams | None", "the chain's flip, if any"),
        f("erase", "RandomErasingParams | None", "the chain's erasing, if any"),
    ), "FusedStage"),
)

BANNER = ("// GENERATED by packages/tr-data/tools/gen_op_params.py from its declaration table: edit the table and\n"
          "// run the script, not this file (tests/test_op_params.py fails when it is stale).\n")


def _check_table() -> None:
    names, ids = set(), set()
    for r in RECORDS:
        assert r.cls not in names, r.cls
        assert not r.kind_id or r.kind_id not in ids, r
        ids.add(r.kind_id)
        seen = set()
        for fd in r.fields:
            known = fd.type in TYPES or (fd.type.endswith(" | None") and fd.type[: -len(" | None")] in names)
            assert known and fd.name.isidentifier() and fd.name not in seen, (r.cls, fd)
            seen.add(fd.name)
        names.add(r.cls)


def _cstr(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def header() -> str:
    kinds = [r for r in RECORDS if r.kind]
    out = [BANNER, "// The typed parameters of each transform kind (and of the fused stage), as Python builds them.",
           "#pragma once", "", "#include <cstdint>", "#include <optional>", "#include <string>", "#include <variant>",
           "#include <vector>",
           "", "namespace trd {", "", "enum class OpKind : int {"]
    out += [f"  {r.kind} = {r.kind_id}," for r in kinds]
    out += ["};", ""]
    for r in RECORDS:
        out.append(f"// {r.doc}")
        out.append(f"struct {r.cls} {{")
        if r.kind:
            out.append(f"  static constexpr OpKind kind = OpKind::{r.kind};")
            out.append(f"  static constexpr const char* kind_name = {_cstr(r.kind)};")
        for fd in r.fields:
            ct, _, init = ctype(fd.type)
            out.append(f"  {ct} {fd.name}{init};  // {fd.doc}")
        out += ["};", ""]
    out.append("// One transform's parameters; the alternative says its kind.")
    out.append("using OpParams = std::variant<" + ",\n                             ".join(r.cls for r in kinds) + ">;")
    out += ["", "}  // namespace trd", ""]
    return "\n".join(out)


def bindings() -> str:
    out = [BANNER, "// The pybind11 classes of op_params.hpp's records: keyword-only constructors (FieldReader),",
           "// read-only fields, fields(), repr and equality.", "#include <pybind11/stl.h>", "",
           '#include "bind_fields.hpp"', '#include "op_params.hpp"', "", "namespace trd::bind {", "", "namespace {"]
    for r in RECORDS:
        names = ", ".join(_cstr(fd.name) for fd in r.fields)
        types = ", ".join(_cstr(fd.type) for fd in r.fields)
        out.append(f"constexpr const char* k{r.cls}Names[] = {{{names}}};")
        out.append(f"constexpr const char* k{r.cls}Types[] = {{{types}}};")
    out += ["}  // namespace", "", "void bind_op_params(py::module_& m) {"]
    for r in RECORDS:
        doc = r.doc + "\n\nKeyword-only fields:\n" + "\n".join(
            f"    {fd.name} ({fd.type}): {fd.doc}" for fd in r.fields)
        doc_lines = "\n".join(f"        {_cstr(line)}" for line in doc.splitlines(keepends=True))
        out += [
            "  {",
            f"    py::class_<{r.cls}> c(m, {_cstr(r.cls)},",
            doc_lines + ");",
            "    c.def(py::init([](const py::args& args, const py::kwargs& kw) {",
            f"      const FieldReader r({_cstr(r.label)}, {_cstr(r.cls)}, FieldNames(k{r.cls}Names), args, kw);",
            f"      {r.cls} v;",
        ]
        out += [f"      v.{fd.name} = r.{ctype(fd.type)[1].format(n=_cstr(fd.name))};" for fd in r.fields]
        out += ["      return v;", "    }));"]
        out += [f"    c.def_readonly({_cstr(fd.name)}, &{r.cls}::{fd.name}, {_cstr(fd.doc)});" for fd in r.fields]
        out.append(f"    add_record_protocol(c, FieldNames(k{r.cls}Names), FieldNames(k{r.cls}Types));")
        if r.kind:
            out.append(f"    c.attr(\"kind\") = {_cstr(r.kind)};")
        out.append("  }")
    out += ["}", "", "}  // namespace trd::bind", ""]
    return "\n".join(out)


def generated() -> dict[str, str]:
    _check_table()
    return {HEADER: header(), BINDINGS: bindings()}


def stale(csrc: Path = CSRC) -> list[str]:
    """The generated files whose contents differ from what the table makes now."""
    return [name for name, text in generated().items()
            if not (csrc / name).exists() or (csrc / name).read_text() != text]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when a generated file is stale; write nothing")
    a = ap.parse_args(argv)
    bad = stale()
    if a.check:
        for name in bad:
            print(f"{CSRC / name} is stale: run {Path(__file__).name}", file=sys.stderr)
        return 1 if bad else 0
    for name, text in generated().items():
        if name in bad:
            (CSRC / name).write_text(text)
            print(f"wrote {CSRC / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
