"""A wheel built from the repo works in a clean virtual environment, from any directory."""
from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                    str(ROOT)], check=True, capture_output=True)
    (path,) = out.glob("rocmcheck-*.whl")
    return path


def test_wheel_ships_probes_inside_the_package(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert "rocmcheck/probes/device.py" in names and "rocmcheck/probes/config.py" in names
    assert "rocmcheck/data/known_issues/core.json" in names
    assert not any(n.startswith("probes/") for n in names)  # no generic top-level name
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "rocmcheck = rocmcheck.cli:main" in text and "[pytest11]" in text


@pytest.mark.slow
def test_wheel_installed_in_a_clean_venv_runs_from_any_directory(wheel, tmp_path):
    venv = tmp_path / "venv"
    # system site-packages only to reuse the installed torch; rocmcheck itself comes from the wheel
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    py = venv / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(wheel)],
                   check=True, capture_output=True)
    where = subprocess.run([str(py), "-c", "import rocmcheck; print(rocmcheck.__file__)"], cwd=tmp_path,
                           capture_output=True, text=True, check=True)
    assert str(venv) in where.stdout
    work = tmp_path / "elsewhere"
    work.mkdir()
    run = subprocess.run([str(venv / "bin" / "rocmcheck"), "run", "--device", "cpu", "--probe", "device-smoke",
                          "--json", "r.json"], cwd=work, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert json.loads((work / "r.json").read_text())["verdicts"][0]["status"] == "pass"
    probes_on_path = subprocess.run([str(py), "-c", "import probes"], cwd=work, capture_output=True)
    assert probes_on_path.returncode != 0
