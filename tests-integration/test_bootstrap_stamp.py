"""tools/bootstrap_stamp.py: what makes tools/bootstrap.sh redo a step, and a second bootstrap that does none."""

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bootstrap_stamp", ROOT / "tools" / "bootstrap_stamp.py")
bs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bs)

STEPS = [("requirements", "requirements", "tools/requirements-dev.txt"),
         *[(f"tr-{p}", "editable", f"packages/tr-{p}") for p in ("core", "tensor", "algo", "graph", "task")],
         *[(f"tr-{p}", "native", f"packages/tr-{p}") for p in ("data", "backend")]]


def _package(tmp_path: Path, name: str = "tr-x") -> Path:
    pkg = tmp_path / name
    for rel, text in {"pyproject.toml": "[project]\nname='tr-x'\n", "CMakeLists.txt": "project(x)\n",
                      "csrc/a.cpp": "int a;\n", "src/tr/x/__init__.py": "", "tests/test_a.py": "def test(): pass\n"
                      }.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    return pkg


def test_tree_digest_follows_sources_and_ignores_build_outputs_and_tests(tmp_path):
    pkg = _package(tmp_path)
    d0 = bs.tree_digest(pkg)
    for rel in ("build/cp311/CMakeCache.txt", "tests/test_b.py", "src/tr/x/__pycache__/m.cpython-311.pyc",
                "src/tr/x/m.pyc", "tr_x.egg-info/PKG-INFO", ".pytest_cache/v", "dist/tr_x.whl"):
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text("noise")
    assert bs.tree_digest(pkg) == d0
    (pkg / "csrc/a.cpp").write_text("int a = 1;\n")
    d1 = bs.tree_digest(pkg)
    assert d1 != d0
    (pkg / "csrc/b.hpp").write_text("")  # a new, empty file counts too
    assert bs.tree_digest(pkg) != d1
    (pkg / "csrc/b.hpp").rename(pkg / "csrc/c.hpp")  # and so does a rename
    assert bs.tree_digest(pkg) not in (d0, d1)


def test_native_digest_follows_the_build_environment(tmp_path):
    pkg = _package(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    env = {"PATH": str(bin_dir)}
    base = bs.digest("native", pkg, env)
    assert bs.digest("native", pkg, dict(env)) == base
    assert bs.digest("native", pkg, env | {"TR_CUDA_ARCHS": "90"}) != base
    assert bs.digest("native", pkg, env | {"TR_BACKEND_CUDA": "OFF"}) != base
    assert bs.digest("native", pkg, env | {"SKBUILD_CMAKE_ARGS": "-DX=1"}) != base
    assert bs.digest("native", pkg, env | {"TR_CONV": "direct", "HOME": "/x"}) == base  # run-time only
    nvcc = bin_dir / "nvcc"
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(0o755)
    with_nvcc = bs.digest("native", pkg, env)
    assert with_nvcc != base  # a CUDA compiler appeared: the CUDA part would now be built
    nvcc.write_text("#!/bin/sh\n# a newer release\n")
    assert bs.digest("native", pkg, env) != with_nvcc


def test_each_native_package_follows_only_what_its_build_reads(tmp_path):
    data, backend = _package(tmp_path, "tr-data"), _package(tmp_path, "tr-backend")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    env = {"PATH": str(bin_dir)}
    d0, b0 = bs.digest("native", data, env), bs.digest("native", backend, env)
    arch = env | {"TR_CUDA_ARCHS": "90"}
    assert bs.digest("native", data, arch) == d0 and bs.digest("native", backend, arch) != b0
    asan = env | {"TR_DATA_ASAN": "ON"}
    assert bs.digest("native", data, asan) != d0 and bs.digest("native", backend, asan) == b0
    cxx = env | {"CXX": "clang++"}
    assert bs.digest("native", data, cxx) != d0 and bs.digest("native", backend, cxx) != b0
    (bin_dir / "nvcc").write_text("")
    (bin_dir / "nvcc").chmod(0o755)
    assert bs.digest("native", data, env) == d0 and bs.digest("native", backend, env) != b0


def test_editable_and_requirements_digests(tmp_path):
    pkg = _package(tmp_path)
    d0 = bs.digest("editable", pkg)
    (pkg / "src/tr/x/__init__.py").write_text("x = 1\n")  # editable: sources are read in place
    assert bs.digest("editable", pkg) == d0
    (pkg / "pyproject.toml").write_text("[project]\nname='tr-x'\ndependencies=['tqdm']\n")
    assert bs.digest("editable", pkg) != d0
    req = tmp_path / "req.txt"
    req.write_text("pytest>=1\n")
    r0 = bs.digest("requirements", req)
    req.write_text("pytest>=1\ntqdm\n")
    assert bs.digest("requirements", req) != r0


def test_fresh_needs_the_same_digest_and_the_install_still_there(tmp_path, monkeypatch):
    monkeypatch.delenv("TR_BOOTSTRAP_FORCE", raising=False)
    stamps, req = tmp_path / "stamps", tmp_path / "req.txt"
    stamps.mkdir()
    req.write_text("# comment\npytest>=1  # the runner\n--index-url https://example.invalid\n")
    value = bs.digest("requirements", req)
    assert not bs.fresh(stamps, "requirements", "requirements", req, value)  # no stamp yet
    (stamps / "requirements").write_text(value + "\n")
    assert bs.fresh(stamps, "requirements", "requirements", req, value)
    assert not bs.fresh(stamps, "requirements", "requirements", req, "0" * 64)
    monkeypatch.setenv("TR_BOOTSTRAP_FORCE", "1")
    assert not bs.fresh(stamps, "requirements", "requirements", req, value)
    monkeypatch.delenv("TR_BOOTSTRAP_FORCE")
    for missing in ("pytest<1", "no-such-distribution-tr-test"):  # uninstalled or downgraded since
        req.write_text(missing + "\n")
        assert not bs.requirements_installed(req)


def test_installed_checks_this_tree_s_packages():
    if not (Path(sys.prefix) / ".tr-stamps").is_dir():
        pytest.skip("this interpreter's environment was not made by tools/bootstrap.sh")
    assert bs.installed("editable", "tr-core", ROOT / "packages/tr-core")
    assert not bs.installed("editable", "tr-core", ROOT / "packages/tr-graph")  # installed from elsewhere
    assert bs.installed("native", "tr-data", ROOT / "packages/tr-data")
    assert not bs.installed("native", "no-such-distribution-tr-test", ROOT)


def test_cli_exit_codes(tmp_path):
    req = tmp_path / "req.txt"
    req.write_text("pytest\n")
    cmd = [sys.executable, str(ROOT / "tools/bootstrap_stamp.py"), "check", str(tmp_path), "requirements",
           "requirements", str(req)]
    env = {k: v for k, v in os.environ.items() if k != "TR_BOOTSTRAP_FORCE"}
    first = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert first.returncode == bs.STALE and len(first.stdout.strip()) == 64
    (tmp_path / "requirements").write_text(first.stdout)
    assert subprocess.run(cmd, capture_output=True, text=True, env=env).returncode == 0
    assert subprocess.run(cmd[:3], capture_output=True, text=True).returncode == 2


def test_second_bootstrap_on_an_unchanged_tree_takes_seconds():
    """The README commands' set-up when nothing changed since the last bootstrap: every step skipped."""
    stamps = Path(sys.prefix) / ".tr-stamps"
    if not stamps.is_dir() or os.environ.get("TR_BOOTSTRAP_FORCE", "") not in ("", "0"):
        pytest.skip("this interpreter's environment was not made by tools/bootstrap.sh")
    stale = [name for name, kind, path in STEPS
             if not bs.fresh(stamps, name, kind, ROOT / path, bs.digest(kind, ROOT / path))]
    if stale:  # a developer's edited tree: running bootstrap here would rebuild under the running tests
        pytest.skip(f"the tree changed since the last bootstrap ({', '.join(stale)}): nothing to measure")
    t0 = time.perf_counter()
    out = subprocess.run(["bash", str(ROOT / "tools/bootstrap.sh")], capture_output=True, text=True,
                         env=os.environ | {"TR_VENV": sys.prefix}, timeout=120)
    seconds = time.perf_counter() - t0
    assert out.returncode == 0, out.stderr
    for name, _, _ in STEPS:
        assert f"[bootstrap] {name} up to date" in out.stdout, out.stdout
    assert "building" not in out.stdout and "installing test" not in out.stdout
    assert seconds < 20, f"a bootstrap with nothing to do took {seconds:.1f} s"
