"""Issue findings on old torch (2.2-2.12), proven on the installed torch.

The compatibility matrix (scripts/compat_matrix.py) runs the real old builds; these tests keep each
finding fixed in CI: the `old-torch` fault hides every API newer than a version, so the fallbacks
run here, and the pure parts (the loss dtype, a rank's exception) are checked directly.
"""
from __future__ import annotations

import json
import os
import time

import pytest

from conftest import by_variant, probe_module, run_probes


def test_gate_paths_run_on_the_oldest_supported_api():
    """torch 2.2 has no sdpa_kernel, no torch.amp.GradScaler, no fully_shard: attention still runs (through
    the older sdp_kernel flags), the scaler variant skips saying which torch has it, and gloo's all_reduce and
    DDP are still checked when FSDP cannot be (before: three errors and the whole multigpu verdict lost)."""
    verdicts = by_variant(run_probes(probe="*", inject="old-torch:2.2", profile="gate",
                                     keyword="attention-sdpa and math-fp32 or attention-model and math "
                                             "or fp16-scaler or multigpu-gloo"))
    assert {k: v["status"] for k, v in verdicts.items()} == {
        "attention-sdpa[math-fp32]": "pass", "attention-model[math]": "pass", "multigpu-gloo": "pass",
        "training[fp16-scaler]": "skip"}, {k: v["message"] for k, v in verdicts.items()}
    assert "torch.amp.GradScaler arrived in torch 2.3" in verdicts["training[fp16-scaler]"]["message"]
    gloo = verdicts["multigpu-gloo"]["measurements"]
    assert gloo["skipped_checks"] == [
        f"fsdp: torch {gloo_torch()} has no torch.distributed._composable.fsdp.fully_shard (it arrived in torch 2.3)"]
    assert {name for rank in gloo["ranks"].values() for name, c in rank.items() if c["ok"] and "skipped" not in c} \
        == {"all_reduce", "ddp"}


def gloo_torch():
    import torch

    return torch.__version__


def test_the_float64_reference_loss_is_float64():
    """The reference computed its loss in float32 (`logits.float()`), and mixing float32 and float64 in
    mse_loss raised 'Found dtype Double but expected Float' in backward on every torch before 2.13."""
    import torch

    attention = probe_module("attention")

    model = attention.actor_critic().to(torch.float64)
    obs = torch.zeros(2, attention.TOKENS, attention.OBS, dtype=torch.float64)
    loss = attention.actor_critic_loss(model, obs, torch.tensor([1, 2]), torch.zeros(2, dtype=torch.float64))
    assert loss.dtype == torch.float64
    with torch.autocast("cpu", dtype=torch.bfloat16):  # the device side: float32 loss from bf16 outputs
        loss = attention.actor_critic_loss(model.float(), obs.float(), torch.tensor([1, 2]), torch.zeros(2))
    assert loss.dtype == torch.float32
    loss.backward()


def test_a_checks_exception_is_its_result_and_the_others_still_run(monkeypatch):
    multigpu = probe_module("multigpu")

    def broken(*args):
        raise ImportError("cannot import name 'fully_shard' from 'torch.distributed.fsdp'")

    monkeypatch.setitem(multigpu.RANK_CHECKS, "fsdp", broken)
    result = multigpu.run_check("fsdp", None, None, "cpu", 0, 2)
    assert result["ok"] is False and result["error"] == \
        "ImportError: cannot import name 'fully_shard' from 'torch.distributed.fsdp'"


@pytest.mark.children
def test_a_ranks_own_failure_reaches_the_verdict(tmp_path, monkeypatch):
    """Before: 'rank 0 exited with 1 without a result', the rank's exception lost."""
    import torch.distributed  # noqa: F401 - imported before the rank's 0.5 s deadline starts

    multigpu = probe_module("multigpu")

    for name in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    result = tmp_path / "0.json"
    assert multigpu.rank_entry(["--backend", "gloo", "--timeout", "0.5", "--result", str(result)]) == 1
    assert json.loads(result.read_text())["error"] == "KeyError: 'RANK'"
    assert not os.environ.get("RANK")
    # the rank's deadline (faulthandler's exit=True timer) is off: before, it ended this very process
    # 5 s later, in the middle of whatever test ran next (pytest-xdist: "node down")
    time.sleep(1.0)
