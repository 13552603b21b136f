"""The torch compatibility matrix: every supported torch really installed, the gate and the full run
on the CPU, one table.

    python scripts/compat_matrix.py [--torch VERSION ...] [--jobs N] [--md FILE]   (or: make compat)

Each torch gets a virtual environment of its own under $ROCMCHECK_COMPAT_CACHE (default
~/.cache/rocmcheck/compat), made once and kept: PyPI's Linux builds of torch are CUDA builds of
several GB, so this is kept out of the 15-minute CI and run before resolving any change to a probe
(docs/design.md, "Truthful on the torch users pin"). The wheel of this checkout is built once and
installed into every environment, and each command runs from an empty folder, as a user would.
Exit code: 0 when every version is GO with no error, crash or hang in the full run, 1 otherwise.
"""
from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from tabulate import tabulate

ROOT = Path(__file__).resolve().parent.parent
HF_OLD = ("transformers==4.57.*", "peft==0.17.1", "accelerate==1.12.*")
HF_NEW = ("transformers>=5.23", "peft>=0.21", "accelerate>=1.15")  # the `hf` extra's floor
# torch version -> what else its environment needs. The oldest builds were made against numpy 1;
# 2.4 and 2.5 get the last Hugging Face stack that supports them, the newest the `hf` extra, so
# hf-training runs on both ends of the range.
MATRIX: Dict[str, Tuple[str, ...]] = {
    "2.2.2": ("numpy<2",),
    "2.3.1": ("numpy<2",),
    "2.4.1": HF_OLD,
    "2.5.1": HF_OLD,
    "2.11.0": (),
    "2.15.0": HF_NEW,  # the newest release when the matrix was last run
}
BAD = ("error", "crash", "hang")


def cache_dir() -> Path:
    return Path(os.environ.get("ROCMCHECK_COMPAT_CACHE") or Path.home() / ".cache" / "rocmcheck" / "compat")


def pip_env() -> Dict[str, str]:
    """A machine-wide pip constraint (a cap on torch, say) must not choose the version under test."""
    return {**os.environ, "PIP_CONSTRAINT": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def venv_for(version: str, extras: Sequence[str], python: str) -> Path:
    """The cached environment for one torch, made when missing or when its requirements changed."""
    reqs = [f"torch=={version}", *extras]
    where = cache_dir() / f"torch-{version}"
    stamp = where / ".ready"
    if stamp.is_file() and stamp.read_text().split("\n") == reqs:
        return where
    shutil.rmtree(where, ignore_errors=True)
    print(f"compat: making {where} ({' '.join(reqs)}); several GB, once", flush=True)
    subprocess.run([python, "-m", "venv", str(where)], check=True)
    subprocess.run([str(where / "bin" / "python"), "-m", "pip", "install", "-q", *reqs], check=True, env=pip_env())
    stamp.write_text("\n".join(reqs))
    return where


def build_wheel(out: Path) -> Path:
    """The wheel of the committed tree (HEAD), built from a clean export: no stale build/ folder, no
    uncommitted file, so the matrix speaks of a commit."""
    source = out / "source"
    source.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "HEAD"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(source)], input=archive, check=True)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out),
                    str(source)], check=True, env=pip_env())
    return next(out.glob("rocmcheck-*.whl"))


def run_version(version: str, venv: Path, wheel: Path, timeout: float) -> dict:
    """Install the wheel, then `gate` and the full `run` on the CPU from an empty folder."""
    py = str(venv / "bin" / "python")
    subprocess.run([py, "-m", "pip", "install", "-q", "--force-reinstall", "--no-deps", str(wheel)], check=True,
                   env=pip_env())
    subprocess.run([py, "-m", "pip", "install", "-q", str(wheel)], check=True, env=pip_env())  # numpy, psutil, tabulate
    torch_version = subprocess.run([py, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                                   text=True, check=True).stdout.strip()
    row: dict = {"torch": torch_version, "requested": version}
    with tempfile.TemporaryDirectory(prefix=f"compat-{version}-") as work:
        for command in ("gate", "run"):
            out = Path(work) / f"{command}.json"
            try:
                done = subprocess.run([str(venv / "bin" / "rocmcheck"), command, "--device", "cpu", "--json", str(out),
                                       "--out-dir", str(Path(work) / command)], cwd=work, capture_output=True,
                                      text=True, timeout=timeout)
                code, tail = done.returncode, (done.stdout + done.stderr)[-2000:]
            except subprocess.TimeoutExpired:
                code, tail = None, f"no verdict within {timeout:.0f} s"
            report = json.loads(out.read_text()) if out.is_file() else {}
            row[command] = {"exit": code, "verdicts": report.get("verdicts", []), "tail": tail if not report else ""}
    return row


def counts(verdicts: List[dict]) -> str:
    tally = collections.Counter(v["status"] for v in verdicts)
    return ", ".join(f"{status} {n}" for status, n in sorted(tally.items())) or "no report"


def gate_word(gate: dict) -> str:
    return {0: "GO", 1: "NO-GO", 2: "UNKNOWN"}.get(gate["exit"], f"exit {gate['exit']}")


def render(rows: List[dict]) -> str:
    """One table of versions and counts, then every verdict that is neither pass nor skip, then the skips."""
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    lines = [f"rocmcheck compatibility matrix, {datetime.date.today()}, commit {commit} (CPU, `--device cpu`, "
             f"PyPI builds of torch)", ""]
    summary = [(r["torch"], gate_word(r["gate"]), counts(r["gate"]["verdicts"]), counts(r["run"]["verdicts"]))
               for r in rows]
    lines.append(tabulate(summary, headers=("torch", "gate", "gate verdicts", "full run"), tablefmt="github"))
    notable = [(r["torch"], cmd, v["variant"], v["status"], v["message"][:160]) for r in rows
               for cmd in ("gate", "run") for v in r[cmd]["verdicts"] if v["status"] not in ("pass", "skip")]
    notable += [(r["torch"], cmd, "(no report)", f"exit {r[cmd]['exit']}", r[cmd]["tail"][-160:])
                for r in rows for cmd in ("gate", "run") if not r[cmd]["verdicts"]]
    lines += ["", "Verdicts other than pass and skip:", ""]
    lines.append(tabulate(notable, headers=("torch", "command", "variant", "status", "message"), tablefmt="github")
                 if notable else "none")
    skips = collections.Counter((v["message"][:120], r["torch"]) for r in rows for v in r["run"]["verdicts"]
                                if v["status"] == "skip")
    by_reason: Dict[str, List[str]] = collections.defaultdict(list)
    for (message, torch_version), n in skips.items():
        by_reason[message].append(f"{torch_version}×{n}")
    lines += ["", "Skips in the full run (reason: torch×count):", ""]
    lines.append(tabulate(sorted((m, " ".join(v)) for m, v in by_reason.items()), headers=("reason", "where"),
                          tablefmt="github"))
    return "\n".join(lines) + "\n"


def healthy(row: dict) -> bool:
    return row["gate"]["exit"] == 0 and not any(v["status"] in BAD for v in row["run"]["verdicts"]) \
        and bool(row["run"]["verdicts"])


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--torch", action="append", metavar="VERSION",
                        help=f"only these versions (default: {' '.join(MATRIX)}); any other release works too")
    parser.add_argument("--python", default=sys.executable, help="the Python each environment is made with")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds one command may take")
    parser.add_argument("--md", type=Path, help="also write the table here")
    args = parser.parse_args(argv or None)
    rows = []
    with tempfile.TemporaryDirectory(prefix="compat-wheel-") as out:
        wheel = build_wheel(Path(out))
        for version in args.torch or list(MATRIX):
            venv = venv_for(version, MATRIX.get(version, ()), args.python)
            print(f"compat: torch {version}: gate and full run", flush=True)
            rows.append(run_version(version, venv, wheel, args.timeout))
    table = render(rows)
    print(table)
    if args.md:
        args.md.write_text(table)
    return 0 if all(healthy(r) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
