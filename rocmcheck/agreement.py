"""Bitwise agreement of a deterministic workload's hashes (`model.WorkloadHashes`) between
members that must agree: a node's GPUs of the same model and stack here (`node_check`, which
the runner applies once every GPU's queue is done, so `run`, `gate` and the node verdict of
`gate --json -` all read its outcome in the verdicts), a fleet's machines in `rocmcheck matrix`.

Members are comparable only when their records have the same workload version and key (arch,
device, torch, runtime, BLAS): others are never compared. Within a group, each op's hash held
by more than half of the members is right; a member holding another is named on that op. Where
no hash has a majority (two members that disagree, a tie) every member is named, unless the
exact answers decide: a member that got an exact answer wrong (`model.SDC_EXACT`) is wrong on
its own, so a member of the same split whose exact answers were all right is cleared. Two GPUs
that disagree on inexact work only, with every exact answer right, are both named, and the
verdict says that neither can be told from the other. Never imports the engine or torch.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from typing import Dict, List, Mapping, Sequence, Tuple

from .model import SDC_EXACT, Status, Verdict, WorkloadHashes, workload_hashes
from .wording import counted


@dataclass(frozen=True)
class Odd:
    """A member whose hashes differ from its group's."""

    member: str
    ops: Tuple[str, ...]  # where it holds a hash other than the majority's
    against: Tuple[str, ...]  # the members it disagrees with (the majority, or the others of a split)
    majority: bool  # True: a majority decided; False: no hash had one (a split of two, a tie)


def groups(records: Mapping[str, WorkloadHashes]) -> List[Dict[str, WorkloadHashes]]:
    """The members whose records may be compared: same workload version, same key."""
    found: Dict[Tuple[str, Tuple[Tuple[str, str], ...]], Dict[str, WorkloadHashes]] = {}
    for member, record in records.items():
        found.setdefault((record.workload, tuple(sorted(record.key.items()))), {})[member] = record
    return list(found.values())


def compared_ops(group: Mapping[str, WorkloadHashes]) -> List[str]:
    """The ops every member hashed and none left out."""
    common = set.intersection(*(set(r.hashes) for r in group.values())) if group else set()
    left = {op for r in group.values() for op in r.left_out}
    return sorted(common - left)


def odd_ones(group: Mapping[str, WorkloadHashes]) -> List[Odd]:
    """The members of one comparable group that disagree with it, by op."""
    members = sorted(group)
    against_majority: Dict[str, List[str]] = {m: [] for m in members}
    split: Dict[str, List[str]] = {m: [] for m in members}
    for op in compared_ops(group):
        held = Counter(group[m].hashes[op] for m in members)
        top, count = held.most_common(1)[0]
        if len(held) == 1:
            continue
        for m in members:
            if count * 2 > len(members):
                if group[m].hashes[op] != top:
                    against_majority[m].append(op)
            else:
                split[m].append(op)
    odd = []
    for m in members:
        if against_majority[m]:
            majority = tuple(o for o in members if not against_majority[o] and o != m)
            odd.append(Odd(m, tuple(against_majority[m]), majority, True))
        elif split[m]:
            odd.append(Odd(m, tuple(split[m]), tuple(o for o in members if o != m), False))
    return odd


def _exact(verdict: Verdict) -> Dict[str, List[str]]:
    found = verdict.measurements.get(SDC_EXACT)
    return found if isinstance(found, dict) else {}


def _names(members: Sequence[str]) -> str:
    return ", ".join(members)


def judgement(odd: Odd, group_size: int, exact: Mapping[str, Mapping[str, List[str]]]) -> str:
    """What the node check says of one named member."""
    ops = _names(odd.ops)
    if odd.majority:
        return (f"its bits differ from those of the node's other {counted(len(odd.against), 'GPU')} of this model and "
                f"stack ({_names(odd.against)}, the majority of {group_size}) on {ops}: this GPU computes wrong")
    wrong = exact.get(odd.member, {}).get("wrong") or []
    if wrong:
        return (f"its bits differ from {_names(odd.against)}'s on {ops}, and its exact answers were wrong: this GPU "
                "computes wrong")
    exact_ops = set(exact.get(odd.member, {}).get("ops") or [])
    which = "inexact work only" if not exact_ops & set(odd.ops) else "work"
    return (f"its bits differ from {_names(odd.against)}'s on {which} ({ops}), every exact answer was right and no "
            f"majority decides: either GPU may compute wrong, so both are named (a third GPU of the model, or "
            f"`rocmcheck matrix` over the fleet's reports, tells them apart)")


def node_check(verdicts: Sequence[Verdict]) -> Tuple[List[Verdict], List[str]]:
    """Compare the hashes of each variant's verdicts across the node's GPUs: the verdicts it
    changes (a named GPU's now fails, saying why) and notes for the run (what agreed, what could
    not be compared)."""
    by_variant: Dict[str, Dict[str, Verdict]] = {}
    for v in verdicts:
        if workload_hashes(v) is not None and v.device.get("name"):
            by_variant.setdefault(v.variant, {})[str(v.device["name"])] = v
    changed: List[Verdict] = []
    notes: List[str] = []
    for variant, on_gpu in by_variant.items():
        records = {m: r for m, r in ((m, workload_hashes(v)) for m, v in on_gpu.items()) if r is not None}
        if len(records) < 2:
            continue
        exact = {m: _exact(v) for m, v in on_gpu.items()}
        for group in groups(records):
            if len(group) < 2:
                notes.append(f"{variant}: {_names(list(group))} has no other GPU of its model and stack to agree with")
                continue
            odd = _cleared(odd_ones(group), exact)
            if not odd:
                notes.append(f"{variant}: {counted(len(group), 'GPU')} ({_names(sorted(group))}) agree bit for bit on "
                             f"{counted(len(compared_ops(group)), 'op')}")
            for o in odd:
                changed.append(_failed(on_gpu[o.member], judgement(o, len(group), exact),
                                       {"ops": list(o.ops), "against": list(o.against), "majority": o.majority}))
    return changed, notes


def _cleared(odd: List[Odd], exact: Mapping[str, Mapping[str, List[str]]]) -> List[Odd]:
    """Where no majority decides, the exact answers do: a member whose exact answers were all
    right is cleared when another member of the split got one wrong."""
    split = [o for o in odd if not o.majority]
    wrong = {o.member for o in split if exact.get(o.member, {}).get("wrong")}
    if not wrong or wrong == {o.member for o in split}:
        return odd
    return [o for o in odd if o.majority or o.member in wrong]


def _failed(verdict: Verdict, why: str, found: Dict[str, object]) -> Verdict:
    """The verdict of a GPU the node check named: fail, its own message kept before why."""
    message = f"{verdict.message}; across the node: {why}" if verdict.status.is_bad else f"across the node: {why}"
    status = Status.worst([verdict.status.value, Status.FAIL.value])
    return replace(verdict, status=status, message=message, measurements={**verdict.measurements, "node_check": found})
