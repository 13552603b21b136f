"""Issue 23: one worker child per device runs its variants after one runtime init, and its
verdicts stay as trustworthy as one child per variant, in both isolation modes."""
from __future__ import annotations

from pathlib import Path

from conftest import by_variant

FAKE = str(Path(__file__).parent / "fake_probes")


def _run(isolation, *probes, **kwargs):
    """The variants in the order given (the runner keeps it), as verdict dicts by variant."""
    from rocmcheck import registry
    from rocmcheck.engine.options import RunOptions
    from rocmcheck.engine.runner import Runner
    from rocmcheck.engine.selection import select

    specs = registry.load_all([FAKE])
    variants = [v for p in probes for v in select(specs, [p])]
    opts = RunOptions(device="cpu", isolation=isolation, probes_paths=[FAKE], write_files=False, **kwargs)
    return Runner(opts).run(variants).to_dict()


# the gate's probes around the two a test plants a crash and a hang in (device-smoke, gpu-visible), in the gate's
# order, with variants before, between and after them: the heavy ones (transfer, sdc, speed, training) would add a
# minute of CI to every run of the gate here and nothing to what is checked
AROUND = ("config-lint", "device-smoke", "gemm", "gpu-visible", "library-imports", "numerics", "pcie-link")


def _gate(isolation, inject=""):
    """The built-in gate on the CPU (fake probes an earlier test left registered are not in it), its variants of
    the probes AROUND the planted ones."""
    from rocmcheck import registry
    from rocmcheck.engine.options import RunOptions
    from rocmcheck.engine.runner import Runner
    from rocmcheck.engine.selection import select

    variants = [v for v in select(registry.load_all(), gate_only=True)
                if v.spec.module.startswith("rocmcheck.probes.") and v.spec.id in AROUND]
    opts = RunOptions(device="cpu", isolation=isolation, timeout=10, inject=inject, write_files=False)
    return Runner(opts).run(variants).to_dict()["verdicts"]


def test_a_workers_next_task_sees_the_settings_of_a_fresh_child(isolation):
    alone = by_variant(_run(isolation, "fake-w-check")["verdicts"])["fake-w-check"]  # the reference: a fresh child
    report = _run(isolation, "fake-w-check", "fake-w-dirty", "fake-w-check")
    first, dirty, after = report["verdicts"]
    assert dirty["measurements"]["pid"] == after["measurements"]["pid"]  # one worker ran all three
    assert after["evidence"]["worker_task"] == 2
    fresh = {k: v for k, v in alone["measurements"].items()
             if k not in ("pid", "probe_s", "runtime_init_s", "first_random")}  # a fresh child's seed varies here
    assert {k: after["measurements"][k] for k in fresh} == fresh
    assert after["measurements"]["first_random"] == first["measurements"]["first_random"]  # the RNG as found
    assert {"default_dtype", "environment", "cwd", "deterministic_algorithms", "grad_enabled", "warning_filters",
            "float32_matmul_precision", "sdpa.math", "num_threads"} <= set(  # TF32 follows the precision
        dirty["evidence"]["state_put_back"])


def test_a_task_that_fails_in_a_worker_is_judged_alone(isolation):
    """fake-w-leak leaves module state that fails fake-w-leak-check in the same process: the
    failure is re-run alone in a fresh child, that verdict counts, and it says both."""
    report = _run(isolation, "fake-w-leak", "fake-w-leak-check", "fake-pass")
    leak, check, after = report["verdicts"]
    assert check["status"] == "warn"  # never a silent pass: flaky, or left by fake-w-leak
    assert check["evidence"]["in_worker"]["status"] == "fail"
    assert check["evidence"]["in_worker"]["after"] == "fake-w-leak"
    assert check["message"].startswith("fail in a shared worker after fake-w-leak (state left by an earlier task ")
    assert check["message"].endswith("pass alone: flaky, or state left by an earlier task")
    assert after["status"] == "pass"
    assert "worker_task" not in check["evidence"]  # the verdict is the fresh child's
    assert "worker_task" not in after["evidence"]  # the worker that failed was ended: a fresh one


def test_a_real_failure_is_confirmed_alone(isolation):
    fail = by_variant(_run(isolation, "fake-pass", "fake-fail")["verdicts"])["fake-fail"]
    assert fail["status"] == "fail" and fail["evidence"]["confirmed_alone"] is True
    assert fail["evidence"]["in_worker"]["status"] == "fail"


def test_own_child_and_env_variants_never_share_a_worker(isolation):
    report = _run(isolation, "fake-w-check", "fake-w-own", "fake-w-env", "fake-w-check")
    first, own, env, after = (v["measurements"] for v in report["verdicts"])
    assert first["pid"] == after["pid"] and first["run_env"] is None is after["run_env"]
    assert len({first["pid"], own["pid"], env["pid"]}) == 3
    assert env["run_env"] == "variant"  # set before `import torch`, in a child of its own


def test_the_runs_own_environment_is_the_workers(isolation):
    """Variables for the whole run (`RunOptions.env`) are the same for every task: one worker, a
    fresh interpreter that had them before `import torch`, runs them all."""
    first, second = (v["measurements"] for v in _run(isolation, "fake-w-check", "fake-w-check",
                                                      env={"ROCMCHECK_TEST_X": "run"})["verdicts"])
    assert first["pid"] == second["pid"] and first["run_env"] == second["run_env"] == "run"


def test_a_crash_and_a_hang_in_the_middle_of_the_gate_are_one_verdict_each(isolation):
    """Planted in the middle of the real gate (its probes around them), on the CPU: exactly one crash and one
    hang, for the right variants, with their signal and stack; every other variant keeps its own verdict, and
    the variants after them run in fresh workers."""
    clean = by_variant(_gate(isolation))
    planted = by_variant(_gate(isolation, inject="segv@device-smoke,hang@gpu-visible"))
    assert set(planted) == set(clean) and {v["status"] for v in clean.values()} <= {"pass", "skip"}
    bad = {k: v["status"] for k, v in planted.items() if v["status"] in ("crash", "hang", "error", "fail")}
    assert bad == {"device-smoke": "crash", "gpu-visible": "hang"}
    crash, hang = planted["device-smoke"], planted["gpu-visible"]
    assert "SIGSEGV" in crash["message"] and crash["evidence"]["in_worker"]["status"] == "crash"
    assert "SIGSEGV" in crash["evidence"]["in_worker"]["signal"]
    assert "no verdict within 10s" in hang["message"] and "_hang" in hang["evidence"]["stack"]
    assert {k: v["status"] for k, v in planted.items() if k not in bad} == \
        {k: v["status"] for k, v in clean.items() if k not in bad}
    # a worker's first task has no worker_task: the gate's first variant, the two planted ones (each judged in a
    # child of its own), and the first after each, in a fresh worker that runs every later variant
    order = list(planted)
    firsts = [k for k, v in planted.items() if not v["evidence"].get("worker_task")]
    crashed, hung = order.index("device-smoke"), order.index("gpu-visible")
    assert firsts == [order[0], order[crashed], order[crashed + 1], order[hung], order[hung + 1]], firsts


def test_which_faults_let_probes_and_the_device_facts_share_a_worker():
    """Whole-run faults (the simulated device, an older torch's API) are a worker's own; any other
    fault a probe meets before it starts gives it a child of its own. The device facts may share
    GPU 0's worker only when every fault is whole-run and meets every probe."""
    from rocmcheck import faults
    from rocmcheck.faults import parse

    assert faults.worker_faults(parse(""), "gemm") == faults.run_wide(parse("")) == frozenset()
    assert faults.worker_faults(parse("simgpu:1,old-torch:2.4"), "gemm") == frozenset({"simgpu:1", "old-torch:2.4"})
    assert faults.run_wide(parse("simgpu:1,old-torch:2.4")) == frozenset({"simgpu:1", "old-torch:2.4"})
    assert faults.worker_faults(parse("simgpu:1,simgpu-copy-tail"), "transfer") is None  # patches the device first
    assert faults.run_wide(parse("simgpu:1,simgpu-copy-tail")) is None
    assert faults.worker_faults(parse("simgpu:1,hang@gemm"), "gemm") == frozenset({"simgpu:1"})  # acts in the probe
    assert faults.run_wide(parse("simgpu:1,hang@gemm")) is None
    assert faults.worker_faults(parse("simgpu:1@transfer"), "gemm") == frozenset()  # meets transfer only
    assert faults.run_wide(parse("simgpu:1@transfer")) is None
