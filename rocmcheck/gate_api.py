"""`rocmcheck.gate()`: the pre-training gate from inside a training script."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterable, List, Optional

from . import registry
from .errors import GateFailed
from .model import Verdict
from .render import failing_line, markdown_report
from .runner import RunOptions
from .session import gate_variants, run_variants


def _gpu_already_initialised() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_initialized())


def gate(device: str = "auto", require: Iterable[str] = (), timeout: Optional[float] = None,
         inject: str = "", probes_path: Iterable[str] = (), out_dir: Optional[str] = None,
         isolation: Optional[str] = None, verbose: bool = True,
         expect_gpus: Optional[int] = None) -> List[Verdict]:
    """Run the gate probes in isolated children and return their verdicts on GO.

    Raises `rocmcheck.GateFailed` (with `.verdicts`) on NO-GO, and KeyboardInterrupt when the gate was
    interrupted: no verdict (UNKNOWN), never a NO-GO the node did not earn. Safe to call after this
    process initialised the GPU: children are then spawned fresh, never forked.
    Writes no report files unless `out_dir` is given. `expect_gpus` fails the gate when torch
    sees fewer GPUs (a node in a fleet whose GPU count is known).
    """
    specs = registry.load_all(probes_path)
    variants = gate_variants(specs, require)
    if isolation is None and _gpu_already_initialised():
        isolation = "spawn"
    options = RunOptions(device=device, timeout=timeout, inject=inject, profile="gate",
                         probes_paths=list(probes_path), write_files=out_dir is not None,
                         out_dir=Path(out_dir or "reports"), command="gate", expect_gpus=expect_gpus)
    if isolation:
        options.isolation = isolation
    say = (lambda v: print(f"rocmcheck gate: {v.status.value.upper():>5} {v.variant}", file=sys.stderr)) \
        if verbose else None
    report = run_variants(options, variants, on_verdict=say, markdown=markdown_report)
    verdicts = [Verdict.from_dict(v) for v in report["verdicts"]]
    if report["run"]["partial"]:
        raise KeyboardInterrupt(f"rocmcheck gate: interrupted during {report['run'].get('interrupted')}: "
                                f"no verdict (UNKNOWN)")
    bad = [v for v in verdicts if v.status.is_bad]
    if bad:
        raise GateFailed("rocmcheck gate: NO-GO\n" + "\n".join(failing_line(v.to_dict()) for v in bad), verdicts)
    return verdicts
