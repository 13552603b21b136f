"""`make hardware`: on a machine with real GPUs, a bounded plan of at most 8 minutes, kept under reports/hardware/.

    python scripts/hardware.py                   what `make hardware` runs
    python scripts/hardware.py --plan            print the steps with their deadlines; run nothing
    python scripts/hardware.py --out DIR         write elsewhere than reports/hardware/

A GPU machine is lent for about 15 minutes at a time, so every step runs under its own `--deadline` (a
step past it ends UNKNOWN with its report written, and the plan goes on), and the deadlines sum to at
most `PLAN_LIMIT_S` (8 minutes). The steps, in order (`PLAN`):
- the gate on every GPU (GO expected, 20 s on one H100/H200 is the bar), twice: from disk, then from the page cache;
- three drills on the real GPU, each a gate narrowed to the probe that must catch it, whose NO-GO or
  warning must name the GPU: a one-bit error in GPU 0's matrix products (`gpu-bitflip:0`, caught by
  `sdc`'s exact answers), GPU 0's products 4x slower (`slow-matmul:0:4`, `speed` against the spec
  table), host-to-device copies that return zeros (`copy-zeros:copy_`, `transfer`);
- the level-1 run on every GPU (`rocmcheck run --device all`);
- `make cuda-build-test`'s tests (tests/test_cuda_build.py) with this machine's torch, its GPUs hidden.

Each step writes `<device>-<date>-<step>.json` and `.md` under the output folder (<device>: the first GPU's
name in lower case with dashes, as `nvidia-h100-80gb-hbm3`), and `<device>-<date>-summary.md` says, per step,
its command, deadline, wall time, exit and whether it came out as expected, rewritten after each step (a plan
cut short by the lent machine's end still says what ran). Only what really ran on real
hardware goes there: where torch sees no GPU, or with faults injected from outside ($ROCMCHECK_INJECT,
simulated GPUs among them), it refuses in one line and writes nothing (exit 2). It exits 0 when every step
came out as expected, else 1.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "reports" / "hardware"
INJECT_ENV = "ROCMCHECK_INJECT"
PLAN_LIMIT_S = 8 * 60  # the whole plan on one GPU: a lent machine's 15 minutes hold it with room to start
STOP_MARGIN_S = 15  # beyond a step's deadline before its process is killed (its report is written ~2 s after)
GPU_NAMES = ("import json, torch; print(json.dumps([torch.cuda.get_device_name(i) "
             "for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []))")
ROCMCHECK = [sys.executable, "-m", "rocmcheck"]


@dataclass(frozen=True)
class Step:
    """One bounded step: `argv` (its report files added by `command`), its `deadline_s`, the exit codes
    that count as expected, and for a drill what its report must show on GPU 0 (`expect_on_gpu0`: the
    statuses one of its verdicts there must have)."""

    name: str
    argv: List[str]
    deadline_s: int
    expected_exit: Tuple[int, ...]
    why: str
    reports: bool = True  # a rocmcheck command, which writes a report of its own
    env: Dict[str, str] = field(default_factory=dict)
    expect_on_gpu0: Tuple[str, ...] = ()

    def command(self, stem: Path, journal: str) -> List[str]:
        if not self.reports:
            return list(self.argv)
        out = f"{stem}-{self.name}"
        return [*self.argv, "--deadline", str(self.deadline_s), "--out-dir", journal, "--json", f"{out}.json",
                "--md", f"{out}.md"]


# The deadlines, from what ran on one H100 (2026-11-25) and one H200 (2026-11-28): the gate took 75 s wall there
# before sdc and speed joined it, and about 25 s is estimated now (docs/budgets.md; its bar is 20 s). It runs twice:
# the first pays for reading torch's libraries from disk where the machine has just started (the GPU query
# before the plan reads only part of them), the second is what a node that ran jobs before sees. A drill is one
# narrowed gate (a process start, the device facts and one probe of a few seconds); the level-1 run is estimated
# at about 200 s per GPU (its variants' durations with transfer at the gate's sizes and the allocator at 64
# cycles); the CUDA-build tests took 9 s. A step past its deadline ends UNKNOWN with its partial report kept
# (its time split says where the time went), and the plan goes on.
def plan(simulated: str = "") -> List[Step]:
    """The steps, in order, on every GPU. `simulated` (tests only: `simgpu:2`) runs the rocmcheck steps on
    simulated GPUs, whose GPU 0 the drills then aim at; a real run has none."""
    with_sim = (lambda faults: f"{simulated},{faults}") if simulated else (lambda faults: faults)
    gate = [*ROCMCHECK, "gate", "--device", "all"]
    healthy_gate = gate + (["--inject", simulated] if simulated else [])
    return [
        Step("gate", healthy_gate, 60, (0,), "the gate on every GPU from a fresh process: GO, the bar 20 s"),
        Step("gate-again", healthy_gate, 30, (0,),
             "the same gate again, torch's libraries now in the page cache (a node that ran jobs before): GO, "
             "the bar 20 s"),
        Step("drill-bitflip", [*gate, "--inject", with_sim("gpu-bitflip:0"), "--probe", "sdc"], 35, (1,),
             "one bit flipped in GPU 0's matrix products: NO-GO naming GPU 0", expect_on_gpu0=("fail",)),
        Step("drill-slow", [*gate, "--inject", with_sim("slow-matmul:0:4"), "--probe", "speed"], 35, (0, 1),
             "GPU 0's products 4x slower: speed below the spec table (on two GPUs also below the other's), named on "
             "GPU 0", expect_on_gpu0=("warn", "fail")),
        # copy_ alone: with every kind zeroed, the training context's own setup breaks first (AdamW's zeroed step
        # count divides by zero), an error that says less than the copy check's "1024 zeros"
        Step("drill-copy-zeros", [*gate, "--inject", with_sim("copy-zeros:copy_"), "--probe", "transfer"], 35, (1,),
             "host-to-device copies (copy_) return zeros: NO-GO, transfer[every-training] naming copy_",
             expect_on_gpu0=("fail",)),
        Step("run", [*ROCMCHECK, "run", "--device", "all"] + (["--inject", simulated] if simulated else []), 255,
             (0, 1), "the level-1 run on every GPU (a fail is a finding, kept)"),
        Step("cuda-build-tests", [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                  "tests/test_cuda_build.py"], 30, (0,),
             "make cuda-build-test's tests with this machine's torch, its GPUs hidden", reports=False,
             env={"CUDA_VISIBLE_DEVICES": "", "HIP_VISIBLE_DEVICES": ""}),
    ]


def plan_text(steps: List[Step]) -> str:
    lines = [f"{s.deadline_s:>4}s  {s.name:<17} {s.why}\n       $ {' '.join(s.argv)}" for s in steps]
    total = sum(s.deadline_s for s in steps)
    return "\n".join([*lines, f"{total:>4}s  in all (at most {PLAN_LIMIT_S}s)"])


def real_gpus() -> List[str]:
    """The names of the GPUs torch sees (ROCm GPUs answer as cuda too), asked in a child: this
    process holds no GPU context while the probes run."""
    asked = subprocess.run([sys.executable, "-c", GPU_NAMES], capture_output=True, text=True, timeout=300)
    return json.loads(asked.stdout.strip().splitlines()[-1]) if asked.returncode == 0 and asked.stdout.strip() else []


def slug(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3': how the files under reports/hardware/ are named."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def refusal(gpus: List[str], inject: str) -> Optional[str]:
    """Why this host must not write under reports/hardware/, or None."""
    if inject:
        return (f"faults are injected (${INJECT_ENV}={inject}): reports/hardware/ keeps only healthy runs on real "
                "GPUs, never a simulated GPU's")
    if not gpus:
        return "torch sees no GPU here: reports/hardware/ keeps only what ran on a real GPU"
    return None


def call(argv: List[str], env: Optional[dict] = None, timeout: Optional[float] = None
         ) -> "subprocess.CompletedProcess[str]":
    """One step, its output shown once it ends and kept for the summary; killed `timeout` seconds in (exit 124)."""
    print("$ " + " ".join(argv), flush=True)
    try:
        done = subprocess.run(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        said = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        done = subprocess.CompletedProcess(argv, 124, said + f"\nkilled after {timeout:g}s\n")
    print(done.stdout, end="", flush=True)
    return done


def on_gpu0(report: Path) -> List[str]:
    """The statuses of a report's verdicts on GPU 0 (cuda:0; simgpu:0 where a test runs the plan there)."""
    try:
        verdicts = json.loads(report.read_text()).get("verdicts") or []
    except (OSError, ValueError):
        return []
    return [v.get("status") for v in verdicts
            if (v.get("device") or {}).get("name") in ("cuda:0", "simgpu:0") and v.get("status") != "skip"]


def run_step(step: Step, stem: Path, journal: str,
             runner: Callable[..., "subprocess.CompletedProcess[str]"]) -> Dict[str, object]:
    """Run one step under its deadline (its process killed STOP_MARGIN_S after it); what came of it."""
    started = time.monotonic()
    done = runner(step.command(stem, journal), {**os.environ, **step.env} if step.env else None,
                  step.deadline_s + STOP_MARGIN_S)
    seen = on_gpu0(Path(f"{stem}-{step.name}.json")) if step.expect_on_gpu0 else []
    as_expected = done.returncode in step.expected_exit and \
        (not step.expect_on_gpu0 or any(status in step.expect_on_gpu0 for status in seen))
    said = [line for line in done.stdout.splitlines() if line.strip()]
    return {"step": step.name, "deadline_s": step.deadline_s, "wall_s": round(time.monotonic() - started, 1),
            "exit": done.returncode, "as_expected": as_expected, "why": step.why,
            "last_line": said[-1] if said else "", "gpu0": seen}


def summary(gpus: List[str], results: List[Dict[str, object]], planned: int) -> str:
    """The summary of the steps run so far, of `planned`: written after each, so a plan cut short (the lent
    machine's time ran out) still says what ran and how."""
    rows = [f"| {r['step']} | {r['deadline_s']} | {r['wall_s']} | {r['exit']} | "
            f"{'yes' if r['as_expected'] else '**no**'} | {r['why']}; last line: `{r['last_line']}` |" for r in results]
    total = sum(float(str(r["wall_s"])) for r in results)
    ran = "" if len(results) == planned else \
        f" Only {len(results)} of the {planned} steps ran: the plan stopped (or was stopped) before the others."
    return "\n".join([f"# make hardware: {', '.join(gpus)}, {datetime.date.today().isoformat()}", "",
                      f"{total:.0f} s in all (deadlines sum to {sum(int(str(r['deadline_s'])) for r in results)} s, "
                      f"at most {PLAN_LIMIT_S} s).{ran}", "",
                      "| step | deadline s | wall s | exit | as expected | what |", "|---|---|---|---|---|---|",
                      *rows, ""])


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help="where the reports go (default reports/hardware/)")
    parser.add_argument("--plan", action="store_true", help="print the steps with their deadlines; run nothing")
    args = parser.parse_args(argv)
    steps = plan()
    if args.plan:
        print(plan_text(steps))
        return 0
    gpus = real_gpus()
    why = refusal(gpus, os.environ.get(INJECT_ENV, ""))
    if why:
        print(f"make hardware: {why}", file=sys.stderr)
        return 2
    stem = args.out / f"{slug(gpus[0])}-{datetime.date.today().isoformat()}"
    path = Path(f"{stem}-summary.md")
    results = execute(steps, stem, lambda so_far: path.write_text(summary(gpus, so_far, len(steps))))
    missed = [str(r["step"]) for r in results if not r["as_expected"]]
    print(f"make hardware: {', '.join(gpus)}: {len(results) - len(missed)} of {len(results)} steps as expected"
          + (f" (not: {', '.join(missed)})" if missed else "") + f"; wrote {path}")
    return 1 if missed else 0


def execute(steps: List[Step], stem: Path, after_each: Callable[[List[Dict[str, object]]], object]
            ) -> List[Dict[str, object]]:
    """Every step in order, each under its deadline, the journals in a temporary folder; `after_each` gets
    the results so far once each step ends."""
    results: List[Dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="rocmcheck-hardware-") as journal:
        for step in steps:
            results.append(run_step(step, stem, journal, call))
            after_each(results)
    return results


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
