import json
import subprocess
import sys

from tr_graph_testlib import ROOT, mlp_spec

from tr.graph.cli import format_call, load_blueprint, main
from tr.graph.compiler import compile_program

MODELS = str(ROOT / "examples" / "models.py")


def test_json(capsys):
    assert main([f"{MODELS}:resnet50", "--batch", "8", "--resolution", "64", "--amp", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["name"] == "resnet50" and d["amp"] and d["num_params"] == 25_557_032
    assert d["arena_bytes"] < d["seed_arena_bytes"] and d["num_tensors"] > 1000 and d["num_ops"] > 500
    assert len(d["layers"]) == d["num_layers"] == 60 and d["layers"][0]["kind"] == "cbr"
    assert d["graphs"]["any/DEEP_FWD_BWD"] > 200 and d["variants"]["val"]["resolution"] == 64


def test_text(capsys):
    assert main([f"{MODELS}:mlp_mnist", "--batch", "128", "--resolution", "28"]) == 0
    out = capsys.readouterr().out
    assert "ArchPlan mlp_mnist" in out and "Memory plan" in out
    rows = {tuple(line.split()[:3]) for line in out.splitlines() if line.startswith("  ")}
    assert ("param", "fc_w", "decayed,amp_copy") in rows and ("grad", "fc_b", "amp_copy") in rows
    assert ("moment1", "fc_w", "decayed,amp_copy") in rows and ("scalar", "int32", "-") in rows
    assert "range_optimizer w=<param[decayed]> g=<grad[decayed]> m=<moment1[decayed]> lr=lr[1,1,1,1]" in out
    assert "range_optimizer w=<param[not decayed]> g=<grad[not decayed]> m=<moment1[not decayed]>" in out
    assert "[any] DEEP_FWD_BWD (10 ops)" in out
    assert "fc_bwd x=L2.y[128,1,1,256] w=L3.w[10,1,1,256] dy=L4.dx[128,1,1,10]" in out


def test_errors_are_reported(capsys, tmp_path):
    f = tmp_path / "bad.py"
    f.write_text("from tr.graph.blueprint import seq, conv, fc\nm = seq(conv(4, 9), fc(2))\n")
    assert main([f"{f}:m", "--batch", "2", "--input", "4,4,1", "--classes", "2"]) == 2
    assert "CompileError: layer 0 (conv 4 k9 s1 p0 at model[0]): conv kernel 9x9 is larger" in capsys.readouterr().err


def test_load_blueprint_calls_factories(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("from tr.graph.blueprint import seq, fc\ndef make():\n    return seq(fc(3))\n")
    assert repr(load_blueprint(f"{f}:make")) == "seq(fc(3))"


def test_module_entry_point():
    r = subprocess.run([sys.executable, "-m", "tr.graph", f"{MODELS}:mlp_mnist", "--batch", "64", "--json"],
                       capture_output=True, text=True, check=True)
    assert json.loads(r.stdout)["num_layers"] == 5


def test_format_call(models):
    p = compile_program(models.mlp_mnist, mlp_spec())
    c = p.calls("train", p.graphs and next(iter(g for _, g in p.graphs)))[0]
    assert format_call(c).startswith("h2d_copy labels=labels_a[128,1,1,1] data=data_a[128,28,28,1] {buffer=0}")
