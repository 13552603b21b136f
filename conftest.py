"""Shared test fixtures. The rocmcheck plugin itself is loaded once, by its entry point."""
from __future__ import annotations

import ast
import contextlib
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence

import pytest
from hypothesis import settings
from packaging.requirements import Requirement

pytest_plugins = ["pytester"]

settings.register_profile("rocmcheck", deadline=None, derandomize=True, database=None, print_blob=True,
                          max_examples=60)
settings.load_profile("rocmcheck")
# `make test-fast` takes this one (--hypothesis-profile): the same derandomized examples, fewer of them
settings.register_profile("rocmcheck-fast", parent=settings.get_profile("rocmcheck"), max_examples=12)

FAKE_PROBES = Path(__file__).parent / "tests" / "fake_probes"


def probes_in_tree(root: Path = Path(__file__).parent) -> int:
    """How many probes the library in `root`/probes declares (`@rocmcheck.probe(...)`), read from
    the source: what every install mode must load, counted without the registry under test."""
    def declares(node: ast.AST) -> bool:  # `@rocmcheck.probe(...)`, or bare
        return ast.unparse(node.func if isinstance(node, ast.Call) else node) == "rocmcheck.probe"

    return sum(declares(d) for path in (root / "probes").glob("*.py")
               for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
               if isinstance(node, ast.FunctionDef) for d in node.decorator_list)


def probe_module(name: str):
    """A built-in probe module as the registry loads it (for its pure decision functions), whichever
    way rocmcheck is installed, or from the source tree."""
    from rocmcheck import registry

    registry.load_all()
    return sys.modules[f"{registry.BUILTIN}.{name}"]


def run_probes(probe: str = "*", inject: str = "", device: str = "cpu", isolation: Optional[str] = None,
               timeout: Optional[float] = None, keyword: str = "", probes_path: List[str] = (),
               env: Optional[Dict[str, str]] = None, profile: str = "full", gate_only: Optional[bool] = False,
               first_use_timeout: Optional[float] = None, level: int = 1) -> List[dict]:
    """Run probes through the real runner (children, watchdog) and return verdict dicts. `gate_only` selects as
    `engine.selection.select` does: None runs every variant, a probe's `gate_variants` included."""
    from rocmcheck import registry
    from rocmcheck.engine.options import RunOptions, default_isolation
    from rocmcheck.engine.runner import Runner
    from rocmcheck.engine.selection import select

    specs = registry.load_all(probes_path)
    variants = select(specs, [probe], keyword, gate_only=gate_only)
    opts = RunOptions(device=device, isolation=isolation or default_isolation(), inject=inject, timeout=timeout,
                      first_use_timeout=first_use_timeout, probes_paths=list(probes_path),
                      env=dict(env or {}), profile=profile, write_files=False, level=level)
    return Runner(opts).run(variants).to_dict()["verdicts"]  # as the JSON report holds them


def by_variant(verdicts: List[dict]) -> Dict[str, dict]:
    return {v["variant"]: v for v in verdicts}


@pytest.fixture
def made_run(monkeypatch, capsys):
    """`made_run(report_json, *argv)`: `rocmcheck ARGV...` in-process, the engine's Runner replaced
    by one whose run returns the made report (no probe runs, no output file is written), so all
    the command prints, its first line too, is its own: (exit code, stdout, stderr)."""
    from rocmcheck.cli import main
    from rocmcheck.records import Report

    def command(data: dict, *argv: str):
        report = Report.from_dict(data)

        class Made:
            def __init__(self, *args, **kwargs) -> None:
                pass

            def run(self, variants):
                return report

        monkeypatch.setattr("rocmcheck.engine.runner.Runner", Made)
        monkeypatch.delenv("ROCMCHECK_INJECT", raising=False)
        code = main(list(argv))
        out = capsys.readouterr()
        return code, out.out, out.err

    return command


# --- the fast tier (`make test-fast`): no test that starts a process ------------------------------
#
# `children` marks a test that starts real processes (the runner's children, a venv, a subprocess);
# `make test-fast` deselects it and `slow` with `-m "not slow and not children"`. A test is marked
# by what it uses: the fixtures below, or the `run_probes` helper named in its body; one that starts a
# process some other way is marked by hand. What keeps the marks right when a test is added: the fast
# tier runs with ROCMCHECK_TEST_NO_CHILDREN=1, and there a test that starts a process fails at once,
# naming the mark it lacks, instead of making the tier slow.

CHILD_FIXTURES = frozenset({"rocm_run", "isolation"})  # fixtures that start children whatever they are given
CHILD_HELPERS = frozenset({"run_probes", "make_venv", "linked_venv", "run_in"})  # helpers here that do
NO_CHILDREN_ENV = "ROCMCHECK_TEST_NO_CHILDREN"


def names_in(code) -> set:
    """The global names a code object and the functions nested in it use."""
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= names_in(const)
    return names


def starts_children(item: pytest.Item) -> bool:
    """Whether `item` starts processes through a fixture or helper this file provides: itself, or
    one of the fixtures it uses (theirs included, so a module's shared recorded run counts)."""
    fixtures = set(getattr(item, "fixturenames", ()))
    if CHILD_FIXTURES & fixtures:
        return True
    functions = [getattr(item, "function", None)]
    info = getattr(item, "_fixtureinfo", None)
    for name in fixtures:
        for fixturedef in (info.name2fixturedefs.get(name, ()) if info else ()):
            functions.append(fixturedef.func)
    return any(hasattr(f, "__code__") and CHILD_HELPERS & names_in(f.__code__) for f in functions)


def pytest_collection_modifyitems(items: List[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("children") is None and starts_children(item):
            item.add_marker(pytest.mark.children)


class StartedChild(BaseException):
    """A BaseException, so that a probe's or the engine's `except Exception` cannot swallow it."""


_current: List[pytest.Item] = []  # the test running now, for the guard below
_started: List[str] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item):
    _current[:] = [item]
    _started.clear()
    with MachineShare.of(item.config).hold(alone=item.get_closest_marker("alone") is not None):
        yield
    _current.clear()


# --- tests that time work run alone -----------------------------------------------------------------------------
#
# `alone` marks a test that judges speed measured live: a simulated GPU computes on the host's CPU, and beside
# another pytest-xdist worker's test its figures swing with what that test does to the cores and caches they share
# (a healthy simulated GPU's bf16 product read 68% slower against its baseline beside the host's same work; of two
# healthy simulated GPUs under sustained load, one read 70% of the other in every window). Timing needs a quiet
# machine, as pytest-benchmark's own runs do (it turns itself off under xdist): such a test waits for the tests
# running now to end, and the next ones wait for it. What the VM's neighbours do to a core no lock stops: for that
# the simulated GPUs' judgements hold each sample against the host's same work timed beside it.


class MachineShare:
    """The lock pytest-xdist's workers share: each test holds it shared, from its first fixture's setup to its
    last one's teardown (a module's shared fixture counts), a test marked `alone` exclusively. A waiting `alone`
    test goes before any test that starts later: it holds the `gate` while it waits, which each test passes
    through first (flock alone lets a stream of shared holders keep an exclusive one waiting)."""

    made: Dict[str, "MachineShare"] = {}

    def __init__(self, folder: Optional[Path]):
        self.files = None
        if folder is not None and sys.platform != "win32":  # without xdist (or on Windows) no test runs beside
            folder.mkdir(parents=True, exist_ok=True)
            self.files = (open(folder / "alone.gate", "a"), open(folder / "alone.lock", "a"))

    @classmethod
    def of(cls, config: pytest.Config) -> "MachineShare":
        workerinput = getattr(config, "workerinput", None)
        uid = workerinput["testrunuid"] if workerinput else ""
        if uid not in cls.made:  # the session's lock files: beside the base folders xdist gives its workers
            cls.made[uid] = cls(Path(config.getoption("basetemp")).parent / f"alone-{uid}" if uid else None)
        return cls.made[uid]

    @contextlib.contextmanager
    def hold(self, alone: bool) -> Iterator[None]:
        if self.files is None:
            yield
            return
        import fcntl

        gate, lock = self.files
        fcntl.flock(gate, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            if not alone:
                fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            if alone:
                fcntl.flock(gate, fcntl.LOCK_UN)


@pytest.fixture(scope="session", autouse=True)
def _no_children_in_fast_tier():
    """Under ROCMCHECK_TEST_NO_CHILDREN=1 (`make test-fast`), a test not marked `children` that starts
    a process fails (from the first fixture on: a module's shared fixture counts). Patched in the
    process that runs the tests, never in pytest-xdist's controller, which starts the workers."""
    if os.environ.get(NO_CHILDREN_ENV) != "1":
        yield
        return
    originals = {(subprocess.Popen, "_execute_child"): subprocess.Popen._execute_child,
                 (os, "fork"): os.fork}
    if hasattr(os, "posix_spawn"):
        originals[(os, "posix_spawn")] = os.posix_spawn

    def guard(what: str, original):
        def guarded(*args, **kwargs):
            item = _current[0] if _current else None
            if item is None or item.get_closest_marker("children"):
                return original(*args, **kwargs)
            _started.append(what)
            raise StartedChild(f"{item.nodeid} starts a process ({what}) in the fast tier: mark it "
                               "@pytest.mark.children, or use a fixture that marks it (conftest.py)")
        return guarded

    for (owner, name), original in originals.items():
        setattr(owner, name, guard(f"{getattr(owner, '__name__', owner)}.{name}", original))
    yield
    for (owner, name), original in originals.items():
        setattr(owner, name, original)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    outcome = yield
    if outcome.excinfo and isinstance(outcome.excinfo[1], StartedChild):
        _started.clear()  # it failed the test itself: said once is enough


@pytest.fixture(autouse=True)
def _fail_if_a_child_was_started():
    """The guard's exception can be caught by code that catches BaseException: fail all the same."""
    yield
    if _started:
        pytest.fail(f"started a process ({_started[0]}) in the fast tier: mark the test @pytest.mark.children",
                    pytrace=False)


@pytest.fixture(autouse=True)
def _restore_probe_registry():
    """Probe modules a test loads (fakes, broken ones) must not leak into the next test."""
    import sys

    from rocmcheck import registry

    before = dict(registry._REGISTRY)
    modules = set(sys.modules)
    yield
    registry._REGISTRY.clear()
    registry._REGISTRY.update(before)
    for name in set(sys.modules) - modules:
        if name.startswith(("rocmcheck.probes.", "rocmcheck_userprobes_")):
            del sys.modules[name]


class SharedZygote:
    """Test-only: the zygote servers of this worker's in-process runs, kept between runs that would start the same
    one (the same probe paths, preloads, folder and environment), as a test database is kept between tests.

    A zygote only imports torch, the preloads and the probes, then forks: it runs nothing of a probe, so a run
    that reuses one forks its children from the state a new one would have, and skips the 2-6 s of imports
    (tens of in-process runs per module). A server that died (killed by a test) is replaced; tests about the
    server itself, its start and what outlives a run are marked `own_zygote` and start their own, as every
    `rocmcheck` command does."""

    servers: Dict[tuple, object] = {}
    made: List[type] = []  # the launcher class, made once: the isolation module's isinstance checks must hold

    @classmethod
    def key(cls, probes_paths, preload) -> tuple:
        env = tuple(sorted((k, v) for k, v in os.environ.items() if not k.startswith("PYTEST_")))
        return tuple(str(p) for p in probes_paths), tuple(preload), os.getcwd(), env

    @classmethod
    def launcher(cls) -> type:
        if not cls.made:
            cls.made.append(cls._make())
        return cls.made[0]

    @classmethod
    def _make(cls) -> type:
        from rocmcheck.engine import zygote

        class Shared(zygote.ZygoteLauncher):
            def __new__(klass, probes_paths, preload=()):
                key = cls.key(probes_paths, preload)
                kept = cls.servers.get(key)
                if kept is not None and not kept.dead and kept._server.poll() is None:
                    with kept._cond:  # a new run's children: nothing of the last run's is waited for
                        kept._exits.clear()
                        kept._replies.clear()
                        kept.info = {**kept.info, "imports_s": {}}  # this run imported nothing
                    return kept
                if kept is not None:  # died (a test killed it): its socket and pipe go, a new one is kept
                    del cls.servers[key]
                    zygote.ZygoteLauncher.close(kept)
                made = super().__new__(klass)
                made._key = key
                return made

            def __init__(self, probes_paths, preload=()):
                if getattr(self, "_server", None) is not None:
                    return  # kept from an earlier run
                super().__init__(probes_paths, preload)
                cls.servers[self._key] = self

            def close(self) -> None:
                if cls.servers.get(self._key) is not self:
                    super().close()

        return Shared

    @classmethod
    def close_all(cls) -> None:
        servers, cls.servers = list(cls.servers.values()), {}
        for server in servers:
            server.close()  # no longer kept: closed


@pytest.fixture(autouse=True)
def _shared_zygote(request, monkeypatch):
    """In-process runs share their zygote servers (`SharedZygote`) unless the test is marked `own_zygote`."""
    if request.node.get_closest_marker("own_zygote") is None:
        from rocmcheck.engine import isolation

        monkeypatch.setattr(isolation, "ZygoteLauncher", SharedZygote.launcher())
    yield


@pytest.fixture(scope="session", autouse=True)
def _close_shared_zygotes():
    yield
    SharedZygote.close_all()


@pytest.fixture
def rocm_run():
    """`rocm_run(probe=..., inject=..., ...)` -> list of verdict dicts (see run_probes)."""
    return run_probes


@pytest.fixture
def piddir(tmp_path, monkeypatch):
    """Where the fake probes (tests/fake_probes/harness.py) record the pids they create, so a test can assert
    that no process of any tree survives."""
    folder = tmp_path / "pids"
    folder.mkdir()
    monkeypatch.setenv("ROCMCHECK_TEST_PIDDIR", str(folder))
    return folder


@pytest.fixture(params=["zygote", "spawn"])
def isolation(request):
    """Both isolation modes, for the reliability cases."""
    return request.param


def make_host(root: Path, amd: int = 0, nvidia: int = 0, driver: Optional[str] = None, dev_nodes: bool = True,
              node_mode: int = 0o666, link: tuple = ("16.0 GT/s PCIe", 16, "16.0 GT/s PCIe", 16)) -> Path:
    """A fixture tree standing in for `/` of a GPU host (point ROCMCHECK_HOST_ROOT at it): PCI
    functions with their link, the KFD topology, /dev/kfd and render nodes, /proc/driver/nvidia."""
    import os

    def write(rel: str, text: str) -> Path:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    write("sys/class/kfd/kfd/topology/nodes/0/properties", "cpu_cores_count 16\ngfx_target_version 0\n")
    functions = [("amd", "0x1002", "0x744c", "0x030000", "amdgpu")] * amd
    functions += [("nvidia", "0x10de", "0x2330", "0x030200", "nvidia")] * nvidia
    for i, (vendor, vendor_id, device_id, pci_class, default_driver) in enumerate(functions):
        dev = f"sys/bus/pci/devices/0000:{3 + i:02x}:00.0"
        for name, value in (("vendor", vendor_id), ("device", device_id), ("class", pci_class),
                            ("current_link_speed", link[0]), ("current_link_width", str(link[1])),
                            ("max_link_speed", link[2]), ("max_link_width", str(link[3]))):
            write(f"{dev}/{name}", value + "\n")
        bound = driver or default_driver
        (root / "sys/bus/pci/drivers" / bound).mkdir(parents=True, exist_ok=True)
        os.symlink(root / "sys/bus/pci/drivers" / bound, root / dev / "driver")
        if vendor == "amd":
            write(f"sys/class/kfd/kfd/topology/nodes/{i + 1}/properties", "simd_count 192\ngfx_target_version 110000\n")
            if dev_nodes:
                os.chmod(write(f"dev/dri/renderD{128 + i}", ""), node_mode)
        else:
            write(f"proc/driver/nvidia/gpus/0000:{3 + i:02x}:00.0/information", "Model: NVIDIA H100 80GB HBM3\n")
            if dev_nodes:
                os.chmod(write(f"dev/nvidia{i}", ""), node_mode)
    if amd and dev_nodes:
        os.chmod(write("dev/kfd", ""), node_mode)
    if nvidia:
        write("proc/driver/nvidia/version",
              "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
              "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n")
    (root / "dev").mkdir(exist_ok=True)
    return root


@pytest.fixture
def fake_host(tmp_path, monkeypatch):
    """`fake_host(amd=1, ...)` builds a host tree and points ROCMCHECK_HOST_ROOT (parent and children) at it."""
    def build(**kwargs):
        root = make_host(tmp_path / "host", **kwargs)
        monkeypatch.setenv("ROCMCHECK_HOST_ROOT", str(root))
        return root
    return build


# --- installed like a user: a venv that sees nothing of this machine ---------------------------


def isolated_env(venv: Path) -> Dict[str, str]:
    """No user site, no PYTHONPATH, nothing of ours in the environment; pip keeps its cache."""
    keep = {k: v for k, v in os.environ.items()
            if k in ("HOME", "LANG", "LC_ALL", "TMPDIR", "PIP_CACHE_DIR", "PIP_CONSTRAINT", "PIP_INDEX_URL",
                     "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_CONFIG_FILE")}
    return {**keep, "PATH": f"{venv / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin", "PYTHONNOUSERSITE": "1"}


def run_ok_script(code: str, timeout: float = 300, env: Optional[Dict[str, str]] = None) -> None:
    """Run `code` in a fresh interpreter (a simulated GPU's own process, so the device's state is its own);
    it passes by printing exactly "ok" and exiting 0, else the assertion shows its stderr."""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-2000:]


def make_venv(path: Path, *packages: str, linked: Sequence[str] = ()) -> Path:
    """A venv without system site-packages holding only `packages` (and their dependencies), installed by pip;
    `linked` distributions (and theirs) come from this interpreter's installation as `linked_venv` gives them,
    already installed when pip resolves `packages`: torch in a minute of unpacking is torch's install, not ours."""
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    if linked:
        link_distributions(path, *linked)
    pip = subprocess.run([str(path / "bin" / "python"), "-I", "-m", "pip", "install", "-q",
                          "--disable-pip-version-check", *packages],
                         capture_output=True, text=True, env=isolated_env(path), cwd=path)
    assert pip.returncode == 0, pip.stderr[-3000:]
    return path


def linked_venv(path: Path, *distributions: str) -> Path:
    """A venv without system site-packages (and without pip) that sees only `distributions`
    and what they require, linked from this interpreter's own installation through a path
    file: what `pip install` would give it, in a second instead of a minute of unpacking."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    return link_distributions(path, *distributions)


def link_distributions(path: Path, *distributions: str) -> Path:
    """`distributions` and what they require, from this interpreter's installation, seen by the venv at `path`
    (and by pip there: their metadata comes along) through a path file."""
    linked = path / "linked"
    linked.mkdir()
    todo, seen = list(distributions), set()
    while todo:
        dist = metadata.distribution(todo.pop())
        if dist.metadata["Name"].lower() in seen:
            continue
        seen.add(dist.metadata["Name"].lower())
        # what it requires here: an extra's, or another Python's (pytest's `tomli; python_version < "3.11"`), is not
        todo += [req.name for req in map(Requirement, dist.requires or [])
                 if req.marker is None or req.marker.evaluate({"extra": ""})]
        for top in {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith(("..", "__pycache__"))}:
            if not (linked / top).exists():
                (linked / top).symlink_to(Path(dist.locate_file(top)))
    (site,) = path.glob("lib/python*/site-packages")
    (site / "linked.pth").write_text(f"{linked}\n")
    return path


def run_in(venv: Path, args: List[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, env=isolated_env(venv), capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def one_thread():
    """torch on one thread, as a CPU run's child has it (two spin-waiting threads on a loaded 2-core
    machine make a round's time, and so the budget's last round, erratic: test_sdc, test_levels_load_memory)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
