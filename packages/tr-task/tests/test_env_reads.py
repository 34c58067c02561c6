"""Each package's reads of its TR_ variables go through tr.core.env: the spellings a flag accepts mean the same
everywhere, and a wrong value is a ConfigError naming it where the old readers took it silently."""

from __future__ import annotations

import pytest

from tr.backend.cuda import cudnn
from tr.backend.cuda.ops import fc as cuda_fc
from tr.core.errors import ConfigError
from tr.core.ops import CONV_ENGINE_CODES
from tr.data import download
from tr.graph import passes
from tr.graph.archplan import DATA, ArchLayer, params
from tr.task import distributed as D


def _mlp() -> list[ArchLayer]:
    """fc(relu) -> fc, as the passes see it after fuse: the DRELU fusion's pattern."""
    return [ArchLayer(uid=0, kind="fc", params=params(out=8, activation="relu"), inputs=(DATA,)),
            ArchLayer(uid=1, kind="fc", params=params(out=3), inputs=(0,))]


@pytest.mark.parametrize("raw,fused", [("1", True), ("true", True), ("ON", True), ("", False), ("0", False),
                                       ("off", False)])
def test_tr_fc_drelu(monkeypatch, raw, fused):
    # before: only "1" turned it on ("true" was silently off)
    monkeypatch.setenv("TR_FC_DRELU", raw)
    out = passes.fuse_drelu(_mlp())
    assert (out[0].params.get("relu_mask") is True and out[1].params.get("drelu") is True) == fused


def test_a_bad_tr_fc_drelu_is_named(monkeypatch):
    monkeypatch.setenv("TR_FC_DRELU", "2")
    with pytest.raises(ConfigError, match="TR_FC_DRELU='2'"):
        passes.fuse_drelu(_mlp())


@pytest.mark.parametrize("raw,want", [(None, True), ("1", True), ("0", False), ("off", False), ("no", False),
                                      ("FALSE", False)])
def test_tr_cublaslt_epilogues(monkeypatch, raw, want):
    # before: anything but "0" kept the epilogues ("off" and "no" were silently on)
    if raw is None:
        monkeypatch.delenv("TR_CUBLASLT_EPILOGUES", raising=False)
    else:
        monkeypatch.setenv("TR_CUBLASLT_EPILOGUES", raw)
    assert cuda_fc._epilogues() is want


def test_a_bad_tr_cublaslt_epilogues_is_named(monkeypatch):
    monkeypatch.setenv("TR_CUBLASLT_EPILOGUES", "fused")
    with pytest.raises(ConfigError, match="TR_CUBLASLT_EPILOGUES='fused': expected a flag"):
        cuda_fc._epilogues()


def test_tr_conv_and_tr_cudnn_autotune(monkeypatch):
    monkeypatch.setenv("TR_CONV", " Direct ")
    assert cudnn.conv_engine() == CONV_ENGINE_CODES["direct"] == 2
    monkeypatch.setenv("TR_CONV", "winograd")
    with pytest.raises(ConfigError, match=r"TR_CONV='winograd': expected one of \['auto', 'cudnn', 'direct'\]"):
        cudnn.conv_engine()
    monkeypatch.setenv("TR_CUDNN_AUTOTUNE", "yes")
    assert cudnn.env_autotune() is True


@pytest.mark.parametrize("raw,want", [("1", True), ("yes", True), ("0", False), ("false", False), ("", False)])
def test_tr_data_offline(monkeypatch, raw, want):
    # before: anything but "" and "0" was offline ("false" silently forbade downloads)
    monkeypatch.setenv("TR_DATA_OFFLINE", raw)
    assert download.offline() is want


def test_tr_force_nccl_reads_the_given_mapping():
    # before: anything but "" and "0" forced NCCL
    assert D.force_nccl({"TR_FORCE_NCCL": "on"}) is True and D.force_nccl({"TR_FORCE_NCCL": "no"}) is False
    assert D.force_nccl({}) is False
    with pytest.raises(ConfigError, match="TR_FORCE_NCCL='x'"):
        D.force_nccl({"TR_FORCE_NCCL": "x"})


@pytest.mark.parametrize("raw,message", [("inf", "TR_DIST_TIMEOUT='inf' is not a number"),
                                         ("1_0", "TR_DIST_TIMEOUT='1_0' is not a number"),
                                         ("0", "the bootstrap timeout must be > 0 seconds, got 0.0")])
def test_a_bad_tr_dist_timeout_is_named(monkeypatch, raw, message):
    # before: float() took "inf" (an endless wait) and "1_0" (10 s)
    monkeypatch.setenv("TR_DIST_TIMEOUT", raw)
    with pytest.raises(ConfigError, match=message):
        D.bootstrap_timeout()
    assert D.DEFAULT_TIMEOUT_S == 300.0 and D.bootstrap_timeout(2) == 2.0
