"""`rocmcheck matrix` and `rocmcheck diff` over saved reports: grouping, classification,
exit codes, file outputs, and one-line errors for input that is not a usable report."""
from __future__ import annotations

import itertools
import json
import re
import shutil
import subprocess
import sys
from fnmatch import fnmatch
from html.parser import HTMLParser
from pathlib import Path
from typing import Dict, Optional

import pytest

from rocmcheck.cli import main
from rocmcheck.engine.options import SPEED_TOLERANCE_PCT
from rocmcheck.outputs.diff import classify, compare
from rocmcheck.outputs.storage import report_json
from rocmcheck.records import SCHEMA, SCHEMA_VERSION, Report

GFX1100 = {"device": {"name": "cuda:0", "arch": "gfx1100"}, "host": {"system": "Linux"},
           "device_facts": {"backend": "rocm", "rocm": "6.4.1", "torch": "2.9.0"}}
CPU = {"device": {"name": "cpu"}, "host": {"system": "Linux"}, "device_facts": {"backend": "cpu", "torch": "2.13.0"}}


RUN_IDS = itertools.count(1)
DEFAULT = f"{SPEED_TOLERANCE_PCT:g}"  # the default speed tolerance, as the diff prints it


def report(statuses: Dict[str, str], fingerprint: Optional[dict] = None, **verdict_extra) -> dict:
    """A report of its own run (a fresh run id: `matrix` counts one run's files once)."""
    verdicts = [{"probe": v.split("[")[0], "variant": v, "status": s, "message": f"{s} message",
                 **verdict_extra.get(v, {})} for v, s in statuses.items()]
    return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "run": {"id": f"r{next(RUN_IDS)}"},
            "fingerprint": fingerprint or CPU, "verdicts": verdicts}


def save(path: Path, data: dict) -> str:
    path.write_text(report_json(Report.from_dict(data)))
    return str(path)


# --- diff --------------------------------------------------------------------------------------


@pytest.mark.parametrize("base, current, kind", [
    ("pass", "fail", "regression"), ("warn", "crash", "regression"), ("skip", "hang", "regression"),
    (None, "error", "regression"),  # a new variant that fails: nothing excuses it
    ("fail", "pass", "fix"), ("hang", "warn", "fix"),
    ("fail", "crash", "changed"), ("pass", "warn", "changed"), ("pass", "skip", "changed"),
    ("crash", "skip", "changed"),
    ("fail", "fail", "same"), (None, "pass", "new"),
])
def test_classify(base, current, kind) -> None:
    assert classify(base, current) == kind


def test_diff_lists_every_kind_and_exits_1_on_a_regression(tmp_path: Path, capsys) -> None:
    base = save(tmp_path / "base.json", report({"a": "pass", "b": "fail", "c": "pass", "d": "pass", "gone": "pass"}))
    cur = save(tmp_path / "cur.json", report({"a": "crash", "b": "pass", "c": "warn", "d": "pass", "new": "skip"}))
    assert main(["diff", base, cur, "--json", str(tmp_path / "diff.json")]) == 1
    out = capsys.readouterr().out
    for line in ("REGRESSION  a  *pass  *crash", "FIX  *b  *fail  *pass", "CHANGED  *c  *pass  *warn",
                 "NEW  *new  *-  *skip", "MISSING  *gone  *pass  *-"):
        assert any(fnmatch(printed, line + "*") for printed in out.splitlines()), line
    assert "1 regression, 1 fix, 1 changed, 1 new, 1 missing, 1 unchanged" in out
    data = json.loads((tmp_path / "diff.json").read_text())
    assert [c["variant"] for c in data["regression"]] == ["a"] and data["unchanged"] == 1


def test_diff_without_regressions_exits_0_and_notes_machines_and_partial_runs(tmp_path: Path, capsys) -> None:
    base = save(tmp_path / "base.json", report({"a": "fail", "b": "pass"}, GFX1100))
    partial = report({"a": "pass", "b": "pass"})
    partial["run"].update(partial=True, interrupted="c")
    assert main(["diff", base, save(tmp_path / "cur.json", partial)]) == 0
    out = capsys.readouterr().out
    assert "different machines" in out and "is partial (interrupted during c)" in out
    assert "0 regressions, 1 fix" in out


def test_diff_reads_a_journal_cut_off_mid_line(tmp_path: Path, capsys) -> None:
    """A run killed half-way leaves a journal whose last line is torn; diff still works."""
    header = {"record": "header", "schema": SCHEMA, "schema_version": SCHEMA_VERSION, "run": {"id": "j"},
              "fingerprint": CPU}
    lines = [json.dumps(header), json.dumps({"record": "started", "variant": "a"}),
             json.dumps({"record": "verdict", "verdict": {"probe": "a", "variant": "a", "status": "hang"}}),
             json.dumps({"record": "started", "variant": "b"}), '{"record": "verd']
    (tmp_path / "run.jsonl").write_text("\n".join(lines))
    base = save(tmp_path / "base.json", report({"a": "pass", "b": "pass"}))
    assert main(["diff", base, str(tmp_path / "run.jsonl")]) == 1
    out = capsys.readouterr().out
    assert "REGRESSION" in out and "is partial (interrupted during b)" in out and "1 missing" in out


def test_compare_takes_the_worst_of_a_repeated_variant() -> None:
    twice = report({"a": "pass"})
    twice["verdicts"].append({"probe": "a", "variant": "a", "status": "crash"})
    result = compare(Report.from_dict(report({"a": "pass"})), Report.from_dict(twice), speed_tolerance_pct=45)
    assert [c.kind for c in result.changes] == ["regression"]


def speed(figures: Dict[str, float], index: Optional[int] = 0, model: str = "GPU-A") -> dict:
    """A verdict's extra fields: speed figures (one sample each) measured on GPU `index` (None: the CPU)."""
    device = {"name": "cpu"} if index is None else {"name": f"cuda:{index}", "index": index, "model": model}
    return {"device": device, "measurements": {"speed": {name: {"unit": "GB/s", "samples": [value]}
                                                         for name, value in figures.items()}}}


def two_gpus(*figures: Dict[str, float], model: str = "GPU-A") -> dict:
    """A pcie-link run on GPUs 0 and 1 (a verdict each), with their figures."""
    data = report({"pcie-link": "skip"})
    data["verdicts"] = [{**data["verdicts"][0], **speed(f, i, model)} for i, f in enumerate(figures)]
    return data


def test_a_speed_figure_slower_beyond_the_tolerance_fails_the_diff_naming_it_with_both_values(tmp_path, capsys):
    """Matched by (variant, GPU index, figure name): GPU 1's 60 is judged against GPU 1's baseline."""
    base = save(tmp_path / "base.json", two_gpus({"h2d-pinned": 100, "d2h-pinned": 50}, {"h2d-pinned": 60}))
    cur = save(tmp_path / "cur.json", two_gpus({"h2d-pinned": 60, "d2h-pinned": 40}, {"h2d-pinned": 60}))
    assert main(["diff", base, cur, "--json", str(tmp_path / "diff.json")]) == 1
    out = capsys.readouterr().out.splitlines()
    assert "0 regressions, 0 fixes, 0 changed, 0 new, 0 missing, 1 unchanged" in out  # the statuses
    assert [line for line in out if line.startswith("SPEED")] == [
        "SPEED REGRESSION pcie-link GPU 0 h2d-pinned: 100 -> 60 GB/s, best sample 100 -> 60 (67% slower)"]
    assert out[-1] == f"speed: compared 3 figures present in both runs; 1 regression beyond {DEFAULT}% slower"
    data = json.loads((tmp_path / "diff.json").read_text())["speed"]
    assert data["regressions"] == [{"variant": "pcie-link", "gpu": 0, "figure": "h2d-pinned", "unit": "GB/s",
                                    "baseline": 100.0, "current": 60.0, "baseline_best": 100.0, "current_best": 60.0,
                                    "slower_pct": pytest.approx(200 / 3), "regression": True, "host_slower_pct": None}]
    assert data["compared"] == 3 and data["tolerance_pct"] == SPEED_TOLERANCE_PCT and data["note"] == out[-1]
    assert main(["diff", base, cur, "--speed-tolerance", "70"]) == 0  # 67% is within 70
    assert capsys.readouterr().out.endswith("0 regressions beyond 70% slower\n")


def test_the_tolerance_is_pytest_benchmarks_percentage_of_time_and_a_figure_exactly_at_it_passes():
    base = Report.from_dict(two_gpus({"copy": 100.0}))
    for now, slower in ((80.0, False), (100 / 1.45, False), (68.9, True), (0.0, True)):
        result = compare(base, Report.from_dict(two_gpus({"copy": now})), speed_tolerance_pct=45)
        assert [c.figure for c in result.speed.regressions] == (["copy"] if slower else []), now
        assert result.failed is slower


def test_the_fastest_samples_are_judged_so_a_run_slowed_in_some_samples_only_is_no_regression():
    """A shared machine slows some samples of a run, never its fastest by much; a slower GPU, all of them."""
    def run(samples):
        data = report({"speed": "pass"})
        data["verdicts"][0].update(device={"index": 0, "model": "m"},
                                   measurements={"speed": {"matmul-fp32": {"unit": "TFLOPS", "samples": samples}}})
        return Report.from_dict(data)

    base = run([0.11, 0.112, 0.111, 0.113, 0.11])
    noisy = compare(base, run([0.041, 0.11, 0.026, 0.111, 0.042]), speed_tolerance_pct=45).speed  # median 0.042
    assert noisy.regressions == [] and noisy.changes[0].current == 0.042
    slow = compare(base, run([0.05, 0.052, 0.051, 0.05, 0.05]), speed_tolerance_pct=45).speed
    assert [c.text() for c in slow.regressions] == [
        "speed GPU 0 matmul-fp32: 0.111 -> 0.05 TFLOPS, best sample 0.113 -> 0.052 (2.2x slower)"]


def test_beside_the_host_a_figure_is_judged_against_the_hosts_same_work_timed_with_it():
    """A simulated GPU's work is the host's: a busier host slows the figure and its host samples alike
    (no regression, however much), while a device path twice as slow doubles the figure alone."""
    def run(samples, host_samples=None):
        data = report({"pcie-link": "skip"})
        figure = {"unit": "GB/s", "samples": samples, **({"host_samples": host_samples} if host_samples else {})}
        data["verdicts"][0].update(device={"index": 0, "model": "simulated GPU"},
                                   measurements={"speed": {"h2d-strided": figure}})
        return Report.from_dict(data)

    def judged(current):
        return compare(base, current, speed_tolerance_pct=50).speed.changes[0]

    device, host = [7.0, 7.278, 6.9], [4.0, 4.1, 3.9]
    base = run(device, host)
    busier = judged(run([x * 0.576 for x in device], [x * 0.576 for x in host]))  # both sides 74% slower
    assert not busier.regression and abs(busier.slower_pct) < 1
    assert busier.host_slower_pct == pytest.approx(73.6, abs=0.1)
    assert busier.text().endswith("best sample 7.278 -> 4.192 (0% slower beside the host's same work, "
                                  "itself 74% slower)")
    slowed = judged(run([x / 2 for x in device], host))  # the device path twice as slow, the host as before
    assert slowed.regression and slowed.slower_pct == pytest.approx(100) and slowed.host_slower_pct == 0
    hidden = judged(run([x / 2 * 1.46 for x in device], [x * 1.46 for x in host]))  # 2x beside a faster host
    assert hidden.regression and hidden.slower_pct == pytest.approx(100) and hidden.host_slower_pct < 0
    assert hidden.current_best > hidden.baseline_best / 1.5  # alone, within the tolerance
    # faster alone, 75% slower beside a host twice as fast: a regression still. A baseline from a busier host makes
    # a real slowdown read faster alone (a CI run: h2d-strided under simgpu-slow-copy:2, "itself 18% faster"), so
    # the figure alone rules nothing out
    faster_alone = judged(run([8.0, 8.3, 7.9], [8.0, 8.2, 7.8]))
    assert faster_alone.regression and faster_alone.slower_pct == pytest.approx(75, abs=1)
    # each sample beside the host's own moment, not the fastest beside the fastest: a CI run read h2d-strided
    # under simgpu-slow-copy:2 49% slower by its fastest sample over the host's fastest and 96% by the median of
    # the pairs. Here one device sample was fast beside an ordinary host sample: two pairs 2x, one 1.4x
    lucky = judged(run([x / 2 for x in device[:2]] + [6.9 / 1.4], host))
    assert lucky.regression and lucky.slower_pct == pytest.approx(100, abs=1) and lucky.host_slower_pct == 0
    assert 0.4 < lucky.baseline_best / lucky.current_best - 1 < 0.5  # the fastest over the fastest: 48% slower
    older = judged(run([3.8, 4.194, 3.7]))  # a report without the host's samples: the fastest samples alone
    assert older.regression and older.host_slower_pct is None and older.text().endswith("(74% slower)")


@pytest.mark.parametrize("baseline, current, line", [
    (two_gpus({"copy": 100}, model="GPU-A"), two_gpus({"copy": 10}, model="GPU-B"),
     "speed: compared 0 of the 1 figure present in both runs (not compared: 1 on another GPU model, GPU-A -> GPU-B); "
     f"0 regressions beyond {DEFAULT}% slower"),
    (report({"pcie-link": "skip"}), two_gpus({"copy": 10, "other": 1}),
     "speed: the baseline has no speed figures (this run has 2): none compared"),
    (two_gpus({"copy": 10}), report({"pcie-link": "skip"}),
     "speed: this run has no speed figures (the baseline has 1): none compared"),
    (report({"pcie-link": "skip"}, **{"pcie-link": speed({"copy": 100}, None)}), two_gpus({"copy": 10, "x": 1}),
     "speed: compared 0 figures present in both runs, 1 only in the baseline, 2 only in this run; "
     f"0 regressions beyond {DEFAULT}% slower"),
], ids=["another-gpu-model", "baseline-without-figures", "run-without-figures", "cpu-against-gpu"])
def test_what_was_not_compared_is_said_in_one_line_and_fails_nothing(tmp_path, capsys, baseline, current, line):
    assert main(["diff", save(tmp_path / "b.json", baseline), save(tmp_path / "c.json", current)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == line


def test_runs_without_speed_figures_say_nothing_of_speed(tmp_path, capsys):
    base, cur = save(tmp_path / "b.json", report({"a": "pass"})), save(tmp_path / "c.json", report({"a": "pass"}))
    assert main(["diff", base, cur, "--json", str(tmp_path / "d.json")]) == 0
    assert "speed:" not in capsys.readouterr().out
    assert json.loads((tmp_path / "d.json").read_text())["speed"]["note"] == ""


@pytest.mark.parametrize("value, why", [("0", "must be a finite positive number, not 0"),
                                        ("-5", "must be a finite positive number, not -5"),
                                        ("inf", "must be a finite positive number, not inf"),
                                        ("fast", "'fast' is not a number")])
def test_a_bad_speed_tolerance_is_a_one_line_usage_error(tmp_path, capsys, value, why):
    base = save(tmp_path / "b.json", report({"a": "pass"}))
    assert main(["diff", base, base, "--speed-tolerance", value]) == 2
    assert capsys.readouterr().err.splitlines() == [f"rocmcheck: error: argument --speed-tolerance: {why}"]


# --- matrix ------------------------------------------------------------------------------------


def test_matrix_groups_identical_fingerprints_and_the_worst_status_wins(tmp_path: Path, capsys) -> None:
    issue = {"id": "gfx-zeros", "title": "silent zeros on copies", "workaround": "update ROCm", "links": ["https://x"]}
    files = [save(tmp_path / "m1.json", report({"copy[a]": "pass", "copy[b]": "pass"}, GFX1100)),
             save(tmp_path / "m2.json", report({"copy[a]": "fail", "copy[b]": "pass"}, GFX1100,
                                              **{"copy[a]": {"known_issues": [issue]}})),
             save(tmp_path / "m3.json", report({"copy[a]": "pass", "only-cpu": "skip"}))]
    md, js = tmp_path / "m.md", tmp_path / "m.json"
    assert main(["matrix", *files, files[0], "--md", str(md), "--json", str(js)]) == 0  # a repeated file counts once
    out = capsys.readouterr().out
    header = out.splitlines()[:5]
    assert header[0].split()[2:] == ["gfx1100", "cpu"] and "(2 reports)" in header[4] and "(1 report)" in header[4]
    table = out.split("\n\n")[0].splitlines()
    rows = {line.split()[0]: line.split()[1:] for line in table if line.startswith(("copy", "only-"))}
    assert rows == {"copy[a]": ["FAIL", "1/2*", "PASS"], "copy[b]": ["PASS", "-"], "only-cpu": ["-", "SKIP"]}
    assert "copy[a] on gfx1100 / rocm 6.4.1 / torch 2.9.0 / Linux:" in out and "workaround: update ROCm" in out
    data = json.loads(js.read_text())
    assert [m["reports"] for m in data["machines"]] == [files[:2], files[2:]]
    assert data["rows"][0]["cells"][0] == {"status": "fail", "counts": {"pass": 1, "fail": 1}, "known_issues": [issue],
                                           "unfit_issues": [],
                                           "details": [{"status": "fail", "message": "fail message", "evidence": {}}]}
    text = md.read_text()
    assert "| `copy[a]` " in text and "gfx1100<br>rocm 6.4.1<br>torch 2.9.0<br>Linux<br>(2 reports)" in text
    assert "## Known issues (*)" in text


def test_matrix_counts_a_run_once_groups_a_probes_rows_and_says_where_it_wrote(tmp_path: Path, capsys) -> None:
    """Issue 21, section 8: the bug report's JSON twin beside its run was a second run (`FAIL 2/2` for
    one failing run); rows followed the first report's order, so a probe's variants were split
    (a multi-GPU run interleaves them); `--html` wrote silently."""
    runs = tmp_path / "runs"
    runs.mkdir()
    save(runs / "node-a.json", report({"copy[a]": "fail", "numerics[x]": "pass", "copy[b]": "pass"}, GFX1100))
    save(runs / "node-b.json", report({"copy[a]": "pass", "numerics[x]": "pass", "copy[b]": "pass"}, GFX1100))
    assert main(["report", "--from", str(runs / "node-a.json"), "-o", str(runs / "bug.md")]) == 0
    capsys.readouterr()
    page = tmp_path / "fleet.html"
    assert main(["matrix", str(runs), "--html", str(page)]) == 0
    out = capsys.readouterr().out
    rows = [line.split()[:2] for line in out.split("\n\n")[0].splitlines()[-3:]]
    assert rows == [["copy[a]", "FAIL"], ["copy[b]", "PASS"], ["numerics[x]", "PASS"]], out
    assert "FAIL 1/2" in out and "(2 reports)" in out and "3 variants, 1 machine, 2 reports" in out
    assert out.splitlines()[-1] == f"wrote {page}" and page.read_text().startswith("<!DOCTYPE html>")


def test_matrix_matches_known_issues_from_a_users_data_file(tmp_path: Path, monkeypatch, capsys) -> None:
    entries = {"issues": [{"id": "mine", "probe": "copy", "status": ["crash"], "arch": ["gfx11*"],
                           "title": "our driver crash", "workaround": "pin the driver"}]}
    (tmp_path / "issues.json").write_text(json.dumps(entries))
    monkeypatch.setenv("ROCMCHECK_KNOWN_ISSUES", str(tmp_path / "issues.json"))
    files = [save(tmp_path / "gpu.json", report({"copy": "crash"}, GFX1100)),
             save(tmp_path / "cpu.json", report({"copy": "crash"}))]  # arch does not match: no issue
    assert main(["matrix", *files]) == 0
    out = capsys.readouterr().out
    assert "CRASH*" in out and "copy on gfx1100" in out and "our driver crash" in out and "copy on cpu" not in out


# --- the HTML page ------------------------------------------------------------------------------

GFX942 = {"device": {"name": "cuda:0", "arch": "gfx942"}, "host": {"system": "Linux"},
          "device_facts": {"backend": "rocm", "rocm": "6.4.1", "torch": "2.9.0"}}
EVIL = "<script>document.title='owned'</script> & <b>bold</b>"


def html_fixture(tmp_path: Path) -> Dict[str, Path]:
    """Four reports on three machines; one message and one stack try to inject markup."""
    issue = {"id": "gfx-zeros", "title": "silent zeros on copies", "workaround": "export HSA_ENABLE_SDMA=0",
             "links": ["https://github.com/ROCm/hip/issues/3874"]}
    files = [save(tmp_path / "m1.json", report({"copy[a]": "pass", "copy[b]": "pass", "evil": "pass"}, GFX1100)),
             save(tmp_path / "m2.json", report(
                 {"copy[a]": "fail", "copy[b]": "hang", "evil": "crash"}, GFX1100,
                 **{"copy[a]": {"known_issues": [issue]},
                    "evil": {"message": EVIL,
                             "evidence": {"exit": "SIGSEGV", "stack": "frame 1\n<img src=x onerror=alert(1)>"}}})),
             save(tmp_path / "m3.json", report({"copy[a]": "pass", "only-cpu": "skip", "evil": "warn"})),
             save(tmp_path / "m4.json", report({"copy[a]": "error", "copy[b]": "pass"}, GFX942))]
    paths = {"html": tmp_path / "m.html", "md": tmp_path / "m.md", "json": tmp_path / "m.json"}
    assert main(["matrix", *files, *(f"--{kind}={path}" for kind, path in paths.items())]) == 0
    return paths


class Cells(HTMLParser):
    """(variant, column label) -> the cell's summary text and status class, from the page."""

    def __init__(self, labels):
        super().__init__()
        self.labels, self.cells, self.current, self.tags = labels, {}, None, []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        attrs = dict(attrs)
        if tag == "td" and "data-variant" in attrs:
            self.current = (attrs["data-variant"], self.labels[int(attrs["data-column"])])
            self.cells[self.current] = ["", attrs["class"].split()[1]]

    def handle_endtag(self, tag):
        if tag in ("td", "summary"):
            self.current = None

    def handle_data(self, data):
        if self.current and (self.tags[-1] in ("summary", "td")):
            self.cells[self.current][0] += data.strip()


def test_html_page_shows_the_markdowns_cells_grouped_expandable_and_escaped(tmp_path: Path, capsys) -> None:
    paths = html_fixture(tmp_path)
    capsys.readouterr()
    matrix = json.loads(paths["json"].read_text())
    labels = [m["label"] for m in matrix["machines"]]
    page = paths["html"].read_text()
    parser = Cells(labels)
    parser.feed(page)

    md_rows = [line.split("|")[1:-1] for line in paths["md"].read_text().splitlines() if line.startswith("| `")]
    md = {(row[0].strip().strip("`"), labels[i]): text.strip() for row in md_rows for i, text in enumerate(row[1:])}
    html = {key: text for key, (text, _) in parser.cells.items()}
    assert html == md and len(md) == 4 * 3  # the same cells, the same texts
    assert html[("copy[a]", labels[0])] == "FAIL 1/2*" and html[("evil", labels[0])] == "CRASH 1/2"
    for (variant, label), (text, status_class) in parser.cells.items():
        assert status_class == ("missing" if text == "-" else "s-" + text.split()[0].rstrip("*").lower())

    # columns grouped: arch, then backend, then torch; gfx1100 and gfx942 side by side; the CPU last
    assert page.index(">gfx1100</th>") < page.index(">gfx942</th>") < page.index(">cpu</th>")
    assert page.count(">rocm 6.4.1</th>") == 2 and page.count(">torch 2.9.0</th>") == 2
    # bad cells open to message, evidence and workaround; good rows can be hidden
    assert "<summary>FAIL 1/2*</summary>" in page and "workaround: export HSA_ENABLE_SDMA=0" in page
    assert page.count('<tr class="bad">') == 3 and page.count('<tr class="good">') == 1
    assert 'id="only-bad"' in page and "#only-bad:checked ~ table tr.good { display: none; }" in page
    # untrusted text is escaped, and the page loads nothing
    assert "<script" not in page and "<img" not in page and "<b>bold" not in page
    assert "&lt;script&gt;document.title=&#x27;owned&#x27;&lt;/script&gt; &amp; &lt;b&gt;bold&lt;/b&gt;" in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert not re.search(r'(src|href)="(?!https://github\.com/)', page) and "default-src 'none'" in page


@pytest.mark.children
def test_html_page_in_a_real_headless_browser(tmp_path: Path, capsys) -> None:
    browsers = ("chromium", "chromium-browser", "google-chrome")
    browser = next((shutil.which(b) for b in browsers if shutil.which(b)), None)
    if browser is None:
        pytest.skip("no headless browser installed (apt-get install chromium)")
    page = html_fixture(tmp_path)["html"]
    capsys.readouterr()
    flags = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run",
             f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120).stdout
    assert "<title>rocmcheck matrix</title>" in dom  # the title the injected script would have changed
    assert dom.count("<tr class=") == 4 and dom.count("<details>") == 5 and "<script" not in dom
    shot = tmp_path / "matrix.png"  # kept as the test's artifact
    subprocess.run([*flags, f"--screenshot={shot}", "--window-size=1400,900", page.as_uri()],
                   capture_output=True, timeout=120)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


# --- bad input: one line, exit 2, and never torch ----------------------------------------------


BAD_INPUTS = {
    "other-major": json.dumps({"schema": SCHEMA, "schema_version": "2.0", "verdicts": []}),
    "truncated": report_json(Report.from_dict(report({"a": "pass"})))[:40],
    "empty": "",
    "not-json": "hello, world",
    "foreign-json": json.dumps([1, 2, 3]),
    "bad-verdict": json.dumps({"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "verdicts": [{"status": "meh"}]}),
}


@pytest.mark.parametrize("command", ["diff", "matrix"])
@pytest.mark.parametrize("name", list(BAD_INPUTS))
def test_bad_input_is_a_one_line_error_with_exit_2(tmp_path: Path, capsys, command, name) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(BAD_INPUTS[name])
    good = save(tmp_path / "good.json", report({"a": "pass"}))
    assert main([command, good, str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rocmcheck: error: ") and err.count("\n") == 1 and "bad.json" in err


def test_missing_file_is_a_usage_error(tmp_path: Path, capsys) -> None:
    assert main(["diff", str(tmp_path / "nope.json"), str(tmp_path / "nope.json")]) == 2
    assert "cannot read" in capsys.readouterr().err


@pytest.mark.children
def test_matrix_and_diff_never_import_torch(tmp_path: Path) -> None:
    a = save(tmp_path / "a.json", report({"a": "pass"}))
    b = save(tmp_path / "b.json", report({"a": "fail"}))
    code = ("import sys; from rocmcheck.cli import main; "
            f"codes = main(['matrix', {a!r}, {b!r}]), main(['diff', {a!r}, {b!r}]); "
            "assert 'torch' not in sys.modules, 'torch imported'; print(codes)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("(0, 1)")


def test_verdict_fields_of_a_foreign_type_are_dropped_by_the_loader_not_a_crash(tmp_path, capsys) -> None:
    data = report({"transfer[to]": "fail"})
    data["verdicts"][0].update(duration_s="slow", message=["not", "text"], evidence={"stack": 3, "exit": "SIGSEGV"})
    code = main(["matrix", save(tmp_path / "foreign.json", data), "--md", str(tmp_path / "m.md")])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "transfer[to]" in out.out and "FAIL" in out.out
    from rocmcheck.outputs.storage import load_report

    (verdict,) = load_report(tmp_path / "foreign.json").verdicts
    assert verdict.duration_s == 0.0 and verdict.message == ""  # the defaults
    assert verdict.evidence == {"exit": "SIGSEGV"}
