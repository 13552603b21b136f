"""What users install is what runs: the wheel holds the whole tree, and installed into a
virtual environment that sees nothing of this machine (no system site-packages, no user
site, no checkout on the path, run from an unrelated folder) it works, with and without torch.
"""
from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from conftest import make_venv, run_in

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_SUFFIXES = (".py", ".json", ".typed", ".cpp")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                    str(ROOT)], check=True, capture_output=True)
    (path,) = out.glob("rocmcheck-*.whl")
    return path


def tree_files() -> set:
    """Every module and data file of the package as it is on disk, caches aside."""
    return {p.relative_to(ROOT).as_posix() for p in (ROOT / "rocmcheck").rglob("*")
            if p.is_file() and p.name.endswith(PACKAGE_SUFFIXES) and "__pycache__" not in p.parts}


def test_wheel_holds_exactly_the_package_tree(wheel):
    in_wheel = {n for n in zipfile.ZipFile(wheel).namelist() if not n.startswith("rocmcheck-")}  # .dist-info aside
    tree = tree_files()
    assert not tree - in_wheel, f"missing from the wheel: {sorted(tree - in_wheel)}"
    assert not in_wheel - tree, f"in the wheel but not in the tree: {sorted(in_wheel - tree)}"
    assert {"rocmcheck/faults/data.py", "rocmcheck/probes/device.py", "rocmcheck/data/known_issues/core.json",
            "rocmcheck/data/workarounds.json", "rocmcheck/py.typed", "rocmcheck/simgpu/simgpu.cpp"} <= in_wheel
    assert not any(n.startswith("probes/") for n in in_wheel)  # no generic top-level name


def test_wheel_declares_its_runtime_dependencies_and_entry_points(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    requires = [line.split(":", 1)[1].strip() for line in meta.splitlines() if line.startswith("Requires-Dist:")]
    runtime = {r.split(">")[0].split("=")[0].split(";")[0].strip() for r in requires if "extra ==" not in r}
    assert runtime == {"numpy", "psutil", "tabulate"}  # the probes import numpy; torch does not depend on it
    text = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "rocmcheck = rocmcheck.cli:main" in text and "[pytest11]" in text


def test_building_the_wheel_prints_no_warning_of_ours(tmp_path):
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                            "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-2000:]
    ours = [line for line in (build.stdout + build.stderr).splitlines()
            if "warning" in line.lower() and "Location 'file:" not in line]  # the machine's own pip index config
    assert not ours, "\n".join(ours[:20])


# --- installed like a user: a venv that sees nothing of this machine ---------------------------


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory, wheel) -> Path:
    """The wheel and what it declares, plus pytest for the plugin: no torch."""
    return make_venv(tmp_path_factory.mktemp("bare") / "venv", str(wheel), "pytest")


@pytest.fixture(scope="module")
def torch_venv(tmp_path_factory, wheel) -> Path:
    """The wheel plus torch (the version this suite runs with) and pytest, from the package index."""
    return make_venv(tmp_path_factory.mktemp("torch") / "venv", str(wheel), f"torch=={metadata.version('torch')}",
                     "pytest")


@pytest.fixture
def elsewhere(tmp_path) -> Path:
    folder = tmp_path / "unrelated"
    folder.mkdir()
    return folder


@pytest.fixture(scope="module")
def gate_report(torch_venv, tmp_path_factory) -> subprocess.CompletedProcess:
    folder = tmp_path_factory.mktemp("gate")
    run = run_in(torch_venv, ["rocmcheck", "gate", "--device", "cpu", "--json", "gate.json"], folder)
    run.folder = folder  # type: ignore[attr-defined]
    return run


@pytest.mark.slow
def test_installed_wheel_says_go_from_any_folder(torch_venv, gate_report):
    assert gate_report.returncode == 0, gate_report.stdout[-2000:] + gate_report.stderr[-2000:]
    assert "\nGO — " in gate_report.stdout
    data = json.loads((gate_report.folder / "gate.json").read_text())
    statuses = {v["variant"]: v["status"] for v in data["verdicts"]}
    assert statuses["gpu-visible"] == "pass" and statuses["device-smoke"] == "pass"
    assert not [v for v, s in statuses.items() if s not in ("pass", "warn", "skip")]
    where = run_in(torch_venv, ["python", "-c", "import rocmcheck; print(rocmcheck.__file__)"], gate_report.folder)
    assert str(torch_venv) in where.stdout  # the installed copy, not this checkout


@pytest.mark.slow
def test_installed_wheel_lists_probes_and_hides_no_generic_module(torch_venv, elsewhere):
    listed = run_in(torch_venv, ["python", "-m", "rocmcheck", "list"], elsewhere)
    assert listed.returncode == 0, listed.stderr
    assert "transfer[to-isolated]" in listed.stdout and "gpu-visible" in listed.stdout
    assert run_in(torch_venv, ["python", "-c", "import probes"], elsewhere).returncode != 0


@pytest.mark.slow
def test_plugin_in_a_project_of_its_own_writes_the_matrix(torch_venv, elsewhere):
    (elsewhere / "test_mine.py").write_text("def test_mine():\n    assert sum([1, 2]) == 3\n")
    run = run_in(torch_venv, ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rocm-matrix=out",
                              "--rocm-gate-only", "--rocm-device=cpu"], elsewhere)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "test_mine.py ." in run.stdout or "1 passed" in run.stdout or " passed" in run.stdout
    reports = sorted((elsewhere / "out").glob("rocmcheck-*.json"))
    assert reports, list(elsewhere.rglob("*"))
    variants = {v["variant"] for v in json.loads(reports[-1].read_text())["verdicts"]}
    assert {"device-smoke", "gpu-visible"} <= variants
    collected = run_in(torch_venv, ["python", "-m", "pytest", "-q", "--co", "-p", "no:cacheprovider"], elsewhere)
    assert "test_mine.py::test_mine" in collected.stdout and "rocmcheck::" not in collected.stdout  # inert


# --- no torch: one plain line, exit 2, and the commands that need no torch still work ----------


@pytest.mark.slow
@pytest.mark.parametrize("command", [["rocmcheck", "gate"], ["rocmcheck", "run", "--probe", "device-smoke"],
                                     ["rocmcheck", "report", "-o", "r.md"], ["rocmcheck", "doctor"],
                                     ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rocm-matrix"]])
def test_without_torch_a_command_that_needs_it_says_so_once_and_exits_2(bare_venv, elsewhere, command):
    (elsewhere / "test_mine.py").write_text("def test_mine():\n    pass\n")
    run = run_in(bare_venv, command, elsewhere)
    assert run.returncode == 2, run.stdout[-2000:] + run.stderr[-2000:]
    said = [line for line in (run.stdout + run.stderr).splitlines() if "torch cannot be imported" in line]
    assert len(said) == 1, run.stdout + run.stderr
    assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in said[0]  # this host has no GPU
    assert "Traceback" not in run.stderr
    assert "ERROR" not in run.stdout and "PASS" not in run.stdout  # no verdict per probe


@pytest.mark.slow
def test_without_torch_gate_api_raises_torch_missing(bare_venv, elsewhere):
    code = ("import rocmcheck\ntry:\n    rocmcheck.gate(device='cpu', verbose=False)\n"
            "except rocmcheck.TorchMissing as exc:\n    print('MISSING', exc)\n")
    run = run_in(bare_venv, ["python", "-c", code], elsewhere)
    assert run.stdout.startswith("MISSING torch cannot be imported"), run.stdout + run.stderr


@pytest.mark.slow
def test_without_torch_list_env_help_matrix_and_diff_work(bare_venv, gate_report, elsewhere):
    report = str(gate_report.folder / "gate.json")
    for command in (["rocmcheck", "--help"], ["rocmcheck", "list"], ["rocmcheck", "list", "--faults"],
                    ["rocmcheck", "env"], ["rocmcheck", "env", "--json"], ["rocmcheck", "matrix", report],
                    ["rocmcheck", "diff", report, report]):
        run = run_in(bare_venv, command, elsewhere)
        assert run.returncode == 0, (command, run.stdout[-1000:], run.stderr[-1000:])
    env = json.loads(run_in(bare_venv, ["rocmcheck", "env", "--json"], elsewhere).stdout)
    assert "No module named 'torch'" in env["device_facts"]["torch_error"]
    assert env["host"]["gpus"]["gpus"] == {"amd": 0, "nvidia": 0}
