"""Speed is a verdict: the `speed` probe's figures (and `multigpu-speed`'s rank check)."""
from __future__ import annotations

import textwrap

import rocmcheck
from rocmcheck.model import SpeedFigure

# --- the probe ----------------------------------------------------------------------------------


def test_the_cpu_measures_every_figure_it_has_with_samples_and_method_and_is_not_judged():
    rocmcheck.registry.load_all()
    ctx = rocmcheck.ProbeContext(device="cpu", profile="gate")
    assert ctx.call(rocmcheck.registry.get("speed").func) is None
    figures = {name: SpeedFigure.from_dict({"name": name, **f}) for name, f in ctx.measurements["speed"].items()}
    assert set(figures) == {"matmul-fp32", "matmul-bf16", "device-memory-copy", "device-memory-triad"}
    for figure in figures.values():
        assert 3 <= len(figure.samples) <= 5 and all(s > 0 for s in figure.samples), figure
        assert figure.method.startswith("wall clock, ") and figure.expected is None
    assert "64 MiB" in figures["device-memory-triad"].method and "256x256x256" in figures["matmul-fp32"].method
    assert set(ctx.measurements["not_measured"]) == {"matmul-tf32", "matmul-fp16", "matmul-fp8"}


def test_samples_stop_at_the_budget_but_never_below_the_least():
    class Clock:
        def seconds(self, work):
            work()
            return 0.1

    calls = []
    from rocmcheck import torchapi

    assert torchapi.time_samples(Clock(), lambda: calls.append(1), 20, warmup=2, budget_s=0.25) == [0.1] * 3
    assert len(calls) == 5  # 2 warm-up + 3 timed: the budget (0.25 s) is spent after 3
    calls.clear()
    assert len(torchapi.time_samples(Clock(), lambda: calls.append(1), 20, warmup=0, budget_s=0.95)) == 10



def test_the_rank_program_measures_all_reduce_bus_bandwidth_by_nccl_tests_formula(rocm_run, tmp_path):
    """The all-reduce figure's rank check on 2 CPU ranks through gloo (on GPUs, `multigpu-speed` runs it
    through NCCL/RCCL), driven from a probe child as `run_distributed` is: the ranks fork from it."""
    (tmp_path / "busbw_probe.py").write_text(textwrap.dedent('''
        import sys
        import rocmcheck

        @rocmcheck.probe("busbw", title="t", targets="t", timeout=120)
        def busbw(ctx):
            multigpu = sys.modules["rocmcheck.probes.multigpu"]
            ctx.measure(checks=multigpu.run_distributed(ctx, "gloo", world=2, names=("all_reduce_busbw",)))
    '''))
    (verdict,) = rocm_run(probe="busbw", probes_path=[str(tmp_path)])
    assert verdict["status"] == "pass", verdict["message"]
    for rank in ("0", "1"):
        result = verdict["measurements"]["checks"][rank]["all_reduce_busbw"]
        assert result["ok"] and len(result["busbw_gbps"]) == 10 and all(b > 0 for b in result["busbw_gbps"])
        assert result["message"].startswith("median bus bandwidth ")
