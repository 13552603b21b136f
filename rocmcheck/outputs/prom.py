"""The run in Prometheus's text format, for node_exporter's textfile collector (`--prom FILE` on
`gate` and `run`): how platform teams already watch node checks (IBM Autopilot, AMD's
device-metrics-exporter and NVSentinel export theirs so).

Named as Prometheus's naming guide asks: the `rocmcheck_` prefix, base units (seconds, bytes
per second, floating-point operations per second) named by their suffix, `_info` for facts
(value 1, the facts in labels), states as a state set (one series per possible state, 1 for the
one that holds). Every series carries `drill` ("true" where a fault was injected on purpose:
`render.injected`), so an alert can leave drills out with `drill="false"`, and `textfile`, the
file's name: node_exporter reads every *.prom file of its one folder as one exposition, and two
rocmcheck files there (a gate's and a burn-in run's) would repeat each other's series; the real
node_exporter (1.5.0) then drops the second file's series, with only a line in its own log
(`was collected before with the same name and label values`) and `node_textfile_scrape_error`
still 0 (tests/test_prom_node_exporter.py). The file is written
whole to a temporary name in the same folder and renamed (`storage.write_atomic`), as the
collector requires: it never reads half a file. Series:

- `rocmcheck_node_status{status}`: GO, NO-GO, UNKNOWN (the gate's exit code, `Report.exit_code`)
- `rocmcheck_gpu_ok{device,...}`: 1 where no variant failed on that GPU; `status` is its worst
- `rocmcheck_variant_ok{probe,variant,device,status}`: one series per variant and device
- `rocmcheck_variant_duration_seconds{probe,variant,device}`
- `rocmcheck_speed_bytes_per_second`, `rocmcheck_speed_flops_per_second` `{figure,...}`: the
  speed figures a verdict measured (`model.speed_figures`, GB/s and TFLOPS in base units)
- `rocmcheck_run_timestamp_seconds`, `rocmcheck_run_duration_seconds`, `rocmcheck_run_info`

A file named where nothing can be written is refused before the run (`Output.must_write`);
a gate that cannot assess at all (no torch, bad input) writes `unknown`'s file, so the last
GO is never left standing.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from .. import __version__
from ..faults import drill_split
from ..model import ExitCode, Status, Verdict, node_status, speed_figures
from ..records import Report
from .render import device_order, injected

NODE_STATES = ("GO", "NO-GO", "UNKNOWN")
# the units a speed figure is measured in (model.SpeedFigure.unit) -> (metric, factor to the base unit)
SPEED_UNITS = {"GB/s": ("rocmcheck_speed_bytes_per_second", 1e9),
               "TFLOPS": ("rocmcheck_speed_flops_per_second", 1e12)}
HELP = {
    "rocmcheck_node_status": "The node's verdict as a state set: 1 for the status it has (GO, NO-GO, UNKNOWN), "
                             "0 for the others.",
    "rocmcheck_gpu_ok": "1 when no probe variant failed, errored, crashed or hung on this GPU, else 0; status is "
                        "its worst verdict.",
    "rocmcheck_variant_ok": "1 when the probe variant passed, warned or was skipped on this device, 0 when it "
                            "failed, errored, crashed or hung; status says which.",
    "rocmcheck_variant_duration_seconds": "How long the probe variant took on this device, in seconds.",
    "rocmcheck_speed_bytes_per_second": "A bandwidth the probe measured (the median of its samples), in bytes "
                                        "per second.",
    "rocmcheck_speed_flops_per_second": "A throughput the probe measured (the median of its samples), in "
                                        "floating-point operations per second.",
    "rocmcheck_run_timestamp_seconds": "When the run ended, in seconds since the Unix epoch.",
    "rocmcheck_run_duration_seconds": "How long the run took, in seconds.",
    "rocmcheck_run_info": "The run's facts in labels: run id, command, rocmcheck version, torch, backend, the "
                          "faults a drill injected, the simulation it ran on, why it could not assess.",
}

Labels = Dict[str, str]
Sample = Tuple[str, Labels, float]


def escape_label(value: Any) -> str:
    """A label value as the text format writes it: backslash, double quote and line feed escaped."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    """`1`, `0`, `0.1015`: a whole number without its `.0`, else the shortest text that reads back exactly."""
    value = float(value)
    return str(int(value)) if value.is_integer() and abs(value) < 2 ** 53 else repr(value)


def exposition(samples: Sequence[Sample]) -> str:
    """The text format: each metric's HELP and TYPE (all gauges) once, then all its samples (the
    format wants a metric's lines together), metrics in `HELP`'s order."""
    lines: List[str] = []
    for name, help_text in HELP.items():
        mine = [(labels, value) for sample, labels, value in samples if sample == name]
        if mine:
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        for labels, value in mine:
            text = ",".join(f'{key}="{escape_label(val)}"' for key, val in labels.items())
            lines.append(f"{name}{{{text}}} {_number(value)}")
    return "\n".join(lines) + "\n"


def _node(status: str, drill: Labels) -> List[Sample]:
    return [("rocmcheck_node_status", {"status": state, **drill}, float(state == status)) for state in NODE_STATES]


def _info(report: Optional[Report], drill_faults: Sequence[str], simulated: Sequence[str],
          drill: Labels, error: str = "") -> Sample:
    run = report.run if report is not None else None
    facts = (report.fingerprint.get("device_facts") or {}) if report is not None else {}
    labels = {"run_id": run.id if run else "", "command": run.command if run else "gate", "version": __version__,
              "torch": str(facts.get("torch") or ""), "backend": str(facts.get("backend") or ""),
              "faults_injected": ",".join(drill_faults), "simulated": ",".join(simulated)}
    return ("rocmcheck_run_info", {**labels, **({"error": error} if error else {}), **drill}, 1.0)


def _gpus(report: Report) -> Iterable[Dict[str, Any]]:
    """The GPUs the verdicts ran on (each verdict's `device` record), in index order; not the CPU."""
    found: Dict[str, Dict[str, Any]] = {}
    for verdict in report.verdicts:
        name = verdict.device.get("name")
        if name and name != "cpu":
            found.setdefault(str(name), verdict.device)
    return sorted(found.values(), key=device_order)


def _one_per_series(report: Report) -> List[Verdict]:
    """A verdict per (variant, device), the worst where a report holds one twice: the textfile
    collector rejects a file that repeats a series."""
    kept: Dict[Tuple[str, str], Verdict] = {}
    for verdict in report.verdicts:
        key = (verdict.variant, str(verdict.device.get("name") or report.run.device))
        if key not in kept or verdict.status.severity > kept[key].status.severity:
            kept[key] = verdict
    return list(kept.values())


def _common(drill_faults: Sequence[str], path: Optional[Path]) -> Labels:
    """The labels every series carries: `drill`, and `textfile` (the file's name) where the file is known."""
    return {"drill": "true" if drill_faults else "false", **({"textfile": path.name} if path is not None else {})}


def textfile(report: Report, path: Optional[Path] = None) -> str:
    """The run's metrics (see the module's docstring), for the file `path`."""
    drill_faults, simulated = injected(report)
    drill = _common(drill_faults, path)
    samples = _node(node_status(report.exit_code()), drill)
    for device in _gpus(report):
        name = str(device["name"])
        statuses = [v.status.value for v in report.verdicts if v.device.get("name") == name]
        worst = Status.worst(statuses)
        labels = {"device": name, **{key: str(device.get(key) or "") for key in ("pci_address", "uuid", "arch",
                                                                               "model")}}
        samples.append(("rocmcheck_gpu_ok", {**labels, "status": worst.value, **drill}, float(not worst.is_bad)))
    for verdict in _one_per_series(report):
        where = {"probe": verdict.probe or verdict.variant.split("[")[0], "variant": verdict.variant,
                 "device": str(verdict.device.get("name") or report.run.device)}
        samples.append(("rocmcheck_variant_ok", {**where, "status": verdict.status.value, **drill},
                        float(not verdict.status.is_bad)))
        samples.append(("rocmcheck_variant_duration_seconds", {**where, **drill}, float(verdict.duration_s)))
        for figure in speed_figures(verdict).values():
            metric = SPEED_UNITS.get(figure.unit)
            if metric is not None:  # a unit this version does not know is left out rather than mislabelled
                samples.append((metric[0], {**where, "figure": figure.name, **drill}, figure.value * metric[1]))
    run = report.run
    ended = run.finished if run.finished is not None else time.time()
    samples.append(("rocmcheck_run_timestamp_seconds", dict(drill), float(ended)))
    if run.started is not None:
        samples.append(("rocmcheck_run_duration_seconds", dict(drill), max(float(ended - run.started), 0.0)))
    samples.append(_info(report, drill_faults, simulated, drill))
    return exposition(samples)


def unknown(error: str, inject: str = "", path: Optional[Path] = None) -> str:
    """The file `path` of a gate that could not assess (no torch, bad input): UNKNOWN, why, and
    when, so that the file never goes on saying the last run's GO."""
    drill_faults, simulated = drill_split([part.strip() for part in inject.split(",")])
    drill = _common(drill_faults, path)
    samples = [*_node(node_status(ExitCode.USAGE), drill),
               ("rocmcheck_run_timestamp_seconds", dict(drill), time.time()),
               _info(None, drill_faults, simulated, drill, error)]
    return exposition(samples)
