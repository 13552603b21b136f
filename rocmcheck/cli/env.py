"""`rocmcheck env`: the environment fingerprint, device facts from a child process."""
from __future__ import annotations

import argparse
import json
from typing import Any, Dict

from ..model import ExitCode


def register(sub: Any) -> None:
    p = sub.add_parser("env", help="the environment fingerprint (device facts from a child process)")
    p.add_argument("--device", default="auto")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_env)


def cmd_env(args: argparse.Namespace) -> int:
    from ..fingerprint import summary
    from ..nodehealth import describe, snapshot
    from ..runner import RunOptions
    from ..session import run_variants

    report = run_variants(RunOptions(device=args.device, write_files=False, command="env", needs_torch=False), [])
    fp = report["fingerprint"]
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
    rows += [[k, v] for k, v in (h.get("env") or {}).items()]
    rows += [[f"pkg {k}", v] for k, v in (h.get("packages") or {}).items()]
    return tabulate([[k, "Could not collect" if v is None else v] for k, v in rows], tablefmt="plain")
