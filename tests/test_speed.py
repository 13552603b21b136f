"""Speed is a verdict: the `speed` probe's figures, the spec table, and the two judgements over them
(against the device's published figures, and against the node's other GPUs of the same model).

The judgements are pure over verdicts, so they are proven in-process on verdicts built here, on
real figures from the CPU, and on a fixture host tree with a downtrained PCIe link; the simulated
GPUs with one slowed (`simgpu-slow-matmul`) prove the whole way through `rocmcheck gate`.
"""
from __future__ import annotations

import json
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

import rocmcheck
from conftest import probe_module
from rocmcheck import faults
from rocmcheck.cli import main
from rocmcheck.errors import UsageError
from rocmcheck.knowledge import speed
from rocmcheck.model import SpeedFigure, Status, Verdict, speed_figures

MI300X = {"name": "cuda:0", "index": 0, "arch": "gfx942", "model": "AMD Instinct MI300X", "pci_address": "0000:0c:00.0"}
GEN4, GEN1 = "16.0 GT/s PCIe", "2.5 GT/s PCIe"


def verdict(device, status=Status.PASS, probe="speed", **figures):
    """A verdict carrying `figures` (name -> samples), as `ctx.measure_speed` records them."""
    unit = {True: "TFLOPS", False: "GB/s"}
    measured = {name.replace("_", "-"): SpeedFigure(name.replace("_", "-"), unit[name.startswith("matmul")],
                                                    list(samples), "test").to_dict()
                for name, samples in figures.items()}
    return Verdict(probe, probe, status, message="ok", measurements={"speed": measured}, device=dict(device))


def gpu(index, model="AMD Instinct MI300X"):
    return {**MI300X, "name": f"cuda:{index}", "index": index, "model": model, "pci_address": f"0000:{index:02x}:00.0"}


# --- the probe ----------------------------------------------------------------------------------


def test_the_cpu_measures_every_figure_it_has_with_samples_and_method_and_is_not_judged():
    rocmcheck.registry.load_all()
    ctx = rocmcheck.ProbeContext(device="cpu", profile="gate")
    assert ctx.call(rocmcheck.registry.get("speed").func) is None
    figures = {name: SpeedFigure.from_dict({"name": name, **f}) for name, f in ctx.measurements["speed"].items()}
    assert set(figures) == {"matmul-fp32", "device-memory-copy", "device-memory-triad"}
    for figure in figures.values():
        assert 3 <= len(figure.samples) <= 5 and all(s > 0 for s in figure.samples), figure
        assert figure.method.startswith("thread CPU time, ") and figure.expected is None
    assert "64 MiB" in figures["device-memory-triad"].method and "256x256x256" in figures["matmul-fp32"].method
    assert set(ctx.measurements["not_measured"]) == {"matmul-tf32", "matmul-fp16", "matmul-bf16", "matmul-fp8"}
    judged = Verdict("speed", "speed", Status.PASS, message="ok", measurements=ctx.measurements,
                     device={"name": "cpu"})
    speed.judge_spec(judged)
    assert (judged.status, judged.message) == (Status.PASS, "ok")  # the CPU: measured, never judged


def test_samples_stop_at_the_budget_but_never_below_the_least():
    class Clock:
        def seconds(self, work):
            work()
            return 0.1

    calls = []
    from rocmcheck import torchapi

    assert torchapi.time_samples(Clock(), lambda: calls.append(1), 20, warmup=2, budget_s=0.25) == [0.1] * 3
    assert len(calls) == 5  # 2 warm-up + 3 timed: the budget (0.25 s) is spent after 3
    calls.clear()
    assert len(torchapi.time_samples(Clock(), lambda: calls.append(1), 20, warmup=0, budget_s=0.95)) == 10


# --- the spec table -----------------------------------------------------------------------------


def test_every_row_of_the_spec_table_has_a_source_and_names_a_figure():
    rows = speed.rows()
    assert len(rows) >= 40
    assert all(r.source.startswith("https://") for r in rows)
    devices = {r.device for r in rows}
    for wanted in ("AMD Instinct MI300X", "AMD Instinct MI250X (one GCD)", "AMD Instinct MI100", "AMD Instinct MI50",
                   "AMD Radeon RX 9070", "NVIDIA H100 SXM", "NVIDIA H100 PCIe", "NVIDIA H200", "NVIDIA A100"):
        assert wanted in devices


@pytest.mark.parametrize("device, figure, value", [
    ({"arch": "gfx942", "model": "AMD Instinct MI300X"}, "matmul-bf16", 552),  # RVS gst target
    ({"arch": "gfx942", "model": "AMD Instinct MI300X VF"}, "p2p-3-5", 33.9),  # CVS threshold, any pair
    ({"arch": "gfx1201", "model": "AMD Radeon RX 9070 XT"}, "matmul-fp16", 145),
    ({"arch": "gfx1201", "model": "AMD Radeon RX 9070"}, "matmul-fp16", 120),
    ({"arch": "gfx1201", "model": "AMD Radeon RX 9070 GRE"}, "matmul-fp16", 90),
    ({"arch": "gfx1100", "model": "Radeon RX 7900 XTX"}, "device-memory-triad", 960),
    ({"arch": "sm_90", "model": "NVIDIA H100 80GB HBM3"}, "matmul-fp8", 1979),
    ({"arch": "sm_90", "model": "NVIDIA H100 PCIe"}, "device-memory-copy", 2000),
    ({"arch": "gfx1151", "model": "AMD Radeon 8060S Graphics"}, "matmul-fp16", None),  # Strix Halo: no figure
    ({"arch": "gfx942", "model": "AMD Instinct MI300X"}, "matmul-tf32", None),
])
def test_the_first_matching_row_is_the_reference(device, figure, value):
    row = speed.reference(device, figure)
    assert (row.value if row else None) == value


@pytest.mark.parametrize("row, problem", [
    ({"device": "X", "arch": ["gfx1"], "figure": "matmul-fp16", "value": 1, "unit": "TFLOPS", "kind": "peak"},
     "row 2 (X matmul-fp16): 'source' is required"),
    ({"device": "X", "arch": ["gfx1"], "figure": "matmul-fp64", "value": 1, "unit": "TFLOPS", "kind": "peak",
      "source": "https://x"}, "row 2 (X matmul-fp64): figure 'matmul-fp64' names no speed figure"),
    ({"device": "X", "figure": "matmul-fp16", "value": 1, "unit": "TFLOPS", "kind": "peak", "source": "https://x"},
     "row 2 (X matmul-fp16): a row matches on 'arch' and/or 'name'"),
    ({"device": "X", "name": ["x"], "figure": "matmul-fp16", "value": -3, "unit": "TFLOPS", "kind": "peak",
      "source": "https://x"}, "'value' must be a positive number"),
])
def test_a_malformed_row_fails_at_load_in_one_line_naming_it(tmp_path, monkeypatch, capsys, row, problem):
    good = {"device": "Y", "arch": ["gfx1"], "figure": "p2p-*", "value": 1, "unit": "GB/s", "kind": "target",
            "source": "https://y"}
    table = tmp_path / "site.json"
    table.write_text(json.dumps({"rows": [good, row]}))
    with pytest.raises(UsageError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        speed.load(table)
    monkeypatch.setenv(speed.SPEC_ENV, str(table))
    assert main(["run", "--probe", "speed", "--device", "cpu", "--out-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and problem in err[0] and str(table) in err[0]
    assert not (tmp_path / "out").exists()


# --- judged against the spec --------------------------------------------------------------------


def test_a_figure_below_its_fraction_of_the_spec_warns_with_both_figures():
    v = verdict(MI300X, matmul_bf16=[200, 210, 220], matmul_fp16=[500, 510, 520], device_memory_copy=[4100] * 3)
    speed.judge_spec(v)
    assert v.status is Status.WARN
    assert v.message.startswith("slower than the spec: matmul-bf16 210 TFLOPS is below 80% of the 552 TFLOPS of "
                                "the AMD Instinct MI300X published target (https://github.com/ROCm/ROCmValidation")
    assert "matmul-fp16" not in v.message and "device-memory" not in v.message  # 510 >= 0.8 x 523; 4100 >= 0.5 x 5300
    figures = speed_figures(v)
    assert (figures["matmul-bf16"].expected, figures["device-memory-copy"].expected) == (552, 5300)
    assert "gst_single.conf" in figures["matmul-fp16"].reference


def test_within_the_spec_says_so_and_an_unknown_gpu_says_it_has_no_reference():
    v = verdict(MI300X, matmul_bf16=[600] * 3, device_memory_triad=[4000] * 3)
    speed.judge_spec(v)
    assert (v.status, v.message) == (Status.PASS, "ok: 2 figures within the spec of AMD Instinct MI300X")
    strix = verdict({"name": "cuda:0", "index": 0, "arch": "gfx1151", "model": "AMD Radeon 8060S Graphics"},
                    matmul_bf16=[0.001] * 3)
    speed.judge_spec(strix)
    assert strix.status is Status.PASS
    assert strix.message == "no spec reference for AMD Radeon 8060S Graphics (gfx1151): 1 figures measured, not judged"
    assert speed_figures(strix)["matmul-bf16"].expected is None


def test_a_failing_verdict_keeps_its_status_and_is_not_judged():
    v = verdict(MI300X, Status.FAIL, matmul_bf16=[1] * 3)
    v.message = "wrong"
    speed.judge_spec(v)
    assert (v.status, v.message) == (Status.FAIL, "wrong")


@pytest.mark.parametrize("link, h2d, slow, words", [
    ((GEN1, 16, GEN4, 16), 3.3, True, "h2d-pinned 3.3 GB/s is below 50% of the 31.51 GB/s of the PCIe 16.0 GT/s "
                                      "(Gen4) x16 link's theoretical rate (the link negotiated 2.5 GT/s (Gen1) x16: "
                                      "4 GB/s)"),
    ((GEN4, 4, GEN4, 16), 6.6, True, "(the link negotiated 16.0 GT/s (Gen4) x4: 7.88 GB/s)"),
    ((GEN4, 16, GEN4, 16), 25.0, False, "ok: 2 figures within the spec of"),
    ((GEN4, 16, GEN4, 16), 9.0, True, "h2d-pinned 9 GB/s is below 50% of the 31.51 GB/s of the PCIe 16.0 GT/s (Gen4) "
                                      "x16 link's theoretical rate"),
])
def test_pinned_copies_are_judged_against_the_links_theoretical_rate(fake_host, link, h2d, slow, words):
    """The link as pcie-link reads it from a fixture host tree (sysfs current_/max_link_speed and
    _width, Documentation/ABI/testing/sysfs-bus-pci); the copies' figures as its measure_speed records them."""
    fake_host(amd=1, link=link)
    ctx = rocmcheck.ProbeContext(device="cpu", device_facts={"devices": [{"index": 0, "pci_address": "0000:03:00.0"}]})
    probe_module("pcie").check_link(ctx, 0)  # records the link; warns when it is below its maximum
    for name, rate in (("h2d-pinned", h2d), ("d2h-pinned", 25.0), ("h2d-pageable", 1.0)):
        ctx.measure_speed(name, "GB/s", [rate] * 5, "device events")
    v = Verdict("pcie-link", "pcie-link", Status.WARN if ctx.warnings else Status.PASS,
                message="; ".join(ctx.warnings) or "ok", measurements=ctx.measurements,
                device={"name": "cuda:0", "index": 0, "arch": "gfx1100", "model": "AMD Radeon RX 7900 XTX"})
    speed.judge_spec(v)
    assert (v.status is Status.WARN) is (slow or link[0] != link[2] or link[1] != link[3])
    assert words in v.message and ("slower than the spec" in v.message) is slow
    assert "h2d-pageable" not in v.message and speed_figures(v)["h2d-pageable"].expected is None


# --- judged against the node's other GPUs of the same model -------------------------------------


def test_with_two_gpus_the_slower_is_held_against_the_faster():
    fast, slow = verdict(gpu(0), matmul_fp32=[100, 101, 99]), verdict(gpu(1), matmul_fp32=[33, 34, 35])
    found = speed.judge_node([fast, slow])
    assert [(f["gpu"], f["figure"], f["reference"]) for f in found] == [(1, "matmul-fp32", 100)]
    assert (fast.status, slow.status) == (Status.PASS, Status.WARN)
    assert slow.message == ("GPU 1 (cuda:1, 0000:01:00.0) is slower than the node's other GPUs of its model: "
                            "matmul-fp32 34 TFLOPS is 34% of the faster of 2 AMD Instinct MI300X (100 TFLOPS; "
                            "below 80% in every sample)")
    assert speed_figures(slow)["matmul-fp32"].reference == "node: the faster of 2 AMD Instinct MI300X"
    assert "action" not in slow.measurements


def test_simulated_gpus_are_held_against_each_other_beside_the_hosts_same_work():
    """Each GPU's samples over its host work's timed beside them: a core slower for one GPU's process slows its host
    work too (not named), a GPU slower than its host work is (named, saying how it was compared)."""
    def timed(index, samples, host):
        v = verdict(gpu(index, "simulated GPU"), matmul_fp32=samples)
        figure = speed_figures(v)["matmul-fp32"]
        v.measurements["speed"]["matmul-fp32"] = replace(figure, host_samples=host).to_dict()
        return v

    assert speed.judge_node([timed(0, [58, 57, 59], [100, 98, 101]), timed(1, [100, 99, 101], [172, 170, 174])]) == []
    slow = timed(1, [58, 57, 59], [100, 98, 101])
    (found,) = speed.judge_node([timed(0, [100, 99, 101], [100, 98, 101]), slow])
    assert (found["gpu"], found["reference"]) == (1, 100)
    assert slow.message.endswith("matmul-fp32 58 TFLOPS is 58% of the faster of 2 simulated GPU (100 TFLOPS; "
                                 "below 80% in every sample, each beside its host's same work)"), slow.message
    # one GPU without the host's samples: each compared as measured
    assert speed.judge_node([timed(0, [58, 57, 59], [100, 98, 101]), verdict(gpu(1, "simulated GPU"),
                                                                            matmul_fp32=[100, 99, 101])])


def test_with_more_gpus_the_median_and_nogo_fails_with_an_action():
    gpus = [verdict(gpu(i), device_memory_copy=[rate] * 3) for i, rate in enumerate((4000, 4100, 3900, 2000))]
    found = speed.judge_node(gpus, nogo=True)
    assert [(f["gpu"], f["reference"], f["status"]) for f in found] == [(3, 3950, "fail")]
    assert gpus[3].status is Status.FAIL and "the median of 4 AMD Instinct MI300X" in gpus[3].message
    assert gpus[3].measurements["action"].startswith("drain the node; check GPU 3 (cuda:3, 0000:03:00.0)")
    assert [g.status for g in gpus[:3]] == [Status.PASS] * 3


@pytest.mark.parametrize("second, named", [
    (verdict(gpu(1), matmul_fp32=[30, 31, 90]), False),  # one sample as fast as its peer: noise, not a slow GPU
    (verdict(gpu(1, "NVIDIA H100 PCIe"), matmul_fp32=[30] * 3), False),  # another model: no peer
    (verdict({"name": "cpu"}, matmul_fp32=[30] * 3), False),  # the CPU is no GPU of the node
    (verdict(gpu(0), matmul_fp32=[30] * 3), False),  # the same GPU twice is one GPU
    (verdict(gpu(1), matmul_fp32=[70] * 3), True),
])
def test_only_a_gpu_slow_in_every_sample_against_a_peer_of_its_model_is_named(second, named):
    assert bool(speed.judge_node([verdict(gpu(0), matmul_fp32=[100] * 3), second])) is named


def test_among_names_only_figures_slow_in_the_earlier_measurement_too():
    def pair():
        return [verdict(gpu(0), matmul_fp32=[100] * 3, matmul_bf16=[100] * 3),
                verdict(gpu(1), matmul_fp32=[30] * 3, matmul_bf16=[30] * 3)]

    first = {s.key for s in speed.slow_figures(pair())}
    assert first == {("speed", 1, "matmul-fp32"), ("speed", 1, "matmul-bf16")}
    again = speed.judge_node(pair(), among={("speed", 1, "matmul-bf16")})
    assert [f["figure"] for f in again] == ["matmul-bf16"]


# --- the planted slow GPU -----------------------------------------------------------------------


@pytest.mark.parametrize("arg, ok", [("1", True), ("1:4", True), (None, True), ("1:x", False), ("1:2:3", False),
                                     ("x", False)])
def test_slow_matmul_takes_a_gpu_index_and_a_factor(arg, ok):
    spec = "simgpu:2,simgpu-slow-matmul" + (f":{arg}" if arg else "")
    if ok:
        assert [str(r) for r in faults.parse(spec)][-1] == "simgpu-slow-matmul" + (f":{arg}" if arg else "")
    else:
        with pytest.raises(UsageError, match=r"takes IDX\[:FACTOR\], not "):
            faults.parse(spec)


@pytest.mark.children
@pytest.mark.alone
@pytest.mark.parametrize("slow_gpu, code, status", [(None, 0, "GO"), ("nogo", 1, "NO-GO")])
def test_the_gate_names_the_slowed_simulated_gpu(tmp_path, capsys, slow_gpu, code, status):
    """`gate --inject simgpu:2,simgpu-slow-matmul:1`: GPU 1's products run 3x as slow; its speed
    verdict warns (or fails under --slow-gpu nogo) and the node verdict names it, and only it."""
    args = ["gate", "--require", "speed", "--inject", "simgpu:2,simgpu-slow-matmul:1", "--out-dir", str(tmp_path),
            "--json", "-", *(["--slow-gpu", slow_gpu] if slow_gpu else [])]
    assert main(args) == code
    node = json.loads(capsys.readouterr().out)
    assert node["status"] == status
    named = {(g["gpu"], g["figure"]) for g in node["slow_gpus"]}
    # its matrix figures, 1/3 of GPU 0's (one can miss a run when the host's load slows GPU 0 as much)
    assert named and all(gpu == 1 and figure.startswith("matmul-") for gpu, figure in named), named
    listed = node["failing"] if slow_gpu else node["warnings"]
    assert [e["device"]["index"] for e in listed if e["check"] == "speed"] == [1]
    report = json.loads(next(Path(tmp_path).glob("rocmcheck-*.json")).read_text())
    first = [v["evidence"]["speed_while_every_gpu_ran"] for v in report["verdicts"] if v["probe"] == "speed"]
    assert len(first) == 2  # measured again, one GPU at a time, before it was named


def test_the_rank_program_measures_all_reduce_bus_bandwidth_by_nccl_tests_formula(rocm_run, tmp_path):
    """The all-reduce figure's rank check on 2 CPU ranks through gloo (on GPUs, `multigpu-speed` runs it
    through NCCL/RCCL), driven from a probe child as `run_distributed` is: the ranks fork from it."""
    (tmp_path / "busbw_probe.py").write_text(textwrap.dedent('''
        import sys
        import rocmcheck

        @rocmcheck.probe("busbw", title="t", targets="t", timeout=120)
        def busbw(ctx):
            multigpu = sys.modules["rocmcheck.probes.multigpu"]
            ctx.measure(checks=multigpu.run_distributed(ctx, "gloo", world=2, names=("all_reduce_busbw",)))
    '''))
    (verdict,) = rocm_run(probe="busbw", probes_path=[str(tmp_path)])
    assert verdict["status"] == "pass", verdict["message"]
    for rank in ("0", "1"):
        result = verdict["measurements"]["checks"][rank]["all_reduce_busbw"]
        assert result["ok"] and len(result["busbw_gbps"]) == 10 and all(b > 0 for b in result["busbw_gbps"])
        assert result["message"].startswith("median bus bandwidth ")
