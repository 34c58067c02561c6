"""Build stamps for tools/bootstrap.sh: skip an install step whose inputs have not changed.

Each step (the dev requirements, an editable pure package, a native package) has a digest of everything
that decides what it installs: files, the relevant environment, the compilers and build tools found, the
interpreter. bootstrap.sh writes the digest to ``<venv>/.tr-stamps/<name>`` after the step succeeds and
skips the step while the digest is unchanged and the installed result is still there. A fresh venv (CI's
fresh clone) has no stamps, so everything is built; TR_BOOTSTRAP_FORCE=1 ignores the stamps.

    python tools/bootstrap_stamp.py check STAMP_DIR NAME KIND PATH

prints the step's digest and exits 0 when the step can be skipped, 10 when it must run. KIND is
``requirements`` (PATH: the requirements file), ``editable`` or ``native`` (PATH: the package directory;
NAME: its distribution name).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from collections.abc import Iterable, Iterator
from importlib import metadata
from pathlib import Path

KINDS = ("requirements", "editable", "native")
STALE = 10  # exit status of `check` when the step must run (1 stays a crash)
# Directories inside a native package that never reach its wheel: build trees, caches, tests.
SKIP_DIRS = {"build", "dist", "tests", "__pycache__", ".pytest_cache", ".ruff_cache", ".tox"}
# What decides a native build besides its files: environment variables (SKBUILD_* wholesale), programs
# found (presence: e.g. the CUDA part built or not; fingerprint: a compiler upgrade) and build dependencies'
# versions. Every native package has the common part; each adds what its CMake code reads, so that e.g. a
# new TR_CUDA_ARCHS rebuilds tr-backend only. A native package missing from PROFILES gets all of them.
COMMON_ENV = ("CC", "CXX", "CFLAGS", "CXXFLAGS", "CPPFLAGS", "LDFLAGS", "CMAKE_ARGS", "CMAKE_GENERATOR")
COMMON_TOOLS = ("c++", "g++", "gcc", "cc", "clang++", "clang", "ninja", "cmake")
COMMON_DISTS = ("scikit-build-core", "cmake", "ninja", "numpy")
PROFILES: dict[str, dict[str, tuple[str, ...]]] = {
    "tr-data": {"env": ("TR_DATA_ASAN",), "tools": (), "dists": ("pybind11",)},
    "tr-backend": {
        "env": ("TR_BACKEND_CUDA", "TR_CUDA_ARCHS", "TR_CUDA_LIBS_ROOT", "TR_CUDNN_ROOT", "TR_CUDNN_FRONTEND_INCLUDE",
                "CUDACXX", "CUDAHOSTCXX", "CUDA_HOME", "CUDA_PATH", "CUDAToolkit_ROOT", "NVCC_APPEND_FLAGS",
                "NVCC_PREPEND_FLAGS"),
        # /usr/local/cuda/bin/nvcc: CMake's check_language(CUDA) finds it without PATH
        "tools": ("nvcc", "/usr/local/cuda/bin/nvcc"),
        # the headers of NVIDIA's wheels (cuBLASLt, NCCL, cuDNN and its frontend) decide what CUDA code builds
        "dists": ("nanobind", "nvidia-cudnn-frontend", "nvidia-cublas", "nvidia-cublas-cu12", "nvidia-nccl-cu13",
                  "nvidia-nccl-cu12", "nvidia-cudnn-cu13", "nvidia-cudnn-cu12"),
    },
}


def profile(name: str) -> dict[str, tuple[str, ...]]:
    extra = PROFILES.get(name)
    if extra is None:  # unknown package: assume it reads everything any package does
        extra = {k: tuple(dict.fromkeys(x for p in PROFILES.values() for x in p[k])) for k in ("env", "tools", "dists")}
    return {"env": COMMON_ENV + extra["env"], "tools": COMMON_TOOLS + extra["tools"],
            "dists": COMMON_DISTS + extra["dists"]}

def iter_files(root: Path) -> Iterator[Path]:
    """Every file under root that can reach the package's build, in a fixed order."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames
                             if d not in SKIP_DIRS and not d.startswith(".") and not d.endswith(".egg-info"))
        for name in sorted(filenames):
            if not name.endswith((".pyc", ".pyo")):
                yield Path(dirpath, name)


def tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for f in iter_files(root):
        h.update(f.relative_to(root).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def tool_fingerprint(path: str | None) -> list | None:
    """(resolved path, size, mtime) of a program: changes when it appears, disappears or is upgraded."""
    if path is None or not os.path.exists(path):
        return None
    real = os.path.realpath(path)
    st = os.stat(real)
    return [real, st.st_size, st.st_mtime_ns]


def dist_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def build_environment(name: str, env: dict[str, str] | None = None) -> dict:
    """What of the machine decides package ``name``'s native build besides its own files."""
    env = dict(os.environ) if env is None else env
    prof, path = profile(name), env.get("PATH", "")
    return {
        "env": {k: env[k] for k in sorted(env) if k in prof["env"] or k.startswith("SKBUILD_")},
        "tools": {t: tool_fingerprint(t if os.path.isabs(t) else shutil.which(t, path=path)) for t in prof["tools"]},
        "dists": {d: dist_version(d) for d in prof["dists"]},
    }

def digest(kind: str, path: Path, env: dict[str, str] | None = None) -> str:
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    parts: dict = {"kind": kind, "python": sys.version, "prefix": sys.prefix, "path": str(path.resolve())}
    if kind == "requirements":
        parts["file"] = hashlib.sha256(path.read_bytes()).hexdigest()
    elif kind == "editable":  # an editable install only records metadata: the pyproject is all that counts
        parts["pyproject"] = hashlib.sha256((path / "pyproject.toml").read_bytes()).hexdigest()
    else:
        parts["tree"] = tree_digest(path)
        parts["build"] = build_environment(path.resolve().name, env)
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def requirement_lines(path: Path) -> Iterable[str]:
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            yield line


def requirements_installed(path: Path) -> bool:
    """Every requirement of the file is installed at an allowed version (a later pip uninstall is noticed)."""
    try:
        from pip._vendor.packaging.requirements import Requirement
    except ImportError:  # pragma: no cover - pip always vendors packaging
        return True
    for line in requirement_lines(path):
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate():
            continue
        version = dist_version(req.name)
        if version is None or (req.specifier and not req.specifier.contains(version, prereleases=True)):
            return False
    return True


def _direct_url(name: str) -> dict | None:
    try:
        text = metadata.distribution(name).read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    return json.loads(text) if text else {}


def installed(kind: str, name: str, path: Path) -> bool:
    """Whether the step's result is still in the environment."""
    if kind == "requirements":
        return requirements_installed(path)
    url = _direct_url(name)
    if url is None:
        return False
    if kind == "editable":  # editable, and from this tree (not a moved or other checkout)
        return bool(url.get("dir_info", {}).get("editable")) and url.get("url") == path.resolve().as_uri()
    dist = metadata.distribution(name)
    files = [f for f in dist.files or [] if f.suffix in (".so", ".pyd")]
    return bool(files) and all(Path(dist.locate_file(f)).exists() for f in files)


def fresh(stamp_dir: Path, name: str, kind: str, path: Path, value: str) -> bool:
    stamp = stamp_dir / name
    if os.environ.get("TR_BOOTSTRAP_FORCE", "") not in ("", "0") or not stamp.is_file():
        return False
    return stamp.read_text().strip() == value and installed(kind, name, path)


def main(argv: list[str]) -> int:
    if len(argv) != 5 or argv[0] != "check" or argv[3] not in KINDS:
        print(__doc__, file=sys.stderr)
        return 2
    stamp_dir, name, kind, path = Path(argv[1]), argv[2], argv[3], Path(argv[4])
    value = digest(kind, path)
    print(value)
    return 0 if fresh(stamp_dir, name, kind, path, value) else STALE


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
