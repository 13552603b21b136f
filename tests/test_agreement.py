"""The node check (`rocmcheck.agreement.node_check`): a deterministic workload's hashes compared
across a node's GPUs of the same model and stack once every GPU ran, by the runner, so `run`,
`gate` and the node verdict of `gate --json -` all read its outcome in the verdicts (issue 33)."""
from __future__ import annotations

import json
import textwrap

import pytest

from rocmcheck import agreement, simgpu
from rocmcheck.cli import main
from rocmcheck.model import SDC_EXACT, SDC_MEASUREMENTS, Status, Verdict, WorkloadHashes
from rocmcheck.outputs.storage import journal_to_report, load_report

KEY = {"arch": "gfx942", "device": "AMD Instinct MI300X", "torch": "2.6.0", "hip": "6.3", "blas": "cublas"}
OPS = ("chain-fp32", "attention-fp32", "exact-fp32")


def _verdict(gpu: int, hashes, key=KEY, workload="sdc-1-gpu", wrong=(), left_out=None, status=Status.PASS):
    record = WorkloadHashes(workload, dict(key), dict(zip(OPS, hashes)), dict(left_out or {}))
    return Verdict("sdc", "sdc[1]", status, {"level": 1}, "ok" if status is Status.PASS else "exact wrong",
                   measurements={SDC_MEASUREMENTS: record.to_dict(),
                                 SDC_EXACT: {"ops": ["exact-fp32"], "wrong": list(wrong)}},
                   device={"name": f"cuda:{gpu}", "index": gpu})


def test_three_gpus_the_majority_decides_and_names_the_odd_one():
    changed, notes = agreement.node_check([_verdict(0, "aaa"), _verdict(1, "abz"), _verdict(2, "aaa")])
    (odd,) = changed
    assert odd.device["name"] == "cuda:1" and odd.status is Status.FAIL
    assert "cuda:0, cuda:2, the majority of 3" in odd.message and "attention-fp32, exact-fp32" in odd.message
    assert odd.measurements["node_check"] == {"ops": ["attention-fp32", "exact-fp32"],
                                              "against": ["cuda:0", "cuda:2"], "majority": True}
    assert notes == []


def test_two_gpus_that_disagree_on_inexact_work_only_are_both_named_and_the_verdict_says_so():
    changed, _ = agreement.node_check([_verdict(0, "aaa"), _verdict(1, "baa")])
    assert [v.device["name"] for v in changed] == ["cuda:0", "cuda:1"]
    assert all(v.status is Status.FAIL and "inexact work only (chain-fp32)" in v.message
               and "both are named" in v.message for v in changed)


def test_two_gpus_the_one_with_a_wrong_exact_answer_is_named_alone():
    own = _verdict(1, "bbb", wrong=["exact-fp32"], status=Status.FAIL)
    changed, _ = agreement.node_check([_verdict(0, "aaa"), own])
    (odd,) = changed
    assert odd.device["name"] == "cuda:1" and odd.message.startswith("exact wrong; across the node: ")
    assert "its exact answers were wrong" in odd.message


def test_only_records_of_one_model_stack_and_workload_are_compared():
    other_model = _verdict(1, "zzz", key={**KEY, "device": "AMD Instinct MI250X"})
    other_version = _verdict(2, "zzz", workload="sdc-2-gpu")
    changed, notes = agreement.node_check([_verdict(0, "aaa"), other_model, other_version])
    assert changed == []
    assert len(notes) == 3 and all("has no other GPU of its model and stack" in n for n in notes)


def test_agreeing_gpus_and_ops_left_out_change_nothing():
    left = {"attention-fp32": "not deterministic here"}
    changed, notes = agreement.node_check([_verdict(0, "aaa"), _verdict(1, "aba", left_out=left)])
    assert changed == [] and notes == ["sdc[1]: 2 GPUs (cuda:0, cuda:1) agree bit for bit on 2 ops"]


def test_a_rejudged_journal_record_of_a_variant_on_a_gpu_replaces_the_earlier():
    """The node check's later verdict (a `rejudged` record) replaces the first; two plain records of
    one variant (a run that ran it twice) both stay."""
    header = {"record": "header", "schema": "rocmcheck-report", "schema_version": "1.0", "run": {"id": "r"}}
    passed, failed, other = (_verdict(1, "aaa"), _verdict(1, "abz", status=Status.FAIL), _verdict(0, "aaa"))
    records = [{"record": kind, "verdict": v.to_dict()}
               for kind, v in (("verdict", passed), ("verdict", other), ("rejudged", failed))]
    lines = [json.dumps(r) for r in (header, *records, {"record": "end", "run": {}})]
    report = journal_to_report(lines, "journal")
    assert [(v.device["name"], v.status) for v in report.verdicts] == [("cuda:1", Status.FAIL), ("cuda:0", Status.PASS)]
    records[2]["record"] = "verdict"
    lines = [json.dumps(r) for r in (header, *records, {"record": "end", "run": {}})]
    assert len(journal_to_report(lines, "journal").verdicts) == 3


HASHING = textwrap.dedent('''
    import rocmcheck
    from rocmcheck.model import WorkloadHashes

    @rocmcheck.probe("fake-hashes", title="hashes that differ on GPU 1", targets="-", gate=True)
    def fake_hashes(ctx):
        odd = ctx.device.endswith(":1")
        ctx.measure(sdc=WorkloadHashes("fake-1", {"device": "simulated GPU"},
                                       {"op": "bad" if odd else "good", "same": "x"}).to_dict())
''')




@pytest.fixture(scope="module")
def simgpu_built():
    simgpu.build()


@pytest.mark.children
def test_the_node_check_fails_the_gpu_the_majority_outvotes_in_gate_and_its_node_verdict(tmp_path, capsys,
                                                                                         simgpu_built):
    """Every GPU's own verdict passes; only the runner's node check, once all ran, names GPU 1."""
    (tmp_path / "probes").mkdir()
    (tmp_path / "probes" / "fake_hashes.py").write_text(HASHING)
    code = main(["gate", "--inject", "simgpu:3", "--require", "fake-hashes", "--probes-path",
                 str(tmp_path / "probes"), "--out-dir", str(tmp_path), "--json", "-"])
    out = capsys.readouterr()
    node = json.loads(out.out)
    assert code == 1 and node["status"] == "NO-GO", out
    (failing,) = node["failing"]
    assert failing["device"]["name"] == "simgpu:1" and "the majority of 3" in failing["message"]
    (journal,) = tmp_path.glob("*.jsonl")
    statuses = {v.device["name"]: v.status for v in load_report(journal).verdicts}
    assert statuses == {"simgpu:0": Status.PASS, "simgpu:1": Status.FAIL, "simgpu:2": Status.PASS}


