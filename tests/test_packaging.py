"""What users install is what runs: the wheel holds the whole tree, and installed into a
virtual environment that sees nothing of this machine (no system site-packages, no user
site, no checkout on the path, run from an unrelated folder) it works, with and without torch.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import isolated_env, linked_venv, make_venv, probes_in_tree, run_in

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_SUFFIXES = (".py", ".json", ".typed", ".cpp")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel a clone builds: from a copy of the tree, so a stale build/ left here (setuptools'
    scratch, holding a module since removed) cannot put an old file in it."""
    out, source = tmp_path_factory.mktemp("dist"), checkout_copy(tmp_path_factory.mktemp("source"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                    str(source)], check=True, capture_output=True)
    (path,) = out.glob("rocmcheck-*.whl")
    return path


def tree_files() -> set:
    """Every module and data file of the package as it is on disk, caches aside, named as in the
    wheel: the probe library's folder probes/ is the package rocmcheck.probes there."""
    found = {p.relative_to(ROOT).as_posix() for folder in ("rocmcheck", "probes") for p in (ROOT / folder).rglob("*")
             if p.is_file() and p.name.endswith(PACKAGE_SUFFIXES) and "__pycache__" not in p.parts}
    return {f"rocmcheck/{name}" if name.startswith("probes/") else name for name in found}


@pytest.mark.children
def test_wheel_holds_exactly_the_package_tree(wheel):
    in_wheel = {n for n in zipfile.ZipFile(wheel).namelist() if not n.startswith("rocmcheck-")}  # .dist-info aside
    tree = tree_files()
    assert not tree - in_wheel, f"missing from the wheel: {sorted(tree - in_wheel)}"
    assert not in_wheel - tree, f"in the wheel but not in the tree: {sorted(in_wheel - tree)}"
    assert {"rocmcheck/faults/data.py", "rocmcheck/probes/device.py", "rocmcheck/knowledge/data/known_issues/core.json",
            "rocmcheck/knowledge/data/workarounds.json", "rocmcheck/py.typed",
            "rocmcheck/simgpu/simgpu.cpp"} <= in_wheel
    assert not any(n.startswith("probes/") for n in in_wheel)  # no generic top-level name


@pytest.mark.children
def test_wheel_declares_its_runtime_dependencies_and_entry_points(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    requires = [line.split(":", 1)[1].strip() for line in meta.splitlines() if line.startswith("Requires-Dist:")]
    runtime = {r.split(">")[0].split("=")[0].split(";")[0].strip() for r in requires if "extra ==" not in r}
    # the probes import numpy (torch does not depend on it); diff judges speed with pytest-benchmark's check
    assert runtime == {"numpy", "psutil", "tabulate", "pytest-benchmark"}
    text = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "rocmcheck = rocmcheck.cli:main" in text and "[pytest11]" in text


@pytest.mark.children
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
    """The wheel and pytest, from the package index, beside the torch this suite runs with (linked: pip sees it
    installed, as on a machine that has torch before rocmcheck)."""
    return make_venv(tmp_path_factory.mktemp("torch") / "venv", str(wheel), "pytest", linked=("torch",))


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


# --- the three ways to have rocmcheck: a wheel, an editable install, a plain checkout ------------
# Each must find the whole probe library (the folder probes/, the package rocmcheck.probes) in the
# parent and in the children that run the probes (zygote server and spawned interpreters).

DEPENDENCIES = ("torch", "numpy", "psutil", "tabulate", "pytest-benchmark")  # linked from this interpreter: seconds
WHERE_IS_THE_LIBRARY = "from rocmcheck import registry; print(registry.builtin_package().__path__[0])"


def checkout_copy(dest: Path) -> Path:
    """What a clone of this repository holds: tracked files and new ones not yet committed, never
    ignored ones (.venv, build/, *.egg-info)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file():  # a tracked file deleted from the work tree is listed too
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


@pytest.fixture(scope="module")
def deps_venv(tmp_path_factory) -> Path:
    """rocmcheck's dependencies and torch, and nothing of rocmcheck."""
    return linked_venv(tmp_path_factory.mktemp("deps") / "venv", *DEPENDENCIES)


@pytest.fixture(scope="module")
def wheel_install(torch_venv, tmp_path_factory) -> tuple:
    """(venv, folder to run in, the command, where the library must be found)."""
    (site,) = torch_venv.glob("lib/python*/site-packages")
    return torch_venv, tmp_path_factory.mktemp("wheel-run"), ["rocmcheck"], site / "rocmcheck" / "probes"


@pytest.fixture(scope="module")
def editable_install(tmp_path_factory) -> tuple:
    """`pip install -e` of a checkout into a venv of the dependencies (setuptools too: built without
    isolation, so nothing is downloaded), run from an unrelated folder."""
    base = tmp_path_factory.mktemp("editable")
    tree = checkout_copy(base / "tree")
    venv = linked_venv(base / "venv", *DEPENDENCIES, "setuptools")
    pip = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                          "--no-deps", "--no-build-isolation", "-e", str(tree)],
                         capture_output=True, text=True, env=isolated_env(venv), cwd=base)
    assert pip.returncode == 0, pip.stderr[-3000:]
    (base / "elsewhere").mkdir()
    return venv, base / "elsewhere", ["rocmcheck"], tree / "probes"


@pytest.fixture(scope="module")
def checkout_run(deps_venv, tmp_path_factory) -> tuple:
    """A checkout and nothing installed: `python -m rocmcheck` from its root."""
    tree = checkout_copy(tmp_path_factory.mktemp("checkout") / "tree")
    return deps_venv, tree, ["python", "-m", "rocmcheck"], tree / "probes"


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["wheel_install", "editable_install", "checkout_run"])
def test_every_install_mode_loads_the_whole_library_and_runs_a_probe_in_both_isolations(mode, request, tmp_path):
    venv, cwd, rocmcheck, library = request.getfixturevalue(mode)
    found = run_in(venv, ["python", "-c", WHERE_IS_THE_LIBRARY], cwd)
    assert Path(found.stdout.strip()) == library, found.stdout + found.stderr[-2000:]
    listed = run_in(venv, [*rocmcheck, "list"], cwd)
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert listed.stdout.rstrip().endswith(f" of {probes_in_tree()} probes"), listed.stdout[-300:]
    for isolation in ("zygote", "spawn"):
        report = tmp_path / f"{isolation}.json"
        run = run_in(venv, [*rocmcheck, "run", "--device", "cpu", "--probe", "device-smoke", "--isolation",
                            isolation, "--json", str(report)], cwd)
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
        statuses = {v["variant"]: v["status"] for v in json.loads(report.read_text())["verdicts"]}
        assert statuses == {"device-smoke": "pass"}, (isolation, statuses)


@pytest.mark.parametrize("library, said", [("absent", "cannot be found"), ("empty", "holds no probe module")])
def test_a_checkout_without_its_probe_library_says_so_instead_of_loading_no_probe(deps_venv, tmp_path, library,
                                                                                 said):
    shutil.copytree(ROOT / "rocmcheck", tmp_path / "rocmcheck", ignore=shutil.ignore_patterns("__pycache__"))
    if library == "empty":  # the package without a single probe module
        (tmp_path / "probes").mkdir()
        shutil.copy2(ROOT / "probes" / "__init__.py", tmp_path / "probes")
    listed = run_in(deps_venv, ["python", "-m", "rocmcheck", "list"], tmp_path)
    assert listed.returncode == 2, listed.stdout[-1000:] + listed.stderr[-1000:]
    assert "the built-in probe library rocmcheck.probes" in listed.stderr and said in listed.stderr, listed.stderr
    assert "Traceback" not in listed.stderr


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


@pytest.mark.children
@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_gate_installs_rocmcheck_and_torch_only_and_make_test_then_adds_the_extras(tmp_path):
    """Issue 31: `make gate` installed the test and hf extras too, though the README says it installs
    rocmcheck and torch; `make test` after it, in the same folder, must notice they are missing."""
    venv = tmp_path / "venv"

    def dry_run(target: str) -> str:
        return subprocess.run(["make", "-n", target, f"VENV={venv}"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout

    gate = dry_run("gate")
    assert "pip install -q -e .\n" in gate and "[test" not in gate and "rocmcheck gate" in gate
    venv.mkdir()
    (venv / ".installed-gate").touch()  # what `make gate` leaves
    test = dry_run("test")
    assert 'pip install -q --no-compile -e ".[test,hf]"' in test and "-m venv" not in test and "pytest" in test
