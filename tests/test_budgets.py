"""Runtime init and first-use compilation are not a probe's timeout: on a GPU the first
`torch.cuda.init()` and a cold MIOpen/cuDNN cache take seconds to minutes, and a probe that
is merely slow to start must not be called hung. Each case makes the slowness happen for real
in the child (a patched runtime init, a first call that takes longer than the timeout)."""
from __future__ import annotations

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
        return {"facts_torch": ctx.device_facts.get("torch")}

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
    assert outside["status"] == "hang", outside


def test_first_use_has_its_own_limit(rocm_run, budget_probes, monkeypatch):
    from rocmcheck import watchdog

    monkeypatch.setattr(watchdog, "FIRST_USE_LIMIT_S", 0.5)
    verdicts = by_variant(rocm_run(probe="budget-first-use", keyword="inside", probes_path=budget_probes))
    verdict = verdicts["budget-first-use[inside]"]
    assert verdict["status"] == "hang" and "first-use compilation ran past its 0.5s limit" in verdict["message"]
