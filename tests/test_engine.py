"""Unit tests of the engine's pieces: selection, faults, exit codes, capture, storage,
known issues, device selection, fall-back and unkillable children."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import probes_in_tree
from rocmcheck import registry
from rocmcheck.engine.capture import TASK_END, OutputDrain
from rocmcheck.engine.exitcodes import describe
from rocmcheck.engine.isolation import Isolation
from rocmcheck.engine.killpolicy import KillPolicy, KillStep
from rocmcheck.engine.launch import ChildProcess, SpawnLauncher
from rocmcheck.engine.selection import keyword_matcher, select
from rocmcheck.engine.task import ErrorInfo, TaskResult
from rocmcheck.engine.verdicts import assemble
from rocmcheck.engine.watchdog import ChildEnd, supervise
from rocmcheck.errors import UsageError
from rocmcheck.faults import parse as parse_faults
from rocmcheck.knowledge import known_issues
from rocmcheck.knowledge.signatures import signatures
from rocmcheck.markers import TaskFiles
from rocmcheck.model import DeviceInfo, ProbeSpec, Requires, Status, Variant, Verdict, expand_variants, variant_id
from rocmcheck.outputs.storage import Journal, load_report, report_json, write_atomic
from rocmcheck.records import SCHEMA, Report, RunInfo

FAKE = str(Path(__file__).parent / "fake_probes")


# --- model and selection -------------------------------------------------------------


def test_variants_from_dict_of_lists_are_the_cartesian_product():
    assert expand_variants({"a": [1, 2], "b": ["x"]}) == ({"a": 1, "b": "x"}, {"a": 2, "b": "x"})
    assert expand_variants(None) == ({},)
    assert variant_id("p", {"m": "to", "pin": True}) == "p[to-true]"


@pytest.mark.parametrize("expr,hits", [
    ("to", {"t[to-f32]", "t[to-f16]"}), ("to and not f16", {"t[to-f32]"}),
    ("cuda or (to and f16)", {"t[cuda-f32]", "t[to-f16]"}), ("not (to)", {"t[cuda-f32]", "g[x]"}),
])
def test_keyword_expressions(expr, hits):
    ids = ["t[to-f32]", "t[to-f16]", "t[cuda-f32]", "g[x]"]
    matcher = keyword_matcher(expr)
    assert {i for i in ids if matcher(i)} == hits


@pytest.mark.parametrize("expr", ["", "and", "(to", "to or", "to )"])
def test_bad_keyword_expressions_are_usage_errors(expr):
    with pytest.raises(UsageError):
        keyword_matcher(expr)


def test_unknown_probe_id_is_a_usage_error():
    with pytest.raises(UsageError, match="unknown probe id 'nope'"):
        select(registry.load_all(), ["nope"])


def test_gate_only_selects_gate_variants():
    specs = registry.load_all([FAKE])
    ids = {v.id for v in select(specs, ["fake-*"], gate_only=True)}
    assert ids == {"fake-pass"}


def test_requirements_name_the_reason():
    cpu = DeviceInfo()
    gpu1 = DeviceInfo("cuda:0", "rocm", 1, "gfx1100")
    assert "needs a GPU" in Requires(gpu=True).unmet(cpu, "linux")
    assert "needs 2 GPUs; 1 visible" in Requires(gpus=2).unmet(gpu1, "linux")
    assert "cuda backend" in Requires(gpu=True, backend="cuda").unmet(gpu1, "linux")
    assert "platform win32" in Requires(platforms=("win32",)).unmet(gpu1, "linux")
    assert Requires(gpu=True).unmet(gpu1, "linux") is None
    simulated = DeviceInfo("simgpu:1", "cpu", 2)
    assert simulated.simulated and not gpu1.simulated and not cpu.simulated
    assert Requires(gpu=True).unmet(simulated, "linux") is None  # a GPU's code paths run on a simulated one
    assert Requires(cuda_runtime=True).unmet(simulated, "linux") == \
        "needs torch.cuda itself (CUDA or ROCm); simgpu:1 is a simulated GPU without it"
    assert Requires(cuda_runtime=True).unmet(gpu1, "linux") is None
    assert "needs a GPU" in Requires(cuda_runtime=True).unmet(cpu, "linux")


@pytest.mark.children
def test_probe_modules_import_without_torch_or_numpy():
    code = ("import sys; from rocmcheck import registry, faults; specs = registry.load_all(); faults.catalogue(); "
            "import rocmcheck.cli; print(len(specs), *sorted(m for m in ('torch', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(probes_in_tree())]  # every probe loaded, and neither module


def test_duplicate_probe_ids_across_modules_are_rejected(tmp_path):
    for name in ("a", "b"):
        (tmp_path / f"{name}.py").write_text(
            "import rocmcheck\n@rocmcheck.probe('dup-probe', title='t', targets='t')\ndef p(ctx):\n    pass\n")
    with pytest.raises(UsageError, match="defined twice"):
        registry.load_all([str(tmp_path)])


def test_broken_probe_module_is_a_one_line_usage_error(tmp_path):
    (tmp_path / "broken.py").write_text("import rocmcheck\ndef broken(:\n")
    with pytest.raises(UsageError, match="cannot load probe module .*SyntaxError"):
        registry.load_all([str(tmp_path)])


# --- faults ------------------------------------------------------------------------------


def test_fault_specs_parse_with_arg_and_scope():
    (req,) = parse_faults("copy-zeros:copy_@transfer*")
    assert (req.name, req.arg, req.scope) == ("copy-zeros", "copy_", "transfer*")
    assert req.applies_to("transfer") and not req.applies_to("gemm")
    with pytest.raises(UsageError, match="unknown fault 'nope'"):
        parse_faults("segv,nope")


@pytest.mark.parametrize("spec,message", [
    ("sdpa-backward-hang:bogus", "takes math|flash|efficient|cudnn, not 'bogus'"),
    ("copy-zeros:nope", "not 'nope'"), ("segv:3", "takes no argument"),
    ("output-flood:lots", "takes a whole number (MiB)"),
])
def test_fault_arguments_are_checked(spec, message):
    with pytest.raises(UsageError, match=message.replace("|", "\\|").replace("(", "\\(").replace(")", "\\)")):
        parse_faults(spec)
    assert parse_faults("copy-zeros:pin*")[0].arg == "pin*"  # a glob over the choices
    assert parse_faults("exit-no-result:3")[0].arg == "3"


# --- exit codes and signatures ---------------------------------------------------------------


def test_exit_statuses_are_named():
    assert describe(-signal.SIGSEGV) == "SIGSEGV"
    assert describe(3) == "exit 3"
    assert "SIGKILL" in describe(137)
    assert describe(0xC0000005, windows=True).startswith("STATUS_ACCESS_VIOLATION")
    assert describe(-1073741819, windows=True).startswith("STATUS_ACCESS_VIOLATION")  # signed form
    assert describe(3, windows=True) == "abort() (exit 3)"
    assert describe(None) == "unknown"


def test_runtime_signatures_are_recognised():
    text = "Memory access fault by GPU node-2 (Agent handle: 0x1) on address (nil). Reason: Unknown."
    found = signatures(text)
    assert "GPU memory access fault (HSA abort)" in found and any("NULL address" in f for f in found)
    assert signatures("RuntimeError: HIP error: invalid device function")
    assert signatures("all good") == []


# --- capture --------------------------------------------------------------------------------


def test_output_drain_keeps_head_and_tail_and_marks_the_cut():
    r, w = os.pipe()
    drain = OutputDrain(r, head=10, tail=10)
    os.write(w, b"HEAD------" + b"x" * 5000 + b"------TAIL")
    os.close(w)
    out = drain.finish()
    text = out.text()
    assert text.startswith("HEAD------") and text.endswith("------TAIL")
    assert "[... 5000 bytes cut by rocmcheck ...]" in text
    assert out.total == 5020 and out.truncated == 5000


def test_output_drain_cuts_a_workers_output_at_each_task_end_even_split_across_reads():
    r, w = os.pipe()
    drain = OutputDrain(r)
    half = len(TASK_END) // 2
    os.write(w, b"first task\n" + TASK_END[:half])
    time.sleep(0.2)  # the drain reads the first half of the marker on its own
    os.write(w, TASK_END[half:] + b"second task\n" + TASK_END + b"third, unfinished")
    first, second = drain.take_task_output(2.0), drain.take_task_output(2.0)
    assert first.text() == "first task\n" and second.text() == "second task\n"
    assert drain.take_task_output(0.1) is None  # the third has not ended
    os.close(w)
    assert drain.finish().text() == "third, unfinished"


# --- storage ----------------------------------------------------------------------------------


def _report(verdicts=()):
    return Report(run=RunInfo(id="x"), verdicts=list(verdicts), tool={"name": "rocmcheck"})


def test_report_json_puts_schema_first_and_has_no_nan(tmp_path):
    v = Verdict("p", "p", Status.FAIL, measurements={"err": float("nan"), "gbps": float("inf")})
    text = report_json(_report([v]))
    assert text.lstrip().startswith('{\n  "schema": "rocmcheck-report",\n  "schema_version": "1.')
    assert "NaN" not in text and '"nan"' in text and '"inf"' in text
    path = tmp_path / "r.json"
    write_atomic(path, text)
    assert load_report(path).verdicts[0].measurements["err"] == "nan"
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind


def test_journal_with_truncated_last_line_loads_as_partial(tmp_path):
    path = tmp_path / "run.jsonl"
    journal = Journal(path)
    journal.append({"record": "header", "schema": SCHEMA, "schema_version": "1.0", "run": {"id": "r"}})
    journal.append({"record": "started", "variant": "a"})
    journal.append({"record": "verdict", "verdict": Verdict("a", "a", Status.PASS).to_dict()})
    journal.append({"record": "started", "variant": "b"})
    journal.close()
    with open(path, "a") as fh:
        fh.write('{"record":"verdict","verdict":{"probe":"b","var')  # the write a crash cut off
    report = load_report(path)
    assert report.run.partial is True and report.run.interrupted == "b"
    assert [v.variant for v in report.verdicts] == ["a"]


@pytest.mark.parametrize("content,message", [
    (b"", "empty file"), (b"{not json", "not valid JSON"), (b"\xff\xfe\x00garbage", "not UTF-8"),
    (b'{"schema": "rocmcheck-report", "schema_version": "2.0", "verdicts": []}', "schema version 2.0 is not supported"),
    (b'{"schema": "other"}', "not a rocmcheck report"), (b"[1, 2]", "not a rocmcheck report"),
    (b'{"schema": "rocmcheck-report", "schema_version": "1.0", "verdicts": NaN}', "not valid JSON"),
])
def test_bad_reports_are_one_line_usage_errors(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(UsageError, match=message) as info:
        load_report(path)
    assert "\n" not in str(info.value)


def test_newer_minor_version_with_unknown_fields_loads(tmp_path):
    path = tmp_path / "newer.json"
    v = {**Verdict("p", "p", Status.PASS).to_dict(), "future_field": 1}
    path.write_text(json.dumps({"schema": SCHEMA, "schema_version": "1.7", "verdicts": [v], "extra": {}}))
    report = load_report(path)
    assert report.verdicts[0].status is Status.PASS and report.sections == {"extra": {}}  # kept, written back


def test_unreadable_report_path_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="cannot read"):
        load_report(tmp_path / "missing.json")


# --- known issues -------------------------------------------------------------------------


def test_known_issue_matching_respects_every_field(tmp_path, monkeypatch):
    entry = {"id": "x", "probe": "transfer*", "status": ["fail"], "arch": ["gfx12*"], "os": ["windows"],
             "rocm": ">=7.0,<7.2", "title": "zeros", "workaround": "HSA_ENABLE_SDMA=0", "links": ["u"]}
    (tmp_path / "mine.json").write_text(json.dumps({"issues": [entry]}))
    monkeypatch.setenv(known_issues.KNOWN_ISSUES_ENV, str(tmp_path / "mine.json"))
    fp = {"device": {"arch": "gfx1201"}, "host": {"system": "Windows"}, "device_facts": {"rocm": "7.1.0"}}
    v = Verdict("transfer", "transfer[to]", Status.FAIL)
    assert [m["id"] for m in known_issues.match(v, fp)] == ["x"]
    assert known_issues.match(Verdict("transfer", "t", Status.PASS), fp) == []
    assert known_issues.match(v, {**fp, "device_facts": {"rocm": "7.2.1"}}) == []
    assert known_issues.match(v, {**fp, "device": {"arch": "gfx1100"}}) == []


def test_version_ranges():
    assert known_issues.in_range("2.13.0+rocm7.2", ">=2.9,<2.14")
    assert not known_issues.in_range("2.5.1", ">=2.6")
    assert not known_issues.in_range(None, "<2.6")
    with pytest.raises(UsageError):
        known_issues.in_range("2.1", "about 2")


def test_a_broken_user_known_issues_file_is_a_usage_error(tmp_path, monkeypatch):
    (tmp_path / "k.json").write_text('{"issues": [{"title": "no id"}]}')
    monkeypatch.setenv(known_issues.KNOWN_ISSUES_ENV, str(tmp_path / "k.json"))
    with pytest.raises(UsageError, match="known-issues file"):
        known_issues.entries()


# --- runner behaviours --------------------------------------------------------------------


@pytest.mark.children
def test_zygote_child_that_cannot_init_the_gpu_falls_back_to_spawn(monkeypatch):
    from rocmcheck.engine.options import RunOptions
    from rocmcheck.engine.runner import Runner

    monkeypatch.setattr(Runner, "resolve_device", lambda self: setattr(self, "device", DeviceInfo()))
    variants = select(registry.load_all([FAKE]), ["fake-pass", "fake-warn"])
    opts = RunOptions(device="cpu", isolation="zygote", inject="gpu-init-fork-error", probes_paths=[FAKE],
                      write_files=False)
    report = Runner(opts).run(variants).to_dict()
    assert [v["status"] for v in report["verdicts"]] == ["pass", "warn"]
    assert report["run"]["isolation"] == "spawn"
    assert any("fell back to spawn" in n for n in report["run"]["notes"])


@pytest.mark.children
def test_unkillable_child_is_abandoned_and_later_gpu_probes_skip(monkeypatch):
    from rocmcheck.engine import isolation as isolation_mod
    from rocmcheck.engine.options import RunOptions
    from rocmcheck.engine.runner import Runner

    real = isolation_mod.supervise

    def stuck_first(child, *args, **kwargs):
        end = real(child, *args, **kwargs)
        if not getattr(stuck_first, "done", False):
            stuck_first.done = True
            end.timed_out, end.unkillable, end.state = True, True, {"status": "disk-sleep"}
        return end

    monkeypatch.setattr(isolation_mod, "supervise", stuck_first)
    monkeypatch.setattr(Runner, "resolve_device",
                        lambda self: setattr(self, "device", DeviceInfo("cuda:0", "rocm", 1, "gfx1100")))
    monkeypatch.setattr(Isolation, "start",
                        lambda self, preload: setattr(self, "launcher", SpawnLauncher([FAKE], prestart=False)))
    variants = select(registry.load_all([FAKE]), ["fake-pass", "fake-warn"])
    opts = RunOptions(device="cuda:0", isolation="spawn", probes_paths=[FAKE], write_files=False)
    report = Runner(opts).run(variants).to_dict()
    first, second = report["verdicts"]
    assert first["status"] == "hang" and "could not be killed" in first["message"]
    assert first["evidence"]["unkillable"] == {"status": "disk-sleep"}
    assert second["status"] == "skip" and "fake-pass" in second["message"]  # the canary failed: no GPU here
    assert first["evidence"]["device_canary"]["usable"] is False


class _NeverDies(ChildProcess):
    def wait(self, timeout):
        time.sleep(min(timeout, 0.05))
        return None


@pytest.mark.children
def test_watchdog_gives_up_on_an_unkillable_child_in_bounded_time():
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    r, w = os.pipe()
    os.close(w)
    life_r, life_w = os.pipe()
    os.close(life_r)
    start = time.monotonic()
    end = supervise(_NeverDies(sleeper.pid, r, life_w), timeout=0.2, policy=KillPolicy().with_waits(kill=1.0))
    assert end.timed_out and end.unkillable
    assert 1.0 <= end.teardown_s and time.monotonic() - start < 5
    assert end.kill_steps[-1] is KillStep.KILL
    sleeper.wait(5)


DUMP, TERM, KILL = KillStep.STACK_DUMP, KillStep.TERM, KillStep.KILL
SPEC = ProbeSpec("p", "t", "t", func=lambda ctx: None)
# how the child ended (ChildEnd fields), what it wrote (its result), the status, the message's words
STATUS_FROM_THE_END = {
    "deadline, gone after SIGTERM": (dict(returncode=-15, timed_out=True, kill_steps=[DUMP, TERM]), None,
                                     Status.HANG, "no verdict within 3s; child killed (SIGUSR1 (stack dump), SIGTERM)"),
    "deadline, SIGKILLed": (dict(returncode=-9, timed_out=True, kill_steps=[DUMP, TERM, KILL]), None,
                            Status.HANG, "child killed (SIGUSR1 (stack dump), SIGTERM, SIGKILL)"),
    "deadline, a result too late": (dict(returncode=-9, timed_out=True, kill_steps=[TERM, KILL]),
                                    {"status": "pass"}, Status.HANG, "child killed (SIGTERM, SIGKILL)"),
    "deadline, unkillable": (dict(timed_out=True, unkillable=True, kill_steps=[DUMP, TERM, KILL], teardown_s=30.2,
                                  state={"status": "disk-sleep"}), None,
                             Status.HANG, "could not be killed (state disk-sleep 30s after SIGKILL)"),
    "declared by the probe": (dict(returncode=-15, timed_out=True, declared_hang="rank 1 did not finish",
                                   kill_steps=[DUMP, TERM]), None,
                              Status.HANG, "rank 1 did not finish; child killed with its processes (SIGUSR1"),
    "a SIGKILL not ours": (dict(returncode=-9), None, Status.CRASH, "not by rocmcheck: possibly the kernel's OOM"),
    "a SIGSEGV": (dict(returncode=-11), None, Status.CRASH, "crashed: SIGSEGV"),
    "exit 0 without a result": (dict(returncode=0), None, Status.ERROR, "exited without a result"),
    "a result": (dict(returncode=0), {"status": "fail", "message": "3 zeros"}, Status.FAIL, "3 zeros"),
}


@pytest.mark.parametrize("case", list(STATUS_FROM_THE_END))
def test_the_status_comes_from_how_the_child_ended_and_the_kill_steps_taken(case):
    """One row per way a child ends. The kill steps are typed; the verdict's evidence shows them
    as the text reports have always held, and a teardown only after a SIGKILL of ours."""
    fields, result, status, words = STATUS_FROM_THE_END[case]
    end = ChildEnd(**{"returncode": None, "elapsed_s": 1.0, **fields})
    verdict = assemble(Variant(SPEC, {}), end, TaskResult.from_dict(result), "", timeout=3.0)
    assert verdict.status is status and words in verdict.message, verdict.message
    steps = fields.get("kill_steps", [])
    text = {DUMP: "SIGUSR1 (stack dump)", TERM: "SIGTERM", KILL: "SIGKILL"}  # what reports have always held
    assert json.loads(json.dumps(verdict.evidence)).get("kill_steps", []) == [text[step] for step in steps]
    assert ("teardown" in verdict.evidence) == (KILL in steps)


# --- the child's result file (TaskResult) ------------------------------------------------------

TRACE = "Traceback (most recent call last):\n  File \"p.py\", line 1\nAssertionError: 3 zeros\n"
# Each shape the child writes, its keys in the order it writes them: a probe's end (the first task
# of a process, a worker's later task with the state it put back, one that retires its worker),
# GPU runtime init raising, a probe the child lacks, rocmcheck failing in the child, an internal task.
CHILD_WRITES = {
    "pass, first task": {"faults_installed": ["slow-io"], "worker_task": 0, "runtime_init_s": 0.25,
                         "status": "pass", "message": "ok", "probe_s": 1.5, "measurements": {"gbps": 12.5},
                         "warnings": []},
    "fail in a worker": {"faults_installed": [], "worker_task": 3, "status": "fail", "message": "3 zeros",
                         "exception": {"type": "AssertionError", "message": "3 zeros", "traceback": TRACE},
                         "probe_s": 0.5, "measurements": {}, "warnings": ["w"], "state_put_back": ["seed"]},
    "retires its worker": {"faults_installed": [], "worker_task": 1, "status": "warn", "message": "w",
                           "probe_s": 0.5, "measurements": {}, "warnings": ["w"], "retire": "RuntimeError: x"},
    "runtime init raised": {"faults_installed": [], "worker_task": 0, "status": "error",
                            "message": "GPU runtime init failed: no HIP", "gpu_init_failed": True,
                            "exception": {"type": "RuntimeError", "message": "no HIP", "traceback": TRACE}},
    "probe not found": {"status": "error", "message": "probe 'p' not found in the child"},
    "harness failed": {"status": "error", "message": "rocmcheck child failed: x",
                       "exception": {"type": "ValueError", "message": "x", "traceback": TRACE}},
    "internal task": {"status": "pass", "message": "ok", "data": {"arch_list": ["gfx942"], "hip": None}},
}


@pytest.mark.parametrize("case", list(CHILD_WRITES))
def test_a_task_result_round_trips_key_for_key_as_the_child_writes_it(case, tmp_path):
    from rocmcheck.engine.child import write_result

    written = CHILD_WRITES[case]
    result = TaskResult.from_dict(written)
    assert result is not None and list(result.to_dict().items()) == list(written.items())
    path = str(tmp_path / "t.result.json")
    write_result(path, result)
    assert Path(path).read_text() == json.dumps(written)  # the file, byte for byte
    assert TaskResult.read(path) == result


def test_a_task_result_is_typed_and_keeps_keys_it_does_not_know():
    result = TaskResult.from_dict({**CHILD_WRITES["fail in a worker"], "newer": {"x": 1}})
    assert result is not None and result.status is Status.FAIL and result.worker_task == 3
    assert result.exception == ErrorInfo("AssertionError", "3 zeros", TRACE)
    assert result.extra == {"newer": {"x": 1}} and result.to_dict()["newer"] == {"x": 1}
    assert TaskResult(Status.SKIP, "none").to_dict() == {"status": "skip", "message": "none"}


# What is in the result file -> the verdict's status, message, measurements and the evidence
# keys it has (from the file). Not a result (torn by a child that died writing it, no status or
# a foreign one) is no result: exit 0 is an error, as is any child that exits 0 with none. A
# field of a foreign type (a probe that wrote the file itself) is as if the child had not written it.
MALFORMED_RESULTS = {
    "no file": (None, Status.ERROR, "exited without a result (exit 0)", {}, set()),
    "empty": (b"", Status.ERROR, "exited without a result (exit 0)", {}, set()),
    "torn": (b'{"status": "pass", "mess', Status.ERROR, "exited without a result (exit 0)", {}, set()),
    "not UTF-8": (b'{"status": "pass", "message": "\xff"}', Status.ERROR, "exited without a result", {}, set()),
    "null": (b"null", Status.ERROR, "exited without a result (exit 0)", {}, set()),
    "a list": (b'[{"status": "pass"}]', Status.ERROR, "exited without a result (exit 0)", {}, set()),
    "no status": (b'{"message": "ok"}', Status.ERROR, "exited without a result (exit 0)", {}, set()),
    "not a status": (b'{"status": "great"}', Status.ERROR, "exited without a result (exit 0)", {}, set()),
    "status not text": (b'{"status": 1}', Status.ERROR, "exited without a result (exit 0)", {}, set()),
    "status alone": (b'{"status": "pass"}', Status.PASS, "", {}, set()),
    "foreign fields": (b'{"status": "pass", "message": 5, "measurements": "x", "exception": [], "probe_s": "slow"}',
                       Status.PASS, "", {}, set()),
    "foreign evidence": (b'{"status": "fail", "message": "m", "faults_installed": "slow-io", "worker_task": "3", '
                         b'"state_put_back": {}, "retire": 7, "exception": "boom", "runtime_init_s": null}',
                         Status.FAIL, "m", {}, set()),
    "an empty exception": (b'{"status": "error", "message": "m", "exception": {}}', Status.ERROR, "m", {}, set()),
    "a traceback only": (b'{"status": "error", "message": "m", "exception": {"traceback": "T"}, "probe_s": 2}',
                         Status.ERROR, "m", {"probe_s": 2}, {"traceback"}),
    "a pass's exception": (b'{"status": "pass", "message": "ok", "exception": {"traceback": "T"}}',
                           Status.PASS, "ok", {}, set()),
    "measurements win": (b'{"status": "pass", "message": "ok", "measurements": {"probe_s": 9}, "probe_s": 1.23456}',
                         Status.PASS, "ok", {"probe_s": 9}, set()),
    "all of it": (json.dumps(CHILD_WRITES["fail in a worker"]).encode(), Status.FAIL, "3 zeros",
                  {"probe_s": 0.5}, {"traceback", "worker_task", "state_put_back"}),
}


@pytest.mark.parametrize("case", list(MALFORMED_RESULTS))
def test_what_a_result_file_holds_gives_the_verdict(case, tmp_path):
    content, status, message, measurements, evidence = MALFORMED_RESULTS[case]
    path = tmp_path / "t.result.json"
    if content is not None:
        path.write_bytes(content)
    result = TaskResult.read(str(path))
    end = ChildEnd(returncode=0, elapsed_s=1.0)
    verdict = assemble(Variant(SPEC, {}), end, result, "", timeout=3.0)
    assert (verdict.status, verdict.measurements) == (status, measurements), verdict
    assert message in verdict.message if result is None else verdict.message == message
    assert set(verdict.evidence) - {"exit", "returncode", "elapsed_s"} == evidence
    if result is None:  # a child that died without a usable result: how it died decides
        died = assemble(Variant(SPEC, {}), ChildEnd(returncode=-11, elapsed_s=1.0), result, "", timeout=3.0)
        assert died.status is Status.CRASH and died.message == "crashed: SIGSEGV"


def _child_ignoring(*signals: str) -> ChildProcess:
    """A child in its own session that ignores `signals` and has said so on its output."""
    code = (f"import os, signal, time; [signal.signal(getattr(signal, s), signal.SIG_IGN) for s in {signals!r}]; "
            f"os.write(1, b'ready'); time.sleep(60)")
    out_r, out_w = os.pipe()
    life_r, life_w = os.pipe()
    popen = subprocess.Popen([sys.executable, "-c", code], stdin=life_r, stdout=out_w, start_new_session=True)
    os.close(out_w)
    os.close(life_r)
    assert os.read(out_r, 16) == b"ready"
    return ChildProcess(popen.pid, out_r, life_w, popen=popen)


@pytest.mark.children
@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="POSIX signals")
@pytest.mark.parametrize("grace", [0.1, 2.5])
def test_a_child_ignoring_sigterm_is_sigkilled_after_the_policys_grace(grace):
    """The wait after SIGTERM is the policy's: measured from outside, the kill comes no sooner
    than the policy's steps allow, and not much later (a generous bound: a loaded machine)."""
    policy = KillPolicy().with_waits(term=grace, kill=5.0)
    child = _child_ignoring("SIGTERM", "SIGUSR1")
    start = time.monotonic()
    end = supervise(child, timeout=0.2, policy=policy)
    elapsed = time.monotonic() - start
    assert end.kill_steps == [KillStep.STACK_DUMP, KillStep.TERM, KillStep.KILL]
    assert end.returncode == -signal.SIGKILL and not end.unkillable
    least = 0.2 + sum(wait for step, wait in policy.steps if step is not KillStep.KILL)
    assert least <= elapsed < least + 2.0


def test_a_kill_policy_ends_with_sigkill_and_names_its_steps():
    with pytest.raises(ValueError, match="ends with SIGKILL"):
        KillPolicy(steps=((KillStep.TERM, 0.5),))
    with pytest.raises(ValueError, match="no such kill step: trem"):
        KillPolicy().with_waits(trem=1.0)
    assert KillPolicy().with_waits(kill=2.0).steps == ((DUMP, 0.3), (TERM, 0.5), (KILL, 2.0))
    assert dict(KillPolicy().steps)[KILL] == 30.0  # a GPU process in driver teardown: docs/isolation.md §7


@pytest.mark.children
def test_timeout_runs_from_the_childs_start_not_from_its_launch(tmp_path):
    """A slow interpreter start (a loaded machine importing torch) is not a hang."""
    files = TaskFiles(str(tmp_path / "task"))
    code = f"import time, pathlib; time.sleep(1.0); pathlib.Path({files.started!r}).touch(); time.sleep(0.5)"
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    r, w = os.pipe()
    os.close(w)
    life_r, life_w = os.pipe()
    os.close(life_r)
    end = supervise(ChildProcess(proc.pid, r, life_w, popen=proc), timeout=0.9, files=files)
    assert not end.timed_out and end.returncode == 0
    assert end.elapsed_s < 0.9  # measured from the start marker, not from the launch


@pytest.mark.children
def test_child_that_never_starts_its_task_is_a_hang_saying_so(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    r, w = os.pipe()
    os.close(w)
    life_r, life_w = os.pipe()
    os.close(life_r)
    end = supervise(ChildProcess(proc.pid, r, life_w, popen=proc), timeout=0.2,
                    files=TaskFiles(str(tmp_path / "never")), startup_limit=0.3)
    assert end.timed_out and end.never_started and end.returncode is not None


@pytest.mark.parametrize("isolation", ["zygote", "spawn"])
def test_a_probes_preload_is_imported_before_it_runs_and_only_when_selected(rocm_run, tmp_path, isolation):
    (tmp_path / "preloading.py").write_text(
        "import sys\nimport rocmcheck\n"
        "@rocmcheck.probe('preloading', title='t', targets='t', preload=('xml.dom.minidom',))\n"
        "def preloading(ctx):\n    assert 'xml.dom.minidom' in sys.modules, 'not preloaded'\n"
        "@rocmcheck.probe('plain', title='t', targets='t')\n"
        "def plain(ctx):\n    assert 'xml.dom.minidom' not in sys.modules, 'preloaded for nothing'\n")
    (first,) = rocm_run(probe="preloading", probes_path=[str(tmp_path)], isolation=isolation)
    (second,) = rocm_run(probe="plain", probes_path=[str(tmp_path)], isolation=isolation)
    assert (first["status"], second["status"]) == ("pass", "pass"), (first["message"], second["message"])


@pytest.mark.children
def test_device_that_is_not_present_is_a_usage_error():
    from rocmcheck.engine.options import RunOptions
    from rocmcheck.engine.runner import Runner

    with pytest.raises(UsageError, match="device cuda:3 is not present"):
        Runner(RunOptions(device="cuda:3", write_files=False)).run([])


@pytest.mark.children
@pytest.mark.parametrize("command", [["gate", "--out-dir", "out"], ["run", "--out-dir", "out"], ["env"]],
                         ids=["gate", "run", "env"])
def test_a_device_that_is_not_present_leaves_no_folder_in_tmpdir(tmp_path, command):
    """Issue 31: each `--device cuda:7` left a rocmcheck-XXXX scratch folder behind. (torch's
    compile cache, torchinductor_<user>, is torch's own, created once and reused by every run.)"""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    proc = subprocess.run([sys.executable, "-m", "rocmcheck", *command, "--device", "cuda:7"], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path, env={**os.environ, "TMPDIR": str(tmpdir)})
    assert proc.returncode == 2 and "device cuda:7 is not present" in proc.stderr, proc.stderr[-2000:]
    assert [p.name for p in tmpdir.iterdir() if not p.name.startswith("torchinductor_")] == []


@pytest.mark.children
def test_the_suite_keeps_the_temporary_folders_of_failed_tests_only(request):
    """Issue 31: `make test` left 1.2 GB of temporary folders, those of passing tests included."""
    assert request.config.getini("tmp_path_retention_policy") == "failed"
    assert int(request.config.getini("tmp_path_retention_count")) == 1


def test_an_interrupted_gate_in_python_is_no_verdict_not_no_go(monkeypatch):
    """Like the command (UNKNOWN, exit 2): an interruption never becomes GateFailed, the NO-GO of a bad node."""
    from rocmcheck import gate_api

    partial = {"run": {"partial": True, "interrupted": "device-smoke"},
               "verdicts": [{"probe": "config-lint", "variant": "config-lint[env]", "status": "pass"}]}
    monkeypatch.setattr(gate_api.Runner, "run", lambda self, variants: Report.from_dict(partial))
    with pytest.raises(KeyboardInterrupt, match="interrupted during device-smoke: no verdict"):
        gate_api.gate(device="cpu", probes_path=[FAKE], verbose=False)


@pytest.mark.children
def test_long_first_use_is_reported_as_it_goes_and_counted_in_the_duration(tmp_path, monkeypatch):
    """compile's duration read 0.19 s for 72 s with nothing printed meanwhile: the duration is
    wall time, first use included, and each FIRST_USE_PROGRESS_S of first use is said."""
    from rocmcheck.engine import watchdog

    monkeypatch.setattr(watchdog, "FIRST_USE_PROGRESS_S", 0.4)
    files = TaskFiles(str(tmp_path / "task"))
    code = (f"import time; from rocmcheck.markers import TaskFiles; f = TaskFiles({files.prefix!r}); "
            "f.mark_started(); f.enter_first_use(); time.sleep(1.3); f.leave_first_use(1.3)")
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    r, w = os.pipe()
    os.close(w)
    life_r, life_w = os.pipe()
    os.close(life_r)
    said = []
    end = supervise(ChildProcess(proc.pid, r, life_w, popen=proc), timeout=0.5, files=files,
                    first_use_limit=10.0, on_first_use=said.append)
    assert not end.timed_out and end.returncode == 0
    assert end.elapsed_s >= 1.3  # wall time from the marker, first use included
    assert len(said) in (2, 3) and said == sorted(said) and said[0] >= 0.4  # 0.4, 0.8, 1.2 s: each said once
