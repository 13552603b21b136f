"""`make hardware`: the full suite on every real GPU of this machine, kept under reports/hardware/.

    python scripts/hardware.py                   what `make hardware` runs
    python scripts/hardware.py --out DIR         write elsewhere than reports/hardware/

It runs `rocmcheck run --device all` (every probe in the full profile, on every GPU torch sees,
the speed figures of each among them) and keeps its report as `<device>-<date>.json` and `.md`,
<device> the first GPU's name in lower case with dashes (`nvidia-h100-80gb-hbm3-2026-11-25.json`),
the journal left in a temporary folder. Then it runs what `make cuda-build-test` runs,
tests/test_cuda_build.py, with this machine's own torch and its GPUs hidden (those tests prove what a
CUDA build says without a GPU; they skip on a ROCm build), and ends the `.md` with their summary.

Only what really ran on real hardware goes under reports/hardware/: where torch sees no GPU, or
with faults injected ($ROCMCHECK_INJECT, simulated GPUs among them), it refuses in one line and
writes nothing (exit 2). Otherwise it exits with the run's code (0 every verdict good, 1 a bad
one), or 1 when the CUDA-build tests fail.
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
from pathlib import Path
from typing import List, Optional

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "reports" / "hardware"
INJECT_ENV = "ROCMCHECK_INJECT"
GPU_NAMES = ("import json, torch; print(json.dumps([torch.cuda.get_device_name(i) "
             "for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []))")


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


def call(argv: List[str], env: Optional[dict] = None) -> "subprocess.CompletedProcess[str]":
    """One step, its output shown as it goes and kept for the summary line."""
    print("$ " + " ".join(argv), flush=True)
    done = subprocess.run(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(done.stdout, end="", flush=True)
    return done


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help="where the report goes (default reports/hardware/)")
    args = parser.parse_args(argv)
    gpus = real_gpus()
    why = refusal(gpus, os.environ.get(INJECT_ENV, ""))
    if why:
        print(f"make hardware: {why}", file=sys.stderr)
        return 2
    stem = args.out / f"{slug(gpus[0])}-{datetime.date.today().isoformat()}"
    json_path, md_path = stem.with_suffix(".json"), stem.with_suffix(".md")
    with tempfile.TemporaryDirectory(prefix="rocmcheck-hardware-") as journal:
        run = call([sys.executable, "-m", "rocmcheck", "run", "--device", "all", "--out-dir", journal,
                    "--json", str(json_path), "--md", str(md_path)])
    hidden = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "HIP_VISIBLE_DEVICES": ""}
    tests = call([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_cuda_build.py"], hidden)
    said = [line for line in tests.stdout.splitlines() if line.strip()]
    if md_path.exists():
        with open(md_path, "a") as md:
            md.write(f"\n## CUDA-build tests\n\n`make cuda-build-test`'s tests (tests/test_cuda_build.py) with this "
                     f"machine's torch, its GPUs hidden: {said[-1] if said else 'no output'} "
                     f"(exit {tests.returncode}).\n")
    wrote = [str(p) for p in (json_path, md_path) if p.exists()]
    print(f"make hardware: {', '.join(gpus)}: wrote {' and '.join(wrote) or 'nothing'}")
    return run.returncode or (1 if tests.returncode else 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
