"""Whole-process timings for the design's bars (docs/design.md, "Performance bars").

Run: python -m pytest benchmarks/bench_plugin_gate.py --benchmark-columns=min,median,max
(not collected by the default `pytest`, whose testpaths are tests/).

- group "gate": `rocmcheck gate --device cpu` against `python -c "import torch"`, for
  the default gate and a light one (config-lint + device-smoke, near-zero probe work).
  Bar: gate <= 1.5 x import torch + the probes' own work. That work is their compute (each
  gate's extra_info: the sum of `probe_s`, the children's wall time, the verdict counts) and
  the modules they import beyond torch: `import torch` plus the gate's preloads
  (`torch._dynamo`, which every optimizer step imports, and the Hugging Face stack) is timed
  beside them, the floor no gate with those probes can go under.
- group "plugin": `pytest` on a one-test file with the plugin autoloaded (no
  --rocm-matrix) against `-p no:rocmcheck`. Bar: no measurable difference.
- group "plugin-import": what the plugin costs a pytest run without --rocm-matrix, in process
  (pytest already imported, rocmcheck not): importing `rocmcheck.plugin` and declaring its
  options. Bar: under 10 ms (it was 30-50 ms when the package imported its probe API at once).
"""
from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from rocmcheck.outputs.storage import load_report

ROUNDS = 5


def _run(argv: List[str], cwd: Path, ok: tuple = (0,)) -> None:
    done = subprocess.run(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=300)
    assert done.returncode in ok, done.stderr[-2000:]


def _timed(benchmark, argv: List[str], cwd: Path) -> None:
    benchmark.pedantic(_run, args=(argv, cwd), rounds=ROUNDS, iterations=1, warmup_rounds=1)


@pytest.mark.benchmark(group="gate")
def test_import_torch(benchmark, tmp_path: Path) -> None:
    _timed(benchmark, [sys.executable, "-c", "import torch"], tmp_path)


def _gate_preloads() -> List[str]:
    from rocmcheck import registry
    from rocmcheck.engine.selection import gate_variants
    from rocmcheck.model import preloads

    return preloads(gate_variants(registry.load_all()))


@pytest.mark.benchmark(group="gate")
def test_import_torch_and_the_gates_preloads(benchmark, tmp_path: Path) -> None:
    modules = ["torch", *_gate_preloads()]
    benchmark.extra_info["modules"] = modules
    _timed(benchmark, [sys.executable, "-c", "import " + ", ".join(modules)], tmp_path)


GATES = {
    "default": [],  # what users run: every gate probe, its work grows with the probe set
    "light": ["--require", "config-lint", "--require", "device-smoke"],  # near-zero probe work: the overhead
}


@pytest.mark.benchmark(group="gate")
@pytest.mark.parametrize("gate", list(GATES))
def test_gate_cpu_whole_process(benchmark, tmp_path: Path, gate: str) -> None:
    report_path = tmp_path / "gate.json"
    argv = [sys.executable, "-m", "rocmcheck", "gate", "--device", "cpu", *GATES[gate], "--out-dir", str(tmp_path),
            "--json", str(report_path)]
    rounds = 3 if gate == "default" else ROUNDS
    # GO or NO-GO are both a complete gate; exit 2 is not
    benchmark.pedantic(_run, args=(argv, tmp_path, (0, 1)), rounds=rounds, iterations=1, warmup_rounds=1)
    report = load_report(report_path)
    benchmark.extra_info["variants"] = len(report["verdicts"])
    benchmark.extra_info["counts"] = report["run"]["counts"]
    benchmark.extra_info["probe_work_s"] = round(sum(v["measurements"].get("probe_s", 0.0)
                                                    for v in report["verdicts"]), 4)
    benchmark.extra_info["children_s"] = round(sum(v["duration_s"] for v in report["verdicts"]), 4)


@pytest.fixture
def trivial_project(tmp_path: Path) -> Path:
    (tmp_path / "test_trivial.py").write_text("def test_one():\n    assert True\n")
    return tmp_path


@pytest.mark.benchmark(group="plugin")
def test_pytest_with_plugin_autoloaded(benchmark, trivial_project: Path) -> None:
    _timed(benchmark, [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_trivial.py"],
           trivial_project)


@pytest.mark.benchmark(group="plugin")
def test_pytest_with_plugin_disabled(benchmark, trivial_project: Path) -> None:
    _timed(benchmark, [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:rocmcheck",
                       "test_trivial.py"], trivial_project)


class _Options:
    """Stands in for pytest's parser and option group: records what the plugin declares."""

    def __init__(self) -> None:
        self.declared: List[str] = []

    def getgroup(self, *args, **kwargs) -> "_Options":
        return self

    def addoption(self, *names, **kwargs) -> None:
        self.declared.extend(names)

    def addini(self, name, *args, **kwargs) -> None:
        self.declared.append(name)


def _forget_rocmcheck() -> tuple:
    for name in [m for m in sys.modules if m == "rocmcheck" or m.startswith("rocmcheck.")]:
        del sys.modules[name]
    return (), {}


def _load_plugin() -> _Options:
    options = _Options()
    importlib.import_module("rocmcheck.plugin").pytest_addoption(options)
    return options


@pytest.mark.benchmark(group="plugin-import")
def test_plugin_import_without_the_flag(benchmark, monkeypatch) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)  # as installed: compiled once (pip does at install)
    options = benchmark.pedantic(_load_plugin, setup=_forget_rocmcheck, rounds=30, warmup_rounds=2)
    assert "--rocm-matrix" in options.declared
    benchmark.extra_info["rocmcheck_modules"] = sorted(m for m in sys.modules if m.startswith("rocmcheck"))
