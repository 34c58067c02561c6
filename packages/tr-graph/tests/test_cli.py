import json
import re
import subprocess
import sys

from tr_graph_testlib import ROOT, mlp_spec, part_calls

from tr.core.dtype import DType
from tr.core.shape import Shape
from tr.graph.cli import format_call, load_blueprint, main
from tr.graph.compiler import compile_program
from tr.graph.spec import CompileSpec
from tr.graph.steps import Part as P
from tr.tensor.dtensor import slot_bytes_for

MODELS = str(ROOT / "examples" / "models.py")


STEPS = ["train_a", "train_last_a", "train_b", "train_last_b", "val_a", "val_last_a", "transfer_a", "val_b",
         "val_last_b", "transfer_b", "clear_metrics", "epoch_begin", "epoch_order", "val_begin", "epoch_end", "val_end"]


def test_json(capsys, models):
    assert main([f"{MODELS}:resnet50", "--batch", "8", "--resolution", "64", "--amp", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["name"] == "resnet50" and d["amp"] and d["num_params"] == 25_557_032
    assert d["arena_bytes"] < d["seed_arena_bytes"] and d["num_tensors"] > 1000 and d["num_ops"] > 500
    assert len(d["layers"]) == d["num_layers"] == 60 and d["layers"][0]["kind"] == "cbr"
    assert d["variants"]["val"]["resolution"] == 64
    steps = d["steps"]
    # num_ops counts the plan's calls once each; the steps run some of them twice (buffer a's and b's steps share
    # the deep part and everything after it)
    assert list(steps) == STEPS and d["num_ops"] < sum(s["ops"] for s in steps.values())
    p = compile_program(models.resnet50, CompileSpec((64, 64, 3), 1000, 8, amp=True))
    assert d["num_ops"] == p.num_ops == len({id(c) for s in p.steps.values() for c in s.calls})
    assert all(s["ops"] == sum(b["ops"] for b in s["branches"]) for s in steps.values())
    train = steps["train_a"]["branches"]
    # the AMP step: the early bucket's cast and all-reduce on UPDATE beside the first layer's backward
    assert [(b["stream"], b["after"]) for b in train] == [("COMP_1", []), ("UPDATE", [0]), ("COMP_1", [0]),
                                                          ("COMP_1", [1, 2])]
    assert steps["val_a"]["branches"] == [{"stream": "COMP_1", "after": [], "ops": 111}]
    p = compile_program(models.resnet50, mlp_spec(input_shape=(64, 64, 3), num_classes=1000, batch=8, amp=True))
    deep = part_calls(p, "train_a", P.DEEP_FWD_BWD)
    assert len(deep) > 200
    ops = lambda *parts: sum(len(part_calls(p, "train_a", x)) for x in parts)  # noqa: E731
    assert train[0]["ops"] == ops(P.ZERO_GRAD, P.FIRST_FWD_A, P.DEEP_FWD_BWD)
    assert train[1]["ops"] == ops(P.CAST_EARLY, P.REDUCE_EARLY) == 2


def test_text(capsys):
    assert main([f"{MODELS}:mlp_mnist", "--batch", "128", "--resolution", "28"]) == 0
    out = capsys.readouterr().out
    assert "ArchPlan mlp_mnist" in out and "Memory plan" in out
    rows = {tuple(line.split()[:3]) for line in out.splitlines() if line.startswith("  ")}
    assert ("param", "fc_w", "decayed,amp_copy") in rows and ("grad", "fc_b", "amp_copy") in rows
    assert ("moment1", "fc_w", "decayed,amp_copy") in rows and ("scalar", "int32", "-") in rows
    assert "range_optimizer w=<param[decayed]> g=<grad[decayed]> m=<moment1[decayed]> lr=lr[1,1,1,1]" in out
    assert "range_optimizer w=<param[not decayed]> g=<grad[not decayed]> m=<moment1[not decayed]>" in out
    assert "\nSteps:\n  train_a (4 branches, 24 ops)\n    branch 0 on COMP_1\n       0 [zero_grad] range_clear" in out
    assert "  val_a (1 branch, 6 ops)\n       0 [infer_a] fc_fwd x=data_a[128,28,28,1]" in out
    assert "  epoch_end (1 branch, 0 ops)\n" in out  # no BN statistics to fold: the step is there, empty
    assert "[deep_fwd_bwd] fc_bwd x=L2.y[128,1,1,256] w=L3.w[10,1,1,256] dy=L4.dx[128,1,1,10]" in out


def _step_lines(out: str, name: str) -> list[str]:
    """The printed lines of one step, its header included."""
    lines = out.splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith(f"  {name} ("))
    end = next((j for j in range(i + 1, len(lines)) if not lines[j].startswith("    ")), len(lines))
    return lines[i:end]


def test_text_amp_branches(capsys):
    assert main([f"{MODELS}:mlp_mnist", "--batch", "128", "--resolution", "28", "--amp"]) == 0
    out = capsys.readouterr().out
    assert "\nSteps:\n" in out
    train = _step_lines(out, "train_a")
    assert train[0] == "  train_a (4 branches, 27 ops)"
    assert [line.strip() for line in train if "branch " in line] == [
        "branch 0 on COMP_1", "branch 1 on UPDATE after 0", "branch 2 on COMP_1 after 0",
        "branch 3 on COMP_1 after 1, 2"]
    # the calls are numbered through the step, each with its part; the working copies are refreshed last
    calls = [line.split(maxsplit=2) for line in train[1:] if "branch " not in line]
    assert [int(n) for n, _, _ in calls] == list(range(27))
    assert calls[16][1:] == ["[reduce_early_grads]", "range_allreduce_mean span=<grad[early] + result>"]
    cast = "range_cast src=<param[amp_copy]> dst=<amp_copy> {src_dtype=fp32, dst_dtype=fp16}"
    assert calls[-1][1:] == ["[cast_working_copies]", cast]
    # the epoch's first refresh of the working copies, a step of its own
    assert _step_lines(out, "epoch_begin") == ["  epoch_begin (1 branch, 1 ops)",
                                               f"       0 [cast_working_copies] {cast}"]


def test_text_without_ops(capsys):
    assert main([f"{MODELS}:mlp_mnist", "--batch", "128", "--resolution", "28", "--no-ops"]) == 0
    out = capsys.readouterr().out
    assert "Memory plan" in out and "Steps:" not in out and "[deep_fwd_bwd]" not in out
    assert re.search(r"\n\d+ tensors, 45 ops in 16 steps, compiled in \d+ ms\n", out)  # each call once, as num_ops


def test_lr_table_steps(capsys):
    def plan(*extra: str) -> dict:
        assert main([f"{MODELS}:mlp_mnist", "--batch", "128", "--json", *extra]) == 0
        return json.loads(capsys.readouterr().out)

    one, run = plan(), plan("--lr-table-steps", "1000")  # the default: a constant rate; a run's table: one per step
    grown = slot_bytes_for(Shape(1, 1, 1, 1000), DType.FP32) - slot_bytes_for(Shape(1, 1, 1, 1), DType.FP32)
    assert run["regions"]["scalar/fp32"] - one["regions"]["scalar/fp32"] == grown == 4096 - 512  # the table's slot
    assert run["arena_bytes"] - one["arena_bytes"] == grown
    assert main([f"{MODELS}:mlp_mnist", "--batch", "128", "--lr-table-steps", "1000"]) == 0
    out = capsys.readouterr().out
    assert "[optimizer] lr_lookup table=lr_table[1,1,1,1000] step=step[1,1,1,1] lr=lr[1,1,1,1]" in out
    assert main([f"{MODELS}:mlp_mnist", "--batch", "128", "--lr-table-steps", "0"]) == 2
    assert "ConfigError: lr_table_steps must be an integer >= 1" in capsys.readouterr().err


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
    c = p.step("transfer_a").calls[0]
    assert format_call(c).startswith("h2d_copy labels=labels_a[128,1,1,1] data=data_a[128,28,28,1] {buffer=0}")


def test_progressive_sides_each_a_train_variant(capsys):
    """--progressive: the plan of a progressive-resizing run, one train and train_last variant per lower side."""
    assert main([f"{MODELS}:resnet50", "--batch", "4", "--resolution", "96", "--progressive", "64,32", "--json"]) == 2
    assert "ascending order" in capsys.readouterr().err
    assert main([f"{MODELS}:resnet50", "--batch", "4", "--resolution", "96", "--progressive", "32,64", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {k: v["resolution"] for k, v in out["variants"].items()} == {
        "train": 96, "train_last": 96, "train@32": 32, "train_last@32": 32, "train@64": 64, "train_last@64": 64,
        "val": 96, "val_last": 96}
    assert {"train_a@32", "transfer_b@64", "train_last_a@64", "train_a", "val_a"} <= set(out["steps"])
    assert main([f"{MODELS}:resnet50", "--batch", "4", "--resolution", "96", "--progressive", "48", "--no-ops"]) == 2
    assert "training side 48 is not a multiple of 32, the network's total stride" in capsys.readouterr().err
