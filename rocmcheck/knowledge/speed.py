"""Speed figures judged: against the device's published figures, and against the node's other GPUs.

A probe only measures (`ctx.measure_speed`: a `SpeedFigure` per name, in the verdict's
measurements); the runner judges here, as it attaches known issues:

- `judge_spec(verdict)`, on each verdict as it arrives: every figure of a GPU's verdict is held
  against its reference, the first row of `data/speed_spec.json` that matches the GPU's arch and
  name and the figure (each row with its source), or for host-device copies against the PCIe
  link's theoretical rate. Below a fraction of it, a passing verdict becomes `warn`, with both
  figures in its message; the figure keeps the reference (`expected`, `reference`). A GPU no row
  matches is measured and says that it has no reference; the CPU is measured and not judged.
- `judge_node(verdicts, nogo)`, once every GPU ran: a GPU whose figure is below a fraction of the
  node's median among GPUs of the same model (of the faster one, with two) is named, its verdict
  `warn`, or `fail` (NO-GO) where the platform asked for that (`--slow-gpu nogo`).

The fractions, and why:
- `TARGET_FRACTION` 0.8 of a published target (RVS gst's `target_stress`, a CVS threshold): RVS
  itself allows 7-10% below its target, over 10-30 s on its tuned shapes; the gate times a few
  samples in well under a second on square shapes through torch, so 20% is left for that.
- `PEAK_FRACTION` 0.4 of a datasheet's dense peak TFLOPS, 0.5 of a peak bandwidth: healthy GPUs
  reach 40-80% of their peak matrix throughput (RVS's own MI300X bf16 target is 42% of the
  1307 TFLOPS peak; NVIDIA's tensor cores reach 60-80%) and 70-90% of their peak memory bandwidth,
  so only a GPU far below what any healthy one of its kind does is flagged.
- `LINK_FRACTION` 0.5 of the link's theoretical rate, for pinned copies only: healthy pinned
  copies reach 80-90% of it, pageable ones depend on the host's memcpy and are not judged. The
  rate is that of the link at its maximum generation and width (`max_link_speed/width`): a link
  that trained down (Gen1 where Gen4 was possible, x4 where x16 was) delivers copies that fit the
  slower link and are far below what the card and slot are for; the message names the link
  negotiated. (The `pcie-link` probe warns on the downtrained link itself.)
- `NODE_FRACTION` 0.8 of the node median: GPUs of one model in one node run within a few percent
  of each other; a GPU stuck at low clocks, power-capped or throttling runs 30-50% slower. A GPU is
  named only when every sample of its figure, its best one too, is below 0.8 of the median: a
  slow GPU is slow every time, while one slow sample is a shared machine's noise (simulated GPUs
  share the host's cores and memory bus: their fastest samples moved by up to 21% between two
  healthy runs, tests/data/speed_noise.json). Where the host did every GPU's work (simulated
  GPUs) and timed its own same work beside each sample (`SpeedFigure.host_samples`), each sample
  is held as a share of that host work's rate: each GPU's process computes on a core of its own,
  whose speed the host's other work moves (of two healthy simulated GPUs under sustained load on a
  2-core machine, one read 58% of the other in every window, with no other test running), and
  its host work, timed on the same core at the same moment, moves with it.
"""
from __future__ import annotations

import fnmatch
import os
import statistics
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Set, Tuple

from ..errors import UsageError
from ..host.hostgpu import describe_link, link_gbps, transfer_rate
from ..model import SPEED_MEASUREMENTS, SpeedFigure, Status, Verdict, speed_figures
from . import DATA, read_data

SPEC_ENV = "ROCMCHECK_SPEED_SPEC"  # further spec tables (os.pathsep-separated), after the built-in one
BUILTIN = DATA / "speed_spec.json"
TARGET_FRACTION = 0.8
PEAK_FRACTION = {"TFLOPS": 0.4, "GB/s": 0.5}
LINK_FRACTION = 0.5
NODE_FRACTION = 0.8
FIGURES = ("matmul-fp32", "matmul-tf32", "matmul-fp16", "matmul-bf16", "matmul-fp8", "device-memory-copy",
           "device-memory-triad", "p2p-0-1", "all-reduce-busbw", "h2d-pageable", "h2d-pinned", "d2h-pageable",
           "d2h-pinned", "h2d-strided")  # the figure names of the contract (p2p-I-J stands for every pair)
LINK_FIGURES = ("h2d-pinned", "d2h-pinned")  # judged against the PCIe link; pageable copies are the host's memcpy
UNITS = ("TFLOPS", "GB/s")
KINDS = ("peak", "target")


@dataclass(frozen=True)
class Row:
    """One published figure for one device (a row of the spec table)."""

    device: str  # the label messages name
    figure: str  # a figure name or a glob over them
    value: float
    unit: str
    kind: str  # peak or target
    source: str
    arch: Tuple[str, ...] = ()
    name: Tuple[str, ...] = ()
    note: str = ""

    def matches(self, arch: str, name: str, figure: str) -> bool:
        """Every field the row names matches (globs, case-insensitive)."""
        def any_of(globs: Tuple[str, ...], text: str) -> bool:
            return any(fnmatch.fnmatchcase(text.lower(), g.lower()) for g in globs)

        return (fnmatch.fnmatchcase(figure, self.figure) and (not self.arch or any_of(self.arch, arch))
                and (not self.name or any_of(self.name, name)))

    @property
    def fraction(self) -> float:
        return TARGET_FRACTION if self.kind == "target" else PEAK_FRACTION[self.unit]

    @property
    def what(self) -> str:
        return f"{self.device} {'published target' if self.kind == 'target' else 'peak'} ({self.source})"


def _problem(row: Any) -> Optional[str]:
    """What makes a row unusable, found when the table is loaded."""
    if not isinstance(row, dict):
        return "not an object"
    for key in ("device", "figure", "unit", "kind", "source"):
        if not isinstance(row.get(key), str) or not row[key].strip():
            return f"'{key}' is required (a string)"
    if not row["source"].startswith(("https://", "http://")):
        return f"'source' must be a link, not '{row['source'][:40]}'"
    if not any(fnmatch.fnmatchcase(f, row["figure"]) for f in FIGURES):
        return f"figure '{row['figure'][:40]}' names no speed figure ({', '.join(FIGURES[:7])}, p2p-I-J, ...)"
    if row["unit"] not in UNITS or row["kind"] not in KINDS:
        return f"unit must be {' or '.join(UNITS)} and kind {' or '.join(KINDS)}"
    value = row.get("value")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        return "'value' must be a positive number"
    for key in ("arch", "name"):
        if key in row and not (isinstance(row[key], list) and all(isinstance(v, str) for v in row[key])):
            return f"'{key}' must be a list of strings"
    if not (row.get("arch") or row.get("name")):
        return "a row matches on 'arch' and/or 'name'"
    return None


def load(path: Path) -> List[Row]:
    """The rows of one spec table; a malformed table or row is a one-line UsageError naming it."""
    data = read_data(path, "speed spec")
    rows = data.get("rows") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise UsageError(f"speed spec '{path}': expected {{\"rows\": [...]}}")
    found = []
    for number, row in enumerate(rows, 1):
        problem = _problem(row)
        if problem:
            label = f"{row.get('device', '?')} {row.get('figure', '?')}" if isinstance(row, dict) else "?"
            raise UsageError(f"speed spec '{path}': row {number} ({str(label)[:60]}): {problem}")
        found.append(Row(row["device"], row["figure"], float(row["value"]), row["unit"], row["kind"], row["source"],
                         tuple(row.get("arch", ())), tuple(row.get("name", ())), str(row.get("note", ""))))
    return found


@lru_cache(maxsize=None)
def _rows(extra: str) -> Tuple[Row, ...]:
    return tuple(r for path in [BUILTIN, *(Path(p) for p in extra.split(os.pathsep) if p)] for r in load(path))


def rows() -> Tuple[Row, ...]:
    """The built-in table's rows, then those of $ROCMCHECK_SPEED_SPEC's files, checked (a UsageError
    otherwise): read before a run starts, so a broken table is bad input, not an error mid-run."""
    return _rows(os.environ.get(SPEC_ENV, ""))


def reference(device: Mapping[str, Any], figure: str) -> Optional[Row]:
    """The first row for this GPU (its arch and torch name) and figure, or None."""
    arch, name = str(device.get("arch") or ""), str(device.get("model") or "")
    return next((r for r in rows() if r.matches(arch, name, figure)), None)


def _rate(m: Mapping[str, Any], speed: str, width: str) -> Optional[Tuple[float, str]]:
    """(theoretical GB/s, 'x GT/s (GenN) xW') of a link from `pcie-link`'s measurements, or None."""
    gbps = link_gbps(m.get(speed), m.get(width))
    return (gbps, describe_link(transfer_rate(m[speed]) or 0.0, int(m[width]))) if gbps else None


def _link(verdict: Verdict) -> Optional[Tuple[float, str]]:
    """(theoretical GB/s, what) of the PCIe link the verdict read: the link at its maximum generation
    and width, naming the one negotiated where it is slower; None without link facts."""
    top = _rate(verdict.measurements, "max_link_speed", "max_link_width")
    now = _rate(verdict.measurements, "link_speed", "link_width")
    best = top or now
    if best is None:
        return None
    slower = f" (the link negotiated {now[1]}: {now[0]:g} GB/s)" if top and now and now[0] < top[0] else ""
    return best[0], f"PCIe {best[1]} link's theoretical rate{slower}"


def _store(verdict: Verdict, figure: SpeedFigure, expected: float, where: str) -> None:
    judged = replace(figure, expected=expected, reference=where)
    verdict.measurements[SPEED_MEASUREMENTS][figure.name] = judged.to_dict()


def _flag(verdict: Verdict, text: str, status: Status = Status.WARN) -> None:
    """Add `text` to the verdict's message; a passing verdict becomes `status`, a warning one `fail`
    when that is asked."""
    if verdict.status is Status.PASS or (verdict.status is Status.WARN and status is Status.FAIL):
        verdict.status = status
    verdict.message = text if verdict.message in ("", "ok") else f"{verdict.message}; {text}"


def _number(value: float) -> str:
    return f"{value:.4g}"


def judge_spec(verdict: Verdict) -> None:
    """Judge a GPU verdict's figures against the spec table or the PCIe link (see the module's doc)."""
    figures = speed_figures(verdict)
    device = verdict.device or {}
    if not figures or device.get("name", "cpu") == "cpu" or verdict.status not in (Status.PASS, Status.WARN):
        return
    link = _link(verdict)
    slow, judged, label = [], 0, ""
    for name, figure in figures.items():
        if name in LINK_FIGURES and link:
            expected, where, fraction = link[0], link[1], LINK_FRACTION
        else:
            row = reference(device, name)
            if row is None or row.unit != figure.unit:
                continue
            expected, where, fraction, label = row.value, row.what, row.fraction, row.device
        judged += 1
        _store(verdict, figure, expected, where)
        if figure.value < fraction * expected:
            slow.append(f"{name} {_number(figure.value)} {figure.unit} is below {fraction:.0%} of the "
                        f"{_number(expected)} {figure.unit} of the {where}")
    model = device.get("model") or device.get("name")
    if slow:
        _flag(verdict, "slower than the spec: " + "; ".join(slow))
    elif not judged:
        note = f"no spec reference for {model} ({device.get('arch')}): {len(figures)} figures measured, not judged"
        verdict.message = note if verdict.message in ("", "ok") else f"{verdict.message}; {note}"
    elif verdict.message in ("", "ok"):
        verdict.message = f"ok: {judged} figures within the spec of {label or model}"


@dataclass(frozen=True)
class Slow:
    """One figure of one GPU below `NODE_FRACTION` of its peers' (`slow_figures`)."""

    verdict: Verdict
    figure: SpeedFigure
    reference: float  # the peers' figure it was held against
    basis: str  # "the faster of 2 <model>", "the median of 8 <model>"
    share: float  # its figure's share of the reference, as compared (`node_pace`)
    beside_host: bool = False  # compared as shares of the host's same work (simulated GPUs)

    @property
    def key(self) -> Tuple[str, int, str]:
        """(variant, GPU index, figure name): what identifies the figure across measurements."""
        return self.verdict.variant, int(self.verdict.device["index"]), self.figure.name


def slow_figures(verdicts: List[Verdict]) -> List[Slow]:
    """Each figure of a GPU below `NODE_FRACTION` of the node's median among the GPUs of its model
    that ran the same probe variant (the faster one's, with two), in every sample; beside the host's
    same work where every GPU's figure was timed beside it (`node_pace`). Judges nothing."""
    groups: Dict[Tuple[str, str], List[Verdict]] = {}
    for v in verdicts:
        device = v.device or {}
        if device.get("index") is not None and device.get("model") and speed_figures(v):
            groups.setdefault((v.variant, str(device["model"])), []).append(v)
    found: List[Slow] = []
    for (variant, model), members in groups.items():
        if len({v.device["index"] for v in members}) < 2:
            continue
        figures = {id(v): speed_figures(v) for v in members}
        for name in sorted(set.intersection(*(set(f) for f in figures.values()))):
            held = [figures[id(v)][name] for v in members]
            beside = all(f.host_samples and len(f.host_samples) == len(f.samples) for f in held)
            paces = [node_pace(f, beside) for f in held]
            basis = f"{'the faster' if len(held) == 2 else 'the median'} of {len(held)} {model}"
            reference = _peers([statistics.median(pace) for pace in paces])
            for v, figure, pace in zip(members, held, paces):
                if max(pace) < NODE_FRACTION * reference:
                    found.append(Slow(v, figure, _peers([f.value for f in held]), basis,
                                      statistics.median(pace) / reference, beside))
    return found


def _peers(values: List[float]) -> float:
    """What a GPU's figure is held against: the faster of two, the median of more."""
    return max(values) if len(values) == 2 else statistics.median(values)


def node_pace(figure: SpeedFigure, beside_host: bool) -> List[float]:
    """A figure's samples as the node compares them: each over the rate of the host's same work
    timed right after it where `beside_host` (every GPU's figure has those), else as measured."""
    if not beside_host:
        return list(figure.samples)
    return [rate / host if host > 0 else 0.0 for rate, host in zip(figure.samples, figure.host_samples)]


def judge_node(verdicts: List[Verdict], nogo: bool = False,
               among: Optional[Set[Tuple[str, int, str]]] = None) -> List[Dict[str, Any]]:
    """Name each GPU with a slow figure (`slow_figures`; with `among`, only those (variant, GPU
    index, figure) it holds: the ones slow in an earlier measurement too) in its verdict: its
    message, its figure's reference, `warn`, or `fail` with `nogo` and the action to take. Returns
    one record per slow figure, for the node verdict and the gate's screen."""
    return [_mark(slow, nogo) for slow in slow_figures(verdicts) if among is None or slow.key in among]


def _mark(slow: Slow, nogo: bool) -> Dict[str, Any]:
    verdict, figure, reference = slow.verdict, slow.figure, slow.reference
    device = verdict.device
    where = ", ".join(str(w) for w in (device.get("name"), device.get("pci_address")) if w)
    gpu = f"GPU {device['index']} ({where})"
    beside = ", each beside its host's same work" if slow.beside_host else ""
    text = (f"{gpu} is slower than the node's other GPUs of its model: {figure.name} {_number(figure.value)} "
            f"{figure.unit} is {slow.share:.0%} of {slow.basis} ({_number(reference)} {figure.unit}; "
            f"below {NODE_FRACTION:.0%} in every sample{beside})")
    _store(verdict, figure, reference, f"node: {slow.basis}")
    _flag(verdict, text, Status.FAIL if nogo else Status.WARN)
    if nogo:
        verdict.measurements["action"] = (f"drain the node; check {gpu}: clocks, power cap, temperature and PCIe "
                                          f"link against its peers (rocm-smi / nvidia-smi -q)")
    return {"gpu": device["index"], "device": device.get("name"), "model": device.get("model"),
            "pci_address": device.get("pci_address"), "check": verdict.variant, "figure": figure.name,
            "value": figure.value, "unit": figure.unit, "reference": reference, "basis": slow.basis,
            "fraction": NODE_FRACTION, "status": verdict.status.value, "message": text}
