"""`rocmcheck report`: the bug-report attachment an upstream maintainer needs, and nothing a
user would regret pasting in public.

Writes a Markdown file that fits a GitHub issue body (trimmed by priority, saying what
was cut), its JSON twin with everything, and a standalone reproducer per failing probe
variant. A run's text was redacted as the run recorded it (`safetext.clean`); here every
string goes through `redact.Redactor` again, now with the environment allow-list (a report
may come from anywhere), which counts what it finds for the report's summary. `write` is the
one way out: every file's text (the Markdown, the JSON twin, each reproducer with the probe
source it embeds) passes the same redactor there, so no section, present or future, can skip it.
"""
from __future__ import annotations

import json
import re
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple, cast

from .. import __version__, registry
from ..errors import UsageError
from ..host.fingerprint import summary
from ..jsonsafe import jsonsafe
from ..knowledge import known_issues
from ..knowledge.explain import explain
from ..model import EVIDENCE_TAILS, Status, is_bad, is_notable
from ..records import Report
from ..redact import REDACTED, Redactor
from ..wording import counted
from . import repro
from .matrix import devices_tested, run_table
from .render import counts_line, doctor_markdown, on_gpu, short, unfit_issue_lines
from .storage import report_json, write_atomic

GITHUB_BODY_LIMIT = 65536


@dataclass
class BugReport:
    markdown: str
    data: Dict[str, Any]  # the JSON twin: the redacted run plus a "bug_report" section
    reproducers: List[repro.Reproducer]
    redactor: Redactor  # the one every file passes as `write` writes it


@dataclass(frozen=True)
class Trim:
    """How much of the report the Markdown shows; each step of TRIM_STEPS shows less."""

    evidence_chars: int = 4000
    matrix_rows: str = "all"  # "all", "not passing" or "none"
    code_per_module: Optional[int] = None  # reproducer scripts shown per probe module; None: all
    helpers: bool = True  # reproducer code with rocmcheck's own helper modules (else the probe's module only)
    doctor: bool = True
    max_verdicts: Optional[int] = None


TRIM_STEPS = (
    ("rocmcheck's own helper modules inside the reproducer code (the .py files beside this report embed them)",
     {"helpers": False}),
    ("evidence tails beyond 1,500 characters", {"evidence_chars": 1500}),
    ("passing and skipped rows of the matrix", {"matrix_rows": "not passing"}),
    ("reproducer code beyond one variant per probe module", {"code_per_module": 1}),
    ("reproducer code (the .py files beside this report have it)", {"code_per_module": 0}),
    ("doctor details", {"doctor": False}),
    ("evidence tails beyond 300 characters", {"evidence_chars": 300}),
    ("failing verdicts beyond the first 20", {"max_verdicts": 20}),
    ("the matrix", {"matrix_rows": "none"}),
)
NAMES_LISTED = 50  # variant names in one sentence before "and N more"


# --- building -----------------------------------------------------------------------------


DRIVER_FACTS = ("nvidia_driver", "amdgpu_driver", "hip_runtime", "miopen_runtime", "cudnn", "nccl", "hipblaslt")


def _reproducers(report: Dict[str, Any], redactor: Redactor, stem: str, probes_paths: Iterable[str]) -> tuple:
    """(reproducers, {variant: why none}) for every failing verdict of `report` (already redacted)."""
    made: List[repro.Reproducer] = []
    missing: Dict[str, str] = {}
    machine = summary(report["fingerprint"])
    registry.load_all(probes_paths)
    for verdict in report["verdicts"]:
        if not is_bad(verdict["status"]):
            continue
        spec = registry.get(verdict.get("probe") or "")
        if spec is None:
            missing[verdict["variant"]] = f"probe '{verdict.get('probe')}' is not known here (see --probes-path)"
            continue
        try:
            built = repro.build(spec, verdict, report, machine)
        except repro.ReproError as exc:
            missing[verdict["variant"]] = str(exc)
            continue
        name = f"{stem}-{built.filename}"
        while name in {r.filename for r in made}:
            name = name[:-3] + "-1.py"
        made.append(replace(built, filename=name, script=redactor.text(built.script), brief=redactor.text(built.brief)))
    return made, missing


def build(report: Report, anonymize: bool = False, stem: str = "rocmcheck-report",
          source: str = "", probes_paths: Iterable[str] = (), log: Optional[Tuple[str, str]] = None) -> BugReport:
    """The redacted Markdown, JSON twin and reproducers for a loaded or fresh report;
    reproducers need the probes' sources (built-in, or from `probes_paths`). `log`: (name, text)
    of the user's own log, whose recognised excerpt (`rocmcheck explain`) goes in too."""
    dropped = len(report.malformed)  # records of the source that were no verdict
    # the issues recorded with each verdict, judged again by the current data over the whole run
    report = replace(report, verdicts=known_issues.judged(report.verdicts, report.fingerprint))
    data = jsonsafe(report.to_dict())  # also bounds the nesting depth of a foreign report
    run = {**data["run"], "counts": report.counts()}
    attached = {**data, "run": run}
    redactor = Redactor(anonymize)
    already = json.dumps(attached).count(REDACTED)  # a fresh run is redacted as it is recorded
    if log is not None:
        attached["log"] = {"source": log[0], **explain(log[1], None, redactor)}
    clean = redactor.data(attached)
    scripts, no_repro = _reproducers(clean, redactor, stem, probes_paths)
    notes = [f"{counted(dropped, 'malformed verdict record')} in the source {'was' if dropped == 1 else 'were'} "
             "left out."] if dropped else []
    context = {"redaction": redactor.summary(already), "twin": f"{stem}.json", "source": redactor.text(source),
               "notes": notes}
    markdown, cuts = _fit(clean, scripts, no_repro, context, redactor)
    twin = {**clean, "bug_report": {
        "generated": time.time(), "generator": f"rocmcheck {__version__}", "source": context["source"],
        "redactions": redactor.counts(), "redacted_as_recorded": already, "redaction_summary": context["redaction"],
        "environment_variables_left_out": len(redactor.omitted_env),
        "anonymized": anonymize, "markdown_cut": cuts, "notes": notes,
        "reproducers": [{"variant": r.variant, "file": r.filename, "script": r.script} for r in scripts],
        "no_reproducer": no_repro}}
    return BugReport(markdown, twin, scripts, redactor)


def write(bug: BugReport, md_path: Path) -> List[Path]:
    """Write the Markdown, its JSON twin and the reproducers beside it, each redacted here, as
    it leaves: the twin as data (a secret's replacement keeps it JSON), the rest as text."""
    leaving = bug.redactor
    json_path = md_path.with_suffix(".json")
    files = [(md_path, leaving.text(bug.markdown)),
             (json_path, report_json(Report.from_dict(leaving.data(bug.data))))]
    files += [(md_path.parent / r.filename, leaving.text(r.script)) for r in bug.reproducers]
    for path, text in files:
        try:
            write_atomic(path, text)
        except OSError as exc:
            raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
    return [path for path, _ in files]


# --- Markdown -----------------------------------------------------------------------------


def _fit(report: Dict[str, Any], scripts: List[repro.Reproducer], no_repro: Dict[str, str],
         context: Dict[str, Any], redactor: Redactor) -> tuple:
    """The Markdown, redacted once more as a whole, within GITHUB_BODY_LIMIT, cutting by
    priority; returns (text, cuts). A candidate is redacted once it fits (redaction may lengthen
    it, so that one is measured again): a report of thousands of verdicts was redacted whole at
    every step (2.5 of its 8 s)."""
    trim, cuts, steps = Trim(), cast(List[str], []), iter(TRIM_STEPS)
    parsed = Report.from_dict(report)  # once: each step builds the whole Markdown again
    while True:
        text = markdown(report, parsed, scripts, no_repro, context, trim, cuts)
        if len(text) <= GITHUB_BODY_LIMIT:
            text = redactor.text(text)  # it may grow: measured again
        step = next(steps, None)
        if len(text) <= GITHUB_BODY_LIMIT or step is None:
            break
        note, change = step
        trim, cuts = replace(trim, **change), [*cuts, note]
    if len(text) > GITHUB_BODY_LIMIT:
        text = redactor.text(text)  # the last, cut below (redacting a redacted text again changes nothing)
        cuts.append("everything past the GitHub issue limit")
        tail = f"\n\n**[cut at {GITHUB_BODY_LIMIT:,} characters: see the JSON twin `{context['twin']}`]**\n"
        text = text[:GITHUB_BODY_LIMIT - len(tail)] + tail
    return text, cuts


def markdown(report: Dict[str, Any], parsed: Report, scripts: List[repro.Reproducer], no_repro: Dict[str, str],
             context: Dict[str, Any], trim: Trim = Trim(), cuts: Iterable[str] = ()) -> str:
    """The Markdown of `report` (as data) and `parsed` (the same, as a Report), cut as `trim` says."""
    fp = report["fingerprint"]
    bad = sorted((v for v in report["verdicts"] if is_bad(v["status"])), key=lambda v: -Status(v["status"]).severity)
    out = [f"# rocmcheck report: {summary(fp)}", "", _summary_paragraph(report, parsed, bad, context), "",
           f"> {context['redaction']}"]
    cuts = list(cuts)
    if cuts:
        out.append(f"> Trimmed to fit a GitHub issue ({GITHUB_BODY_LIMIT:,} characters): left out "
                   f"{'; '.join(cuts)}. The JSON twin `{context['twin']}` has everything.")
    out += ["", "## Environment", "", _fingerprint_table(report, parsed), ""]
    by_variant = {r.variant: r for r in scripts}
    shown = bad if trim.max_verdicts is None else bad[:trim.max_verdicts]
    code_shown: Counter = Counter()
    tails_shown: Dict[Tuple[str, str], str] = {}  # (evidence key, its text) -> the variant that showed it first
    for v in shown:
        script = by_variant.get(v["variant"])
        show_code = script is not None and (trim.code_per_module is None
                                            or code_shown[script.module] < trim.code_per_module)
        code_shown[script.module if script else ""] += show_code
        out += _verdict_section(v, script, show_code, no_repro.get(v["variant"]), trim.evidence_chars, trim.helpers,
                                tails_shown)
    if len(shown) < len(bad):
        out += ["", "Also not passing: " + _names([_named(v) for v in bad[len(shown):]])]
    warns = [v for v in report["verdicts"] if v["status"] == "warn"]
    if warns:
        out += ["", "## Warnings", ""] + [f"- `{v['variant']}`: {short(v.get('message', ''), 300)}"
                                          for v in warns[:NAMES_LISTED]]
        out += [f"- and {len(warns) - NAMES_LISTED} more (see the matrix)"] if len(warns) > NAMES_LISTED else []
    out += _known_issues_section(bad + warns)
    if "log" in report:
        out += _log_section(report["log"], trim.evidence_chars)
    out += _matrix_section(report, parsed, trim.matrix_rows)
    if "doctor" in report:
        out += ["", "## Doctor", ""]
        out += _doctor(report["doctor"]) if trim.doctor else ["(cut: see the JSON twin)"]
    return "\n".join(out) + "\n"


def _matrix_section(report: Dict[str, Any], parsed: Report, rows_kept: str) -> List[str]:
    """The run's table (a column per GPU), its passing and skipped rows cut where `rows_kept` says."""
    variants = list(dict.fromkeys(v["variant"] for v in report["verdicts"]))
    if rows_kept == "none":
        return ["", f"Full matrix ({len(variants)} variants): cut, see the JSON twin."]
    rows = variants if rows_kept == "all" else \
        list(dict.fromkeys(v["variant"] for v in report["verdicts"] if is_notable(v["status"])))
    cut = "" if rows_kept == "all" else f", {len(variants) - len(rows)} passing or skipped rows cut"
    return ["", f"<details><summary>Full matrix ({len(variants)} variants{cut})</summary>", "",
            run_table(parsed, markdown=True, variants=rows) if rows else "(no verdicts)", "",
            "</details>"]


def _named(verdict: Dict[str, Any]) -> str:
    """`` `device-smoke` on simgpu:1 (simgpu, 0000:11:00.0) (fail) ``: a not-passing variant in a sentence."""
    return f"`{verdict['variant']}`{on_gpu(_mapping(verdict.get('device')))} ({verdict['status']})"


def _names(names: List[str]) -> str:
    more = len(names) - NAMES_LISTED
    return ", ".join(names[:NAMES_LISTED]) + (f" and {more} more" if more > 0 else "")


def _summary_paragraph(report: Dict[str, Any], parsed: Report, bad: List[Dict[str, Any]],
                       context: Dict[str, Any]) -> str:
    run = report.get("run") or {}
    when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(run["started"])) + " UTC" \
        if isinstance(run.get("started"), (int, float)) else "an unknown time"
    variants = len({v["variant"] for v in report["verdicts"]})
    across = f" ({counted(len(report['verdicts']), 'verdict')} across its devices)" \
        if variants != len(report["verdicts"]) else ""
    text = (f"rocmcheck {(report.get('tool') or {}).get('version', '?')} ran {counted(variants, 'probe variant')}"
            f"{across} on **{summary(report['fingerprint'])}** ({_devices(parsed)}, profile "
            f"{run.get('profile', '?')}, isolation {run.get('isolation', '?')}, run `{run.get('id', '?')}`, {when}): "
            f"{counts_line(parsed)}.")
    if bad:
        listed = ", ".join(_named(v) for v in bad[:5])
        text += f" Not passing: {listed}{' and more' if len(bad) > 5 else ''}."
        matched = {str(i.get("id")) for v in bad for i in v["known_issues"]}
        text += f" {counted(len(matched), 'known issue')} {'matches' if len(matched) == 1 else 'match'}." \
            if matched else " No known issue matches."
    else:
        text += " Every variant passed or was skipped."
    if run.get("inject"):
        text += f" Faults were injected (`{run['inject']}`): a self-test, not a real GPU fault."
    if context["source"]:
        text += f" Built from `{context['source']}`."
    return " ".join([text, *context["notes"]])


def _devices(parsed: Report) -> str:
    """`devices simgpu:0 (simgpu, 0000:10:00.0), simgpu:1 (…)`, or `device cpu`."""
    tested = devices_tested(parsed)
    return f"device{'s' if len(tested) > 1 else ''} {', '.join(tested)}"


def _fingerprint_table(report: Dict[str, Any], parsed: Report) -> str:
    from tabulate import tabulate

    fp = report["fingerprint"]
    host, dev = _mapping(fp.get("host")), _mapping(fp.get("device_facts"))
    gpus = "; ".join(f"{g.get('index')}: {g.get('name')} ({g.get('arch')}, "
                     f"{_gib(g.get('memory_bytes'))})" for g in _list(dev.get("devices")) if isinstance(g, dict))
    rows = [
        ("rocmcheck", (report.get("tool") or {}).get("version")),
        ("torch", dev.get("torch")),
        ("backend", " ".join(f"{k} {dev[k]}" for k in ("rocm", "hip", "cuda") if dev.get(k)) or dev.get("backend")),
        ("GPUs", gpus or f"none visible ({dev.get('torch_error') or 'CPU run'})"),
        ("device under test", ", ".join(devices_tested(parsed))),
        ("wheel arch list", " ".join(map(str, _list(dev.get("arch_list")))) or None),
        ("driver / runtime", ", ".join(f"{k} {dev[k]}" for k in DRIVER_FACTS if dev.get(k)) or None),
        ("OS", dev.get("os_collect_env") or host.get("os")),
        ("kernel", f"{host.get('kernel')}{' (WSL)' if host.get('wsl') else ''}" if host.get("kernel") else None),
        ("Python", host.get("python")),
        ("GPU kernel options", " ".join(map(str, _list(host.get("kernel_cmdline")))) or None),
        ("GPU environment", ", ".join(f"`{k}={v}`" for k, v in _mapping(host.get("env")).items()) or None),
        ("packages", ", ".join(f"{k} {v}" for k, v in _mapping(host.get("packages")).items()) or None),
    ]
    return tabulate([[k, _cell(v)] for k, v in rows if v not in (None, "")], headers=["fact", "value"],
                    tablefmt="github")


def _verdict_section(v: Dict[str, Any], script: Optional[repro.Reproducer], show_code: bool,
                     why_none: Optional[str], evidence_chars: int, helpers: bool = True,
                     tails_shown: Optional[Dict[Tuple[str, str], str]] = None) -> List[str]:
    """One failure's section. A long evidence text (a hang's stacks, a traceback) that an earlier
    section showed word for word is named, not repeated: ten variants hung in one place are one
    stack to read (`tails_shown` collects them across the sections)."""
    tails_shown = {} if tails_shown is None else tails_shown
    ev = _mapping(v.get("evidence"))
    out = ["", f"## {v['status'].upper()} `{v['variant']}`{on_gpu(_mapping(v.get('device')))}", "",
           short(v.get("message", ""), 1000), ""]
    exited = None if ev.get("signal") or ev.get("returncode") == 0 else ev.get("exit")
    facts = [("exit", exited), ("signal", ev.get("signal")),
             ("signatures", ", ".join(map(str, ev.get("signatures") or [])) or None),
             ("faults injected", ", ".join(map(str, ev.get("faults_injected") or [])) or None),
             ("parameters", _pairs(v.get("params"))), ("variant environment", _pairs(v.get("env"))),
             ("measurements", _pairs(v.get("measurements"))), ("duration", f"{v.get('duration_s', 0)} s")]
    out += [f"- {k}: {short(_cell(val), 400)}" for k, val in facts if val]
    issues = v.get("known_issues") or []
    out += [f"- known issue: {issue.get('title', issue.get('id'))} (`{issue.get('id')}`)" for issue in issues]
    out += unfit_issue_lines(v.get("unfit_issues") or [], bool(issues))
    for key in EVIDENCE_TAILS:
        if ev.get(key):
            tail = _tail(str(ev[key]), evidence_chars)
            first = tails_shown.setdefault((key, tail), v["variant"])
            out += (_details(key.replace("_", " "), tail) if first == v["variant"]
                    else ["", f"{key.replace('_', ' ').capitalize()}: the same as `{first}`'s above."])
    if script and show_code:
        out += _details(f"standalone reproducer <code>{script.filename}</code>"
                        + ("" if helpers else " (its rocmcheck helper modules: in the file)"),
                        script.script if helpers else script.brief, "python")
    elif script:
        out += ["", f"Standalone reproducer: `{script.filename}` (beside this report)."]
    elif why_none:
        out += ["", f"No standalone reproducer: {why_none}."]
    return out


def _known_issues_section(verdicts: List[Dict[str, Any]]) -> List[str]:
    issues: Dict[str, Dict[str, Any]] = {}
    for v in verdicts:
        for issue in v.get("known_issues") or []:
            entry = issues.setdefault(str(issue.get("id")), {**issue, "variants": []})
            entry["variants"].append(v["variant"])
    if not issues:
        return []
    out = ["", "## Known issues", ""]
    for iid, issue in issues.items():
        out.append(f"- **{issue.get('title', iid)}** (`{iid}`), matched by "
                   + _names([f"`{name}`" for name in issue["variants"]]))
        if issue.get("workaround"):
            out.append(f"  - workaround: {issue['workaround']}")
        out += [f"  - {link}" for link in issue.get("links") or []]
    return out


def _log_section(log: Dict[str, Any], chars: int) -> List[str]:
    """The user's log as `rocmcheck explain` read it: the recognised lines and the known issues."""
    out = ["", f"## The log `{log.get('source')}` ({log.get('lines', 0):,} lines)", ""]
    quoted = list(dict.fromkeys(f"line {ln['line']}: {ln['text']}"
                                for sig in _list(log.get("signatures")) for ln in _list(sig.get("lines"))))
    if not quoted:
        return out + ["Nothing in it was recognised as a known GPU runtime or library failure."]
    out += _details(f"Recognised lines ({len(quoted)})", _tail("\n".join(quoted), chars), "text")
    for issue in _list(log.get("known_issues")):
        tag = "matches" if issue.get("confident") else "possible"
        out.append(f"- {tag}: **{issue.get('title', issue.get('id'))}** (`{issue.get('id')}`)"
                   + (f": {issue['workaround']}" if issue.get("workaround") else ""))
    return out


def _doctor(results: Any) -> List[str]:
    """`rocmcheck doctor`'s results as tables and snippets; any other shape as nested bullets."""
    return doctor_markdown(results) or _generic(results)


def _generic(value: Any, depth: int = 0) -> List[str]:
    """Any JSON value as nested Markdown bullets (the doctor section's shape is its own)."""
    pad = "  " * depth
    if isinstance(value, dict):
        lines = []
        for key, item in value.items():
            if isinstance(item, (dict, list)) and item and depth < 6:
                lines += [f"{pad}- **{_cell(key)}**:", *_generic(item, depth + 1)]
            else:
                lines.append(f"{pad}- **{_cell(key)}**: {short(_cell(item), 500)}")
        return lines
    if isinstance(value, list) and depth < 6:
        return [line for item in value for line in
                (_generic(item, depth) if isinstance(item, dict) else [f"{pad}- {short(_cell(item), 500)}"])]
    return [f"{pad}- {short(_cell(value), 500)}"]


def _details(summary_html: str, body: str, lang: str = "") -> List[str]:
    fence = "`" * max(3, max((len(run) for run in re.findall(r"`+", body)), default=0) + 1)
    return ["", f"<details><summary>{summary_html}</summary>", "", f"{fence}{lang}", body.rstrip(), fence, "",
            "</details>"]


def _tail(text: str, limit: int) -> str:
    """The last `limit` characters, starting at a line boundary, the cut marked."""
    text = text.strip()
    if len(text) <= limit:
        return text
    kept = text[-limit:]
    kept = kept[kept.find("\n") + 1:] if "\n" in kept else kept
    return f"[... {len(text) - len(kept):,} characters cut; the JSON twin has them ...]\n{kept}"


def _mapping(value: Any) -> Dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> List[Any]:
    return value if isinstance(value, list) else []


def _pairs(value: Any) -> Optional[str]:
    return ", ".join(f"{k}={_cell(v)}" for k, v in value.items()) if isinstance(value, dict) and value else None


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _gib(value: Any) -> str:
    return f"{value / 2**30:.1f} GiB" if isinstance(value, (int, float)) else "? GiB"
