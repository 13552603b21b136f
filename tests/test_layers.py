"""The guard rails of docs/architecture.md: the import layers and the probe library's wall
(import-linter's contracts in pyproject.toml), the lint (ruff) and the types (mypy), so `make test`
fails where a change breaks any of them."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    assert found, f"{name} is not installed: pip install -e '.[test]' (the test extra has it)"
    return found


@pytest.mark.children
def test_the_import_layers_hold():
    done = subprocess.run([_tool("lint-imports"), "--no-cache"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


@pytest.mark.children
def test_a_probe_that_imports_the_engine_breaks_the_wall(tmp_path):
    """The probes' contract reads probes/ (outside rocmcheck/, where grimp would not look): in a copy, a
    probe importing the runner, or a module the contract has never heard of, is reported."""
    for part in ("rocmcheck", "probes", "pyproject.toml"):
        copy = shutil.copytree if (ROOT / part).is_dir() else shutil.copy2
        copy(ROOT / part, tmp_path / part)
    (tmp_path / "rocmcheck" / "newcomer.py").write_text('"""A module added to the engine later."""\n')
    with (tmp_path / "probes" / "device.py").open("a") as fh:
        fh.write("\n\ndef planted():\n    from rocmcheck import faults, newcomer, torchapi\n"
                 "    from rocmcheck.engine import runner\n\n    return faults, newcomer, runner, torchapi\n")
    done = subprocess.run([_tool("lint-imports"), "--no-cache"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode != 0, done.stdout[-4000:]
    broken = done.stdout[done.stdout.index("Broken contracts"):]
    assert "probes use only the probe API" in broken and "rocmcheck layers" not in broken, broken
    assert "probes.device -> rocmcheck.engine.runner" in broken, broken
    assert "probes.device -> rocmcheck.newcomer" in broken, broken
    assert "rocmcheck.torchapi" not in broken and "rocmcheck.faults" not in broken  # the probe API stays allowed


@pytest.mark.children
def test_ruff_finds_nothing():
    done = subprocess.run([_tool("ruff"), "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


@pytest.mark.children
def test_mypy_finds_nothing():
    """The package ships py.typed: its types are a contract with its users' type checkers. The files,
    and the strict settings for the engine, are pyproject.toml's [tool.mypy]."""
    done = subprocess.run([_tool("mypy"), "--no-incremental"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
