"""The node verdict a scheduler reads (`gate --json -`), its exit contract, the expected GPU
count, a folder of node reports, and the multi-node recipe run for
real with torchrun over loopback (two "nodes", gloo on the CPU)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import by_variant, probe_module
from rocmcheck.cli import main
from rocmcheck.model import Verdict
from rocmcheck.outputs import node
from rocmcheck.outputs.storage import report_json
from rocmcheck.records import SCHEMA, SCHEMA_VERSION, Report


def _stdout_document(capsys) -> dict:
    out = capsys.readouterr()
    return json.loads(out.out), out.err  # stdout must parse as exactly one document


@pytest.mark.children
def test_go_node_verdict_is_the_only_thing_on_stdout(tmp_path, capsys):
    code = main(["gate", "--device", "cpu", "--probe", "device-smoke", "--probe", "gpu-visible",
                 "--out-dir", str(tmp_path), "--json", "-"])
    doc, err = _stdout_document(capsys)
    assert code == 0 and doc["status"] == "GO" and doc["exit_code"] == 0 and doc["failing"] == []
    assert doc["schema"] == node.SCHEMA and doc["node"] == socket.gethostname()
    assert "PASS  device-smoke" in err and "\nGO" in err  # the human lines went to stderr
    assert Path(doc["reports"]["json"]).is_file()


@pytest.mark.children
def test_no_go_node_verdict_names_each_failure_with_an_action(tmp_path, capsys):
    code = main(["gate", "--keep-going", "--device", "cpu", "--probe", "device-smoke", "--probe", "transfer",
                 "-k", "device-smoke or every-training",
                 "--inject", "copy-zeros", "--out-dir", str(tmp_path), "--json", "-"])
    doc, _ = _stdout_document(capsys)
    assert code == 1 and doc["status"] == "NO-GO" and doc["exit_code"] == 1
    failing = {f["check"]: f for f in doc["failing"]}
    assert set(failing) == {"device-smoke", "transfer[every-training]"}
    assert failing["device-smoke"]["status"] == "fail" and "wrong at" in failing["device-smoke"]["message"]
    assert all(f["action"].startswith("fix this before training") for f in failing.values())  # CPU: no drain


@pytest.mark.parametrize("verdict, on_gpu, start", [
    ({"status": "fail", "known_issues": [{"id": "sdma-zeros", "workaround": "export HSA_ENABLE_SDMA=0"}]}, True,
     "apply the known workaround (sdma-zeros): export HSA_ENABLE_SDMA=0"),
    ({"status": "hang"}, True, "drain the node and reset the GPU"),
    ({"status": "crash"}, True, "drain the node and reset the GPU"),
    ({"status": "fail"}, True, "drain the node: this GPU"),
    ({"status": "fail", "probe": "gpu-visible", "measurements": {"action": "reinstall torch for this GPU: x"}}, True,
     "reinstall torch for this GPU: x"),
    ({"status": "error"}, False, "fix this before training"),
])
def test_recommended_action_per_failure(verdict, on_gpu, start):
    assert node.action(Verdict.from_dict({"probe": "p", "variant": "p", **verdict}), on_gpu).startswith(start)


@pytest.mark.children
def test_a_gpu_host_whose_torch_cannot_use_it_is_no_go_with_reinstall(fake_host, tmp_path, capsys):
    fake_host(amd=1)
    assert main(["gate", "--out-dir", str(tmp_path), "--json", "-"]) == 1
    doc, _ = _stdout_document(capsys)
    (failure,) = doc["failing"]
    assert failure["check"] == "gpu-visible" and failure["action"].startswith("reinstall torch for this GPU: ")
    assert "--index-url" in failure["action"]


@pytest.mark.parametrize("argv, env, fragment", [
    (["gate", "--probe", "no-such-probe"], {}, "unknown probe id"),
    (["gate", "--timeout", "-3"], {}, "must be a finite positive number"),
    (["gate"], {"ROCMCHECK_EXPECT_GPUS": "eight"}, "ROCMCHECK_EXPECT_GPUS must be a whole number"),
])
def test_could_not_assess_is_exit_2_with_an_unknown_document(argv, env, fragment, monkeypatch, capsys):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert main([*argv, "--json", "-"]) == 2
    doc, err = _stdout_document(capsys)
    assert doc["status"] == "UNKNOWN" and doc["exit_code"] == 2 and fragment in doc["error"]
    assert len(err.strip().splitlines()) == 1 and fragment in err


def test_expected_gpus_missing_fails_the_gate_and_says_so(rocm_run, tmp_path, capsys):
    assert main(["gate", "--device", "cpu", "--probe", "device-smoke", "--expect-gpus", "8",
                 "--out-dir", str(tmp_path), "--json", "-"]) == 1
    doc, _ = _stdout_document(capsys)
    failure = {f["check"]: f for f in doc["failing"]}["gpu-visible"]  # added although not selected
    assert "expected 8 GPUs, torch sees 0" in failure["message"] and failure["action"].startswith("drain the node")
    assert by_variant(rocm_run(probe="device-smoke", device="cpu"))["device-smoke"]["status"] == "pass"


def _node_report(path: Path, host: str, statuses: dict) -> None:
    fp = {"host": {"system": "Linux", "hostname": host}, "device": {"name": "cuda:0", "arch": "gfx942"},
          "device_facts": {"backend": "rocm", "rocm": "6.4", "torch": f"2.13.0-{host}"}}
    verdicts = [{"probe": v.split("[")[0], "variant": v, "status": s, "message": s} for v, s in statuses.items()]
    path.write_text(report_json(Report.from_dict({"schema": SCHEMA, "schema_version": SCHEMA_VERSION,
                                                  "run": {"id": host}, "fingerprint": fp, "verdicts": verdicts})))


@pytest.mark.children
def test_matrix_of_a_folder_of_node_reports_puts_the_worst_nodes_first(tmp_path, capsys):
    fleet = tmp_path / "fleet"
    fleet.mkdir()
    _node_report(fleet / "a.json", "a", {"device-smoke": "pass", "transfer[to-isolated]": "pass"})
    _node_report(fleet / "b.json", "b", {"device-smoke": "hang", "transfer[to-isolated]": "pass"})
    _node_report(fleet / "c.json", "c", {"device-smoke": "pass", "transfer[to-isolated]": "fail"})
    assert main(["matrix", str(fleet), "--json", str(tmp_path / "m.json")]) == 0
    labels = [m["label"] for m in json.loads((tmp_path / "m.json").read_text())["machines"]]
    assert ["2.13.0-b" in labels[0], "2.13.0-c" in labels[1], "2.13.0-a" in labels[2]] == [True, True, True]
    (tmp_path / "empty").mkdir()
    assert main(["matrix", str(tmp_path / "empty")]) == 2
    assert "no report" in capsys.readouterr().err


@pytest.mark.slow
def test_multi_node_recipe_runs_under_torchrun_over_loopback(tmp_path):
    """Two torchrun "nodes" of one process each on 127.0.0.1, running the documented module."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROCMCHECK_", "LOCAL_RANK"))}
    env["TMPDIR"] = str(tmp_path)  # torchrun keeps its logs in a torchelastic_* folder it never removes
    nodes = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1",
                               f"--node-rank={rank}", "--master-addr=127.0.0.1", f"--master-port={port}",
                               "-m", "rocmcheck.probes.multigpu", "--backend", "gloo", "--timeout", "90"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
             for rank in (0, 1)]
    outs = [p.communicate(timeout=240) for p in nodes]
    lines = [json.loads(line) for out, _ in outs for line in out.splitlines() if line.startswith("{")]
    assert [p.returncode for p in nodes] == [0, 0], [err[-2000:] for _, err in outs]
    assert sorted(r["rank"] for r in lines) == [0, 1] and all(r["world"] == 2 for r in lines)
    assert all(all(c["ok"] for c in r["checks"].values()) for r in lines)


RECIPES = Path(__file__).resolve().parent.parent / "docs" / "recipes"


def test_k8s_init_container_command_is_a_valid_gate_command():
    from rocmcheck.cli import build_parser

    text = (RECIPES / "k8s-init-container.yaml").read_text()
    line = next(ln for ln in text.splitlines() if '"gate"' in ln)
    command = json.loads(line.split("command:", 1)[1])
    args = build_parser().parse_args(command[1:])
    assert command[0] == "rocmcheck" and args.command == "gate"
    assert args.output_json == Path("-") and args.expect_gpus == 8


def test_a_rank_that_skips_before_its_checks_still_writes_its_result(tmp_path, monkeypatch):
    """Skip is an outcome, not an Exception: the rank program must still record it, or the probe
    sees a rank that ended with no result."""
    import json

    import rocmcheck

    multigpu = probe_module("multigpu")

    def skipping(argv):
        raise rocmcheck.Skip("torch 2.2.2 has no FSDP2")

    monkeypatch.setattr(multigpu, "rank_main", skipping)
    result = tmp_path / "0.json"
    assert multigpu.rank_entry(["--result", str(result)]) == 1
    assert "torch 2.2.2 has no FSDP2" in json.loads(result.read_text())["error"]


# --- the drain reason and the job a verdict belongs to ------------------------------------------

GPU1 = {"name": "cuda:1", "index": 1, "arch": "gfx942", "pci_address": "0000:c1:00.0"}


def _gate_report(verdicts: list, **run) -> Report:
    return Report.from_dict({"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "run": {"device": "cuda:0", **run},
                             "verdicts": [{"probe": v["variant"].split("[")[0], **v} for v in verdicts]})


def test_the_reason_names_the_first_failure_its_gpu_and_how_many_more():
    report = _gate_report([{"variant": "device-smoke", "status": "pass", "device": {"name": "cuda:0", "index": 0}},
                           {"variant": "device-smoke", "status": "crash", "message": "crashed: SIGSEGV",
                            "device": GPU1},
                           {"variant": "transfer[to-float32]", "status": "fail", "message": "zeros", "device": GPU1},
                           {"variant": "node-health", "status": "fail", "message": "bad pages", "device": GPU1}])
    doc = node.verdict(report, 1)
    assert doc["reason"] == ("rocmcheck NO-GO: device-smoke on cuda:1 (gfx942, 0000:c1:00.0), +2 more: "
                             "crashed: SIGSEGV")
    go = node.verdict(_gate_report([{"variant": "device-smoke", "status": "pass"}]), 0)
    assert go["reason"] == "rocmcheck GO" and go["status"] == "GO"


def test_a_drill_says_so_first_and_an_interruption_says_what_stopped_it():
    drill = _gate_report([{"variant": "device-smoke", "status": "fail", "message": "wrong at 3"}], inject="copy-zeros")
    assert node.verdict(drill, 1)["reason"] == "rocmcheck DRILL NO-GO (copy-zeros): device-smoke: wrong at 3"
    stopped = _gate_report([], partial=True, interrupted="fake-sleep",
                           notes=["interrupted by the --deadline of 8s during fake-sleep"])
    doc = node.verdict(stopped, 2)
    assert doc["error"] == "interrupted by the --deadline of 8s during fake-sleep"
    assert doc["reason"] == "rocmcheck UNKNOWN: interrupted by the --deadline of 8s during fake-sleep"
    older = node.verdict(_gate_report([], partial=True, interrupted="fake-sleep"), 2)  # a report that kept no note
    assert older["error"] == "interrupted during fake-sleep"


@pytest.mark.parametrize("error", ["x" * 600, "it's \"quoted\" `cmd` $HOME \\ back\nslash \x1b[31m ünï ☃",
                                   "  spaced \t out  "])
def test_a_reason_is_short_plain_ascii_that_sh_and_nhc_can_carry(error):
    reason = node.unknown(error)["reason"]
    assert len(reason) <= node.REASON_LIMIT == 250 and reason.startswith("rocmcheck UNKNOWN: ")
    assert all(" " <= c <= "~" for c in reason) and not set(reason) & set("'\"`$\\")
    assert "  " not in reason and (len(error) < 300 or reason.endswith("..."))


def test_the_verdict_names_the_slurm_job_that_ran_it(monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert node.unknown("x")["job_id"] is None
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    assert node.unknown("x")["job_id"] == "4242" and node.verdict(_gate_report([]), 0)["job_id"] == "4242"
    monkeypatch.setenv("SLURM_JOB_ID", "9\x1b[2J\"odd")
    assert json.loads(json.dumps(node.unknown("x")))["job_id"] == "9\"odd"  # escapes gone, JSON-escaped
