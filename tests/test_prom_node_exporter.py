"""`--prom FILE` read by the real node_exporter (issue 34): its textfile collector, started here
over a temporary folder on a loopback port, scraped over HTTP, and its answer parsed with
prometheus_client's parser.

The binary is Debian's `prometheus-node-exporter` (`.ci/run` installs it; `node_exporter` on the
PATH does too); without it the module skips. node_exporter runs with every collector off but the
textfile one, so a scrape holds its own few series (`node_textfile_scrape_error`,
`node_textfile_mtime_seconds{file}`, `promhttp_metric_handler_errors_total`) and the folder's.
What it checks beyond tests/test_prom.py: that the real collector takes the file as written
(no `node_textfile_scrape_error`), that what it serves is what the file says, that a scrape while
the gate rewrites the file never sees half of it, and that two rocmcheck files in its one folder
(a gate's and a run's) are both served: node_exporter gathers every file into one exposition and
drops a series a second file repeats, with only a line in its log (prom.py's `textfile` label).
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rocmcheck.cli import main
from rocmcheck.outputs.formats import OUTPUTS
from rocmcheck.outputs.storage import write_outputs
from rocmcheck.records import SCHEMA, SCHEMA_VERSION, Report

BINARY = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
PROM = next(o for o in OUTPUTS if o.name == "prom")
START_LIMIT_S = 15.0
GATE = ["gate", "--device", "cpu", "--probe", "device-smoke"]  # the CPU self-test, one probe: about 3 s

pytestmark = [pytest.mark.children,
              pytest.mark.skipif(BINARY is None, reason="no node_exporter: Debian's prometheus-node-exporter is not "
                                                        "installed (.ci/run installs it)")]

Series = Dict[str, List[Tuple[Dict[str, str], float]]]


def two_gpu_report(bad_on=1, copies: int = 1) -> Report:
    """device-smoke and gemm (measuring a throughput) on cuda:0 and cuda:1, device-smoke failing
    on `bad_on`; `copies` of each variant (named -0, -1, ...) make a bigger file."""
    verdicts = []
    for index in (0, 1):
        device = {"name": f"cuda:{index}", "index": index, "arch": "gfx942", "model": "AMD Instinct MI300X",
                  "pci_address": f"0000:c{index}:00.0", "uuid": f"GPU-{index}"}
        for copy in range(copies):
            suffix = f"-{copy}" if copies > 1 else ""
            verdicts.append({"probe": "device-smoke", "variant": f"device-smoke{suffix}", "duration_s": 0.25,
                             "device": device, "status": "fail" if index == bad_on else "pass", "message": "m"})
            verdicts.append({"probe": "gemm", "variant": f"gemm[bf16]{suffix}", "status": "pass", "message": "ok",
                             "duration_s": 1.5, "device": device,
                             "measurements": {"speed": {"matmul-bf16": {"unit": "TFLOPS", "samples": [60, 61.5, 70]}}}})
    return Report.from_dict({
        "schema": SCHEMA, "schema_version": SCHEMA_VERSION,
        "run": {"id": "r1", "command": "gate", "device": "cuda:0", "started": 1000.0, "finished": 1012.5},
        "fingerprint": {"device_facts": {"backend": "rocm", "torch": "2.9.1+rocm6.4"}}, "verdicts": verdicts})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def parsed(text: str) -> Series:
    """metric name -> [(labels, value)], through prometheus_client's parser."""
    found: Series = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


def ours(series: Series) -> Dict[str, set]:
    """The rocmcheck series, as sets of (sorted labels, value): comparable whatever the order."""
    return {name: {(tuple(sorted(labels.items())), value) for labels, value in samples}
            for name, samples in series.items() if name.startswith("rocmcheck_")}


class NodeExporter:
    """node_exporter with only its textfile collector, over `folder`, on 127.0.0.1."""

    def __init__(self, folder: Path, log: Path):
        self.folder = folder
        self.log = log
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/metrics"
        with open(log, "wb") as out:
            self.proc = subprocess.Popen([str(BINARY), f"--web.listen-address=127.0.0.1:{self.port}",
                                          "--collector.disable-defaults", "--collector.textfile",
                                          f"--collector.textfile.directory={folder}"],
                                         stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        limit = time.monotonic() + START_LIMIT_S
        while True:
            try:
                self.text()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > limit:
                    self.stop()
                    pytest.fail(f"node_exporter did not answer on {self.url}: {log.read_text()[-2000:]}")
                time.sleep(0.1)

    def text(self) -> str:
        with urllib.request.urlopen(self.url, timeout=5) as answer:
            return answer.read().decode()

    def scrape(self) -> Series:
        return parsed(self.text())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)

    def assert_no_error(self, series: Series) -> None:
        """node_exporter read every file (`node_textfile_scrape_error` 0) and gathered every series:
        a repeated series shows only in promhttp's error counter (of the scrapes before) and its log."""
        assert series["node_textfile_scrape_error"] == [({}, 0.0)]
        gathering = [v for labels, v in series["promhttp_metric_handler_errors_total"]
                     if labels["cause"] == "gathering"]
        assert gathering == [0.0], self.log.read_text()[-3000:]
        assert "level=error" not in self.log.read_text()


@pytest.fixture
def exporter(tmp_path) -> Iterator[NodeExporter]:
    folder = tmp_path / "textfile"
    folder.mkdir()
    node_exporter = NodeExporter(folder, tmp_path / "node_exporter.log")
    try:
        yield node_exporter
    finally:
        node_exporter.stop()


def node_status(series: Series, textfile: str = "rocmcheck.prom") -> Dict[str, float]:
    return {labels["status"]: value for labels, value in series["rocmcheck_node_status"]
            if labels.get("textfile") == textfile}


class Scraper(threading.Thread):
    """Scrapes as fast as node_exporter answers until stopped (or `limit_s`), keeping what went
    wrong: a scrape error, a node status that is not one state set to 1, a file not served."""

    def __init__(self, exporter: NodeExporter, target: Path, limit_s: float):
        super().__init__(daemon=True)
        self.exporter, self.target, self.limit_s = exporter, target, limit_s
        self.stopped = threading.Event()
        self.scrapes = 0
        self.statuses: List[str] = []
        self.problems: List[str] = []

    def run(self) -> None:
        end = time.monotonic() + self.limit_s
        while not self.stopped.is_set() and time.monotonic() < end:
            written = self.target.exists()  # before the scrape: once there, the file is never gone
            try:
                series = self.exporter.scrape()
            except Exception as exc:  # kept and asserted on by the test, not lost in the thread
                self.problems.append(f"scrape failed: {exc!r}")
                continue
            self.scrapes += 1
            if series["node_textfile_scrape_error"] != [({}, 0.0)]:
                self.problems.append(f"scrape error: {series['node_textfile_scrape_error']}")
            if not written:
                continue
            states = node_status(series) if "rocmcheck_node_status" in series else {}
            if sorted(states.values()) != [0.0, 0.0, 1.0]:
                self.problems.append(f"node status {states}")
            else:
                status = next(s for s, v in states.items() if v == 1.0)
                if not self.statuses or self.statuses[-1] != status:
                    self.statuses.append(status)

    def stop(self) -> None:
        self.stopped.set()
        self.join(timeout=10)


def gate(target: Path, out_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCMCHECK_")}
    return subprocess.run([sys.executable, "-m", "rocmcheck", *GATE, "--out-dir", str(out_dir), "--prom", str(target),
                           *extra], capture_output=True, text=True, env=env, timeout=300)


def test_node_exporter_serves_the_gates_go_then_its_drills_no_go(exporter, tmp_path):
    """The real gate writes the file twice (GO, then a drill that is NO-GO) while a scraper reads
    node_exporter all along: every scrape is whole, and each verdict is served as written."""
    target = exporter.folder / "rocmcheck.prom"
    scraper = Scraper(exporter, target, limit_s=240)
    scraper.start()
    try:
        go = gate(target, tmp_path / "reports")
        assert go.returncode == 0, go.stderr[-2000:]
        after_go = exporter.scrape()
        no_go = gate(target, tmp_path / "reports", "--inject", "copy-zeros")
        assert no_go.returncode == 1, no_go.stderr[-2000:]
        after_no_go = exporter.scrape()
    finally:
        scraper.stop()
    assert node_status(after_go) == {"GO": 1.0, "NO-GO": 0.0, "UNKNOWN": 0.0}
    assert {labels["drill"] for labels, _ in after_go["rocmcheck_node_status"]} == {"false"}
    assert node_status(after_no_go) == {"GO": 0.0, "NO-GO": 1.0, "UNKNOWN": 0.0}
    (variant, ok), = after_no_go["rocmcheck_variant_ok"]
    assert ok == 0.0 and variant == {"probe": "device-smoke", "variant": "device-smoke", "device": "cpu",
                                     "status": "fail", "drill": "true", "textfile": "rocmcheck.prom"}
    assert {labels["drill"] for name, samples in after_no_go.items() if name.startswith("rocmcheck_")
            for labels, _ in samples} == {"true"}
    (info, _), = after_no_go["rocmcheck_run_info"]
    assert info["faults_injected"] == "copy-zeros"
    assert ours(after_no_go) == ours(parsed(target.read_text()))  # served as the file says
    (mtime, when), = after_no_go["node_textfile_mtime_seconds"]
    assert mtime == {"file": str(target)} and abs(when - target.stat().st_mtime) < 1.5
    print(f"\nnode_exporter: {scraper.scrapes} scrapes during the gate's GO and NO-GO, {scraper.statuses}")
    assert scraper.scrapes >= 3 and not scraper.problems, scraper.problems[:5]
    assert scraper.statuses[-2:] == ["GO", "NO-GO"]  # no scrape saw anything but whole files
    exporter.assert_no_error(exporter.scrape())


def test_what_node_exporter_serves_is_what_the_file_says(exporter):
    """Two GPUs with speed figures, a label value with a quote, a backslash and a line feed, and
    the UNKNOWN file of a gate that could not start: each served as its file says."""
    report = two_gpu_report()
    report.verdicts[0].variant = 'odd["name"]\\with\nlines'
    target = exporter.folder / "rocmcheck.prom"
    write_outputs(report, [PROM], exporter.folder, {"prom": target})
    served = exporter.scrape()
    assert ours(served) == ours(parsed(target.read_text()))
    assert 'odd["name"]\\with\nlines' in {labels["variant"] for labels, _ in served["rocmcheck_variant_ok"]}
    assert {v for _, v in served["rocmcheck_speed_flops_per_second"]} == {61.5e12}
    exporter.assert_no_error(served)

    assert main(["gate", "--device", "simgpu:3", "--prom", str(target), "--out-dir", str(exporter.folder.parent)]) == 2
    served = exporter.scrape()
    assert node_status(served) == {"GO": 0.0, "NO-GO": 0.0, "UNKNOWN": 1.0}
    (info, _), = served["rocmcheck_run_info"]
    assert "names simulated GPUs" in info["error"] and "rocmcheck_variant_ok" not in served
    exporter.assert_no_error(exporter.scrape())


def test_a_gates_file_and_a_runs_file_share_the_folder(exporter):
    """node_exporter has one textfile folder: a gate's file (NO-GO) and a burn-in run's (GO) are
    both served, told apart by `textfile`; without it, every series of the second file that
    repeats the first's is dropped (a gathering error in node_exporter's log, no scrape error)."""
    gate_file, run_file = exporter.folder / "rocmcheck.prom", exporter.folder / "rocmcheck-burnin.prom"
    write_outputs(two_gpu_report(bad_on=1), [PROM], exporter.folder, {"prom": gate_file})
    write_outputs(two_gpu_report(bad_on=None), [PROM], exporter.folder, {"prom": run_file})
    exporter.scrape()
    served = exporter.scrape()  # the second: promhttp counts the first's gathering errors
    exporter.assert_no_error(served)
    both = ours(parsed(gate_file.read_text()))
    for name, samples in ours(parsed(run_file.read_text())).items():
        both.setdefault(name, set()).update(samples)
    assert ours(served) == both
    assert node_status(served, "rocmcheck.prom") == {"GO": 0.0, "NO-GO": 1.0, "UNKNOWN": 0.0}
    assert node_status(served, "rocmcheck-burnin.prom") == {"GO": 1.0, "NO-GO": 0.0, "UNKNOWN": 0.0}


def test_a_scrape_while_the_file_is_rewritten_never_sees_half(exporter):
    """The writer the gate uses (write_outputs: a temporary name, then a rename) replaces the file
    again and again, GO and NO-GO in turn, for at most 3 s while a scraper reads node_exporter."""
    target = exporter.folder / "rocmcheck.prom"
    reports = [two_gpu_report(bad_on=None, copies=40), two_gpu_report(bad_on=1, copies=40)]  # 480 series each
    write_outputs(reports[0], [PROM], exporter.folder, {"prom": target})
    scraper = Scraper(exporter, target, limit_s=10)
    scraper.start()
    writes, end = 0, time.monotonic() + 3.0
    try:
        while time.monotonic() < end and writes < 2000:
            write_outputs(reports[writes % 2], [PROM], exporter.folder, {"prom": target})
            writes += 1
    finally:
        scraper.stop()
    print(f"\nnode_exporter: {writes} rewrites of {target.stat().st_size} bytes, {scraper.scrapes} scrapes in 3 s")
    assert writes >= 10 and scraper.scrapes >= 10, (writes, scraper.scrapes)
    assert not scraper.problems, scraper.problems[:5]
    assert {"GO", "NO-GO"} <= set(scraper.statuses)
    assert sorted(p.name for p in exporter.folder.iterdir()) == ["rocmcheck.prom"]  # no temporary file left
    exporter.assert_no_error(exporter.scrape())
