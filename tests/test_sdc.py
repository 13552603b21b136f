"""The one-bit faults of issue 33: `bitflip[:RATE]` patches the CPU's matrix products in the probe's
child, `simgpu-bitflip:IDX` and `simgpu-bitflip-rate:IDX:RATE` flip inside a simulated GPU, below torch."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from rocmcheck import faults, simgpu
from rocmcheck.errors import UsageError


@pytest.fixture(scope="module")
def simgpu_built():
    simgpu.build()


def test_the_cpu_bitflip_flips_the_lowest_bit_of_one_element_of_every_product():
    import torch

    from rocmcheck.numeric import bitwise, tensor_bits

    a, b = torch.randn(8, 16), torch.randn(16, 4)
    right = a @ b
    with faults.reverting():
        faults.install(faults.parse("bitflip"), "sdc")
        flipped = [torch.matmul(a, b), a @ b, torch.nn.functional.linear(a, b.T)]
    for got in flipped:
        check = bitwise(tensor_bits(got), tensor_bits(right))
        assert (check.mismatches, check.first_bad) == (1, right.numel() // 2)
        assert int(tensor_bits(got).reshape(-1)[16] ^ tensor_bits(right).reshape(-1)[16]) == 1
    assert torch.equal(a @ b, right)  # put back


SIMULATED_FLIP = textwrap.dedent('''
    import torch
    from rocmcheck import simgpu
    simgpu.enable(2)
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    right = (a @ b).view(torch.int32)
    def differing(gpu):
        got = (a.to(f"simgpu:{gpu}") @ b.to(f"simgpu:{gpu}")).cpu().view(torch.int32)
        return (got != right).nonzero().flatten().tolist(), int((got ^ right).abs().max())
    simgpu.set_bitflip(1, 1.0)
    assert differing(0) == ([], 0), differing(0)
    assert differing(1) == ([4, 0], 1), differing(1)  # row 4, column 0: the middle element, its lowest bit
    simgpu.set_bitflip(1, 0.25)
    hits = sum(bool(differing(1)[0]) for _ in range(400))
    assert 60 <= hits <= 140, hits  # about a quarter of the products
    print("ok", flush=True)
    import os; os._exit(0)
''')


@pytest.mark.children
def test_the_simulated_gpu_flips_one_low_bit_in_its_products_every_time_or_at_a_rate(simgpu_built):
    run = subprocess.run([sys.executable, "-c", SIMULATED_FLIP], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-2000:]


@pytest.mark.parametrize("spec, refused", [
    ("bitflip:0", "fault 'bitflip' takes rate per call"), ("bitflip:x", "fault 'bitflip' takes rate per call"),
    ("simgpu:2,simgpu-bitflip-rate:1", "takes IDX:RATE"), ("simgpu:2,simgpu-bitflip-rate:1:2", "takes IDX:RATE"),
    ("simgpu-bitflip:1", "needs 'simgpu' in the same spec"),
])
def test_a_bad_bitflip_spec_is_refused(spec, refused):
    with pytest.raises(UsageError, match=refused):
        faults.parse(spec)


def test_good_bitflip_specs_parse():
    assert [str(r) for r in faults.parse("simgpu:2,simgpu-bitflip-rate:1:2e-5,bitflip:0.5")] == [
        "simgpu:2", "simgpu-bitflip-rate:1:2e-5", "bitflip:0.5"]
