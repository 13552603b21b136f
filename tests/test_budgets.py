"""Runtime init and first-use compilation are not a probe's timeout: on a GPU the first
`torch.cuda.init()` and a cold MIOpen/cuDNN cache take seconds to minutes, and a probe that
is merely slow to start must not be called hung. Each case makes the slowness happen for real
in the child (a patched runtime init, a first call that takes longer than the timeout)."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from conftest import by_variant

PROBES = textwrap.dedent('''
    import time
    import rocmcheck

    @rocmcheck.fault("slow-init", "runtime init takes 2 s, as a cold GPU driver does")
    def slow_init(arg):
        import torch
        real = torch.set_num_threads  # what runtime init calls on the CPU (torch.cuda.init on a GPU)
        def slow(n):
            time.sleep(2.0)
            real(n)
        torch.set_num_threads = slow

    @rocmcheck.probe("budget-init", title="init", targets="-", timeout=1.0)
    def budget_init(ctx):
        ctx.measure(facts_torch=ctx.device_facts.get("torch"))

    @rocmcheck.probe("budget-first-use", title="first use", targets="-", timeout=1.0,
                     variants={"where": ["inside", "outside"]})
    def budget_first_use(ctx, where):
        if where == "inside":
            with ctx.first_use():
                time.sleep(2.0)
        else:
            time.sleep(2.0)
''')


@pytest.fixture
def budget_probes(tmp_path):
    folder = tmp_path / "probes"
    folder.mkdir()
    (folder / "budget_probes.py").write_text(PROBES)
    return [str(folder)]


def test_slow_runtime_init_is_outside_the_timeout_and_reported(rocm_run, budget_probes, isolation):
    (verdict,) = rocm_run(probe="budget-init", inject="slow-init", probes_path=budget_probes, isolation=isolation)
    assert verdict["status"] == "pass", verdict
    assert verdict["measurements"]["runtime_init_s"] >= 2.0
    import torch
    assert verdict["measurements"]["facts_torch"] == torch.__version__  # the run's facts, gathered once


def test_first_use_is_outside_the_timeout_the_rest_is_not(rocm_run, budget_probes):
    verdicts = by_variant(rocm_run(probe="budget-first-use", probes_path=budget_probes))
    inside, outside = verdicts["budget-first-use[inside]"], verdicts["budget-first-use[outside]"]
    assert inside["status"] == "pass" and inside["measurements"]["first_use_s"] >= 2.0, inside
    assert inside["duration_s"] >= 2.0, inside  # wall time, first use included (compile showed 0.19 s for 72 s)
    assert outside["status"] == "hang", outside


def test_an_explicit_timeout_bounds_first_use_too(rocm_run, budget_probes):
    """`--timeout 1` is everything after runtime init: a first use that takes 2 s is a hang at 1 s
    (before, only the 600 s first-use limit bounded it)."""
    (verdict,) = rocm_run(probe="budget-first-use", keyword="inside", probes_path=budget_probes, timeout=1.0)
    assert verdict["status"] == "hang", verdict
    assert "no verdict within 1s (first use included)" in verdict["message"]
    assert verdict["duration_s"] < 1.0 + 2.0


def test_first_use_has_its_own_limit_when_given(rocm_run, budget_probes):
    (verdict,) = rocm_run(probe="budget-first-use", keyword="inside", probes_path=budget_probes, timeout=30.0,
                          first_use_timeout=0.5)
    assert verdict["status"] == "hang", verdict
    assert "first use (compilation, kernel search) ran past its 0.5s limit" in verdict["message"]


def test_the_default_limits_are_bounded_and_sized_for_a_cold_cache():
    from rocmcheck.engine import options, watchdog

    # MIOpen's first convolution took 63 s on a cold cache; 600 s let a hang in first use stall a gate
    assert 63 < options.FIRST_USE_LIMIT_S <= 120 and 63 < watchdog.STARTUP_LIMIT_S <= 120


@pytest.mark.children
def test_hangs_get_their_verdict_within_the_timeout_from_the_command_line(tmp_path):
    """As issue 21 met them: a backward hang in numerics[autocast-bf16] (its backward was inside
    first use, so bounded by 600 s) and `--inject hang` on device-smoke (the fault blocked before
    the start marker: 300 s of start-up limit). With a first-use limit given apart, the backward
    hang still ends at the timeout: only the first convolution is first use, never the step."""
    out = subprocess.run([sys.executable, "-m", "rocmcheck", "run", "--device", "cpu", "--probe", "numerics",
                          "--probe", "device-smoke", "-k", "autocast-bf16 or device-smoke", "--timeout", "3",
                          "--first-use-timeout", "60", "--inject", "backward-hang@numerics,hang@device-smoke",
                          "--json", str(tmp_path / "run.json"), "--out-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out.stderr
    verdicts = by_variant(json.loads((tmp_path / "run.json").read_text())["verdicts"])
    for name, frame in (("numerics[autocast-bf16]", "_blocking_backward"), ("device-smoke", "_block_forever")):
        verdict = verdicts[name]
        assert verdict["status"] == "hang" and verdict["message"].startswith("no verdict within 3s; child killed")
        assert verdict["duration_s"] < 3 + 2, verdict  # the design's bar: the timeout + 2 s
        assert frame in verdict["evidence"]["stack"]
