"""`rocmcheck env`: the environment fingerprint, device facts from a child process."""
from __future__ import annotations

import argparse
import json
from typing import Any, Dict, List

from ..engine.options import Given, RunOptions, add_to_argparse
from ..model import ExitCode


def register(sub: Any) -> None:
    p = sub.add_parser("env", help="the environment fingerprint (device facts from a child process)")
    add_to_argparse(p, "device")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_env)


def cmd_env(args: argparse.Namespace) -> int:
    from ..engine.runner import Runner
    from ..host.fingerprint import summary
    from ..host.nodehealth import describe, snapshot

    opts = RunOptions.build(Given({"device": args.device}), write_files=False, command="env", needs_torch=False)
    report = Runner(opts).run([])
    fp = report.fingerprint
    health = snapshot()  # the GPUs' own counters (node-health), read from the driver
    if args.json:
        print(json.dumps({**fp, "node_health": {a: h.to_dict() for a, h in health.items()}}, indent=2, default=str))
        return ExitCode.OK
    print(summary(fp))
    print(_env_text(fp))
    if health:
        from tabulate import tabulate

        print(tabulate([[f"health {a}", describe(h)] for a, h in health.items()], tablefmt="plain"))
    return ExitCode.OK


def inventory_rows(gpus: Dict[str, Any]) -> List[List[Any]]:
    """The host's own GPU inventory (read from files, whatever torch sees): what the GPUs are,
    their driver and link, and the device nodes a container or a user may lack."""
    counts = gpus.get("gpus") or {}
    found = ", ".join(f"{n} {'AMD' if v == 'amd' else 'NVIDIA'}" for v, n in counts.items() if n)
    rows: List[List[Any]] = [["host GPUs", found or "none (PCI, KFD topology, /dev, /proc/driver/nvidia, WSL)"]]
    for g in gpus.get("pci") or []:
        link = f", link {g.get('link_speed')} x{g.get('link_width')} (max {g.get('max_link_speed')} " \
               f"x{g.get('max_link_width')})" if g.get("link_speed") else ""
        rows.append([f"PCI {g.get('address')}", f"{g.get('vendor')} {g.get('device_id')}, driver "
                                                 f"{g.get('driver') or 'none bound'}{link}"])
    if gpus.get("kfd_gfx_targets"):
        rows.append(["KFD gfx targets", " ".join(str(t) for t in gpus["kfd_gfx_targets"])])
    nodes = [n for n in [gpus.get("dev_kfd"), *(gpus.get("render_nodes") or []), *(gpus.get("nvidia_nodes") or [])]
             if n]
    if nodes or counts.get("amd") or counts.get("nvidia"):
        rows.append(["device nodes", " ".join(f"{n['path']} ({'rw' if n.get('readable_writable') else 'no access'})"
                                              for n in nodes) or "none"])
    if gpus.get("wsl_dxg"):
        rows.append(["WSL /dev/dxg", gpus.get("wsl_vendor") or "present"])
    rows += [[name, value] for name, value in (gpus.get("visible_devices") or {}).items()]
    return rows


def _env_text(fp: Dict[str, Any]) -> str:
    from tabulate import tabulate

    d, h = fp.get("device_facts") or {}, fp.get("host") or {}
    rows = [["torch", d.get("torch")], ["HIP", d.get("hip")], ["ROCm", d.get("rocm")], ["CUDA", d.get("cuda")],
            ["wheel arch list", " ".join(d.get("arch_list") or []) or None],
            ["driver", d.get("nvidia_driver") or d.get("amdgpu_driver")], ["HIP runtime", d.get("hip_runtime")],
            ["cuDNN / MIOpen", d.get("cudnn")], ["NCCL / RCCL", d.get("nccl")], ["hipBLASLt", d.get("hipblaslt")],
            ["OS", h.get("os")],
            ["kernel", h.get("kernel")], ["WSL", h.get("wsl")], ["Python", h.get("python")],
            ["GPU kernel options", " ".join(h.get("kernel_cmdline") or []) or None]]
    rows += [[f"GPU {g.get('index')}", f"{g.get('name')} ({g.get('arch')}, {g.get('memory_bytes', 0) / 2**30:.1f} GiB)"]
             for g in d.get("devices") or [] if g]
    rows += inventory_rows(h.get("gpus") or {})
    rows += [[k, v] for k, v in (h.get("env") or {}).items()]
    rows += [[f"pkg {k}", v] for k, v in (h.get("packages") or {}).items()]
    return tabulate([[k, "Could not collect" if v is None else v] for k, v in rows], tablefmt="plain")
