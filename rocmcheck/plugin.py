"""PYTEST_DONT_REWRITE
The pytest plugin: `pytest --rocm-matrix[=DIR]` runs every probe variant as a test item.

Registered through the `pytest11` entry point as `rocmcheck`: `-p no:rocmcheck` turns
it off, `-p rocmcheck` loads it under --disable-plugin-autoload (never also list
`rocmcheck.plugin` in `pytest_plugins`: that registers it twice). Without
--rocm-matrix it only declares its options and markers: no items, no runner, no torch.

With it, a `rocmcheck` collector joins the session's collection, so each variant is
an item `rocmcheck::<variant id>` that -k, -m (`rocm_probe`, `rocm_gate`, `rocm_gpu`)
and --deselect select like any test. Items run one at a time through one isolated
Runner per session (started when the first item needs it; its children do all GPU
work). Under xdist the items carry `xdist_group("rocmcheck")` and need a --dist mode
that keeps a group on one worker, so probes on one GPU never run concurrently; a
worker keeps only its journal and sends its report to the controller, which merges
the workers' reports (where the grouping failed and probes ran on two workers) and
writes the run's one JSON and Markdown file and prints the matrix.
"""
from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Tuple

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

import pytest

if TYPE_CHECKING:
    from .engine.options import RunOptions
    from .engine.runner import Runner
    from .model import Variant, Verdict
    from .outputs.storage import Output
    from .records import Report

GROUP = "rocmcheck"
XDIST_GROUP = "rocmcheck"
SERIAL_DISTS = ("loadgroup", "loadscope", "loadfile")  # modes that keep all rocmcheck items on one worker
WORKER_REPORT = "rocmcheck_report"
WORKER_FILES = "rocmcheck_files"
WORKER_LOCK = "rocmcheck_lock"  # workerinput key: the controller's lock file that keeps the probes serial
MARKERS = (
    "rocm_probe: a rocmcheck probe variant (added by --rocm-matrix)",
    "rocm_gate: a rocmcheck probe variant that is part of the gate",
    "rocm_gpu: a rocmcheck probe variant that needs a GPU (skipped on the CPU)",
)

MATRIX_HELP = ("run every rocmcheck probe variant as a test item; write the matrix (JSON + Markdown) to DIR "
               "(default reports/). Write --rocm-matrix=DIR: a bare `--rocm-matrix DIR` also takes DIR")
HTML_HELP = "with --rocm-matrix: also write the run's matrix as one self-contained HTML page to FILE"
SHARED = ("device", "timeout", "first_use_timeout", "isolation", "probes_path", "gate_only", "baseline",
          "inject", "level", "duration", "speed_tolerance")  # rocmcheck.engine.options

KEY = pytest.StashKey["MatrixPlugin"]()


class RocmcheckWarning(UserWarning):
    """A probe variant ended `warn`: it worked, but a known risk is present."""


def pytest_addoption(parser: pytest.Parser) -> None:
    from .engine.options import add_to_pytest

    group = parser.getgroup(GROUP, "rocmcheck: GPU probes as test items")
    group.addoption("--rocm-matrix", dest="rocm_matrix", nargs="?", const="reports", default=None,
                    metavar="DIR", help=MATRIX_HELP)
    add_to_pytest(group, parser, *SHARED)
    # the named outputs' options, spelled here: reading them from `outputs.formats` would import the
    # renderers into every pytest run (test_inert_without_the_flag); one missing here fails `read_settings`
    group.addoption("--rocm-html", dest="rocm_output_html", default=None, metavar="FILE", help=HTML_HELP)


def run_outputs() -> List["Output"]:
    """The run's own files (JSON, Markdown), named after its id under the --rocm-matrix folder."""
    from .outputs.formats import offered

    return [o for o in offered("pytest") if o.default_name]


def named_outputs() -> List["Output"]:
    """The outputs the plugin offers that are written only where named (`--rocm-html FILE`): of the
    session's whole matrix, so written once at its end; the others are the run's own files, under
    the --rocm-matrix folder."""
    from .outputs.formats import offered

    return [o for o in offered("pytest") if o.default_name is None]


def pytest_configure(config: pytest.Config) -> None:
    for line in MARKERS:
        config.addinivalue_line("markers", line)
    if config.getoption("rocm_matrix") is None:
        return
    from .errors import UsageError

    try:
        plugin = MatrixPlugin(config, read_settings(config))
    except UsageError as exc:
        raise pytest.UsageError(f"rocmcheck: {exc}") from None
    config.stash[KEY] = plugin
    config.pluginmanager.register(plugin, "rocmcheck-matrix")
    if plugin.distributed:
        config.pluginmanager.register(XdistHooks(plugin), "rocmcheck-xdist")


def pytest_unconfigure(config: pytest.Config) -> None:
    plugin = config.stash.get(KEY, None)
    if plugin is not None:
        plugin.close()
        del config.stash[KEY]


# --- settings: command line over ini file, each error naming where the value came from --------


@dataclass(frozen=True)
class Settings:
    """What --rocm-matrix runs with: the run's options, and what only the plugin does with its
    report (judge it against a baseline, write an HTML page)."""

    options: "RunOptions"
    baseline: Optional[Path] = None
    named: Dict[str, Path] = field(default_factory=dict)  # output -> the file its --rocm- option named
    speed_tolerance_pct: float = 0.0  # against the baseline (read_settings gives the option's value or its default)


def read_settings(config: pytest.Config) -> Settings:
    """Every setting, checked now (the run's in `RunOptions.build`): a bad value is a usage error
    before any probe runs. Paths on the command line are relative to where pytest was started,
    those of the ini file to its folder."""
    from .engine.options import OPTIONS, SPEED_TOLERANCE_PCT, Given, RunOptions

    here = config.invocation_params.dir
    given = {name: config.getoption(f"rocm_{name}") for name in SHARED}
    if given["probes_path"]:
        given["probes_path"] = [str(here / p) for p in given["probes_path"]]
    ini = {name: config.getini(f"rocm_{name}") for name in SHARED if OPTIONS[name].ini}
    out_dir = here / config.getoption("rocm_matrix")
    named = {o.name: here / config.getoption(f"rocm_output_{o.name}") for o in named_outputs()
             if config.getoption(f"rocm_output_{o.name}")}
    checked = Given(given, named="--rocm-{dashed}", ini=ini)
    options = RunOptions.build(checked, folders={"--rocm-matrix": out_dir},
                               files={f"--rocm-{o.flag[2:]}": named.get(o.name) for o in named_outputs()},
                               command="pytest", out_dir=out_dir)
    ini_dir = config.inipath.parent if config.inipath else config.rootpath
    baseline = here / given["baseline"] if given["baseline"] else (ini_dir / ini["baseline"] if ini["baseline"]
                                                                   else None)
    tolerance = checked.value("speed_tolerance")
    return Settings(options, baseline, named, SPEED_TOLERANCE_PCT if tolerance is None else tolerance)


# --- items --------------------------------------------------------------------------------


class ProbeCollector(pytest.Collector):
    """The session-level `rocmcheck` node holding one item per selected probe variant."""

    def collect(self) -> List[pytest.Item]:
        plugin = self.config.stash[KEY]
        return [ProbeItem.from_parent(self, name=v.id, variant=v) for v in plugin.variants]


class ProbeItem(pytest.Item):
    """One probe variant; its verdict decides the outcome and rides in user_properties."""

    def __init__(self, *, variant: "Variant", **kwargs: Any):
        super().__init__(**kwargs)
        self.variant = variant
        self.add_marker("rocm_probe")
        if variant.in_gate():
            self.add_marker("rocm_gate")
        if variant.spec.requires.gpu or variant.spec.requires.gpus:
            self.add_marker("rocm_gpu")
        if self.config.pluginmanager.hasplugin("xdist"):
            self.add_marker(pytest.mark.xdist_group(XDIST_GROUP))

    def runtest(self) -> None:
        plugin = self.config.stash[KEY]
        verdict = plugin.run(self.variant)
        self.user_properties.extend(verdict_properties(verdict))
        plugin.judge(verdict)

    def reportinfo(self) -> Tuple[Path, Optional[int], str]:
        """The probe function's file and line, so skips and junitxml point at the probe."""
        from .registry import module_file

        line = self.variant.spec.func.__code__.co_firstlineno - 1
        return Path(module_file(self.variant.spec) or self.path), line, f"rocmcheck {self.variant.id}"


def verdict_properties(verdict: "Verdict") -> List[Tuple[str, str]]:
    """JSON-able properties: they survive xdist and land in --junitxml as <property>."""
    from .outputs.storage import dumps

    return [("rocmcheck_status", verdict.status.value), ("rocmcheck_verdict", dumps(verdict.to_dict()))]


def failure_text(verdict: "Verdict", baseline: Optional[str], has_baseline: bool) -> str:
    """The failure report: the verdict line, its evidence and any known workaround."""
    from .model import EVIDENCE_TAILS
    from .outputs.render import failing_line, known_issue_lines

    lines = [failing_line(verdict)]
    if has_baseline:
        lines.append(f"regression against the baseline: {baseline or 'absent'} -> {verdict.status.value}")
    ev = verdict.evidence
    if ev.get("returncode"):
        lines.append(f"exit: {ev.get('exit')}")
    lines += [f"{key}: {ev[key]}" for key in ("signatures", "faults_injected", "kill_steps", "unkillable")
              if ev.get(key)]
    if verdict.measurements:
        lines.append("measurements: " + ", ".join(f"{k}={v}" for k, v in verdict.measurements.items()))
    lines += known_issue_lines(verdict.known_issues, verdict.unfit_issues)
    for key in EVIDENCE_TAILS:
        if ev.get(key):
            lines += ["", f"--- {key} ---", str(ev[key]).rstrip()]
    return "\n".join(lines)


# --- the session's probe run -----------------------------------------------------------------


class MatrixPlugin:
    """One pytest session's probe run: settings, the lazily started Runner, the report."""

    def __init__(self, config: pytest.Config, settings: Settings):
        from . import registry
        from .engine.selection import select

        self.config = config
        self.settings = settings
        self.is_worker = hasattr(config, "workerinput")
        self.distributed = config.getoption("dist", "no") != "no" and not config.getoption("collectonly")
        if self.distributed and config.getoption("dist") not in SERIAL_DISTS:
            raise pytest.UsageError(
                f"rocmcheck: probes share one GPU and must run one at a time, which --dist "
                f"{config.getoption('dist')} cannot promise: add --dist loadgroup (the probe items carry "
                f"xdist_group('{XDIST_GROUP}')), or use loadscope or loadfile")
        self.variants = select(registry.load_all(settings.options.probes_paths),
                               gate_only=settings.options.profile == "gate", level=settings.options.level)
        self.baseline: Optional["Report"] = None
        self.baseline_statuses: Dict[str, str] = {}
        if settings.baseline is not None:
            from .outputs.diff import statuses
            from .outputs.storage import load_report

            self.baseline = load_report(settings.baseline)
            self.baseline_statuses = statuses(self.baseline, str(settings.baseline))
        self.selected: Optional[List["Variant"]] = None  # the probe items left after -k, -m and --deselect
        self.runner: Optional["Runner"] = None
        self.current: Optional[str] = None  # the variant running now: named if the run is interrupted
        self.report: Optional["Report"] = None
        self.files: List[str] = []

    # collection and header

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector) -> Any:
        report = yield
        if isinstance(collector, pytest.Session) and report.passed:
            report.result.append(ProbeCollector.from_parent(collector, name="rocmcheck", nodeid="rocmcheck"))
        return report

    def pytest_report_header(self, config: pytest.Config) -> Optional[str]:
        if not self.distributed:
            return None  # the header comes after collection, once the device is resolved
        return (f"rocmcheck: {len(self.variants)} probe variants, run one at a time across xdist workers; "
                f"device {self.settings.options.device}, isolation {self.settings.options.isolation}")

    @pytest.hookimpl(tryfirst=True)  # before the terminal's, which starts the run (pytest_report_collectionfinish)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """The probe variants this session will run: what its zygote preloads for (`pytest -k device-smoke`
        imports no transformers for `hf-training`) and what an injected fault must aim at, as in `rocmcheck run`."""
        self.selected = [item.variant for item in session.items if isinstance(item, ProbeItem)]

    def pytest_report_collectionfinish(self, config: pytest.Config, items: List[pytest.Item]) -> Optional[str]:
        if self.is_worker:
            return None
        count = sum(isinstance(item, ProbeItem) for item in items)
        from .wording import counted

        if not count:
            return "rocmcheck: no probe variant selected"
        if config.getoption("collectonly"):
            return (f"rocmcheck: {counted(count, 'probe variant')} (device {self.settings.options.device}, "
                    "not resolved: --collect-only)")
        runner = self.start()
        dev = runner.device
        arch = f", arch {dev.arch}" if dev.arch else ""
        return (f"rocmcheck: device {dev.name} (backend {dev.backend}{arch}), {counted(count, 'probe variant')}, "
                f"isolation {runner.isolation.mode}, profile {runner.opts.profile}")

    # running

    def start(self) -> "Runner":
        """The session's Runner, started on first use: launcher up, device resolved, journal open."""
        if self.runner is not None:
            return self.runner
        from .engine.runner import Runner
        from .errors import TorchMissing, UsageError

        # an xdist worker writes only its journal: the controller writes the run's files from the merged
        # report, so a run split over two workers is still one run file, not two fragments
        runner = Runner(self.settings.options, outputs=[] if self.is_worker else run_outputs())
        try:
            runner.start(self.variants if self.selected is None else self.selected)
        except UsageError as exc:
            runner.close_launcher()
            raise pytest.UsageError(f"rocmcheck: {exc}") from None
        except TorchMissing as exc:  # could not assess: exit 2, no verdict per probe
            runner.close_launcher()
            pytest.exit(f"rocmcheck: {exc}", returncode=2)
        self.runner = runner
        return runner

    def run(self, variant: "Variant") -> "Verdict":
        from .errors import interrupts_taken

        # Ctrl-C ends the session (pytest's own KeyboardInterrupt) with the partial report, even in
        # a session that inherited SIGINT ignored; SIGTERM is left as the session has it
        with self.serial(), interrupts_taken(sigterm=False):
            runner = self.start()
            self.current = variant.id
            verdict = runner.run_one(variant)
            self.current = None
        return verdict

    @contextlib.contextmanager
    def serial(self) -> Iterator[None]:
        """Under xdist, one probe at a time across every worker of this test run.

        `--dist loadgroup` should already keep the probe items on one worker, but with
        pytest 9.2 and pytest-xdist 3.8 the grouping silently stops working
        (pytest-dev/pytest-xdist#1386); a lock file shared by the run's workers keeps the
        probes serial whatever the scheduler does. The controller names it (in a folder of
        its own, removed at its end: no lock outlives the run). POSIX; elsewhere the grouping alone.
        """
        lock_path = self.config.workerinput.get(WORKER_LOCK) if self.is_worker else None  # type: ignore[attr-defined]
        if lock_path is None or fcntl is None:
            yield
            return
        with open(lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def judge(self, verdict: "Verdict") -> None:
        """Map the verdict to the item's outcome; with a baseline only regressions fail: a status
        that got bad, or a speed figure slower beyond the tolerance (whatever the status: the
        pcie-link probe measures its copies, then skips on a host without a link to read)."""
        from .model import Status
        from .outputs.diff import classify, compare_speed
        from .outputs.render import failing_line

        status = verdict.status
        if self.baseline is not None:
            slower = compare_speed(self.baseline.verdicts, [verdict], self.settings.speed_tolerance_pct).regressions
            if slower:
                pytest.fail("\n".join([failing_line(verdict),
                                        *(f"speed regression against the baseline, beyond "
                                          f"{self.settings.speed_tolerance_pct:g}% slower: {c.text()}"
                                          for c in slower)]), pytrace=False)
        if status is Status.SKIP:
            pytest.skip(verdict.message)
        base = self.baseline_statuses.get(verdict.variant)
        if status.is_bad:
            if self.baseline is not None and classify(base, status.value) != "regression":
                pytest.xfail(f"{status.value} now, {base} in the baseline: not a regression")
            pytest.fail(failure_text(verdict, base, self.baseline is not None), pytrace=False)
        if status is Status.WARN:
            warnings.warn(RocmcheckWarning(f"{verdict.variant}: {verdict.message}"))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: Any) -> Any:
        """A skip is reported at the probe's location, not at the plugin's pytest.skip call."""
        report = yield
        if isinstance(item, ProbeItem) and report.skipped and isinstance(report.longrepr, tuple):
            path, line, _ = item.location
            report.longrepr = (path, (line or 0) + 1, report.longrepr[2])
        return report

    # the end

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.runner is None:
            return
        paths = self.runner.paths()
        from .records import BETWEEN

        between = BETWEEN if exitstatus == pytest.ExitCode.INTERRUPTED else None
        interrupted = self.current or between
        self.report = self.runner.finish(interrupted=interrupted)
        self.runner = None
        self.files = [str(path) for kind, path in sorted(paths.items(), key=lambda item: item[0] == "jsonl")
                      if kind not in self.report.run.unwritten]
        if self.is_worker:
            from .outputs.storage import report_json

            session.config.workeroutput[WORKER_REPORT] = report_json(self.report)  # type: ignore[attr-defined]
            session.config.workeroutput[WORKER_FILES] = self.files  # type: ignore[attr-defined]

    def receive(self, report: "Report", files: List[str]) -> None:
        """The report of an xdist worker that ran probes; several are merged into one matrix."""
        if self.report is None:
            self.report, self.files = report, files
            return
        from .knowledge import known_issues

        mine, theirs = self.report.run, report.run
        # a known issue's scope is judged again over the whole run: its control may have run on another worker
        merged = replace(self.report, verdicts=known_issues.judged(self.report.verdicts + report.verdicts,
                                                                   self.report.fingerprint))
        merged.run = replace(mine, counts=merged.counts(), partial=mine.partial or theirs.partial,
                             interrupted=mine.interrupted or theirs.interrupted,
                             unwritten={**mine.unwritten, **theirs.unwritten},
                             notes=[*mine.notes, *theirs.notes,
                                    "probes ran on more than one xdist worker, one at a time"])
        self.report = merged
        self.files = [*self.files, *files]

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.report is None or self.is_worker:
            return  # no probe ran (deselected, --collect-only), or an xdist worker: the controller prints
        from .outputs.storage import write_outputs

        # under xdist the run's own files too: the workers wrote only their journals
        outputs = [*(run_outputs() if self.distributed else []), *named_outputs()]
        out_dir = self.settings.options.out_dir
        write_outputs(self.report, outputs, out_dir, self.settings.named)

        run = self.report.run

        def written(some: List["Output"]) -> List[str]:
            paths = (o.path(out_dir, run.id, self.settings.named) for o in some if o.name not in run.unwritten)
            return [str(path) for path in paths if path is not None]

        # the run's files, the journals, then the files named on the command line
        self.files = [*written(run_outputs() if self.distributed else []), *self.files, *written(named_outputs())]
        terminalreporter.section("rocmcheck matrix")
        for line in self.summary_lines(self.report):
            terminalreporter.write_line(line)

    def summary_lines(self, report: "Report") -> List[str]:
        from .outputs.render import known_issue_lines
        from .outputs.runtext import terminal_matrix
        from .outputs.storage import write_problem

        lines = terminal_matrix(report).splitlines()
        lines += [f"note: {note}" for note in report.run.notes]
        for v in report.verdicts:
            if v.known_issues or v.unfit_issues:
                lines += [f"{v.status.value.upper()} {v.variant}:", *known_issue_lines(v.known_issues, v.unfit_issues)]
        if self.baseline is not None:
            from .outputs.diff import compare

            result = compare(self.baseline, report, names=(str(self.settings.baseline), "this run"),
                             speed_tolerance_pct=self.settings.speed_tolerance_pct)
            lines.append(f"against the baseline {self.settings.baseline}: {result.counts_line()}")
            lines += [f"  REGRESSION {c.variant}: {c.baseline or 'absent'} -> {c.current}" for c in result.regressions]
            lines += [f"  SPEED REGRESSION {c.text()}" for c in result.speed.regressions]
            lines += [f"  {line}" for line in [result.speed.line()] if line]
        lines.append("wrote " + ", ".join(self.files))
        if report.run.unwritten:  # the outcome of the items stands without them
            lines.append(write_problem(report.run.unwritten))
        return lines

    def close(self) -> None:
        """Safety net for an aborted session: no zygote outlives pytest."""
        if self.runner is not None:
            self.runner.close_launcher()
            self.runner = None


class XdistHooks:
    """Registered only on an xdist controller, so xdist's own hooks exist."""

    def __init__(self, plugin: MatrixPlugin):
        self.plugin = plugin
        self.lock_dir: Optional[str] = None

    def pytest_configure_node(self, node: Any) -> None:
        """Each worker gets the path of the run's one lock file (`MatrixPlugin.serial`)."""
        if self.lock_dir is None:
            self.lock_dir = tempfile.mkdtemp(prefix="rocmcheck-xdist-")
        node.workerinput[WORKER_LOCK] = str(Path(self.lock_dir) / "probes.lock")

    def pytest_unconfigure(self) -> None:
        if self.lock_dir is not None:
            shutil.rmtree(self.lock_dir, ignore_errors=True)
            self.lock_dir = None

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        output = getattr(node, "workeroutput", None) or {}
        if WORKER_REPORT in output:
            from .records import Report

            report = Report.from_dict(json.loads(output[WORKER_REPORT]))
            self.plugin.receive(report, list(output.get(WORKER_FILES) or []))
