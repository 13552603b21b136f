"""`rocmcheck.gate()`: the pre-training gate from inside a training script."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterable, List, Optional

from . import registry
from .engine.options import Given, RunOptions
from .engine.runner import Runner
from .engine.selection import gate_variants
from .errors import GateFailed
from .model import Verdict
from .outputs.formats import offered
from .outputs.render import failing_line
from .outputs.storage import write_problem


def _gpu_already_initialised() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_initialized())


def gate(device: str = "auto", require: Iterable[str] = (), timeout: Optional[float] = None,
         inject: str = "", probes_path: Iterable[str] = (), out_dir: Optional[str] = None,
         isolation: Optional[str] = None, verbose: bool = True,
         expect_gpus: Optional[int] = None, slow_gpu: Optional[str] = None, keep_going: bool = False) -> List[Verdict]:
    """Run the gate probes in isolated children and return their verdicts on GO.

    Raises `rocmcheck.GateFailed` (with `.verdicts`) on NO-GO, and KeyboardInterrupt when the gate was
    interrupted: no verdict (UNKNOWN), never a NO-GO the node did not earn. Safe to call after this
    process initialised the GPU: children are then spawned fresh, never forked.
    Writes no report files unless `out_dir` is given. `expect_gpus` fails the gate when torch
    sees fewer GPUs (a node in a fleet whose GPU count is known); `slow_gpu="nogo"` fails it when a GPU
    is slower than the node's others of its model (by default that warns). As the command, a GPU's
    probes stop at its first failing verdict unless `keep_going` (the other GPUs' run on); and, an argument
    not given is read from the environment ($ROCMCHECK_INJECT, $ROCMCHECK_EXPECT_GPUS, $ROCMCHECK_SLOW_GPU).
    """
    if isolation is None and _gpu_already_initialised():
        isolation = "spawn"
    given = Given({"device": device, "isolation": isolation, "timeout": timeout, "inject": inject,
                   "probes_path": list(probes_path), "expect_gpus": expect_gpus, "slow_gpu": slow_gpu},
                  named="rocmcheck.gate({name}=...)")
    out = Path(out_dir) if out_dir is not None else None
    options = RunOptions.build(given, folders={"rocmcheck.gate(out_dir=...)": out}, profile="gate", command="gate",
                               write_files=out is not None, out_dir=out or Path("reports"), keep_going=keep_going)
    variants = gate_variants(registry.load_all(options.probes_paths), require)
    say = (lambda v: print(f"rocmcheck gate: {v.status.value.upper():>5} {v.variant}", file=sys.stderr)) \
        if verbose else None
    report = Runner(options, on_verdict=say, outputs=offered("gate()")).run(variants)
    if report.run.unwritten:
        print(f"rocmcheck gate: {write_problem(report.run.unwritten)}", file=sys.stderr)
    if report.run.partial:
        raise KeyboardInterrupt(f"rocmcheck gate: interrupted {report.run.where_interrupted()}: no verdict (UNKNOWN)")
    bad = [v for v in report.verdicts if v.status.is_bad]
    if bad:
        raise GateFailed("rocmcheck gate: NO-GO\n" + "\n".join(failing_line(v) for v in bad), report.verdicts)
    return report.verdicts
