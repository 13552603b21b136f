"""Text for people: the live line per verdict, which GPU a verdict is from, doctor's results.
Renders `Report`s and `Verdict`s only, so every command and the plugin share it and it imports
nothing above the engine. A run's table and Markdown are the matrix of one run (`matrix`,
`runtext`).
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from tabulate import tabulate

from ..faults import drill_split
from ..model import STATUS_ORDER, Verdict
from ..records import Report
from ..wording import counted

MESSAGE_WIDTH = 90


def short(text: str, width: int = MESSAGE_WIDTH) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


# --- which GPU ---------------------------------------------------------------------------------
# The one place that says which device a verdict is from, so that the gate's summary, the live
# line, the run's table and Markdown, the bug report and the matrix name a GPU the same way.


def gpu_parts(device: Mapping[str, Any]) -> List[str]:
    """A verdict's device (`engine.devices.label`'s record) for people: the torch name, which
    holds the index, then the arch and PCI address where known (`["simgpu:1", "simgpu",
    "0000:11:00.0"]`); `["cpu"]` for the CPU; [] for a verdict that recorded none (an older report)."""
    name = device.get("name")
    if not name:
        return []
    return [str(name), *(str(device[key]) for key in ("arch", "pci_address") if device.get(key))]


def gpu_text(device: Mapping[str, Any]) -> str:
    """`simgpu:1 (simgpu, 0000:11:00.0)`, `cpu`, or "" (no device recorded)."""
    parts = gpu_parts(device)
    return f"{parts[0]} ({', '.join(parts[1:])})" if len(parts) > 1 else "".join(parts)


def on_gpu(device: Mapping[str, Any], full: bool = True) -> str:
    """` on simgpu:1 (simgpu, 0000:11:00.0)` after a variant's name (` on simgpu:1` when not
    `full`), "" for the CPU: a CPU run's lines stay as they were."""
    name = device.get("name")
    if not name or name == "cpu":
        return ""
    return f" on {gpu_text(device) if full else name}"


def device_order(device: Mapping[str, Any]) -> Tuple[bool, int, str]:
    """Sort key of devices (the columns of a table): GPUs by index, then the CPU and a verdict
    that recorded no device."""
    name = str(device.get("name") or "")
    index = device.get("index")
    return (name in ("", "cpu"), index if isinstance(index, int) else -1, name)


def verdict_line(v: Verdict) -> str:
    """`  PASS  transfer[to-float32]  0.12s  ok`, with ` on cuda:N` for a verdict from a GPU (its
    arch and PCI address too when it is bad)."""
    where = on_gpu(v.device, full=v.status.is_bad)
    return f"{v.status.value.upper():>5}  {v.variant}{where}  {v.duration_s:.2f}s  {short(v.message)}"


# --- drills ------------------------------------------------------------------------------------
# A run with a planted fault is a drill, and every output says so (issue 34): a leftover
# $ROCMCHECK_INJECT must never drain a fleet with a NO-GO that reads as real. Simulated GPUs
# (`--inject simgpu:N`) and an older torch's simulated API plant no fault: such a run is a
# simulation, said apart ("simulated"), not a drill.


def injected(report: Report) -> Tuple[List[str], List[str]]:
    """(drill, simulated): the run's planted faults and its simulations (`faults.drill_split`),
    from its `--inject` spec and from what each verdict's child says it installed, so a report
    whose run record lost the spec (a pytest run, an older report) still shows its drill."""
    spec = [part.strip() for part in report.run.inject.split(",")]
    installed = [str(f) for v in report.verdicts for f in v.evidence.get("faults_injected") or []]
    return drill_split([*spec, *installed])


def injection_text(drill: Sequence[str], simulated: Sequence[str] = ()) -> str:
    """`DRILL: faults injected on purpose (copy-zeros)`, or `simulated (simgpu:2), no fault
    injected`, or "" for a real run: the words every output uses."""
    if drill:
        return f"DRILL: faults injected on purpose ({', '.join(drill)})"
    return f"simulated ({', '.join(simulated)}), no fault injected" if simulated else ""


def counts_line(report: Report) -> str:
    run = report.run
    parts = [f"{run.counts[s.value]} {s.value}" for s in STATUS_ORDER if run.counts.get(s.value)]
    partial = f" (PARTIAL: interrupted {run.where_interrupted()})" if run.partial else ""
    return (", ".join(parts) or "no probes run") + partial


def failing_line(v: Verdict, width: Optional[int] = None) -> str:
    """`FAIL transfer[to-float32] on cuda:1 (gfx942, 0000:11:00.0): the message` (the message cut
    to `width`)."""
    return f"{v.status.value.upper()} {v.variant}{on_gpu(v.device)}: {short(v.message, width) if width else v.message}"


def md_escape(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def unfit_issue_lines(unfit: Iterable[Mapping[str, Any]], others_fit: bool) -> List[str]:
    """The known issues that match a failure but whose scope the run rules out (`unfit_issues`,
    from `known_issues.judged`), each with why; "none fits" first when no other one does, so the
    reader is not left with an entry whose advice would not help, nor to guess why none is shown."""
    lines = [f"  {u.get('id')} does not: {u.get('why')}" for u in unfit]
    return ["- known issue: none fits this failure", *lines] if lines and not others_fit else lines


def known_issue_lines(issues: Iterable[Mapping[str, Any]], unfit: Iterable[Mapping[str, Any]] = ()) -> List[str]:
    """A verdict's (or a matrix cell's) known issues: title, workaround, links; then the unfit ones."""
    issues = list(issues)
    lines = []
    for issue in issues:
        lines.append(f"- known issue: {issue.get('title', issue.get('id'))}")
        if issue.get("workaround"):
            lines.append(f"  workaround: {issue['workaround']}")
        lines.extend(f"  {link}" for link in issue.get("links", []))
    return lines + unfit_issue_lines(unfit, bool(issues))


# --- doctor's results (`rocmcheck.doctor`'s `Case.to_dict` shape) ---------------------------

DOCTOR_STATE_TEXT = {
    "fails": "fails: passed {rate} re-runs as it is", "flaky": "flaky: passes {rate} re-runs as it is",
    "not-reproduced": "passed {rate} re-runs as it is: not reproduced, nothing to fix",
    "unmeasured": "not measured: the budget ran out ({rate} re-runs)",
    "skipped": "does not run here (skipped): nothing to diagnose"}
DOCTOR_OUTCOME_TEXT = {"fix": "FIX", "no-fix": "no fix", "crash": "crashed", "hang": "hung", "skip": "n/a here",
                       "cut": "cut", "untried": "untried", "not-tried": "not tried"}


def _state_line(result: Mapping[str, Any]) -> str:
    if result.get("baseline_from"):  # a representative's deterministic failure stands for this one's
        return (f"fails like {result['baseline_from']}, which failed every re-run as it is (not re-run itself); "
                f"a fix must pass {result.get('required_passes')} in a row")
    line = DOCTOR_STATE_TEXT.get(str(result.get("state")), "{rate}").format(rate=result.get("pass_rate", "?"))
    if result.get("state") == "flaky":
        line += f"; a fix must pass {result.get('required_passes')} in a row"
    return line


def _candidate_note(row: Mapping[str, Any]) -> str:
    if row.get("outcome") == "untried":
        return "not tried: the budget ran out"
    if row.get("outcome") == "cut":
        return "stopped by the budget before enough runs"
    if row.get("outcome") == "not-tried":
        return str(row.get("why", ""))
    return row.get("message") or row.get("title", "")


def doctor_text(results: List[Dict[str, Any]]) -> str:
    """Doctor's results for the terminal: per variant its state, the candidates tried, the snippet."""
    if not results:
        return "doctor: nothing to diagnose: no variant failed"
    out = []
    for r in results:
        out += ["", f"{r['variant']}: {_state_line(r)} (originally {r['original']['status']}: "
                    f"{short(r['original']['message'], 100)})"]
        rows = [[DOCTOR_OUTCOME_TEXT[c["outcome"]], c["id"], f"{c['passes']}/{c['runs']}",
                 short(_candidate_note(c), 80)] for c in r["candidates"]]
        if rows:
            out.append(tabulate(rows, headers=["outcome", "candidate", "passed", "note"], tablefmt="simple"))
        elif r["state"] in ("fails", "flaky"):
            out.append("  no candidate workaround applies to this variant")
        if r["snippet"]:
            out += [f"  paste this ({r['fixes'][0]}):", *("    " + line for line in r["snippet"].splitlines())]
    fixed = sum(1 for r in results if r["fixes"])
    have = "has" if fixed == 1 else "have"
    out += ["", f"doctor: {fixed} of {counted(len(results), 'failing variant')} {have} a workaround"]
    if any(r["untried"] or r["state"] == "unmeasured" for r in results):
        out.append("doctor: some candidates were not tried for lack of budget: raise --budget, or lower --timeout "
                   "(a hanging run costs its whole timeout)")
    return "\n".join(out)


def doctor_markdown(results: Any) -> Optional[List[str]]:
    """The doctor section as Markdown; None when `results` is not doctor's shape (a foreign report)."""
    if not isinstance(results, list) or not all(isinstance(r, dict) and isinstance(r.get("variant"), str)
                                                 and isinstance(r.get("candidates"), list) for r in results):
        return None
    out: List[str] = []
    for r in results:
        original = r.get("original") if isinstance(r.get("original"), dict) else {}
        out += [f"### `{r['variant']}`: {_state_line(r)}", "",
                f"Originally {original.get('status', '?')}: {short(original.get('message', ''), 300)}", ""]
        rows = [c for c in r["candidates"] if isinstance(c, dict)]
        if rows:
            out += ["| candidate | kind | outcome | passed | note |", "|---|---|---|---|---|"]
            out += [f"| `{c.get('id')}` | {c.get('kind')} | "
                    f"{'**fix**' if c.get('outcome') == 'fix' else c.get('outcome')} | {c.get('passes')}/"
                    f"{c.get('runs')} | {md_escape(short(_candidate_note(c), 200))} |" for c in rows]
        fixes = [c for c in rows if c.get("outcome") == "fix"]
        for c in fixes[:1]:
            out += ["", f"Workaround (`{c.get('id')}`: {c.get('title')}):", "", "```", str(c.get("snippet")), "```"]
        out.append("")
    return out
