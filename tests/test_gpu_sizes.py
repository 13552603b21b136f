"""Every gate variant's host-side work at the sizes a real GPU gets, held to its budget (issue 39, item 2).

The CPU and the simulated GPUs run small sizes (`ctx.gpu_sized` is False there), so no test ran
what a GPU gets until one did: `sdc` built its exact answers with int64 numpy products at a GPU's
sizes, 43 s of a 2 s budget on an H200's host. Here each probe runs on torch's `meta` device, which
`ctx.gpu_sized` takes for a real GPU: tensors there have shapes and no data, so the device's work
costs nothing while the host's (numpy, RNG, dtype rounding, building models) costs what it costs.
A probe runs until it ends or first needs something the meta device cannot give (a value read
back, a runtime call); what it did on the host until then is its setup, measured in this
process's CPU time (the wall time of a 2-core machine shared by other work says more about the
load than about the probe) and held to the variant's budget.

Generic over the registry: a new gate variant is measured without a line here. One that cannot
run this way (it skips on a device that is not CUDA/ROCm, or fails before any device work) is
named in NOT_ON_META with the reason, and the test fails when that list is not exactly the set of
such variants, so no probe escapes silently and none stays listed once it runs.
"""
from __future__ import annotations

import re
import time
from typing import Any, Dict, List, Optional, Tuple

import pytest

from rocmcheck.context import ProbeContext
from rocmcheck.errors import Skip
from rocmcheck.host.fingerprint import device_facts
from rocmcheck.model import Variant, level_budget
from rocmcheck.registry import load_all

# a gate variant with no level: its host setup's share of the gate's 20 s on one GPU (issue 39, item 4)
GATE_VARIANT_S = 1.0
# how a probe ends when it reaches work the meta device cannot do: a read-back, or a runtime call
REACHED_DEVICE = re.compile(r"meta tensor|accelerator device|autocast device_type 'meta'|"
                            r"'Tensor' object has no attribute 'meta'")

_GPU_ONLY = "it skips on a device that is not CUDA/ROCm (the meta device reads as a simulated GPU)"
NOT_ON_META: Dict[str, str] = {
    "allocator[default]": _GPU_ONLY,
    "attention-model[flash]": _GPU_ONLY,
    "config-lint[arch-in-wheel]": _GPU_ONLY,
    "hf-training[accelerate-fp32-stored]": _GPU_ONLY + "; Accelerate knows no other device",
    "hf-training[accelerate-bf16-stored]": _GPU_ONLY + "; Accelerate knows no other device",
    "library-imports[torchao]": "it skips where torchao is not installed",
    "library-imports[torchtune]": "it skips where torchtune is not installed",
    "node-health": "it runs in the parent and reads the host's GPUs, which the meta device has none of",
    "numerics[cast-bf16]": "rocmcheck.torchapi.device_module has no module for the meta device",
    "numerics[cast-fp16]": "rocmcheck.torchapi.device_module has no module for the meta device",
    "numerics[autocast-bf16]": "rocmcheck.torchapi.device_module has no module for the meta device",
    "numerics[ftz-fp16]": "rocmcheck.torchapi.device_module has no module for the meta device",
    "speed": "rocmcheck.torchapi.device_module has no module for the meta device",
}


def gate_variants() -> List[Variant]:
    return [v for spec in load_all().values() for v in spec.expand() if v.in_gate()]


def budget_s(variant: Variant) -> float:
    """The host setup's bound: a levelled variant's seconds of work, else GATE_VARIANT_S; never more than the
    variant's whole cost budget at level 1 (`ProbeSpec.cost_budget`, which its setup is part of)."""
    own = level_budget(variant.params) if "level" in variant.params else GATE_VARIANT_S
    return min(own or GATE_VARIANT_S, variant.spec.cost_budget(variant.params, 1))


def warm_up() -> None:
    """What the first probe would otherwise pay for the whole run: torch's meta kernels and the
    error path of a read-back."""
    import torch
    import torch.nn  # noqa: F401

    x = torch.ones(8).to("meta")
    with pytest.raises(NotImplementedError):
        (x * 2).cpu()


def run_on_meta(variant: Variant, run_facts: Dict[str, Any]) -> Tuple[float, Optional[BaseException]]:
    """The variant's CPU seconds on the host at a GPU's sizes, and what ended it (None: it returned). `run_facts`:
    the device facts a run hands every probe (its facts child's), so no probe measures gathering them again."""
    ctx = ProbeContext(device="meta", requested_device="cuda:0", profile="gate", params=dict(variant.params),
                       timeout=variant.spec.timeout, device_facts=run_facts,
                       budget_s=level_budget(variant.params) if "level" in variant.params else None)
    began = time.process_time()
    ended = ctx.call(variant.spec.func, in_child=False)
    return time.process_time() - began, ended


def reached_device(ended: Optional[BaseException]) -> bool:
    return ended is None or (not isinstance(ended, Skip) and bool(REACHED_DEVICE.search(str(ended))))


@pytest.mark.children  # the run's device facts, as its facts child gathers them, start collect_env's commands
def test_every_gate_variants_host_setup_at_a_gpus_sizes_fits_its_budget():
    warm_up()
    run_facts = device_facts()
    variants = gate_variants()
    assert any(v.id == "sdc[1]" for v in variants)
    measured: Dict[str, float] = {}
    not_run: Dict[str, str] = {}
    for variant in variants:
        seconds, ended = run_on_meta(variant, run_facts)
        if reached_device(ended):
            measured[variant.id] = seconds
        else:
            not_run[variant.id] = f"{type(ended).__name__}: {str(ended).splitlines()[0] if str(ended) else ''}"
    assert set(not_run) == set(NOT_ON_META), {"not run, unlisted": sorted(set(not_run) - set(NOT_ON_META)),
                                              "listed, yet ran": sorted(set(NOT_ON_META) - set(not_run)),
                                              "why": not_run}
    over = {v.id: f"{measured[v.id]:.2f} s of {budget_s(v):g} s" for v in variants
            if v.id in measured and measured[v.id] > budget_s(v)}
    print("host setup at a GPU's sizes, CPU seconds: " + ", ".join(f"{k} {v:.2f}" for k, v in measured.items()))
    assert not over, over
