"""Structure-aware edits of DTS files for the DTS tests: the format's fields by name (tr.data.dts.format's
HEADER and BLOCK structs), a Pack whose fields are read and written by name with the checksums recomputed as a
writer would, the mutations of test_fuzz_dts.py (each edits a Pack and says what it did), mixed by
``mutate_pack``, and the small packs and edits the regression tests share (``fake_jpeg_pack``, ``edited``)."""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np
from parser_fuzz import dumps as json_dumps
from parser_fuzz import mutate, mutate_at, mutate_json, near, replace_file

from tr.data.dts import DtsWriter, jpeg_header
from tr.data.dts.format import BLOCK, HEADER, PAGE, crc32

# ---- the format's fields by name (tr.data.dts.format: HEADER and BLOCK) ------------------------------------
_HEADER_NAMES = ("magic", "major", "minor", "patch", "reserved", "dataset", "split", "level", "kind", "num_classes",
                 "layout", "width", "height", "channels", "color", "num_samples", "total_blocks", "header_bytes",
                 "block_bytes", "block_header_bytes", "alignment", "max_pics", "total_bytes", "meta_len", "crc")
_BLOCK_NAMES = ("magic", "block_id", "num_pics", "payload_bytes", "payload_crc", "crc")


def _fields(fmt: str, names: tuple[str, ...]) -> dict[str, tuple[int, str]]:
    """name -> (offset, struct format) of a little-endian struct's fields (padding skipped)."""
    out, off, it = {}, 0, iter(names)
    for count, code in re.findall(r"(\d*)([a-zA-Z])", fmt.lstrip("<")):
        n = int(count or 1)
        if code == "x":
            off += n
        elif code == "s":
            out[next(it)] = (off, f"<{n}s")
            off += n
        else:
            for _ in range(n):
                out[next(it)] = (off, "<" + code)
                off += struct.calcsize(code)
    assert off == struct.calcsize(fmt) and len(out) == len(names), "the DTS header layout changed: update the names"
    return out


HEAD = _fields(HEADER.format, _HEADER_NAMES)
BHEAD = _fields(BLOCK.format, _BLOCK_NAMES)
INDEX_AT = BLOCK.size  # offsets[n], sizes[n], labels[n] (u32) follow the block's fixed fields


class Pack:
    """A DTS file's bytes, its fields read and written by name; the fix_* methods recompute checksums as a
    writer would, where a reader will look after the edits (a field pointing outside the file: left as is)."""

    def __init__(self, raw: bytes) -> None:
        self.b = bytearray(raw)

    # the fixed header
    def get(self, name: str) -> int | bytes:
        off, fmt = HEAD[name]
        return struct.unpack_from(fmt, self.b, off)[0]

    def set(self, name: str, v: int | bytes) -> None:
        off, fmt = HEAD[name]
        if isinstance(v, int):
            v &= (1 << (8 * struct.calcsize(fmt))) - 1
        struct.pack_into(fmt, self.b, off, v)

    def fix_header(self) -> None:
        hb = min(int(self.get("header_bytes")), len(self.b))
        if hb < HEADER.size:
            return
        region = bytearray(self.b[:hb])
        struct.pack_into("<I", region, HEAD["crc"][0], 0)
        self.set("crc", crc32(region))

    # blocks
    def start(self, i: int) -> int:
        return int(self.get("header_bytes")) + i * int(self.get("block_bytes"))

    def blocks(self) -> int:
        return int(self.get("total_blocks"))

    def _ok(self, i: int, need: int) -> bool:
        return 0 <= self.start(i) and self.start(i) + need <= len(self.b)

    def bget(self, i: int, name: str) -> int | bytes:
        off, fmt = BHEAD[name]
        return struct.unpack_from(fmt, self.b, self.start(i) + off)[0]

    def bset(self, i: int, name: str, v: int | bytes) -> None:
        off, fmt = BHEAD[name]
        struct.pack_into(fmt, self.b, self.start(i) + off, v & 0xFFFFFFFF if isinstance(v, int) else v)

    def index(self, i: int) -> np.ndarray:
        """Block i's (3, n) index: offsets, sizes, labels (a copy)."""
        n = int(self.bget(i, "num_pics"))
        return np.frombuffer(self.b, "<u4", 3 * n, self.start(i) + INDEX_AT).reshape(3, n).copy()

    def set_index(self, i: int, idx: np.ndarray) -> None:
        """Write a (3, n) index and num_pics = n, the rest of the block header zeroed."""
        s, bhb = self.start(i), int(self.get("block_header_bytes"))
        raw = np.ascontiguousarray(idx, "<u4").tobytes()
        end = min(s + max(bhb, INDEX_AT + len(raw)), len(self.b))
        if s + INDEX_AT + len(raw) > end:
            raise ValueError(f"block {i}'s index does not fit the file")
        self.b[s + INDEX_AT:end] = raw + bytes(end - s - INDEX_AT - len(raw))
        self.bset(i, "num_pics", idx.shape[1])

    def fix_block(self, i: int, payload: bool = False) -> None:
        bhb = int(self.get("block_header_bytes"))
        if bhb < BLOCK.size or not self._ok(i, bhb):
            return
        s = self.start(i)
        if payload:
            n = int(self.bget(i, "payload_bytes"))
            self.bset(i, "payload_crc", crc32(self.b[s + bhb:s + bhb + n]))
        head = bytearray(self.b[s:s + bhb])
        struct.pack_into("<I", head, BHEAD["crc"][0], 0)
        self.bset(i, "crc", crc32(head))

    def fix_all(self, payload: bool = False) -> None:
        for i in range(min(self.blocks(), 64)):
            self.fix_block(i, payload)
        self.fix_header()

    def meta_text(self) -> bytes:
        return bytes(self.b[HEADER.size:HEADER.size + int(self.get("meta_len"))])

    def set_meta(self, text: bytes) -> None:
        """The metadata replaced, the header region grown by whole pages where it no longer fits (the blocks
        move with it: header_bytes and total_bytes follow)."""
        hb = int(self.get("header_bytes"))
        if not HEADER.size <= hb <= len(self.b):
            raise ValueError(f"a header region of {hb} bytes")
        need = -(-(HEADER.size + len(text)) // PAGE) * PAGE
        if need > hb:
            self.b[hb:hb] = bytes(need - hb)
            self.set("header_bytes", need)
            self.set("total_bytes", int(self.get("total_bytes")) + need - hb)
            hb = need
        self.b[HEADER.size:hb] = text + bytes(hb - HEADER.size - len(text))
        self.set("meta_len", len(text))


# ---- mutations: each edits a Pack and says what it did ----------------------------------------------------
_NUMERIC = ("split", "level", "kind", "num_classes", "width", "height", "channels", "num_samples", "total_blocks",
            "header_bytes", "block_bytes", "block_header_bytes", "alignment", "max_pics", "total_bytes", "meta_len")


def _header_field(p: Pack, r: np.random.Generator) -> str:
    k = int(r.integers(0, 10))
    if k == 0:  # absurd versions: an older or newer major, minors from the future
        name, v = ("major", "minor", "patch", "reserved")[int(r.integers(0, 4))], int(r.choice([0, 3, 5, 99, 255]))
    elif k == 1:
        name = ("dataset", "layout", "color", "magic")[int(r.integers(0, 4))]
        width = HEAD[name][1][1:-1]
        v = r.integers(0, 256, int(width), dtype=np.uint8).tobytes() if r.random() < 0.5 else b"NCHW"[:int(width)]
    else:
        name = _NUMERIC[int(r.integers(0, len(_NUMERIC)))]
        bits = 8 * struct.calcsize(HEAD[name][1])
        v = near(int(p.get(name)), r, bits)
    old = p.get(name)
    p.set(name, v)
    return f"header {name} {old!r} -> {p.get(name)!r}"


def _meta(p: Pack, r: np.random.Generator) -> str:
    text = p.meta_text()
    k = int(r.integers(0, 4))
    if k == 0:
        try:
            doc = json.loads(text)
        except ValueError:  # an earlier edit of this case broke it
            doc = {}
        doc, how = mutate_json(doc, r)
        new, how = json_dumps(doc, sort_keys=True).encode(), f"metadata {how}"
    elif k == 1:
        new = [b"[1, 2]", b"5", b"null", b'"classes"', b'{"classes": 5}', b'{"classes": {"a": 1}}',
               b'{"classes": [1, 2, 3]}', b'{"classes": "abc"}', b"{}", b"{" * 3000, b"[" * 3000 + b"]" * 3000,
               b'{"classes": ' + b"[" * 1900 + b"]" * 1900 + b"}"][int(r.integers(0, 12))]
        how = f"metadata {new[:30]!r}... ({len(new)} bytes)"
    elif k == 2:
        new, how = mutate(text, r, header=len(text))
        how = f"metadata text: {how}"
    else:  # the length says less or more than the text
        v = near(len(text), r)
        p.set("meta_len", v)
        return f"meta_len {len(text)} -> {p.get('meta_len')}"
    p.set_meta(new)
    return how


def _pick(p: Pack, r: np.random.Generator) -> int:
    return int(r.integers(0, max(1, min(p.blocks(), 64))))


def _block_field(p: Pack, r: np.random.Generator) -> str:
    i = _pick(p, r)
    name = ("magic", "block_id", "num_pics", "payload_bytes", "payload_crc")[int(r.integers(0, 5))]
    if name == "magic":
        v: int | bytes = [b"LV0B", b"LV1B", b"LV3B", b"LV9B", b"\0\0\0\0"][int(r.integers(0, 5))]
    elif name == "num_pics" and r.random() < 0.5:
        v = int(r.choice([int(p.get("max_pics")), int(p.get("max_pics")) + 1,
                          (int(p.get("block_header_bytes")) - INDEX_AT) // 12 + 1]))
    else:
        v = near(int(p.bget(i, name)), r)
    old = p.bget(i, name)
    p.bset(i, name, v)
    return f"block {i} {name} {old!r} -> {v!r}"


def _index(p: Pack, r: np.random.Generator) -> str:
    i = _pick(p, r)
    idx = p.index(i)
    n = idx.shape[1]
    if n == 0:
        return f"block {i}: no samples to edit"
    bhb, payload, align = int(p.get("block_header_bytes")), int(p.bget(i, "payload_bytes")), int(p.get("alignment"))
    j, k = int(r.integers(0, n)), int(r.integers(0, n))
    what = int(r.integers(0, 4))
    if what == 3:  # a permutation of the block's samples: still a valid pack
        perm = r.permutation(n)
        p.set_index(i, idx[:, perm])
        return f"block {i}: samples reordered"
    old = int(idx[what, j])
    if what == 0:
        choices = [0, bhb - align, bhb + payload, bhb + payload - 1, int(idx[0, k]), old + 1, old + align,
                   old - align, near(old, r)]
    elif what == 1:
        choices = [0, 1, old - 1, old + 1, int(idx[1, k]), payload, 2 * old, near(old, r)]
    else:
        classes = int(p.get("num_classes"))
        choices = [classes, classes - 1, classes + 1, 2**31, 2**32 - 1, int(r.integers(0, max(1, classes))),
                   near(old, r)]
    idx[what, j] = int(choices[int(r.integers(0, len(choices)))]) & 0xFFFFFFFF
    p.set_index(i, idx)
    return f"block {i} sample {j}: {('offset', 'size', 'label')[what]} {old} -> {int(idx[what, j])}"


def _payload(p: Pack, r: np.random.Generator) -> str:
    """Edit one sample's bytes in place (RAW: pixels; JPEG: the file, its markers mostly) or cut its size."""
    i = _pick(p, r)
    idx = p.index(i)
    if idx.shape[1] == 0:
        return f"block {i}: no samples to edit"
    j = int(r.integers(0, idx.shape[1]))
    s, (o, z) = p.start(i), (int(idx[0, j]), int(idx[1, j]))
    old = bytes(p.b[s + o:s + o + z])
    new, how = mutate(old, r, header=min(len(old), 600))
    if len(new) < len(old) and r.random() < 0.5:  # a shorter sample: its size follows
        idx[1, j] = len(new)
        p.set_index(i, idx)
    new = (new + old[len(new):])[:len(old)]
    p.b[s + o:s + o + z] = new
    return f"block {i} sample {j} bytes: {how}"


def _consistent(p: Pack, r: np.random.Generator) -> str:
    """Edits a writer could have made: the pack stays valid."""
    i = p.blocks() - 1
    idx = p.index(i)
    if r.random() < 0.5 and p.blocks() > 1:  # the last block dropped
        p.b = p.b[:p.start(i)]
        p.set("total_blocks", i)
        p.set("num_samples", int(p.get("num_samples")) - idx.shape[1])
        p.set("total_bytes", len(p.b))
        return "last block dropped (counts follow)"
    if idx.shape[1] > 1:  # the last sample of the last block dropped
        p.set_index(i, idx[:, :-1])
        p.set("num_samples", int(p.get("num_samples")) - 1)
        return "last sample dropped (counts follow)"
    return "unchanged"


def _counts_disagree(p: Pack, r: np.random.Generator) -> str:
    i = _pick(p, r)
    idx = p.index(i)
    k = int(r.integers(0, 3))
    if k == 0 and idx.shape[1] > 1:  # the index loses a sample, the header's count does not
        p.set_index(i, idx[:, :-1])
        return f"block {i} lost its last sample, num_samples unchanged"
    if k == 1:  # the index gains a sample (a copy of another)
        p.set_index(i, np.concatenate([idx, idx[:, :1]], 1))
        return f"block {i} gained a copy of its first sample, num_samples unchanged"
    d = int(r.choice([-1, 1]))
    p.set("num_samples", int(p.get("num_samples")) + d)
    return f"num_samples {d:+d}"


def _file_size(p: Pack, r: np.random.Generator) -> str:
    """The file cut or grown, the header's total_bytes told the new size."""
    n = len(p.b)
    if r.random() < 0.5 and int(p.get("header_bytes")) < n:
        cut = int(r.integers(int(p.get("header_bytes")), n))
        p.b = p.b[:cut]
        how = f"cut to {cut} bytes"
    else:
        extra = int(r.choice([1, 64, PAGE, int(p.get("block_bytes"))]))
        p.b += bytes(extra)
        how = f"{extra} zero bytes appended"
    p.set("total_bytes", len(p.b))
    return how + " (total_bytes follows)"


FIXED = [(_header_field, 15), (_meta, 12), (_block_field, 10), (_index, 18), (_payload, 8), (_consistent, 5),
         (_counts_disagree, 6), (_file_size, 4)]


def mutate_pack(raw: bytes, r: np.random.Generator) -> tuple[bytes, str]:
    """One case: random bytes aimed at the header or a block header (checksums left stale), or 1-3 field
    edits with the checksums recomputed (most of the time)."""
    p = Pack(raw)
    if r.random() < 0.2:
        if r.random() < 0.5:
            return mutate_at(raw, 0, HEADER.size + int(p.get("meta_len")), r)
        i = _pick(p, r)
        return mutate_at(raw, p.start(i), INDEX_AT + 12 * int(p.bget(i, "num_pics")), r)
    fns, weights = zip(*FIXED)
    w = np.array(weights, float) / sum(weights)
    hows = []
    for _ in range(1 if r.random() < 0.85 else int(r.integers(2, 4))):
        fn = fns[int(r.choice(len(fns), p=w))]
        try:
            hows.append(fn(p, r))
        except (ValueError, IndexError, struct.error):  # an earlier edit moved the fields out of the file
            hows.append(f"{fn.__name__} skipped")
    if r.random() < 0.92:
        p.fix_all(payload=True)
        hows.append("checksums recomputed")
    return bytes(p.b), "; ".join(hows)


# ---- packs and edits of the regression tests ------------------------------------------------------------------

def fake_jpeg_pack(path: Path, split: str = "train", n: int = 5, size: int = 104, classes: int = 3,
                   block: int = 1 << 16) -> Path:
    """A JPEG pack of ``n`` byte strings of ``size`` bytes framed as JPEGs (the readers check blocks, not JPEG
    structure), labelled 0, 1, ... modulo ``classes``."""
    h = jpeg_header("TEST", split, 0, classes, " RGB", {"classes": [f"c{i}" for i in range(classes)]}, block)
    with DtsWriter(path, h) as w:
        for i in range(n):
            w.add(b"\xff\xd8" + bytes([i]) * (size - 4) + b"\xff\xd9", i % classes)
    return path


def edited(tmp_path: Path, make: Callable[[Path], object], edit: Callable[[Pack], object]) -> Path:
    """tmp_path/p/train.dts written by ``make``, edited through a Pack, its checksums recomputed as a writer
    would."""
    path = tmp_path / "p" / "train.dts"
    path.parent.mkdir()
    make(path)
    p = Pack(path.read_bytes())
    edit(p)
    p.fix_all(payload=True)
    replace_file(path, bytes(p.b))
    return path
