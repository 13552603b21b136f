"""Node health on every GPU of a node (issue 25: "in well under a second").

Run: python -m pytest benchmarks/bench_node_health.py --benchmark-columns=min,median,max

What the gate does for `node-health` on an 8-GPU node, in the parent: read every GPU's
counters (RAS error counts per block, bad pages, PCIe replays, hwmon temperatures and power)
from an 8-GPU fixture tree (the MI300X of tests/fixtures/nodehealth, eight times), then read
and judge each GPU again as its queue ends. No child, no GPU runtime.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rocmcheck.host import nodehealth

MI300X = Path(__file__).parent.parent / "tests/fixtures/nodehealth/mi300x/sys/bus/pci/devices/0000:0c:00.0"
ADDRESSES = [f"0000:{bus:02x}:00.0" for bus in (0x0c, 0x22, 0x38, 0x5c, 0x9f, 0xaf, 0xbf, 0xdf)]


@pytest.fixture(scope="module")
def node(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("node")
    for address in ADDRESSES:
        shutil.copytree(MI300X, root / "sys/bus/pci/devices" / address, symlinks=True)
    (root / "sys/bus/pci/drivers/amdgpu").mkdir(parents=True)
    return root


def gate_reads(root: Path) -> list:
    before = nodehealth.snapshot(root)
    return [nodehealth.judge(before[a], nodehealth.snapshot(root, only=a)[a], i) for i, a in enumerate(ADDRESSES)]


def test_eight_gpus_read_and_judged(benchmark, node):
    findings = benchmark(gate_reads, node)
    assert [f.status for f in findings] == ["pass"] * 8
    assert benchmark.stats.stats.median < 0.5  # "well under a second"
