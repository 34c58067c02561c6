"""``python -m tr.core.env`` (tr.core.env_listing): the table, one variable in full, docs/ENVIRONMENT.md's tables;
and docs/ENVIRONMENT.md lists exactly the registry's variables, with their defaults, as the registry makes them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tr.core import env
from tr.core.env_listing import SECTIONS, main, markdown, render_doc
from tr.core.errors import ConfigError

DOC = Path(__file__).resolve().parents[3] / "docs" / "ENVIRONMENT.md"


def _clean_environ(**set_: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k not in env.VARIABLES}
    return {**base, **set_}


def test_the_command_lists_every_variable_with_the_values_set_now():
    r = subprocess.run([sys.executable, "-m", "tr.core.env"], capture_output=True, text=True, timeout=60,
                       env=_clean_environ(TR_FC_DRELU="1", TR_DIST_TIMEOUT="45"))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split()[:5] == ["variable", "type", "default", "set", "now"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert list(rows) == list(env.VARIABLES)
    assert rows["TR_FC_DRELU"].split()[:5] == ["TR_FC_DRELU", "flag", "0", "1", "the"]
    assert "the plan" in rows["TR_FC_DRELU"] and "the numbers" in rows["TR_CUBLASLT_EPILOGUES"]
    assert rows["TR_DIST_TIMEOUT"].split()[:5] == ["TR_DIST_TIMEOUT", "float", "300", "45", "nothing"]
    assert rows["TR_CONV"].split()[:4] == ["TR_CONV", "choice", "auto", "the"]  # unset: no value shown
    assert "(build time)" in rows["TR_CUDA_ARCHS"] and "(setup time)" in rows["TR_VENV"]


def test_a_value_of_the_wrong_type_is_named_and_the_exit_status_is_1(capsys):
    assert main([], _clean_environ(TR_CONV="fastest", TR_CUDNN_WORKSPACE_MB="0")) == 1
    out, err = capsys.readouterr()
    assert "TR_CONV                    choice  auto         'fastest' (invalid)" in out
    assert err.splitlines() == [
        "error: environment variable TR_CONV='fastest': expected one of ['auto', 'cudnn', 'direct']",
        "error: environment variable TR_CUDNN_WORKSPACE_MB='0': the cuDNN workspace cap must be > 0 MiB, got 0"]


def test_one_variable_in_full_says_why_it_changes_what_it_changes(capsys):
    assert main(["TR_FC_DRELU", "TR_CUDNN_AUTOTUNE"], _clean_environ(TR_FC_DRELU="on")) == 0
    out = capsys.readouterr().out
    assert out.startswith("TR_FC_DRELU\n  accepts:  a flag\n  default:  0\n  set now:  on\n"
                          "  read by:  tr-graph, at run time (Python)\n  changes:  the plan: adds relu-mask tensors")
    assert "TR_CUDNN_AUTOTUNE\n" in out and "pins the recorded engines" in out
    assert main(["TR_NOPE"], {}) == 2
    assert "error: environment variable 'TR_NOPE' is not declared" in capsys.readouterr().err


def test_the_markdown_option_prints_the_docs_tables(capsys):
    assert main(["--markdown"], {}) == 0
    out = capsys.readouterr().out
    assert out == "\n".join(f"<!-- {s} -->\n{markdown(s)}" for s in SECTIONS)
    with pytest.raises(SystemExit):
        main(["--markdown", "TR_CONV"], {})


def test_the_tables_have_one_row_a_variable_with_its_default():
    rows = {}
    for s in SECTIONS:
        for line in markdown(s).splitlines()[2:]:
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            assert len(cells) == markdown(s).splitlines()[1].count("---"), line  # a "|" in a text is escaped
            rows[cells[0].strip("`")] = (s, cells[2])
    assert list(rows) == list(env.VARIABLES)
    for name, var in env.VARIABLES.items():
        want = "unset" if var.default is None else f"`{var.show(var.default)}`"
        assert rows[name] == (var.section, want), name
    assert rows["TR_CUDNN_WORKSPACE_MB"] == ("running", "`1024`") and rows["TR_CUDNN_PATH"][1] == "unset"


def test_docs_environment_md_is_current():
    text = DOC.read_text(encoding="utf-8")
    assert render_doc(text) == text, ("docs/ENVIRONMENT.md's tables differ from tr.core.env's registry: run "
                                      "`python -m tr.core.env --update-doc docs/ENVIRONMENT.md`")
    listed = re.findall(r"^\| `([A-Z][A-Z0-9_]*)` \|", text, re.M)
    assert sorted(listed) == sorted(env.VARIABLES)  # each once, nothing else in a table
    for name in ("TR_FC_DRELU", "TR_CUBLASLT_EPILOGUES", "TR_NVJPEG_PATH", "TR_DATA_ASAN"):  # missing before
        assert f"| `{name}` |" in text


def test_render_doc_keeps_the_prose_and_refuses_unmarked_or_repeated_tables(tmp_path, capsys):
    doc = "".join(f"# {s}\n\nprose {s}\n<!-- begin tr.core.env {s} -->\nSTALE TABLE\n"
                  f"<!-- end tr.core.env {s} -->\nafter\n" for s in SECTIONS)
    new = render_doc(doc)
    assert "STALE TABLE" not in new and new.count("prose ") == 3 and new.count("after\n") == 3
    assert markdown("building") in new and render_doc(new) == new
    with pytest.raises(ConfigError, match="the 'setup' table must be marked once .* found 0"):
        render_doc(doc.replace("begin tr.core.env setup", "begin setup"))
    with pytest.raises(ConfigError, match="the 'running' table must be marked once .* found 2"):
        render_doc(doc + "<!-- begin tr.core.env running -->\n<!-- end tr.core.env running -->\n")
    with pytest.raises(ConfigError, match="a table marked 'later'"):
        render_doc(doc + "<!-- begin tr.core.env later -->\n<!-- end tr.core.env later -->\n")
    path = tmp_path / "ENV.md"
    path.write_text(doc)
    assert main(["--update-doc", str(path)], {}) == 0 and path.read_text() == new
    assert main(["--update-doc", str(path)], {}) == 0 and "already current" in capsys.readouterr().out
    path.write_text("no tables")
    assert main(["--update-doc", str(path)], {}) == 2 and path.read_text() == "no tables"  # nothing written
