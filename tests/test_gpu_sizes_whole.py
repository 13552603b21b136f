"""The gate variants whose host work goes on after a read-back, run whole at a GPU's sizes on the CPU (issue 39).

tests/test_gpu_sizes.py runs every gate variant on torch's `meta` device, which holds shapes and no data, so it
measures a probe's host work only up to the first value read back. Some probes do most of theirs after that: gemm
builds its float64 references and checks every row sum, transfer writes a pattern for every source and compares
every method's copy with it, sdc attributes a bad copy with checksums. Here those variants run on the CPU with
`ctx.gpu_sized` true, so every line of them runs at the sizes a real GPU gets (the GPU's work done by the CPU), to
its verdict: a host step that is wrong or out of proportion at those sizes (an int32 index past 2**31, an O(n**3)
reference) shows up here, and the CPU seconds of each are printed. They are not held to the GPU's budget: the CPU
also does the device's products here, which a GPU does in milliseconds.

The others are not here: after their first read-back `sdc` compares 8 bytes an output and `speed` times a loop;
`training` runs its float64 reference on the host at the GPU's sizes, in torch's threads over the host's cores
(the whole variant took 0.34-0.58 s on the H100's 16 cores), but on this 2-core CPU, its device run included, it
costs 12 CPU s, more than one test may spend here; `pcie-link` skips on the CPU.
"""
from __future__ import annotations

import time
from unittest import mock

import pytest

from rocmcheck.context import ProbeContext
from rocmcheck.registry import load_all

WHOLE = ("gemm[fp32-default]", "gemm[bf16-default]", "transfer[every-training]")


def gate_variant(variant_id: str):
    found = [v for spec in load_all().values() for v in spec.expand() if v.id == variant_id and v.in_gate()]
    assert len(found) == 1, f"{variant_id} is no longer one gate variant"
    return found[0]


@pytest.mark.parametrize("variant_id", WHOLE)
def test_a_gate_variant_runs_whole_at_a_gpus_sizes(variant_id, capsys):
    variant = gate_variant(variant_id)
    with mock.patch.object(ProbeContext, "gpu_sized", property(lambda self: True)):
        ctx = ProbeContext(device="cpu", requested_device="cuda:0", profile="gate", params=dict(variant.params),
                           timeout=variant.spec.timeout)
        assert ctx.gpu_sized
        began = time.process_time()
        ended = ctx.call(variant.spec.func, in_child=False)
        seconds = time.process_time() - began
    with capsys.disabled():
        print(f"\n{variant_id} whole at a GPU's sizes on the CPU: {seconds:.2f} CPU s")
    assert ended is None, f"{variant_id}: {type(ended).__name__}: {ended}"
    assert not ctx.warnings, ctx.warnings
