"""Silent data corruption across a fleet (issue 33, check 4): the deterministic workload's hashes
of many machines' GPUs, compared bit for bit within the groups that must agree.

A record (`model.WorkloadHashes`, under a verdict's `measurements["sdc"]`) says what one GPU's
workload produced, and the workload version and key (arch, device name, torch, ROCm/CUDA and BLAS
library versions) under which the same bits are expected anywhere. Records are grouped by
(workload, key), and groups are never compared with each other: another workload version or
library honestly gives other bits. In a group each machine's GPU (`fingerprint.machine_identity`,
`render.gpu_text`) votes, per op, the hash its records gave; the hash of a strict majority of the
voters is taken as right and a GPU that gave another is flagged. Without a strict majority (two
machines that disagree) nothing says which is wrong: both sides are named, undecided. A GPU whose
own reports gave several hashes for one op (a node checked nightly whose answer changed one night)
is flagged, whatever the number of machines, with the reports on each side and the odd ones out
where a strict majority of its own reports agree; it does not vote. Apart from that, a group of
one machine has no peer (its GPUs are compared on the node, by the `sdc` probe itself); an op a
record left out (not deterministic there) is not compared for it. Either finding makes
`rocmcheck matrix` exit 1. Never imports torch.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from ..host.fingerprint import machine_identity, summary
from ..model import SDC_MEASUREMENTS, workload_hashes
from ..records import Report
from ..wording import counted
from .render import device_order, gpu_text, on_gpu

NEVER_COMPARED = "reports of different workload versions or keys are never compared with each other"
SHOWN = 12  # hex digits of a hash in the text; the JSON keeps it whole


@dataclass
class Gpu:
    """One machine's GPU in a group: a voter, with the hashes its records gave per op."""

    machine: str  # `fingerprint.machine_identity`
    label: str  # `fingerprint.summary`: what the matrix heads its column with
    gpu: str  # `render.gpu_text`
    order: Tuple[bool, int, str]  # `render.device_order`
    reports: List[str] = field(default_factory=list)
    hashes: Dict[str, Dict[str, List[str]]] = field(default_factory=dict)  # op -> hash -> reports that gave it

    def ref(self) -> Dict[str, Any]:
        return {"machine": self.label, "machine_id": self.machine, "gpu": self.gpu, "reports": self.reports}


GroupKey = Tuple[str, Tuple[Tuple[str, str], ...]]  # (workload, the key's items sorted)


def compare(runs: List[Tuple[str, Report]]) -> Dict[str, Any]:
    """The fleet section of the matrix (JSON-able) from (name, report) pairs, one per run:
    the groups by workload version and key, each judged; `disagree` where any GPU is flagged or
    a group cannot decide."""
    groups: Dict[GroupKey, Dict[Tuple[str, str], Gpu]] = {}
    malformed: List[str] = []
    for name, report in runs:
        machine = machine_identity(report.fingerprint)
        for verdict in report.verdicts:
            if SDC_MEASUREMENTS not in verdict.measurements:
                continue
            device = verdict.device or report.device
            record = workload_hashes(verdict)
            if record is None:
                malformed.append(f"{name} ({verdict.variant}{on_gpu(device)})")
                continue
            unit = groups.setdefault((record.workload, tuple(sorted(record.key.items()))), {}).setdefault(
                (machine, gpu_text(device)),
                Gpu(machine, summary(report.fingerprint), gpu_text(device), device_order(device)))
            if name not in unit.reports:
                unit.reports.append(name)
            for op, digest in record.hashes.items():
                if op not in record.left_out:
                    unit.hashes.setdefault(op, {}).setdefault(digest, []).append(name)
    judged = [_judge(workload, dict(key), sorted(units.values(), key=lambda u: (u.label, u.machine, u.order)))
              for (workload, key), units in sorted(groups.items())]
    notes = [f"{counted(len(malformed), 'malformed sdc record')} left out (no workload, key and hashes to read): "
             + ", ".join(malformed)] if malformed else []
    return {"never_compared": NEVER_COMPARED, "groups": judged, "notes": notes,
            "disagree": any(g["flagged"] or g["undecided"] for g in judged)}


def _judge(workload: str, key: Dict[str, str], units: List[Gpu]) -> Dict[str, Any]:
    """One group: per op, the strict majority's hash, the GPUs that gave another, the ties."""
    ops = sorted({op for u in units for op in u.hashes})
    machines = len({u.machine for u in units})
    group: Dict[str, Any] = {"workload": workload, "key": key, "machines": machines,
                             "gpus": [u.ref() for u in units], "ops": ops, "flagged": [], "undecided": []}
    if not ops:
        return {**group, "status": "no peer" if machines < 2 else "nothing compared"}
    flagged: Dict[int, Dict[str, Any]] = {}
    undecided: Dict[Tuple[Tuple[int, ...], ...], Dict[str, Any]] = {}  # the same split on several ops: one entry
    for op in ops:
        voters = [i for i, u in enumerate(units) if len(u.hashes.get(op, {})) == 1]
        votes = Counter(next(iter(units[i].hashes[op])) for i in voters)
        best, agree = votes.most_common(1)[0] if votes else ("", 0)
        majority: Optional[str] = best if machines > 1 and 2 * agree > len(voters) else None
        for i, unit in enumerate(units):
            found = unit.hashes.get(op, {})
            if len(found) > 1 or (majority is not None and found and majority not in found):
                flagged.setdefault(i, {**unit.ref(), "ops": {}})["ops"][op] = {
                    "hashes": found, "own_majority": _own_majority(found), "majority": majority, "agree": agree,
                    "voters": len(voters)}
        if machines > 1 and majority is None and len(votes) > 1:
            split = [(digest, tuple(i for i in voters if digest in units[i].hashes[op]))
                     for digest, _ in votes.most_common()]
            entry = undecided.setdefault(tuple(side for _, side in split), {"ops": [], "sides": [
                {"gpus": [units[i].ref() for i in side], "hashes": {}} for _, side in split]})
            entry["ops"].append(op)
            for (digest, _), side in zip(split, entry["sides"]):
                side["hashes"][op] = digest
    status = "disagree" if flagged else "undecided" if undecided else "agree" if machines > 1 else "no peer"
    return {**group, "status": status, "flagged": [flagged[i] for i in sorted(flagged)],
            "undecided": list(undecided.values())}


def _own_majority(found: Dict[str, List[str]]) -> Optional[str]:
    """Of the hashes one GPU's own reports gave for an op (hash -> reports), the one a strict
    majority of those reports gave: the others are its odd ones out. None for a tie (2 vs 2)."""
    if len(found) < 2:
        return None
    digest, names = max(found.items(), key=lambda item: len(item[1]))
    return digest if 2 * len(names) > sum(len(n) for n in found.values()) else None


# --- text: the same lines for the terminal, the Markdown and the HTML -----------------------------


def _where(ref: Dict[str, Any]) -> str:
    """`a.json, b.json (gfx942 / rocm 6.4 / torch 2.7.0 / Linux) on cuda:1 (gfx942, 0000:11:00.0)`."""
    return f"{', '.join(ref['reports'])} ({ref['machine']}){' on ' + ref['gpu'] if ref['gpu'] else ''}"


def _op_text(op: str, found: Dict[str, Any]) -> str:
    hashes: Dict[str, List[str]] = found["hashes"]
    if len(hashes) > 1:
        usual = found.get("own_majority")
        if usual is not None:
            odd = [(digest, names) for digest, names in hashes.items() if digest != usual]
            return (f"{op} gave {len(hashes)} hashes across its own reports: {usual[:SHOWN]} in "
                    f"{len(hashes[usual])} of {sum(len(n) for n in hashes.values())} ({', '.join(hashes[usual])}); "
                    "the odd one out: " + ", ".join(f"{digest[:SHOWN]} ({', '.join(names)})" for digest, names in odd))
        return (f"{op} gave {len(hashes)} hashes across its own reports, no strict majority of them: "
                + " vs ".join(f"{digest[:SHOWN]} ({', '.join(names)})" for digest, names in hashes.items()))
    return (f"{op} gave {next(iter(hashes))[:SHOWN]} where {found['agree']} of {found['voters']} GPUs "
            f"gave {found['majority'][:SHOWN]}")


def lines(fleet: Dict[str, Any]) -> List[Tuple[int, str]]:
    """(depth, text): 0 the heading and notes, 1 a group, 2 a finding (a GPU flagged, a tie);
    none where no report carried workload hashes."""
    groups = fleet["groups"]
    if not groups and not fleet["notes"]:
        return []
    out = [(0, f"Deterministic-workload hashes (silent data corruption): {counted(len(groups), 'group')} by "
               f"workload version and key; {fleet['never_compared']}.")]
    for group in groups:
        key = ", ".join(f"{k} {v}" for k, v in group["key"].items())
        head = (f"workload {group['workload']}, {key}: {counted(group['machines'], 'machine')}, "
                f"{counted(len(group['gpus']), 'GPU')}, {counted(len(group['ops']), 'op')}")
        said = {"no peer": "no peer to compare", "nothing compared": "nothing to compare (every op left out)",
                "agree": "all agree bit for bit", "disagree": f"{counted(len(group['flagged']), 'GPU')} flagged",
                "undecided": "they disagree and no strict majority says which is wrong"}
        out.append((1, f"{head}: {said[group['status']]}"))
        out += [(2, f"DISAGREES {_where(f)}: " + "; ".join(_op_text(op, found) for op, found in f["ops"].items()))
                for f in group["flagged"]]
        out += [(2, f"cannot decide on {', '.join(tie['ops'])}: "
                    f"{' vs '.join(str(len(side['gpus'])) for side in tie['sides'])}: "
                    + " | ".join(", ".join(map(_where, side["gpus"])) for side in tie["sides"]))
                for tie in group["undecided"]]
    return out + [(0, note) for note in fleet["notes"]]
