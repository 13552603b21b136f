"""Every GPU of the node: one queue per device, the queues at once, one probe at a time per
device, through the real runner. Torch is made to report GPUs that are really the CPU (the
`simgpu` fault: simulated GPUs in the device-facts child and in every probe child)."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from rocmcheck.cli import main
from rocmcheck.errors import UsageError

PROBES = textwrap.dedent('''
    import pathlib
    import threading
    import time
    import rocmcheck

    BARRIER = pathlib.Path(__file__).parent / "barrier"  # holds `expected` where a test asks for one

    @rocmcheck.probe("sched-work", title="work", targets="-", timeout=30, gate=True, variants={"n": [1, 2]})
    def sched_work(ctx, n):
        """Variant 1 on each device waits (up to 20 s) until variant 1 runs on every expected device."""
        began = time.time()
        time.sleep(0.6)
        met = None
        if n == 1 and (BARRIER / "expected").exists():
            (BARRIER / ctx.device).touch()
            deadline = time.time() + 20
            while len(list(BARRIER.glob("simgpu:*"))) < int((BARRIER / "expected").read_text()):
                if time.time() > deadline:
                    break
                time.sleep(0.02)
            met = len(list(BARRIER.glob("simgpu:*")))
        ctx.measure(began=began, ended=time.time(), device=ctx.device, met=met)

    @rocmcheck.probe("sched-hang", title="hangs on simgpu:1", targets="-", timeout=2)
    def sched_hang(ctx):
        if ctx.device == "simgpu:1":
            threading.Event().wait()
        ctx.measure(ended=time.time())

    @rocmcheck.probe("sched-node", title="once per node", targets="-", per_device=False)
    def sched_node(ctx):
        ctx.measure(device=ctx.device)
''')


@pytest.fixture
def sched_probes(tmp_path):
    folder = tmp_path / "probes"
    folder.mkdir()
    (folder / "sched_probes.py").write_text(PROBES)
    return [str(folder)]


def _on(verdicts, probe):
    return [v for v in verdicts if v["probe"] == probe]


def test_queues_run_at_once_one_probe_at_a_time_per_device(rocm_run, sched_probes, isolation):
    barrier = Path(sched_probes[0]) / "barrier"
    barrier.mkdir()
    (barrier / "expected").write_text("4")
    verdicts = rocm_run(probe="sched-*", keyword="not hang", device="auto", inject="simgpu:4",
                        probes_path=sched_probes, isolation=isolation)
    work = _on(verdicts, "sched-work")
    assert len(work) == 8 and all(v["status"] == "pass" for v in work)
    assert sorted(v["device"]["name"] for v in work) == sorted(f"simgpu:{i}" for i in range(4) for _ in range(2))
    assert all(v["measurements"]["device"] == v["device"]["name"] for v in work)  # the child ran on its GPU
    spans = {}
    for v in work:
        spans.setdefault(v["device"]["name"], []).append((v["measurements"]["began"], v["measurements"]["ended"]))
    for device, pair in spans.items():  # never two probes on one device
        (a0, a1), (b0, b1) = sorted(pair)
        assert a1 <= b0, device
    met = [v["measurements"]["met"] for v in work if v["params"]["n"] == 1]
    assert met == [4, 4, 4, 4]  # variant 1 ran on the four devices at once: each saw the other three
    (node,) = _on(verdicts, "sched-node")
    assert node["status"] == "pass" and node["device"]["name"] == "simgpu:0"  # once, not per GPU


def test_a_hang_on_one_device_does_not_hold_up_the_others(rocm_run, sched_probes):
    verdicts = rocm_run(probe="sched-hang", device="all", inject="simgpu:3", probes_path=sched_probes)
    by_device = {v["device"]["name"]: v for v in verdicts}
    assert by_device["simgpu:1"]["status"] == "hang"
    assert by_device["simgpu:0"]["status"] == by_device["simgpu:2"]["status"] == "pass"
    assert by_device["simgpu:0"]["duration_s"] < 1.5 and by_device["simgpu:2"]["duration_s"] < 1.5


def test_every_verdict_names_its_gpu(rocm_run, sched_probes):
    verdicts = rocm_run(probe="sched-work", keyword="1", device="simgpu:0,2", inject="simgpu:4",
                        probes_path=sched_probes)
    names = {v["device"]["name"]: v["device"] for v in verdicts}
    assert set(names) == {"simgpu:0", "simgpu:2"}
    assert names["simgpu:2"]["index"] == 2 and names["simgpu:2"]["pci_address"] == "0000:12:00.0"
    assert names["simgpu:2"]["uuid"] == "simgpu-2" and names["simgpu:2"]["model"] == "simulated GPU"


def test_a_gpu_that_is_not_there_is_bad_input(rocm_run, sched_probes):
    with pytest.raises(UsageError, match="device simgpu:7 is not present"):
        rocm_run(probe="sched-node", device="simgpu:0,7", inject="simgpu:4", probes_path=sched_probes)


@pytest.mark.children
def test_gate_on_four_gpus_has_a_matrix_column_per_gpu(sched_probes, tmp_path, capsys):
    args = ["--probes-path", sched_probes[0], "--inject", "simgpu:4", "--out-dir", str(tmp_path)]
    assert main(["gate", "--require", "sched-work", "--json", str(tmp_path / "g.json"), *args]) == 0
    assert main(["matrix", str(tmp_path / "g.json"), "--json", str(tmp_path / "m.json")]) == 0
    import json

    matrix = json.loads((tmp_path / "m.json").read_text())
    labels = [m["label"] for m in matrix["machines"]]
    assert len(labels) == 4 and all(any(f"simgpu:{i}" in label for label in labels) for i in range(4))
    row = next(r for r in matrix["rows"] if r["variant"] == "sched-work[1]")
    assert [c["status"] for c in row["cells"]] == ["pass"] * 4
