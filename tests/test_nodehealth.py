"""`node-health`: the GPU's own counters judged on fixture trees shaped like real cards' sysfs
(tests/fixtures/nodehealth/README.md names the sources), an H100 `nvidia-smi -q -x` document and
a stand-in for nvidia-ml-py's `pynvml`; one end-to-end gate on two (fake) GPUs."""
from __future__ import annotations

import ctypes
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from rocmcheck.host import nodehealth
from rocmcheck.outputs import node
from rocmcheck.records import Report

FIXTURES = Path(__file__).parent / "fixtures" / "nodehealth"
CARDS = {"mi250x": "0000:c1:00.0", "mi300x": "0000:0c:00.0", "rx7900xtx": "0000:03:00.0"}
H100 = (FIXTURES / "h100.xml").read_text()


def tree(tmp_path: Path, cards: dict) -> Path:
    """A writable host root holding each fixture card at the address given ({address: card})."""
    root = tmp_path / "host"
    for address, card in cards.items():
        src = FIXTURES / card / "sys/bus/pci/devices" / CARDS[card]
        shutil.copytree(src, root / "sys/bus/pci/devices" / address, symlinks=True)
        (root / "sys/bus/pci/drivers/amdgpu").mkdir(parents=True, exist_ok=True)
    return root


def device(root: Path, address: str) -> Path:
    return root / "sys/bus/pci/devices" / address


def read(card: str) -> nodehealth.GpuHealth:
    return nodehealth.snapshot(FIXTURES / card)[CARDS[card]]


# --- AMD ---------------------------------------------------------------------------------------


def test_mi250x_with_a_page_pending_retirement_is_no_go_with_the_action():
    health = read("mi250x")
    assert health.source == "amdgpu sysfs" and health.pages == {"retired": 1, "pending": 1, "failed": 0}
    assert set(health.ue) == {"umc", "sdma", "gfx", "mmhub", "pcie_bif", "hdp"} and health.ras_features == \
        "feature mask: 0x6f"
    finding = nodehealth.judge(health, health, 3)
    assert finding.status == "fail" and "1 bad memory pages pending retirement" in finding.message
    assert finding.action == "drain the node; reset or replace GPU 3 (0000:c1:00.0)"
    assert "from amdgpu sysfs" in finding.message


def test_mi300x_correctable_errors_rising_during_the_run_warn_with_the_numbers(tmp_path):
    root = tree(tmp_path, {"0000:0c:00.0": "mi300x"})
    before = nodehealth.snapshot(root)["0000:0c:00.0"]
    assert before.ce["umc"] == 3 and before.de["umc"] == 0  # the newer kernel's de: line is read too
    unchanged = nodehealth.judge(before, nodehealth.snapshot(root)["0000:0c:00.0"], 0)
    assert unchanged.status == "pass" and "3 correctable errors (none new)" in unchanged.message
    (device(root, "0000:0c:00.0") / "ras/umc_err_count").write_text("ue: 0\nce: 11\nde: 0\n")
    (device(root, "0000:0c:00.0") / "pcie_replay_count").write_text("12\n")
    finding = nodehealth.judge(before, nodehealth.snapshot(root)["0000:0c:00.0"], 0)
    assert finding.status == "warn" and "correctable errors rose during the run: umc 3 -> 11 (+8)" in finding.message
    assert "PCIe replays rose during the run: 0 -> 12 (+12)" in finding.message
    assert finding.measurements["correctable_before"]["umc"] == 3 and finding.measurements["correctable"]["umc"] == 11


def test_uncorrectable_errors_since_boot_are_no_go(tmp_path):
    root = tree(tmp_path, {"0000:0c:00.0": "mi300x"})
    (device(root, "0000:0c:00.0") / "ras/gfx_err_count").write_text("ue: 2\nce: 0\nde: 0\n")
    finding = nodehealth.judge(None, nodehealth.snapshot(root)["0000:0c:00.0"], 5)
    assert finding.status == "fail" and "2 uncorrectable errors since boot (gfx 2)" in finding.message
    assert finding.action.startswith("drain the node; reset or replace GPU 5")


def test_rdna3_card_without_ras_skips_naming_the_missing_folder():
    health = read("rx7900xtx")
    finding = nodehealth.judge(health, health, 0)
    assert finding.status == "skip" and "ras/ (the driver exposes no RAS error counters" in finding.message
    m = finding.measurements
    assert m["pcie_replays"] == 0 and {t["sensor"] for t in m["temperatures"]} == {"edge", "junction", "mem"}
    assert m["power_w"] == 17.0 and m["power_cap_w"] == 327.0


@pytest.mark.parametrize("file, text, words", [
    ("hwmon/hwmon1/temp2_input", "111000\n", "throttled at idle: junction 111 C at or above its critical 110 C"),
    ("hwmon/hwmon1/power1_average", "320000000\n", "throttled at idle: power 320 W at its cap 327 W"),
])
def test_thermal_or_power_throttling_at_idle_warns(tmp_path, file, text, words):
    root = tree(tmp_path, {"0000:03:00.0": "rx7900xtx"})
    (device(root, "0000:03:00.0") / file).write_text(text)
    idle = nodehealth.snapshot(root)["0000:03:00.0"]
    cool = read("rx7900xtx")
    finding = nodehealth.judge(idle, cool, 0)  # judged on the reading before the run: the GPU was idle then
    assert finding.status == "warn" and words in finding.message


@pytest.mark.parametrize("file, text, words", [
    ("ras/umc_err_count", "Query currently inaccessible\n", "umc_err_count: 'Query currently inaccessible'"),
    ("ras/gpu_vram_bad_pages", "\x00\x01garbage\n", "gpu_vram_bad_pages: not in the pfn : size : flag format"),
    ("pcie_replay_count", "lots\n", "pcie_replay_count: not a number ('lots')"),
    ("hwmon/hwmon2/temp2_input", "", "temp2_input: not a number ('')"),  # garbage, not a sensor the driver hides
])
def test_a_garbage_counter_file_is_named_never_raised(tmp_path, file, text, words):
    root = tree(tmp_path, {"0000:0c:00.0": "mi300x"})
    (device(root, "0000:0c:00.0") / file).write_text(text)
    finding = nodehealth.judge(None, nodehealth.snapshot(root)["0000:0c:00.0"], 0)
    assert finding.status == "warn" and "cannot read" in finding.message and words in finding.message


def test_an_unreadable_counter_warns_and_an_unreadable_sensor_is_only_not_exposed(tmp_path):
    root = tree(tmp_path, {"0000:0c:00.0": "mi300x"})
    counter, sensor = (device(root, "0000:0c:00.0") / f for f in ("ras/umc_err_count", "hwmon/hwmon2/temp3_input"))
    for path in (counter, sensor):
        path.unlink()
        path.mkdir()  # reading a folder fails with an OSError whoever runs the suite (root included)
    health = nodehealth.snapshot(root)["0000:0c:00.0"]
    assert any(u.startswith(f"{counter}: ") for u in health.unreadable) and "umc" not in health.ce
    assert any(n.startswith(f"{sensor}: ") for n in health.not_exposed)  # amdgpu answers EINVAL for some sensors
    assert not any(str(sensor) in u for u in health.unreadable) and len(health.temperatures) == 1
    assert nodehealth.judge(None, health, 0).status == "warn"  # for the counter only


def test_a_host_without_the_tree_has_no_gpus(tmp_path):
    assert nodehealth.snapshot(tmp_path / "nothing") == {}


# --- NVIDIA ------------------------------------------------------------------------------------


def h100(**edits: str) -> nodehealth.GpuHealth:
    text = H100
    for old, new in edits.items():
        assert old in text, old
        text = text.replace(old, new)
    return nodehealth.parse_nvidia_smi(text)["0000:19:00.0"]


def test_a_healthy_h100_from_nvidia_smi_passes_and_says_its_source():
    health = h100()
    assert health.ue == {"sram_uncorrectable_parity": 0, "sram_uncorrectable_secded": 0, "dram_uncorrectable": 0}
    assert health.pages == {} and health.rows == {"correctable": 0, "uncorrectable": 0} and health.throttle == []
    assert health.flags == {"remapped_row_pending": False, "remapped_row_failure": False,
                            "sram_threshold_exceeded": False, "reset_required": False,
                            "drain_and_reset_recommended": False}  # pending_retirement: N/A on Hopper
    assert (health.pcie_replays, health.power_w, health.power_cap_w) == (0, 71.5, 700.0)
    finding = nodehealth.judge(health, health, 0)
    assert finding.status == "pass" and "from nvidia-smi -q -x" in finding.message


RESET = "drain the node; reset GPU 2 (0000:19:00.0) (nvidia-smi -r) once its jobs have ended"
REPLACE = "drain the node; replace GPU 2 (0000:19:00.0) (NVIDIA's field diagnostic confirms an RMA)"


@pytest.mark.parametrize("old, new, status, words, action", [
    ("<dram_uncorrectable>0</dram_uncorrectable>", "<dram_uncorrectable>4</dram_uncorrectable>", "fail",
     "4 uncorrectable errors since boot (dram_uncorrectable 4)",
     "drain the node; reset or replace GPU 2 (0000:19:00.0)"),
    # NVIDIA's words: a row remap waits for a GPU reset; a failed one is the DRAM RMA criterion
    ("<remapped_row_pending>No</", "<remapped_row_pending>Yes</", "fail",
     "a row remap is pending (remapped_row_pending): it takes effect at the next GPU reset", RESET),
    ("<remapped_row_failure>No</", "<remapped_row_failure>Yes</", "fail",
     "a row remap failed (remapped_row_failure): NVIDIA's DRAM memory RMA policy criterion", REPLACE),
    # the L2 memory RMA policy: the flag set is the replacement criterion, whatever the counters say
    ("<sram_threshold_exceeded>No</", "<sram_threshold_exceeded>Yes</", "fail",
     "(sram_threshold_exceeded): the L2 memory RMA policy criterion for replacing the GPU is met", REPLACE),
    ("<reset_required>No</", "<reset_required>Yes</", "fail", "the driver says the GPU needs a reset", RESET),
    ("<drain_and_reset_recommended>No</", "<drain_and_reset_recommended>Yes</", "fail",
     "the driver recommends draining the GPU and resetting it", RESET),
    ("<clocks_event_reason_hw_thermal_slowdown>Not Active</", "<clocks_event_reason_hw_thermal_slowdown>Active</",
     "warn", "throttled at idle: throttle reason hw_thermal_slowdown active", None),
])
def test_h100_verdicts(old, new, status, words, action):
    bad = h100(**{old: new})
    finding = nodehealth.judge(bad, bad, 2)
    assert finding.status == status and words in finding.message, finding.message
    assert "pages" not in finding.message and finding.action == action


def test_pending_retirement_printed_under_two_names_is_one_status():
    """nvidia-smi prints NVML's one boolean (nvmlDeviceGetRetiredPagesPendingStatus) as both
    pending_blacklist and pending_retirement: one pending status, never a count of two pages."""
    both = h100(**{"<pending_blacklist>N/A</": "<pending_blacklist>Yes</",
                   "<pending_retirement>N/A</": "<pending_retirement>Yes</"})
    one = h100(**{"<pending_blacklist>N/A</": "<pending_blacklist>Yes</"})
    assert both.flags["pending_retirement"] is one.flags["pending_retirement"] is True
    finding = nodehealth.judge(both, both, 2)
    assert finding.status == "fail" and finding.action == RESET
    assert finding.message.count("a page retirement is pending (pending_retirement)") == 1
    assert "2 " not in finding.message.split(": ", 1)[1]


def h100_r580(**edits: str) -> nodehealth.GpuHealth:
    text = (FIXTURES / "h100-r580.xml").read_text()
    for old, new in edits.items():
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return nodehealth.parse_nvidia_smi(text)["0000:19:00.0"]


def test_the_newest_layout_passes_healthy_and_deprecated_reset_fields_are_no_answer():
    health = h100_r580()
    assert health.recovery_action is None and "reset_required" not in health.flags
    assert health.flags["channel_repair_pending"] is health.flags["tpc_repair_pending"] is False
    assert nodehealth.judge(health, health, 0).status == "pass"


@pytest.mark.parametrize("old, new, words, action", [
    ("<gpu_recovery_action>None</", "<gpu_recovery_action>Reset</", "recovery action is 'Reset'", RESET),
    ("<gpu_recovery_action>None</", "<gpu_recovery_action>Reboot</", "recovery action is 'Reboot'",
     "drain the node; reboot it"),
    ("<gpu_recovery_action>None</", "<gpu_recovery_action>Drain P2P</", "recovery action is 'Drain P2P'",
     "drain the node; end the jobs that use peer-to-peer traffic with GPU 2 (0000:19:00.0), then read its "
     "recovery action again"),
    ("<gpu_recovery_action>None</", "<gpu_recovery_action>Drain and Reset</", "'Drain and Reset'", RESET),
    ("<channel_repair_pending>No</", "<channel_repair_pending>Yes</", "an HBM channel repair is pending", RESET),
    ("<tpc_repair_pending>No</", "<tpc_repair_pending>Yes</", "a TPC repair is pending", RESET),
])
def test_newest_layout_recovery_action_and_repair_flags_are_no_go_with_nvidias_action(old, new, words, action):
    bad = h100_r580(**{old: new})
    finding = nodehealth.judge(bad, bad, 2)
    assert finding.status == "fail" and words in finding.message and finding.action == action


def test_the_strongest_action_wins_and_describe_names_the_flags():
    bad = h100_r580(**{"<channel_repair_pending>No</": "<channel_repair_pending>Yes</",
                       "<sram_threshold_exceeded>No</": "<sram_threshold_exceeded>Yes</"})
    assert nodehealth.judge(bad, bad, 2).action == REPLACE
    assert "sram_threshold_exceeded; channel_repair_pending" in nodehealth.describe(bad)


def test_h100_with_ecc_off_skips_and_garbage_xml_is_a_value_error():
    start, end = H100.index("<ecc_errors>"), H100.index("</remapped_rows>") + len("</remapped_rows>")
    off = nodehealth.parse_nvidia_smi(H100[:start] + H100[end:])["0000:19:00.0"]
    assert nodehealth.judge(off, off, 0).status == "skip"
    for garbage in ("<nvidia_smi_log><gpu id=", "<html></html>"):
        with pytest.raises(ValueError, match="not an nvidia-smi XML document"):
            nodehealth.parse_nvidia_smi(garbage)


def test_a_truncated_document_names_the_line_and_column_in_the_verdict(tmp_path, monkeypatch):
    """The parse error reaches the verdict through the redaction every message goes through;
    expat's "unclosed token: line N, column M" must keep its place."""
    from rocmcheck import safetext

    cut = tmp_path / "cut.xml"
    cut.write_text(H100[:H100.index("<pci_bus>19") + 5])
    monkeypatch.setenv(nodehealth.SMI_XML_ENV, str(cut))
    health = nodehealth.read_nvidia(["0000:19:00.0"])["0000:19:00.0"]
    text = safetext.clean(nodehealth.judge(health, health, 0).message)
    assert re.search(r"unclosed token: line \d+, column \d+", text), text


class FakeNVMLError(Exception):
    pass


class SramStatus(ctypes.Structure):
    """nvmlEccSramErrorStatus_v1_t as far as node-health reads it."""
    _fields_ = [("version", ctypes.c_uint), ("bThresholdExceeded", ctypes.c_uint)]


def fake_pynvml(ue: int = 0, remapped=(0, 0, False, False), reasons: int = 0x1, sram: int = 0, repair=(0, 0),
                fields=None):
    """A stand-in for nvidia-ml-py's `pynvml`: one H100 at 0000:19:00.0. `fields` maps an NVML field
    id to its value (absent: NVML answers NVML_ERROR_NOT_SUPPORTED, 3, for that field)."""
    calls = []
    fields = {230: 0, 226: 0, 227: 0} if fields is None else fields

    def remapped_rows(handle):
        if remapped is None:
            raise FakeNVMLError("Not Supported")
        return remapped

    def sram_status(handle, ref):
        ref._obj.bThresholdExceeded = sram
        return 0  # NVML_SUCCESS, as pynvml returns it

    def field_values(handle, ids):
        return [SimpleNamespace(fieldId=i, nvmlReturn=0 if i in fields else 3,
                                value=SimpleNamespace(uiVal=fields.get(i, 0))) for i in ids]

    return calls, SimpleNamespace(
        NVMLError=FakeNVMLError, NVML_MEMORY_ERROR_TYPE_UNCORRECTED=1, NVML_MEMORY_ERROR_TYPE_CORRECTED=0,
        NVML_VOLATILE_ECC=0, NVML_TEMPERATURE_GPU=0,
        nvmlInit=lambda: calls.append("init"), nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetCount=lambda: 1, nvmlDeviceGetHandleByIndex=lambda i: f"h{i}",
        nvmlDeviceGetPciInfo=lambda h: SimpleNamespace(busId=b"00000000:19:00.0"),
        nvmlDeviceGetTotalEccErrors=lambda h, kind, counter: ue if kind == 1 else 7,
        nvmlDeviceGetRetiredPagesPendingStatus=lambda h: 0, nvmlDeviceGetRemappedRows=remapped_rows,
        c_nvmlEccSramErrorStatus_v1_t=SramStatus, nvmlDeviceGetSramEccErrorStatus=sram_status,
        nvmlDeviceGetRepairStatus=lambda h: list(repair), nvmlDeviceGetFieldValues=field_values,
        nvmlDeviceGetCurrentClocksEventReasons=lambda h: reasons, nvmlDeviceGetPcieReplayCounter=lambda h: 0,
        nvmlDeviceGetTemperature=lambda h, sensor: 33, nvmlDeviceGetPowerUsage=lambda h: 71500,
        nvmlDeviceGetEnforcedPowerLimit=lambda h: 700000)


def test_nvml_readings_are_judged_like_nvidia_smis():
    calls, nvml = fake_pynvml()
    health = nodehealth.read_nvml(nvml)["0000:19:00.0"]
    assert calls == ["init", "shutdown"] and health.source == "NVML (nvidia-ml-py)"
    assert (health.ue, health.ce, health.power_w, health.power_cap_w) == ({"volatile_total": 0},
                                                                          {"volatile_total": 7}, 71.5, 700.0)
    assert nodehealth.judge(health, health, 0).status == "pass"  # the idle reason is no throttle
    _, failing = fake_pynvml(ue=1, remapped=None, reasons=0x4 | 0x1)
    bad = nodehealth.read_nvml(failing)["0000:19:00.0"]
    assert any("nvmlDeviceGetRemappedRows (Not Supported)" in n for n in bad.not_exposed)
    assert bad.throttle == ["sw_power_cap"]
    assert nodehealth.judge(bad, bad, 1).status == "fail"


@pytest.mark.parametrize("kwargs, words", [
    ({"sram": 1}, "(sram_threshold_exceeded): the L2 memory RMA policy criterion"),
    ({"repair": (1, 0)}, "an HBM channel repair is pending"),
    ({"repair": (0, 1)}, "a TPC repair is pending"),
    ({"remapped": (0, 3, True, False)}, "a row remap is pending (remapped_row_pending)"),
    ({"fields": {230: 4, 226: 0, 227: 0}}, "the driver's recovery action is 'Drain and Reset'"),
    ({"fields": {230: 0, 226: 1, 227: 0}}, "the driver says the GPU needs a reset (reset_required)"),
])
def test_nvml_reads_the_same_flags_and_recovery_action_as_nvidia_smi(kwargs, words):
    _, nvml = fake_pynvml(**kwargs)
    health = nodehealth.read_nvml(nvml)["0000:19:00.0"]
    finding = nodehealth.judge(health, health, 0)
    assert finding.status == "fail" and words in finding.message and "pages" not in finding.message


def test_nvml_without_the_newer_calls_names_what_it_could_not_read():
    _, nvml = fake_pynvml(fields={230: 0})  # a driver that deprecated the two reset fields
    del nvml.nvmlDeviceGetRepairStatus  # nvidia-ml-py older than the call
    health = nodehealth.read_nvml(nvml)["0000:19:00.0"]
    assert "NVML field 226 (return 3)" in health.not_exposed and "NVML field 227 (return 3)" in health.not_exposed
    assert any(n.startswith("NVML nvmlDeviceGetRepairStatus") for n in health.not_exposed)
    assert nodehealth.judge(health, health, 0).status == "pass"


def test_without_nvml_or_nvidia_smi_each_gpu_names_both(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    monkeypatch.delenv(nodehealth.SMI_XML_ENV, raising=False)
    monkeypatch.setenv("PATH", "")
    health = nodehealth.read_nvidia(["0000:19:00.0"])["0000:19:00.0"]
    assert "nvidia-ml-py is not installed (pip install 'rocmcheck[nvidia]')" in health.not_exposed
    assert "nvidia-smi is not on PATH" in health.not_exposed
    assert nodehealth.judge(health, health, 0).status == "skip"


@pytest.mark.children
def test_a_hung_nvml_is_left_behind_and_nvidia_smi_asked_instead(monkeypatch, tmp_path):
    import threading

    never = threading.Event()
    _, nvml = fake_pynvml()
    nvml.nvmlInit = never.wait  # a GPU that fell off the bus can hang NVML in the gate's own process
    monkeypatch.setattr(nodehealth, "NVML_TIMEOUT_S", 0.2)
    monkeypatch.delenv(nodehealth.SMI_XML_ENV, raising=False)
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!{sys.executable}\nprint(open({str(FIXTURES / 'h100.xml')!r}).read())\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    health = nodehealth.read_nvidia(["0000:19:00.0"], nvml)["0000:19:00.0"]
    assert health.source == "nvidia-smi -q -x" and health.ue["dram_uncorrectable"] == 0
    never.set()


# --- the gate ----------------------------------------------------------------------------------


def test_no_torch_reproducer_is_made_for_the_driver_counters():
    from rocmcheck import registry
    from rocmcheck.outputs import repro

    spec = registry.load_all()["node-health"]
    with pytest.raises(repro.ReproError, match="reads the driver's files, not torch: `rocmcheck env`"):
        repro.build(spec, {"variant": "node-health", "status": "fail"}, {"run": {"device": "cuda:0"}}, "m")


def test_the_node_verdict_carries_the_probes_own_action():
    report = {"run": {"device": "cuda:1"}, "verdicts": [
        {"probe": "node-health", "variant": "node-health", "status": "fail", "message": "m", "device": "cuda:1",
         "measurements": {"action": "drain the node; reset or replace GPU 1 (0000:11:00.0)"}}]}
    (failing,) = node.verdict(Report.from_dict(report), 1)["failing"]
    assert failing["action"] == "drain the node; reset or replace GPU 1 (0000:11:00.0)"


BUMP = """
import os
import rocmcheck

@rocmcheck.probe("zz-bump", title="a GPU whose correctable errors rise while the gate works", targets="test")
def bump(ctx):
    ras = os.path.join(os.environ["ROCMCHECK_HOST_ROOT"], "sys/bus/pci/devices/0000:10:00.0/ras/umc_err_count")
    with open(ras, "w") as f:
        f.write("ue: 0\\nce: 9\\nde: 0\\n")
"""


@pytest.mark.children
def test_gate_on_two_gpus_reads_counters_before_and_after_in_the_parent_and_drains_the_failing_one(tmp_path):
    root = tree(tmp_path, {"0000:10:00.0": "mi300x", "0000:11:00.0": "mi250x"})
    (tmp_path / "probes").mkdir()
    (tmp_path / "probes" / "bump.py").write_text(BUMP)
    env = {**__import__("os").environ, "ROCMCHECK_HOST_ROOT": str(root)}
    out = subprocess.run([sys.executable, "-m", "rocmcheck", "gate", "--require", "node-health", "--require", "zz-bump",
                          "--probes-path", str(tmp_path / "probes"), "--inject", "simgpu:2", "--json", "-",
                          "--out-dir", str(tmp_path / "reports")], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 1, out.stderr
    verdict = json.loads(out.stdout)
    assert verdict["status"] == "NO-GO"
    (failing,) = verdict["failing"]
    assert failing["check"] == "node-health" and failing["device"]["name"] == "simgpu:1"
    assert failing["action"] == "drain the node; reset or replace GPU 1 (0000:11:00.0)"
    report = json.loads(Path(verdict["reports"]["json"]).read_text())
    health = {v["device"]["name"]: v for v in report["verdicts"] if v["probe"] == "node-health"}
    # read before zz-bump ran (the baseline) and after it (node-health runs last on each GPU, whatever its name)
    assert health["simgpu:0"]["status"] == "warn" and "umc 3 -> 9 (+6)" in health["simgpu:0"]["message"]
    failing_gpu = health["simgpu:1"]
    assert failing_gpu["measurements"]["pcie_replays"] == 0 and "pending retirement" in failing_gpu["message"]
    (warned,) = verdict["warnings"]  # the node verdict lists what to watch too
    assert warned["check"] == "node-health" and warned["device"]["name"] == "simgpu:0" and "+6" in warned["message"]
    assert all("runtime_init_s" not in v["measurements"] for v in health.values())  # no child, no GPU runtime
