"""`rocmcheck explain`, the known issues against real reports, and the no-binary crash path.

The corpus holds real failure reports from public trackers, each reduced to the lines the user
pasted, the environment it states, the confirmed resolution, its failure class and its link. It
is split by a fixed rule (`held_out`) into a tuning part (tests/data/real_reports.json) and a
held-out part (tests/data/explain_heldout.json) that no signature was written from, so the
numbers on the held-out part say how explain does on logs it has not seen.
"""
from __future__ import annotations

import codecs
import fnmatch
import hashlib
import io
import json
import random
import re
import struct
import sys
from pathlib import Path

try:
    from re import _parser as sre_parse  # Python >= 3.11
except ImportError:  # pragma: no cover - older Python
    import sre_parse  # type: ignore[no-redef]

import pytest

from rocmcheck.cli import main
from rocmcheck.host import hostgpu
from rocmcheck.knowledge import known_issues
from rocmcheck.knowledge.classes import CLASSES
from rocmcheck.knowledge.explain import explain, recognise, stated_facts
from rocmcheck.knowledge.signatures import KERNEL_SIGNATURES, SIGNATURES, could_match, signatures, text_bigrams
from rocmcheck.model import Status, Verdict

DATA = Path(__file__).parent / "data"
CORPUS = json.loads((DATA / "real_reports.json").read_text())["reports"]  # the tuning part
HELDOUT = json.loads((DATA / "explain_heldout.json").read_text())["reports"]  # frozen: never tuned on
LATER = json.loads((DATA / "explain_later.json").read_text())["reports"]  # collected after issue 41's tuning
LATER2 = json.loads((DATA / "explain_later2.json").read_text())["reports"]  # collected after round 2's tuning (148e884)
LATER3 = json.loads((DATA / "explain_later3.json").read_text())["reports"]  # collected class-blind at 8a498c0
WRITTEN_FROM = [r for r in CORPUS if r.get("written_from")]  # the reports the first signatures were written from
HELD_OUT_BELOW = 0xa0  # ~62% of the reports found for issue 35, >= 40% of the whole corpus
# the classes issue 35 found explain missing: each needs two reports, one of them held out
MISSED_CLASSES = ("kernel-gpu-reset", "kernel-nvidia-xid", "kernel-iommu-fault", "pcie-atomics", "nccl-shm",
                  "collective-hang", "driver-too-old", "arch-not-in-build", "hipblaslt-unsupported-arch",
                  "rocm-older-than-card", "arch-dropped", "windows-igpu-first", "zluda", "wsl-no-device", "miopen",
                  "app-arch-list", "nan-output", "hip-error")
# the classes issue 41 found missing (fresh reports explain could not name): each has two reports, one held out
ISSUE_41_CLASSES = ("nvidia-fabric-manager", "cuda-forward-compat", "cuda-init-unknown", "ptx-toolchain",
                    "nvidia-kernel-module", "container-toolkit", "container-no-gpu", "container-render-group",
                    "dataloader-shm", "wsl-libcuda", "wsl-bundled-hsa", "extension-abi", "cudnn-version",
                    "cublas-mismatch", "miopen", "zluda", "arch-not-in-build", "gpu-too-old", "flash-attn-arch",
                    "bf16-unsupported", "igpu-override", "override-not-in-service", "out-of-memory", "apu-memory",
                    "collective-desync", "windows-no-nccl", "nccl-network", "nccl-memlock", "duplicate-gpu-rank",
                    "pci-bar", "amdgpu-init-failed", "windows-dll", "windows-backend", "device-assert-user-data",
                    "windows-distributed")
# the classes round 3 added from the third later part's misses (new reports, two each, one held out)
ROUND_3_CLASSES = ("triton-missing", "device-count-assert")


def held_out(report) -> bool:
    """The split rule, fixed before any signature was written against the new reports: a report
    the first signatures were not written from is held out when sha256(url) starts below
    HELD_OUT_BELOW. A hash of the link is blind to the text, so no class is held out by choice."""
    return not report.get("written_from") and hashlib.sha256(report["url"].encode()).digest()[0] < HELD_OUT_BELOW
NO_BINARY_LOG = ("Loading model...\n"
                 "hipErrorNoBinaryForGpu: Unable to find code object for all current devices!\n"
                 "Aborted (core dumped)\n")


@pytest.fixture(scope="module")
def answers():
    return [(report, explain("\n".join(report["log"]))) for report in WRITTEN_FROM]


def test_the_corpus_is_real_reports_with_links_resolutions_and_classes():
    reports = CORPUS + HELDOUT + LATER + LATER2 + LATER3
    assert len(reports) >= 150
    assert len({r["url"] for r in reports}) == len(reports)
    for report in reports:
        assert re.match(r"https://github\.com/[\w.-]+/[\w.-]+/(issues|pull)/\d+$", report["url"]), report["url"]
        assert report["log"] and all(len(line) <= 600 for line in report["log"]), "short excerpts only"
        assert report["facts"] and report["resolution"] and report["class"], report["url"]
        assert report["gpu"] in ("amd", "nvidia", "none", "unknown") and report["os"] in (
            "linux", "windows", "wsl", "macos", "unknown"), report["url"]
    known = {e["id"] for e in known_issues.entries()}
    assert {r["expect"] for r in reports} - {None} <= known


def test_the_split_follows_its_rule_and_holds_out_at_least_40_percent():
    assert all(held_out(r) for r in HELDOUT) and not any(held_out(r) for r in CORPUS)
    assert len(HELDOUT) >= 0.4 * (len(CORPUS) + len(HELDOUT))
    assert len(WRITTEN_FROM) == 59 and not any(r.get("written_from") for r in HELDOUT)


def test_every_missed_class_has_two_reports_one_held_out_and_the_corpus_spans_vendors_and_systems():
    reports = CORPUS + HELDOUT
    for cls in MISSED_CLASSES + ISSUE_41_CLASSES + ROUND_3_CLASSES:
        assert sum(r["class"] == cls for r in reports) >= 2 and any(r["class"] == cls for r in HELDOUT), cls
    assert sum(r["class"] == "none" for r in reports) >= 25
    assert {"amd", "nvidia"} <= {r["gpu"] for r in HELDOUT}
    assert {"linux", "windows", "wsl"} <= {r["os"] for r in HELDOUT}


def test_explain_names_the_right_known_issue_first_and_nothing_wrong_with_confidence(answers):
    named = right = expected = found = 0
    wrong = []
    for report, result in answers:
        issues = result["known_issues"]
        confident = [i["id"] for i in issues if i["confident"]]
        if confident:
            named += 1
            right += confident[0] == report["expect"]
            if confident[0] != report["expect"]:
                wrong.append((report["url"], confident[0]))
        if report["expect"]:
            expected += 1
            first = issues[0] if issues else {}
            found += first.get("id") == report["expect"] and bool(first.get("workaround"))
    precision, recall = right / named, found / expected
    print(f"\nreal reports: {len(answers)}; precision {right}/{named} = {precision:.2f}, "
          f"recall {found}/{expected} = {recall:.2f}")
    assert not wrong, wrong
    assert precision >= 0.95 and recall >= 0.9


def judge(report):
    """(diagnosed, right, wrong with confidence) for one report. Diagnosed: explain named a class
    or a known issue. Right: the known issue the thread confirmed ranks first, or, where none
    applies (expect null), the leading class is the report's. Wrong with confidence: a confident
    issue that is neither the expected one nor of the report's class (or the class it narrows)."""
    result = explain("\n".join(report["log"]))
    issues, classes = result["known_issues"], [c["id"] for c in result["classes"]]
    diagnosed = bool(classes or issues)
    if report["class"] == "none":
        return diagnosed, False, diagnosed
    right = (bool(issues) and issues[0]["id"] == report["expect"]) if report["expect"] else (
        bool(classes) and classes[0] == report["class"])
    fits = {report["class"], CLASSES[report["class"]].parent if report["class"] in CLASSES else None}
    confident = [i for i in issues if i["confident"]]
    wrong = bool(confident) and confident[0]["id"] != report["expect"] and (
        bool(report["expect"]) or confident[0].get("class") not in fits)
    return diagnosed, right, wrong


def scores(reports):
    judged = [(r, judge(r)) for r in reports]
    failures = [(r, j) for r, j in judged if r["class"] != "none"]
    diagnosed, right = sum(j[0] for _, j in judged), sum(j[1] for _, j in failures)
    return {"gpu_failures": len(failures), "right": right, "recall": right / len(failures),
            "diagnosed": diagnosed, "precision": right / diagnosed if diagnosed else 0.0,
            "wrong_confident": sum(j[2] for _, j in failures),
            "no_gpu_logs": len(judged) - len(failures), "no_gpu_diagnosed": sum(j[0] for r, j in judged
                                                                              if r["class"] == "none")}


@pytest.mark.parametrize("part, reports, floor", [("tuning", CORPUS, 0.9), ("held-out", HELDOUT, 0.85)])
def test_precision_and_recall_on_both_parts_and_no_log_without_a_gpu_issue_diagnosed(part, reports, floor):
    """Issue 35: the held-out part is the measure (never read while writing signatures); its
    floor is the issue's, 85% of its GPU failures answered with the right known issue or class.
    Measured when the floors were set: tuning 103/109 (precision 103/108), held-out 68/78
    (precision 68/75); before issue 35 the same explain scored 54/109 and 9/78. With issue 41's
    reports added to both parts: tuning 146/153 (precision 146/150), held-out 126/140 (precision
    126/136); the explain of 56c2b48 scored 108/153 and 72/140 on them. With round 2's reports:
    tuning 158/167 (precision 158/162; bitsandbytes#372, a lone CPU-build notice, is now called
    benign), held out 139/153 (precision 139/149). With round 3's reports: the explain of e9d639e scored
    tuning 159/173 (precision 159/166) and held out 144/164 (precision 144/155); round 3's knowledge
    (e204190) scores 163/173 (precision 163/168) and 148/164 (precision 148/159): one held-out report
    became a miss (ROCm/legacy-rocm-build#5245, a HIP error labelled hip-error, now led by
    memory-access-fault because HIP prints CUDA's 'an illegal memory access was encountered')."""
    s = scores(reports)
    print(f"\n{part}: recall {s['right']}/{s['gpu_failures']} = {s['recall']:.2f}, precision {s['right']}/"
          f"{s['diagnosed']} = {s['precision']:.2f}, wrong with confidence {s['wrong_confident']}, "
          f"no-GPU logs diagnosed {s['no_gpu_diagnosed']}/{s['no_gpu_logs']}")
    assert s["recall"] >= floor and s["precision"] >= floor, s
    assert s["no_gpu_diagnosed"] == 0 and s["wrong_confident"] == 0, s


def test_the_later_parts_were_collected_after_the_tuning_and_never_overlap_it():
    """Issue 41: each later part is new threads, none cited by the tuning or held-out parts or by
    the other later part (the second one: none cited anywhere in the knowledge base either); their
    no-GPU logs are there so a figure on them also says how often explain cries wolf."""
    assert not {r["url"] for r in LATER} & {r["url"] for r in CORPUS + HELDOUT}
    assert len(LATER) >= 30 and sum(r["class"] == "none" for r in LATER) >= 3
    cited = {link for path in Path(known_issues.__file__).parent.glob("data/**/*.json")
             for link in re.findall(r"https://github\.com/[\w.-]+/[\w.-]+/(?:issues|pull)/\d+", path.read_text())}
    assert not {r["url"] for r in LATER2} & ({r["url"] for r in CORPUS + HELDOUT + LATER} | cited)
    assert len(LATER2) >= 40 and sum(r["class"] == "none" for r in LATER2) >= 5
    assert {"amd", "nvidia"} <= {r["gpu"] for r in LATER2} and {"linux", "windows"} <= {r["os"] for r in LATER2}


def test_the_third_later_part_was_collected_blind_and_overlaps_nothing():
    """The third later part: new threads found by generic symptom queries (not by class), none in
    another part or cited anywhere in the knowledge base; a class the knowledge base lacks is
    labelled other:<name>, so the part also says how often users hit one."""
    cited = {link for path in Path(known_issues.__file__).parent.glob("data/**/*.json")
             for link in re.findall(r"https://github\.com/[\w.-]+/[\w.-]+/(?:issues|pull)/\d+", path.read_text())}
    assert not {r["url"] for r in LATER3} & ({r["url"] for r in CORPUS + HELDOUT + LATER + LATER2} | cited)
    assert len(LATER3) >= 30 and sum(r["class"] == "none" for r in LATER3) >= 5
    assert {"amd", "nvidia"} <= {r["gpu"] for r in LATER3} and {"linux", "windows"} <= {r["os"] for r in LATER3}
    assert all(r["class"] in CLASSES or r["class"] == "none" or re.match(r"other:[\w.-]+$", r["class"])
               for r in LATER3)
    assert all(r.get("collected") == "later3" for r in LATER3)


@pytest.mark.parametrize("part, reports, recall, precision, no_gpu_diagnosed", [
    ("issue-41 tuning", [r for r in CORPUS if r.get("collected") == "issue-41"], 42 / 44, 42 / 42, 0),
    ("issue-41 held out", [r for r in HELDOUT if r.get("collected") == "issue-41"], 57 / 62, 57 / 60, 0),
    ("later", LATER, 21 / 28, 21 / 24, 2),
    ("round-2 tuning", [r for r in CORPUS if r.get("collected") == "issue-41-r2"], 13 / 14, 13 / 13, 0),
    ("round-2 held out", [r for r in HELDOUT if r.get("collected") == "issue-41-r2"], 13 / 13, 13 / 13, 0),
    ("second later", LATER2, 35 / 37, 35 / 36, 0),
    ("round-3 tuning", [r for r in CORPUS if r.get("collected") == "issue-41-r3"], 5 / 6, 5 / 6, 0),
    ("round-3 held out", [r for r in HELDOUT if r.get("collected") == "issue-41-r3"], 10 / 11, 10 / 10, 0),
])
def test_each_part_of_issue_41_scores_at_least_what_was_measured(part, reports, recall, precision, no_gpu_diagnosed):
    """Issue 41, measured when each part was frozen (before issue 41's knowledge the same explain
    scored 5/44 and 4/62 on the first two). The later part was collected after the tuning and
    never tuned on: its 21/28 (75%) is below the issue's 85%, and bitsandbytes' CPU-build warning
    on two machines without a GPU problem is still diagnosed; the floors say that, not a wish (round
    2 generalised from the classes it missed, using new reports, and left its measured figure as it
    was). Round 2's own reports, split by the same rule before its signatures: explain scored 3/14
    and 1/13 on them (1 of 4 no-GPU logs diagnosed) before round 2. The second later part was
    collected after round 2's tuning was frozen (148e884) and measured once: 35/37 (95%),
    precision 35/36, none of its 5 no-GPU logs diagnosed, no wrong confident answer. Round 3's own
    reports (collected from the classes the third later part missed, split by the same rule before any
    signature, committed at cbc0a94): the explain of e9d639e scored 1/6 (precision 1/4) and 5/11
    (precision 5/6) on them; after round 3 (e204190) 5/6 and 10/11. The later part's 21/28 is asserted
    as measured; explain names 26/28 of it before and after round 3, which is not a measurement
    (round 2 generalised from its misses)."""
    s = scores(reports)
    print(f"\n{part}: recall {s['right']}/{s['gpu_failures']}, precision {s['right']}/{s['diagnosed']}, "
          f"no-GPU logs diagnosed {s['no_gpu_diagnosed']}/{s['no_gpu_logs']}")
    assert s["recall"] >= recall - 1e-9 and s["precision"] >= precision - 1e-9, s
    assert s["no_gpu_diagnosed"] <= no_gpu_diagnosed and s["wrong_confident"] == 0, s


def test_the_third_later_part_scores_what_was_measured_wrong_confident_answers_included():
    """Measured once at 8a498c0, after the part was committed (61e53dc) and never tuned on: 10/20 GPU
    failures named right, precision 10/14, none of its 15 no-GPU logs diagnosed. 3 of the 20 failures
    are of a class the knowledge base lacks (other:*); on the 17 it has a class for, 10/17. Two answers
    are wrong with confidence: 'no kernel image' on cards of compute capability 3.0 and 3.5 that the
    threads confirm are too old for the build (labelled gpu-too-old), answered with the
    cuda-no-kernel-image issue of arch-not-in-build. Those were the figures as measured.

    Round 3 then generalised from its misses (new reports, never this part's threads or lines), so
    what this part scores now is NOT a measurement: 11/20, precision 11/17, none wrong with
    confidence (a 'no kernel image' log that names no card is now undecided, not confident); 11/17 on
    the classes the knowledge base had. Precision fell because two of its three other:* failures
    (the lazy-init 'device >= 0 && device < num_gpus' assert) are now named device-count-assert, a
    class round 3 added, while their labels, fixed before round 3, say other:*. The test asserts
    what explain scores now, so a later change that loses it shows."""
    s = scores(LATER3)
    print(f"\nthird later: recall {s['right']}/{s['gpu_failures']}, precision {s['right']}/{s['diagnosed']}, "
          f"wrong with confidence {s['wrong_confident']}, "
          f"no-GPU logs diagnosed {s['no_gpu_diagnosed']}/{s['no_gpu_logs']}")
    assert s["gpu_failures"] == 20 and s["no_gpu_logs"] == 15
    assert s["recall"] >= 11 / 20 - 1e-9 and s["precision"] >= 11 / 17 - 1e-9, s
    assert s["no_gpu_diagnosed"] <= 0 and s["wrong_confident"] == 0, s
    lacking = [r for r in LATER3 if r["class"].startswith("other:")]
    assert len(lacking) == 3
    known = scores([r for r in LATER3 if r["class"] in CLASSES])
    assert known["recall"] >= 11 / 17 - 1e-9, known


def test_a_log_shows_its_lines_and_facts_and_nothing_recognised_is_exit_1(tmp_path, capsys):
    log = tmp_path / "train.log"
    log.write_text("step 1 loss 2.3\n" * 5 + "torch 2.4.1+rocm6.0 on gfx1031\n" + NO_BINARY_LOG)
    assert main(["explain", str(log), "--elsewhere"]) == 0
    out = capsys.readouterr().out
    assert "line 8: hipErrorNoBinaryForGpu" in out and "[matches] hip-no-binary-for-gpu" in out
    assert "arch gfx1031, torch 2.4.1+rocm6.0" in out and "HSA_OVERRIDE_GFX_VERSION=10.3.0" in out
    assert "rocmcheck run --probe config-lint --probe device-smoke" in out
    log.write_text("step 1 loss 2.3\nall good\n")
    assert main(["explain", str(log), "--json", "--elsewhere"]) == 1
    assert json.loads(capsys.readouterr().out)["signatures"] == []


@pytest.mark.parametrize("argv, stdin, message", [
    (["explain", "/no/such/log"], "", "cannot read the log"),
    (["explain"], "", "no log on stdin"),
    (["explain", "-"], "\0\1binary", "not a text log"),
    (["explain", "a", "b"], "", "unrecognized arguments"),
])
def test_bad_input_is_one_line_and_exit_2(monkeypatch, capsys, argv, stdin, message):
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


LOG = "step 1 loss 2.3\n" * 5 + "torch 2.4.1+rocm6.0 on gfx1031\n" + NO_BINARY_LOG


@pytest.mark.parametrize("how, data", [
    ("padded with NULs by a hard reset", LOG.encode()[:40] + b"\0" * 4096 + LOG.encode()[40:] + b"\0" * 65536),
    ("NULs first", b"\0" * 16384 + LOG.encode()),
    ("PowerShell's > (UTF-16 with a BOM)", LOG.replace("\n", "\r\n").encode("utf-16")),
    ("UTF-16 without a BOM", LOG.encode("utf-16-le")),
    ("UTF-16 big-endian without a BOM", LOG.encode("utf-16-be")),
    ("UTF-8 with a BOM", codecs.BOM_UTF8 + LOG.encode()),
])
def test_a_log_padded_with_nuls_or_in_utf16_is_read(tmp_path, capsys, how, data):
    """Issue 31: both were refused as binary data."""
    log = tmp_path / "train.log"
    log.write_bytes(data)
    assert main(["explain", str(log), "--elsewhere"]) == 0, how
    out = capsys.readouterr().out
    assert "line 8: hipErrorNoBinaryForGpu" in out and "arch gfx1031, torch 2.4.1+rocm6.0" in out, how


@pytest.mark.parametrize("data", [
    b"\0\1binary",
    random.Random(31).randbytes(20000),
    Path(sys.executable).resolve().read_bytes()[:65536],  # an executable: NULs and other controls
    struct.pack("1000f", *range(1000)),  # floats: NULs dropped, the rest is not UTF-8
])
def test_binary_data_is_still_refused_in_one_line(tmp_path, capsys, data):
    blob = tmp_path / "blob"
    blob.write_bytes(data)
    assert main(["explain", str(blob)]) == 2
    err = capsys.readouterr().err
    assert "is not a text log (binary data)" in err and err.count("\n") == 1


def test_the_log_is_redacted_and_facts_disagreeing_with_each_other_are_named():
    text = ("HSA_OVERRIDE_GFX_VERSION=10.3.0\nAgent 2: gfx1100\nMemory access fault by GPU node-1 (Agent handle: 0x1) "
            "on address (nil). Reason: Unknown. HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123456789\n")
    result = explain(text)
    assert "hf_abcdefghijklmnopqrstuvwxyz0123456789" not in json.dumps(result)
    assert "HF_TOKEN=[REDACTED]" in result["signatures"][0]["lines"][0]["text"]
    assert result["known_issues"][0]["id"] == "memory-access-fault-nil"
    assert any("HSA_OVERRIDE_GFX_VERSION=10.3.0 (gfx1030) on a gfx1100: a different generation" in c
               for c in result["checks"])


def test_a_megabyte_single_line_is_quoted_around_its_match():
    text = "x" * 1_000_000 + " HIP error: invalid device function " + "y" * 1000
    hit = next(s for s in recognise(text) if s["id"] == "invalid-device-function")
    assert hit["lines"][0]["line"] == 1 and "invalid device function" in hit["lines"][0]["text"]
    assert len(hit["lines"][0]["text"]) < 300


@pytest.mark.children
def test_on_this_machine_the_log_is_held_against_its_gpu_and_wheel(fake_host, capsys, tmp_path):
    root = fake_host(amd=1)
    (root / "sys/class/kfd/kfd/topology/nodes/1/properties").write_text("gfx_target_version 100301\n")
    log = tmp_path / "crash.log"
    log.write_text(NO_BINARY_LOG)
    assert main(["explain", str(log)]) == 0
    out = capsys.readouterr().out
    assert "this machine's torch 2." in out and "no GPU arch (a CPU build)" in out  # read without a GPU
    assert "fix for gfx1031: the wheel has no code object for gfx1031" in out


def test_log_facts_limit_which_issue_is_named():
    fault = "Memory access fault by GPU node-1 (Agent handle: 0x1) on address 0x7f00. Reason: Page not present " \
            "or supervisor privilege.\n"
    assert [i["id"] for i in explain(fault + "Name: gfx1151\nUbuntu 24.04\n")["known_issues"]] == \
        ["apu-hipmemcpy-page-fault"]
    assert explain(fault + "Name: gfx1100\n")["known_issues"] == []  # the APU issue's arch limit
    unstated = explain(fault)["known_issues"]
    assert [(i["id"], i["confident"]) for i in unstated] == [("apu-hipmemcpy-page-fault", False)]
    assert stated_facts("torch==2.5.1+rocm6.2 gfx942 gfx942 gfx1036", [])["arch"] == "gfx942"


# --- known issues match what a verdict says, within their limits --------------------------


def _concrete(glob: str) -> str:
    return glob.replace("[[]", "[").replace("*", "x").replace("?", "x")


def _version_in(spec: str) -> str:
    numbers = re.findall(r"[0-9][0-9.]*", spec)
    candidates = [n for want in numbers for n in (want, want + ".1", re.sub(r"\d+$", lambda m: str(max(
        int(m.group()) - 1, 0)), want))] + ["0.1", "99"]
    return next(v for v in candidates if known_issues.in_range(v, spec))


def _shortest(tree) -> str:
    """The shortest text a parsed regex matches, taking the first branch of each alternation
    (a deterministic, instant stand-in for hypothesis' from_regex, which took 17 s here)."""
    out = []
    for op, arg in tree:
        name = str(op)
        if name == "LITERAL":
            out.append(chr(arg))
        elif name == "IN":
            kind, value = arg[0]
            out.append({"CATEGORY_DIGIT": "1", "CATEGORY_SPACE": " "}.get(str(value), "x") if str(kind) == "CATEGORY"
                       else chr(value[0] if str(kind) == "RANGE" else value))
        elif name == "ANY":
            out.append("x")
        elif name == "BRANCH":
            out.append(_shortest(arg[1][0]))
        elif name == "SUBPATTERN":
            out.append(_shortest(arg[-1]))
        elif name in ("MAX_REPEAT", "MIN_REPEAT"):
            out.append(_shortest(arg[2]) * arg[0])
    return "".join(out)  # anchors and lookarounds add nothing


def _example(entry):
    """A message the entry's pattern matches."""
    if "message" not in entry:
        return "failed"
    text = _shortest(sre_parse.parse(entry["message"]))
    assert re.search(entry["message"], text, re.I), (entry["id"], text)
    return text


def _verdict_and_fingerprint(entry, message):
    status = Status((entry.get("status") or ["fail"])[0])
    verdict = Verdict(_concrete(entry["probe"]), _concrete(entry.get("variant", entry["probe"])), status,
                      message=message)
    facts = {"torch": _version_in(entry["torch"]) if "torch" in entry else "2.9.0",
             "backend": entry.get("backend", "rocm")}
    facts.update({k: _version_in(entry[k]) for k in ("hip", "rocm", "cuda") if k in entry})
    host = {"system": entry.get("os", ["linux"])[0].split()[0].capitalize(),
            "wsl": "wsl" in entry.get("os", [""])[0], "python": _version_in(entry.get("python", ">=3.9")),
            "cpu_flags": ["avx", "avx2", *entry.get("cpu_flags", [])]}
    arch = _concrete(entry.get("arch", ["gfx1100"])[0])
    fingerprint = {"device_facts": facts, "host": host, "device": {"arch": arch}}
    return verdict, fingerprint


def _ids(verdict, fingerprint):
    return {m["id"] for m in known_issues.match(verdict, fingerprint)}


@pytest.mark.parametrize("entry", known_issues.entries(), ids=lambda e: e["id"])
def test_every_known_issue_matches_its_failure_and_no_near_miss(entry):
    message = _example(entry)
    verdict, fingerprint = _verdict_and_fingerprint(entry, message)
    assert entry["id"] in _ids(verdict, fingerprint)
    misses = {}
    if entry["probe"] != "*":
        misses["another probe"] = (Verdict("zz-other", "zz-other", verdict.status, message=message), fingerprint)
    if "status" in entry:
        other = next(s for s in Status if s.is_notable and s.value not in entry["status"])
        misses["another status"] = (Verdict(verdict.probe, verdict.variant, other, message=message), fingerprint)
    if "variant" in entry:
        misses["another variant"] = (Verdict(verdict.probe, "zz[other]", verdict.status, message=message), fingerprint)
    if "message" in entry and not signatures(message):
        planted = Verdict(verdict.probe, verdict.variant, verdict.status, message="result differs",
                          evidence={"output_tail": f"progress: case {message} ran"})
        misses["its words only in the progress lines"] = (planted, fingerprint)
    if "arch" in entry:
        misses["another arch"] = (verdict, {**fingerprint, "device": {"arch": "gfx000"}})
    if "os" in entry:
        misses["another OS"] = (verdict, {**fingerprint, "host": {**fingerprint["host"], "system": "Plan9",
                                                                  "wsl": False}})
    if "not_os" in entry:
        misses["the OS it never applies to"] = (verdict, {**fingerprint, "host": {**fingerprint["host"],
                                                                                  "system": "Linux", "wsl": True}})
    if "backend" in entry:
        other = {**fingerprint["device_facts"], "backend": "cuda" if entry["backend"] == "rocm" else "rocm"}
        misses["another backend"] = (verdict, {**fingerprint, "device_facts": other})
    for flag in entry.get("cpu_flags", []):
        fewer = [f for f in fingerprint["host"]["cpu_flags"] if f != flag]
        host = {**fingerprint["host"], "cpu_flags": fewer}
        misses[f"a CPU without {flag}"] = (verdict, {**fingerprint, "host": host})
    if "cpu_flags" in entry:
        misses["no /proc/cpuinfo"] = (verdict, {**fingerprint, "host": {**fingerprint["host"], "cpu_flags": None}})
    for key in ("torch", "hip", "rocm", "cuda"):
        if key in entry:
            outside = next(v for v in ("0.0.1", "999.0") if not known_issues.in_range(v, entry[key]))
            misses[f"{key} {outside}"] = (verdict, {**fingerprint, "device_facts": {**fingerprint["device_facts"],
                                                                                    key: outside}})
    assert [why for why, (v, fp) in misses.items() if entry["id"] in _ids(v, fp)] == []


def test_entries_found_by_log_signatures_also_say_what_a_verdict_must_say():
    ids = {s.id for s in [*SIGNATURES, *KERNEL_SIGNATURES]}
    for entry in known_issues.entries():
        assert set(entry.get("signatures", ())) <= ids, entry["id"]
        if entry.get("signatures") and entry["probe"] in ("*", "gpu-visible", "library-imports", "device-smoke"):
            assert "message" in entry, f"{entry['id']} would match every failure of {entry['probe']}"


@pytest.mark.parametrize("torch_version, backend, expected", [
    ("2.4.1", "cpu", ["sdpa-fully-masked-rows-nan-torch-lt-2.5"]),
    ("2.4.1+rocm6.0", "rocm", ["sdpa-fully-masked-rows-nan-torch-lt-2.5"]),
    ("2.5.1", "cpu", []),
])
def test_left_padded_nan_grads_on_old_torch_name_exactly_the_torch_issue(torch_version, backend, expected):
    verdict = Verdict("attention-sdpa", "attention-sdpa[efficient-fp32]", Status.FAIL,
                      message="left-pad: dk has 19 NaN/Inf; left-pad: dv has 19 NaN/Inf",
                      evidence={"output_tail": "case v-strided error 0.0\ncase left-pad ..."})
    fingerprint = {"device_facts": {"torch": torch_version, "backend": backend}, "device": {"arch": "gfx942"}}
    assert sorted(_ids(verdict, fingerprint)) == expected


# The `flags` line of a Sapphire Rapids Xeon's /proc/cpuinfo, cut to the vector and matrix sets and a
# few neighbours (names from the kernel's arch/x86/include/asm/cpufeatures.h; the lscpu flags quoted
# in pytorch/pytorch#144021 for a Xeon Platinum 8475B carry the same avx512_fp16 amx_bf16 amx_tile).
SPR_CPUINFO = ("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8475B\n"
               "flags\t\t: fpu sse sse2 avx f16c fma avx2 avx512f avx512bw avx512_bf16 avx512_fp16 amx_bf16 "
               "amx_tile amx_int8 arat\n\nprocessor\t: 1\nflags\t\t: fpu\n")


def test_cpu_flags_are_the_first_flags_lines_vector_and_matrix_sets(tmp_path):
    from rocmcheck.host import fingerprint

    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text(SPR_CPUINFO)
    assert fingerprint.cpu_flags(tmp_path) == ["amx_bf16", "amx_int8", "amx_tile", "avx", "avx2", "avx512_bf16",
                                               "avx512_fp16", "avx512bw", "avx512f", "f16c", "fma"]
    assert fingerprint.cpu_flags(tmp_path / "nothing") is None


@pytest.mark.parametrize("torch_version, flags, expected", [
    ("2.5.1+cu124", ["avx512_fp16", "amx_tile", "avx2"], ["sdpa-cpu-flash-fp16-sigill-torch-2.5.1"]),
    ("2.5.1+cu124", ["avx512_fp16", "avx2"], []),  # no AMX: not the CPU it was seen on
    ("2.5.1+cu124", None, []),  # no /proc/cpuinfo to say
    ("2.4.1+cu121", ["avx512_fp16", "amx_tile"], []),
])
def test_the_sigill_of_cpu_flash_fp16_is_named_only_on_torch_2_5_1_and_an_avx512_fp16_amx_cpu(
        torch_version, flags, expected):
    verdict = Verdict("attention-sdpa", "attention-sdpa[flash-fp16]", Status.CRASH, message="crashed: SIGILL")
    fingerprint = {"device_facts": {"torch": torch_version, "backend": "cpu"}, "host": {"cpu_flags": flags}}
    assert sorted(_ids(verdict, fingerprint)) == expected


@pytest.mark.parametrize("card, arch_list, override, says", [
    ("gfx1031", None, None, "or set HSA_OVERRIDE_GFX_VERSION=10.3.0 (the gfx1031 runs gfx1030 code objects)"),
    ("gfx1102", ["gfx1100", "gfx942"], None, "or set HSA_OVERRIDE_GFX_VERSION=11.0.0"),
    ("gfx1031", ["gfx1100"], None, "(it lists gfx1100): install a ROCm torch built for gfx1031"),
    ("gfx1100", ["gfx1030"], "10.3.0", "makes the gfx1100 report as gfx1030, a different generation"),
    ("gfx1031", ["gfx1030"], "10.3.0", "is already set, yet code is missing"),
    ("gfx1100", ["gfx1100"], None, "the wheel lists gfx1100"),
])
def test_arch_advice_names_the_wheel_the_family_override_or_the_wrong_override(card, arch_list, override, says):
    advice = hostgpu.arch_advice(card, arch_list, override)
    assert says in advice
    assert ("HSA_OVERRIDE_GFX_VERSION=10.3.0 (" in advice) == (card == "gfx1031" and arch_list is None)


@pytest.mark.children
def test_gate_names_hip_no_binary_and_the_fix_when_the_runtime_aborts(fake_host, tmp_path, monkeypatch, capsys):
    """The fault prints HIP's text and aborts at the first GPU runtime call, in the device-facts
    child and in every probe child, as a wheel without the card's code objects does."""
    root = fake_host(amd=1)
    (root / "sys/class/kfd/kfd/topology/nodes/1/properties").write_text("gfx_target_version 100301\n")
    monkeypatch.setenv("HSA_OVERRIDE_GFX_VERSION", "11.0.0")
    code = main(["gate", "--inject", "no-binary-for-gpu", "--out-dir", str(tmp_path), "--json", "-"])
    out = capsys.readouterr()
    node = json.loads(out.out[out.out.index("{"):])
    assert code == 1 and node["status"] == "NO-GO"
    failing = node["failing"][0]
    assert failing["status"] == "crash" and "hipErrorNoBinaryForGpu" in failing["message"]
    assert "HSA_OVERRIDE_GFX_VERSION=11.0.0 makes the gfx1031 report as gfx1100, a different generation" \
        in failing["action"]
    assert any("hipErrorNoBinaryForGpu at the first HIP call" in note for note in node["notes"])


def test_report_log_puts_the_recognised_excerpt_and_issue_in_the_attachment(tmp_path, capsys):
    from rocmcheck.outputs.storage import SCHEMA

    run = tmp_path / "run.json"
    run.write_text(json.dumps({"schema": SCHEMA, "schema_version": "1.3", "run": {"id": "r1", "device": "cpu"},
                               "fingerprint": {}, "verdicts": []}))
    log = tmp_path / "train.log"
    log.write_text("epoch 1\nLoading model...\nHF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123456789 "
                   + NO_BINARY_LOG.split("\n", 1)[1])
    out = tmp_path / "bug.md"
    assert main(["report", "--from", str(run), "--log", str(log), "-o", str(out)]) == 0
    md, twin = out.read_text(), json.loads(out.with_suffix(".json").read_text())
    assert f"## The log `{log}` (4 lines)" in md and "Recognised lines (1)" in md
    assert "line 3: HF_TOKEN=[REDACTED] hipErrorNoBinaryForGpu" in md
    assert "matches: **hipErrorNoBinaryForGpu" in md
    assert twin["log"]["known_issues"][0]["id"] == "hip-no-binary-for-gpu"
    assert "hf_abcdefghijklmnopqrstuvwxyz0123456789" not in md + json.dumps(twin)
    assert main(["report", "--from", str(run), "--log", str(tmp_path / "missing.log")]) == 2
    assert "cannot read the log" in capsys.readouterr().err


@pytest.mark.parametrize("log, expected, confident", [
    ("Memory access fault by GPU node-1 (Agent handle: 0x55d) on address (nil). Reason: Unknown.",
     "memory-access-fault-nil", True),
    ("AttributeError: module 'torch' has no attribute 'int1'", "torch-int1-missing", True),
    ("torch 2.5.1+rocm6.2\n[W CUDAAllocatorConfig.h:28] Warning: expandable_segments not supported on this platform",
     "expandable-segments-ignored", True),
    ("torch 2.6.0+rocm6.2.4\nRuntimeError: CUDA error: HIPBLAS_STATUS_INTERNAL_ERROR when calling `hipblasLtMatmul( "
     "ltHandle, computeDesc.descriptor())`", "hipblaslt-status-error", True),
    ('Thread 0x7f (most recent call first):\n  File "/usr/lib/python3.10/site-packages/torch/nn/parallel/'
     'parallel_apply.py", line 86 in parallel_apply', "dataparallel-broken", False),
    ("RuntimeError: ProcessGroupNCCL is only supported with GPUs, no GPUs found!", "process-group-sees-no-gpu", True),
    (NO_BINARY_LOG, "hip-no-binary-for-gpu", True),
    ("RuntimeError: CUDA error: no kernel image is available for execution on the device", "cuda-no-kernel-image",
     False),
    ("NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current PyTorch installation.\n"
     "RuntimeError: CUDA error: no kernel image is available for execution on the device", "cuda-no-kernel-image",
     True),
])
def test_the_failures_users_name_most_each_have_a_tested_entry(log, expected, confident):
    first = explain(log)["known_issues"][0]
    assert (first["id"], first["confident"]) == (expected, confident) and first["workaround"]


def test_a_no_kernel_image_log_that_names_no_card_leaves_too_old_and_not_built_open():
    """Round 3: 'no kernel image' is printed alike for a card older than the build's oldest arch
    (gpu-too-old) and an arch the build left out (arch-not-in-build). A log that names no compute
    capability gets both classes and a possible (not confident) known issue that says what decides;
    a log that names the card's sm_XY keeps the confident answer."""
    bare = explain("RuntimeError: CUDA error: no kernel image is available for execution on the device")
    assert [c["id"] for c in bare["classes"]][:2] == ["arch-not-in-build", "gpu-too-old"]
    assert any("compute capability" in w for w in bare["classes"][1]["why"])
    issue = bare["known_issues"][0]
    assert not issue["confident"] and any("get_arch_list" in d for d in issue["decide"])
    named = explain("NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current PyTorch "
                    "installation.\nRuntimeError: CUDA error: no kernel image is available for execution on the device")
    assert "gpu-too-old" not in [c["id"] for c in named["classes"]] and named["known_issues"][0]["confident"]


def test_round_3_classes_triton_missing_and_the_device_count_assert():
    """torch.compile without a working triton, and CUDA's lazy-init 'device >= 0 && device < num_gpus'
    assert, are named; xFormers' optional-Triton notice and an out-of-range device_index the program
    asked for are not."""
    compile_log = explain("torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:\nRuntimeError: "
                          "Cannot find a working triton installation. Either the package is not installed or it is "
                          "too old.")
    assert compile_log["classes"][0]["id"] == "triton-missing"
    init_log = explain("RuntimeError: device >= 0 && device < num_gpus INTERNAL ASSERT FAILED at "
                       "\"../aten/src/ATen/cuda/CUDAContext.cpp\":50, please report a bug to PyTorch. "
                       "device=, num_gpus=")
    assert init_log["classes"][0]["id"] == "device-count-assert"
    notice = explain("A matching Triton is not available, some optimizations will not be enabled.\n"
                     "Error caught was: No module named 'triton'")
    assert not notice["classes"] and [b["id"] for b in notice["benign"]] == ["benign-xformers-triton"]
    asked = explain("RuntimeError: device_index >= 0 && device_index < num_gpus INTERNAL ASSERT FAILED at "
                    "\"../c10/cuda/CUDAStream.cpp\":247, please report a bug to PyTorch")
    assert not asked["classes"]


# --- calibration: a confident answer only where the log's own facts fit its scope --------------

ARCH_LINE = "rocBLAS error: Cannot read TensileLibrary.dat: No such file or directory for GPU arch : {}"


def _fact_lines(entry, fit):
    """Log lines stating facts that fit every limit of `entry` (fit=True) or contradict them all."""
    lines = []
    if "arch" in entry:
        fitting = _concrete(entry["arch"][0])
        other = next(a for a in ("gfx1100", "gfx906", "gfx1201") if not any(
            fnmatch.fnmatchcase(a, g) for g in entry["arch"]))
        lines.append(f"GPU arch from rocminfo: Name:    {fitting if fit else other}")
    if "os" in entry:
        windows = any("windows" in o for o in entry["os"])
        lines.append("C:\\Users\\me\\app\\run.exe" if windows == fit else "/home/me/venv/bin/python on Ubuntu 22.04")
    if "not_os" in entry:
        lines.append("/home/me/venv/bin/python on Ubuntu 22.04" if fit else "WSL environment detected.")
    if "backend" in entry:
        rocm = entry["backend"] == "rocm"
        lines.append("torch 2.5.1+rocm6.2" if rocm == fit else "torch 2.5.1+cu121")
    for key, word in (("torch", "torch "), ("rocm", "ROCm "), ("cuda", "CUDA used to build PyTorch: ")):
        if key in entry:
            inside = _version_in(entry[key])
            outside = next(v for v in ("0.0.1", "99.0.0") if not known_issues.in_range(v, entry[key]))
            lines.append(f"{word}{inside if fit else outside}")
    return lines


def _signature_text(entry):
    """A log line for each of `entry`'s signatures with its message, from the patterns themselves."""
    by_id = {s.id: s for s in [*SIGNATURES, *KERNEL_SIGNATURES]}
    message = _example(entry) if "message" in entry else ""
    return [f"{_shortest(sre_parse.parse(by_id[sid].pattern.pattern))} {message}" for sid in entry["signatures"]]


SCOPED = [e for e in known_issues.entries() if e.get("signatures") and set(e) & {
    "arch", "os", "not_os", "backend", "torch", "rocm", "cuda"}]


@pytest.mark.parametrize("entry", SCOPED, ids=lambda e: e["id"])
def test_no_confident_known_issue_that_the_logs_own_facts_contradict(entry):
    """For every known issue that has a scope, a log showing its failure and facts that fit names
    it, and the same log with facts that contradict every limit never names it with confidence
    (it is left out: a limit the log contradicts rules it out)."""
    failure = _signature_text(entry)
    fitting = explain("\n".join([*failure, *_fact_lines(entry, fit=True)]))
    assert entry["id"] in [i["id"] for i in fitting["known_issues"]], fitting["facts"]
    contradicted = explain("\n".join([*failure, *_fact_lines(entry, fit=False)]))
    assert entry["id"] not in [i["id"] for i in contradicted["known_issues"]], contradicted["facts"]


def test_scoped_issues_cover_what_the_issue_asks():
    """The planted contradictions reach the issues users meet: an APU-only remedy, an OS-bound one,
    a backend-bound one."""
    assert {"apu-hipmemcpy-page-fault", "hsa-out-of-resources", "hipblaslt-status-error",
            "expandable-segments-ignored"} <= {e["id"] for e in SCOPED}


def test_an_apu_remedy_never_goes_to_a_log_that_names_a_discrete_card():
    """Issue 35: a memory access fault on an RX 7900 XTX got the Strix-APU page-fault remedy."""
    fault = ("Memory access fault by GPU node-1 (Agent handle: 0x5f) on address 0x7f3c. Reason: Page not present "
             "or supervisor privilege.\n")
    named = explain(fault + "Device: AMD Radeon RX 7900 XTX\n")
    assert named["facts"]["arch"] == "gfx1100" and "integrated" not in named["facts"]
    assert "apu-hipmemcpy-page-fault" not in [i["id"] for i in named["known_issues"]]
    assert named["classes"][0]["id"] == "memory-access-fault" and "HSA_OVERRIDE_GFX_VERSION" in \
        named["classes"][0]["advice"]
    apu = explain(fault + "Device: AMD Radeon 8060S Graphics (Ryzen AI Max+ 395), Ubuntu 24.04\n")
    assert [(i["id"], i["confident"]) for i in apu["known_issues"]] == [("apu-hipmemcpy-page-fault", True)]


def test_a_ring_timeout_on_a_discrete_card_is_a_gpu_reset_not_an_apu_page_fault():
    """Issue 35: an RX 7900 XTX ring timeout on ROCm 5.6 got the Strix-APU / kernel 6.17 remedy."""
    log = ("[  711.45] [drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx_0.0.0 timeout, signaled seq=43270\n"
           "[  711.45] amdgpu 0000:0d:00.0: amdgpu: GPU reset begin!\n"
           "[  711.46] amdgpu 0000:0d:00.0: amdgpu: [gfxhub] page fault (src_id:0 ring:24 vmid:8 pasid:32771)\n"
           "ROCm 5.6, AMD Radeon RX 7900 XTX\n")
    result = explain(log)
    assert result["classes"][0]["id"] == "kernel-gpu-reset"
    assert "apu-hipmemcpy-page-fault" not in [i["id"] for i in result["known_issues"]]
    assert "newer ROCm" in result["classes"][0]["advice"]


def test_a_discrete_card_behind_the_igpu_is_told_to_hide_the_igpu_not_to_install_its_libraries():
    """Issue 35: an RX 6800 XT user whose HIP SDK enumerated the iGPU first was told to install
    rocBLAS for the iGPU's arch."""
    log = ("rocBLAS error: Cannot read C:\\Program Files\\AMD\\ROCm\\6.1\\bin\\/rocblas/library/TensileLibrary.dat: "
           "No such file or directory for GPU arch : gfx1036\n")
    result = explain(log)
    assert result["facts"]["os"] == "windows" and result["facts"]["arch"] == "gfx1036"
    assert result["classes"][0]["id"] == "windows-igpu-first" and "HIP_VISIBLE_DEVICES=1" in \
        result["classes"][0]["advice"]
    assert not any(i["confident"] for i in result["known_issues"])  # the rocBLAS remedy is only possible
    assert not any(c.startswith("fix for gfx1036") for c in result["checks"])


@pytest.mark.parametrize("log, leading, facts, says", [
    ("WSL environment detected.\nCall returned HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime failed",
     "wsl-no-device", {"os": "linux wsl"}, "WSL runtime"),
    ("RuntimeError: No HIP GPUs are available\nPython platform: Linux-6.6.87.1-microsoft-standard-WSL2-x86_64",
     "wsl-no-device", {"os": "linux wsl"}, "librocdxg"),
    ("  File \"C:\\ComfyUI-Zluda\\comfy\\ops.py\", line 5\nRuntimeError: CUDA error: CUBLAS_STATUS_NOT_SUPPORTED "
     "when calling `cublasSgemm( handle)`", "zluda", {"backend": "zluda", "os": "windows"}, "HIP SDK"),
    ("rocBLAS error: Cannot read /opt/rocm-6.4.0/lib/rocblas/library/TensileLibrary.dat: No such file or directory "
     "for GPU arch : gfx906\n\"/opt/rocm-6.4.0/lib/rocblas/library/TensileLibrary_lazy_gfx1101.dat\"",
     "arch-dropped", {"arch": "gfx906", "rocm": "6.4.0"}, "Stay on ROCm 6.3"),
    ("torch 2.0.0+rocm5.4.2\nrocBLAS error: Cannot read /venv/torch/lib/rocblas/library/TensileLibrary.dat\n"
     "Name:                    gfx1100", "rocm-older-than-card", {"arch": "gfx1100", "rocm": "5.4.2"},
     "Use ROCm 5.5 or newer"),
    ("RuntimeError: The NVIDIA driver on your system is too old (found version 11040).", "driver-too-old",
     {"driver_cuda": "11.4"}, "supports CUDA 11.4"),
    ("kfd kfd: skipped device 1002:67df, PCI rejects atomics", "pcie-atomics", {}, "atomics"),
    ("NCCL WARN Error while creating shared memory segment /dev/shm/nccl-a1 (size 9637888)\n"
     "RuntimeError: NCCL error: unhandled system error", "nccl-shm", {}, "--shm-size"),
    ("init.cc:179 NCCL WARN Missing \"iommu=pt\" from kernel command line which can lead to system instablity or hang!",
     "collective-hang", {}, "iommu=pt"),
    ("[ 90.64] amdgpu 0000:2d:00.0: AMD-Vi: Event logged [IO_PAGE_FAULT domain=0x0013 address=0xfe9fe000]",
     "kernel-iommu-fault", {}, "iommu=pt"),
    ("[93297.02] NVRM: Xid (PCI:0000:43:00): 79, pid=1, GPU has fallen off the bus.", "kernel-nvidia-xid",
     {"xid": ["79"]}, "Xid 79: the GPU has fallen off the bus"),
    ("UserWarning: Attempting to use hipBLASLt on an unsupported architecture! Overriding blas backend to hipblas",
     "hipblaslt-unsupported-arch", {}, "TORCH_BLAS_PREFER_HIPBLASLT=0"),
    ("time=x level=WARN msg=\"amdgpu is not supported (supported types:[gfx1030 gfx1100])\" gpu_type=gfx1031 gpu=0",
     "app-arch-list", {"arch": "gfx1031"}, "(gfx1031)"),
    ("MIOpen(HIP): Error [Compile] 'hiprtcCompileProgram(prog.get())' naive_conv.cpp: HIPRTC_ERROR_COMPILATION (6)",
     "miopen", {}, "MIOPEN_FIND_MODE=2"),
    ("RuntimeError: HIP error: invalid argument\nFor debugging consider passing AMD_SERIALIZE_KERNEL=3", "hip-error",
     {}, "AMD_SERIALIZE_KERNEL=3"),
    ("Step: 100 Loss: nan Accuracy: 0.465", "nan-output", {}, "CPU"),
    ("AssertionError: Torch not compiled with CUDA enabled", "cpu-wheel", {}, "GPU build"),
])
def test_each_class_is_recognised_refined_by_its_facts_and_advised(log, leading, facts, says):
    result = explain(log)
    lead = result["classes"][0]
    assert lead["id"] == leading, [c["id"] for c in result["classes"]]
    assert facts.items() <= result["facts"].items(), result["facts"]
    assert says in lead["advice"] and lead["collect"] is not None
    if lead["id"] in ("wsl-no-device", "zluda", "windows-igpu-first", "arch-dropped", "rocm-older-than-card"):
        assert not any(i["confident"] and i.get("class") != leading for i in result["known_issues"])


def test_a_remedy_for_a_missing_arch_names_the_arch_the_log_shows():
    """The failing device is the one named (llama.cpp's 'current device: 1'), and a CUDA card's
    sm_XY with the wheel's list."""
    log = ("ggml_cuda_init: found 2 ROCm devices:\n  Device 0: AMD Radeon RX 9070, gfx1201 (0x1201), VMM: no\n"
           "  Device 1: AMD Radeon 740M Graphics, gfx1103 (0x1103), VMM: no\nROCm error: invalid device function\n"
           "  current device: 1, in function ggml_cuda_compute_forward at ggml-cuda.cu:2932\n")
    result = explain(log)
    assert result["facts"]["arch"] == "gfx1103" and result["facts"]["device"] == 1
    assert result["classes"][0]["id"] == "windows-igpu-first" and "gfx1103" in result["classes"][0]["advice"]
    assert "HIP_VISIBLE_DEVICES=0 (the discrete card's index in this log)" in result["classes"][0]["advice"]
    cuda = explain("NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current PyTorch "
                   "installation.\nThe current PyTorch install supports CUDA capabilities sm_50 sm_60 sm_70 sm_80 "
                   "sm_90.")
    assert cuda["known_issues"][0]["id"] == "cuda-no-kernel-image" and cuda["known_issues"][0]["confident"]
    assert cuda["facts"]["arch"] == "sm_120" and cuda["facts"]["wheel_archs"][-1] == "sm_90"
    assert any(c.startswith("fix for sm_120: the build lists sm_50 sm_60 sm_70 sm_80 sm_90") and "cu128" in c
               for c in cuda["checks"])


@pytest.mark.parametrize("text, key, value", [
    ("List of available TensileLibrary Files :\n\"/opt/rocm/lib/rocblas/library/TensileLibrary_lazy_gfx1101.dat\"",
     "arch", None),
    ("The current PyTorch install supports CUDA capabilities sm_50 sm_60 sm_70.", "arch", None),
    ("PS H:\\therock\\bin> .\\hipInfo.exe", "os", "windows"),
    ("File \"/Users/me/ComfyUI/main.py\", line 11", "os", "macos"),
    ("[  308.33] [drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring sdma0 timeout", "os", "linux"),
    ("rocBLAS error: Cannot read C:\\Program Files\\AMD\\ROCm\\6.1\\bin\\/rocblas/library/TensileLibrary.dat",
     "rocm", "6.1"),
    ("docker run -it rocm/pytorch:rocm5.7_ubuntu22.04_py3.10_pytorch_2.0.1", "rocm", "5.7"),
    ("| NVIDIA-SMI 470.86       Driver Version: 470.86       CUDA Version: 11.4", "driver", "470.86"),
    ("docker run --rm --device=/dev/kfd rocm/pytorch:latest", "container", True),
    ("Device: AMD Radeon RX 6800M\n", "arch", "gfx1031"),
    ("Device: AMD Radeon RX 6800 XT\n", "arch", "gfx1030"),
])
def test_the_facts_a_log_states_are_read_where_the_line_says_them(text, key, value):
    assert stated_facts(text, []).get(key) == value


def test_the_quick_prefilter_never_skips_a_signature_that_matches():
    """literals() lets recognise skip a regex whose required strings are absent: on every report of
    both parts, and on each pattern's own shortest match, the prefilter agrees with the regex."""
    for sig in [*SIGNATURES, *KERNEL_SIGNATURES]:
        example = _shortest(sre_parse.parse(sig.pattern.pattern))
        assert sig.pattern.search(example) and could_match(sig.needles, example.lower()), sig.id
    for report in CORPUS + HELDOUT:
        text = "\n".join(report["log"])
        for sig in [*SIGNATURES, *KERNEL_SIGNATURES]:
            if sig.pattern.search(text):
                assert could_match(sig.needles, text.lower()), (sig.id, report["url"])


def test_the_byte_pair_gate_of_a_big_log_never_skips_a_signature_that_matches():
    """A log of a MiB or more is first reduced to the byte pairs it holds (signatures.text_bigrams):
    each pattern's own shortest match, planted in a MiB of training output, is still recognised,
    and the gate rules out a needle whose pair is absent."""
    filler = "step 1234/100000 | loss 2.3412 | lr 3.0e-04 | grad_norm 0.812 | 41.2 samples/s\n" * 14000
    for sig in [*SIGNATURES, *KERNEL_SIGNATURES]:
        example = _shortest(sre_parse.parse(sig.pattern.pattern))
        text = filler + example + "\n"
        assert could_match(sig.needles, text.lower(), text_bigrams(text.lower())), sig.id
    assert text_bigrams("short") is None
    assert not could_match(("zq",), (filler + "z q").lower(), text_bigrams((filler + "z q").lower()))


@pytest.mark.parametrize("make, code, says", [
    (lambda p: p.mkdir(), 2, "cannot read the log"),
    (lambda p: p.write_bytes(b""), 2, "is empty"),
    (lambda p: p.write_text("step 1 loss 2.3\n" * 3_000_000 + NO_BINARY_LOG), 0, "hip-no-binary-for-gpu"),
])
def test_a_folder_an_empty_file_and_a_50_mb_log_are_bad_input_or_a_result(tmp_path, capsys, make, code, says):
    log = tmp_path / "train.log"
    make(log)
    assert main(["explain", str(log), "--elsewhere"]) == code
    out = capsys.readouterr()
    assert says in (out.err if code == 2 else out.out) and "Traceback" not in out.err
    if code == 2:
        assert out.err.count("\n") == 1


# --- issue 41: the classes it added, reasoning from the log's own facts, its three misleads ----------


@pytest.mark.parametrize("log, leading, says", [
    ("RuntimeError: Unexpected error from cudaGetDeviceCount(). Error 802: system not yet initialized",
     "nvidia-fabric-manager", "nvidia-fabricmanager"),
    ("RuntimeError: CUDA failed with error forward compatibility was attempted on non supported HW",
     "cuda-forward-compat", "reboot"),
    ("CUDA error 222 at ggml-cuda.cu:420: the provided PTX was compiled with an unsupported toolchain.",
     "ptx-toolchain", "update the NVIDIA driver"),
    ("cudaGetDeviceCount returned 30\n-> unknown error\nmodprobe: ERROR: could not insert 'nvidia_331_uvm'",
     "cuda-init-unknown", "modprobe nvidia_uvm"),
    ("kernel: NVRM: API mismatch: the client has the version 535.54.03, but\nNVRM: this kernel module has the version "
     "530.30.02.", "nvidia-kernel-module", "reboot"),
    ("docker: Error response from daemon: could not select device driver \"\" with capabilities: [[gpu]].",
     "container-toolkit", "nvidia-ctk runtime configure"),
    ("root@4728a09607c1:/opt/project# python3 test.py\nAssertionError: \nFound no NVIDIA driver on your system.",
     "container-no-gpu", "--gpus all"),
    ("ROCk module is loaded\nUnable to open /dev/kfd read-write: Permission denied", "container-render-group",
     "keep-groups"),
    ("RuntimeError: DataLoader worker (pid 47) is killed by signal: Bus error.", "dataloader-shm", "--shm-size"),
    ("RuntimeError: Failed to dlopen libcuda.so", "wsl-libcuda", "/usr/lib/wsl/lib"),
    ("WSL2\npip3 install torch --index-url https://download.pytorch.org/whl/rocm6.2\nRuntimeError: No HIP GPUs are "
     "available", "wsl-bundled-hsa", "libhsa-runtime64"),
    ("ImportError: /x/knn.so: undefined symbol: _ZN3c105ErrorC1ENS_14SourceLocationERKSs", "extension-abi",
     "--no-build-isolation"),
    ("RuntimeError: cuDNN version incompatibility: PyTorch was compiled  against (8, 7, 0) but found runtime version "
     "(8, 2, 4).", "cudnn-version", "LD_LIBRARY_PATH"),
    ("RuntimeError: CUDA error: CUBLAS_STATUS_INVALID_VALUE when calling `cublasGemmEx( handle, opa, opb, m, n, k)`",
     "cublas-mismatch", "nvidia-cublas"),
    ("/tmp/comgr-92ff79/include/miopen_rocrand.hpp:45:10: fatal error: 'rocrand/rocrand_xorwow.h' file not found",
     "miopen", "MIOPEN_FIND_MODE=2"),
    ("Found GPU0 GeForce GTX 670M which is of cuda capability 2.1.\nPyTorch no longer supports this GPU because it is "
     "too old.", "gpu-too-old", "sm_50"),
    ("RuntimeError: FlashAttention only supports Ampere GPUs or newer.", "flash-attn-arch", "sdpa"),
    ("ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your Tesla "
     "V100-SXM2-32GB GPU has compute capability 7.0.", "bf16-unsupported", "--dtype half"),
    ("rocBLAS error: Cannot read /opt/rocm/lib/rocblas/library/TensileLibrary.dat: Illegal seek for GPU arch : gfx90c",
     "igpu-override", "HSA_OVERRIDE_GFX_VERSION=9.0.0"),
    ("Environment=\"HSA_OVERRIDE_GFX_VERSION=10.3.0\"\nlevel=WARN msg=\"amdgpu is not supported (supported types:"
     "[gfx1030 gfx1100])\" gpu_type=gfx1031 gpu=0", "override-not-in-service", "daemon-reload"),
    ("torch.cuda.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 MiB (GPU 0; 512.00 MiB total capacity; "
     "150.39 MiB already allocated)", "apu-memory", "UMA frame buffer"),
    ("RuntimeError: Distributed package doesn't have NCCL built in", "windows-no-nccl", "gloo"),
    ("NCCL WARN Bootstrap : no socket interface found", "nccl-network", "NCCL_SOCKET_IFNAME"),
    ("misc/ibvwrap.cc:278 NCCL WARN Call to ibv_reg_mr_iova2 failed with error Cannot allocate memory", "nccl-memlock",
     "memlock unlimited"),
    ("ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\nDuplicate GPU detected : rank 0 and "
     "rank 1 both on CUDA device 2000", "duplicate-gpu-rank", "LOCAL_RANK"),
    ("NVRM: This PCI I/O region assigned to your NVIDIA device is invalid:\nNVRM: BAR0 is 0M @ 0x0 (PCI:0000:01:00.0)",
     "pci-bar", "pci=realloc"),
    ("amdgpu 0000:23:00.0: Direct firmware load for amdgpu/arcturus_gpu_info.bin failed with error -2\n"
     "amdgpu 0000:23:00.0: Fatal error during GPU init", "amdgpu-init-failed", "linux-firmware"),
    ("OSError: [WinError 126] The specified module could not be found. Error loading \"C:\\venv\\torch\\lib\\c10.dll\" "
     "or one of its dependencies.", "windows-dll", "Visual C++ Redistributable"),
    ("RuntimeError: Torch is not able to use GPU; add --skip-torch-cuda-test to COMMANDLINE_ARGS variable",
     "windows-backend", "--use-directml"),
])
def test_each_class_of_issue_41_is_recognised_and_advised_with_the_fix(log, leading, says):
    result = explain(log)
    assert [c["id"] for c in result["classes"]][:1] == [leading], [c["id"] for c in result["classes"]]
    assert says in result["classes"][0]["advice"] and result["classes"][0]["collect"]


def test_a_collective_timeout_after_earlier_collectives_is_ranks_out_of_step_not_iommu():
    """Issue 41's confident mislead: a watchdog at the 19th collective, after training had
    progressed, answered '[matches] rccl-hang: add iommu=pt' when the ranks had unequal data. A
    timeout at the first collectives is still the P2P/IOMMU hang."""
    log = ("Epoch 9, Rank 0, world_size 8: 35batch [00:03, 10.54batch/s]\n[E ProcessGroupNCCL.cpp:717] [Rank 4] "
           "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=19, OpType=ALLREDUCE, Timeout(ms)=1800000) "
           "ran for 1803657 milliseconds before timing out.\n")
    result = explain(log)
    assert [c["id"] for c in result["classes"]] == ["collective-desync", "collective-hang"]
    assert not any(i["confident"] for i in result["known_issues"])
    assert any("whether the failure is collective-hang" in d for i in result["known_issues"] for d in i["decide"])
    assert "DistributedSampler" in result["classes"][0]["advice"] and "iommu=pt is not the first" in \
        result["classes"][0]["advice"]
    first = explain("[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, "
                    "Timeout(ms)=600000) ran for 600004 milliseconds before timing out.\n")
    assert first["classes"][0]["id"] == "collective-hang" and first["known_issues"][0]["id"] == "rccl-hang"
    ranks = explain("[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7559, OpType=ALLGATHER)\n"
                    "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7561, OpType=ALLGATHER)")
    assert ranks["facts"]["ranks_disagree"] and ranks["classes"][0]["id"] == "collective-desync"


def test_a_device_side_assert_on_an_index_check_is_the_users_data():
    """Issue 41: a device-side assert naming a label/index range check was answered as a GPU failure."""
    log = ("/pytorch/aten/src/THCUNN/ClassNLLCriterion.cu:108: cunn_ClassNLLCriterion_updateOutput_kernel: block: "
           "[0,0,0], thread: [0,0,0] Assertion `t >= 0 && t < n_classes` failed.\nRuntimeError: CUDA error: "
           "device-side assert triggered\n")
    result = explain(log)
    lead = result["classes"][0]
    assert lead["id"] == "device-assert-user-data" and "'t >= 0 && t < n_classes'" in lead["advice"]
    assert "not the GPU" in lead["advice"] and not any(i["confident"] for i in result["known_issues"])
    generic = explain("RuntimeError: CUDA error: device-side assert triggered\n")  # no check named: not decided
    assert [c["id"] for c in generic["classes"]] == ["cuda-error"]


def test_an_oom_at_capacity_is_answered_with_what_fits_and_benign_warnings_are_not_diagnosed(tmp_path, capsys):
    """Issue 41: an OOM with little reserved-but-unallocated memory is the job not fitting, so the
    advice leads with the batch and checkpointing, not allocator settings; a library's fallback
    notice is named benign and diagnoses nothing (exit 1: no failure recognised)."""
    oom = explain("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 MiB. GPU 0 has a total capacty "
                  "of 8.00 GiB of which 0 bytes is free. Of the allocated memory 7.44 GiB is allocated by PyTorch, and "
                  "3.16 MiB is reserved by PyTorch but unallocated.\n")
    assert [c["id"] for c in oom["classes"]] == ["out-of-memory"] and oom["facts"]["gpu_total_mib"] == 8192
    assert oom["classes"][0]["advice"].startswith("The job needs more GPU memory than is free (the GPU has 8.0 GiB")
    assert oom["classes"][0]["advice"].index("gradient checkpointing") < oom["classes"][0]["advice"].index(
        "expandable_segments")
    log = tmp_path / "comfy.log"
    log.write_text("ComfyUI\\comfy\\ldm\\modules\\attention.py:407: UserWarning: 1Torch was not compiled with flash "
                   "attention.\nPrompt executed in 4.2 seconds\n")
    assert main(["explain", str(log), "--elsewhere"]) == 1
    out = capsys.readouterr().out
    assert "Nothing recognised" in out and "Benign (no GPU failure; nothing to fix):" in out
    assert "benign-no-flash-sdpa" in out and "Failure class" not in out


def test_a_cuda_arch_list_is_read_as_the_cuda_release_the_build_was_made_with():
    """Issue 41: a build whose list ends at sm_75 on an sm_86 card is a CUDA 10 build."""
    result = explain("NVIDIA GeForce RTX 3060 with CUDA capability sm_86 is not compatible with the current PyTorch "
                     "installation.\nThe current PyTorch install supports CUDA capabilities sm_37 sm_50 sm_60 sm_61 "
                     "sm_70 sm_75 compute_37.\n")
    assert any("its list ends at sm_75, a CUDA 10.x build; sm_86 needs CUDA 11.1 or newer" in c
               for c in result["checks"])
    newer = explain("NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current PyTorch "
                    "installation.\nThe current PyTorch install supports CUDA capabilities sm_50 sm_60 sm_70 sm_80 "
                    "sm_90.")
    assert any("a CUDA 11.8-12.6 build; sm_120 needs CUDA 12.8 or newer" in c for c in newer["checks"])


# --- issue 41, round 2: the classes the later part missed, generalised from new reports -------------


@pytest.mark.parametrize("log, leading, says", [
    ("    raise RuntimeError('Current CUDA Device does not support bfloat16. Please switch dtype to float16.')",
     "bf16-unsupported", "float16"),
    ("ValueError: Your setup doesn't support bf16/gpu. You need torch>=1.10, using Ampere GPU with cuda>=11.0",
     "bf16-unsupported", "--fp16"),
    ("E tensorflow/stream_executor/cuda/cuda_dnn.cc:319] Loaded runtime CuDNN library: 7.4.1 but source was compiled "
     "with: 7.6.4.  CuDNN library major and minor version needs to match", "cudnn-version", "cuDNN"),
    ("E tensorflow/stream_executor/cuda/cuda_dnn.cc:347] Loaded runtime CuDNN library: 5103 (compatibility version "
     "5100) but source was compiled with 5005 (compatibility version 5000).", "cudnn-version", "cuDNN"),
    ("FAIL : Failed to load library libonnxruntime_providers_cuda.so with error: libcudnn.so.8: cannot open shared "
     "object file: No such file or directory", "cudnn-version", "cuDNN"),
    ("File \"C:\\py\\Lib\\site-packages\\torch\\distributed\\rendezvous.py\", line 189, in _create_c10d_store\n"
     "RuntimeError: use_libuv was requested but PyTorch was build without libuv support", "windows-distributed",
     "USE_LIBUV=0"),
    ("enqueue.cc:58 NCCL WARN Cuda failure 'named symbol not found'", "nccl-too-old", "NVCC_GENCODE"),
])
def test_each_class_of_round_2_is_recognised_in_its_other_wordings(log, leading, says):
    """Round 2 of issue 41: the wordings of torch autocast, transformers, TensorFlow/XLA, ONNX Runtime
    and torch's Windows build that the later part showed unrecognised."""
    result = explain(log)
    assert [c["id"] for c in result["classes"]][:1] == [leading], [c["id"] for c in result["classes"]]
    assert says in result["classes"][0]["advice"] and result["classes"][0]["collect"]


def test_an_nccl_older_than_the_card_is_named_from_the_versions_the_log_states():
    """NCCL 2.15 added H100: a log naming an H100 and NCCL 2.14.3 with an NCCL failure is that, and
    the same log with NCCL 2.18.5 is not."""
    log = ("NVIDIA H100 80GB HBM3\nNCCL version {v}+cuda11.8\ntorch.distributed.DistBackendError: NCCL error in: "
           "ProcessGroupNCCL.cpp:1275, unhandled system error, NCCL version {v}\n")
    old, new = explain(log.format(v="2.14.3")), explain(log.format(v="2.18.5"))
    assert old["facts"]["nccl"] == "2.14.3" and old["classes"][0]["id"] == "nccl-too-old"
    assert "NCCL 2.14.3; sm_90 needs NCCL 2.15" in " ".join(old["classes"][0]["why"])
    assert new["classes"][0]["id"] != "nccl-too-old"


@pytest.mark.parametrize("before", [
    "Running evaluation on rank 0\n",
    "Saving model checkpoint to output/checkpoint-500\n",
    "[rank1]: Traceback (most recent call last):\n[rank1]: RuntimeError: CUDA error: an illegal memory access\n",
])
def test_a_collective_timeout_with_a_rank_elsewhere_is_ranks_out_of_step_and_iommu_only_possible(before):
    """The later part's confident mislead: rank 0 evaluating while the others wait at the next
    collective was answered '[matches] rccl-hang'. A rank evaluating, saving or raising before the
    watchdog is ranks out of step; a bare early timeout stays the P2P/IOMMU hang, and even then the
    watchdog alone makes no known issue confident: the answer says what decides."""
    watchdog = ("[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=BROADCAST, "
                "Timeout(ms)=600000) ran for 600038 milliseconds before timing out.\n")
    result = explain(before + watchdog)
    assert [c["id"] for c in result["classes"]][:2] == ["collective-desync", "collective-hang"]
    assert not any(i["confident"] for i in result["known_issues"])
    bare = explain(watchdog)
    assert bare["classes"][0]["id"] == "collective-hang" and bare["known_issues"][0]["id"] == "rccl-hang"
    assert not bare["known_issues"][0]["confident"] and "iommu=pt" in bare["classes"][0]["advice"]
    assert any("other ranks' logs decide" in c for c in bare["classes"][0]["cannot_tell"])
    warned = explain('NCCL WARN Missing "iommu=pt" from kernel command line which can lead to system instablity or '
                     'hang!\n' + watchdog)
    assert warned["known_issues"][0]["id"] == "rccl-hang" and warned["known_issues"][0]["confident"]


def test_a_cpu_build_notice_is_benign_unless_the_run_wants_the_gpu_library():
    """bitsandbytes' 'compiled without GPU support' and TensorFlow's missing cudart are printed on
    machines where nothing fails (no GPU, or Windows): named benign, never diagnosed. With a GPU
    8-bit load or optimizer in the log, or the CPU library failing a GPU call, it is the failure."""
    notice = ("UserWarning: The installed version of bitsandbytes was compiled without GPU support. 8-bit optimizers, "
              "8-bit multiplication, and GPU quantization are unavailable.\n")
    tf = ("W tensorflow/stream_executor/platform/default/dso_loader.cc:64] Could not load dynamic library "
          "'cudart64_110.dll'; dlerror: cudart64_110.dll not found\nI tensorflow/stream_executor/cuda/cudart_stub.cc"
          ":29] Ignore above cudart dlerror if you do not have a GPU set up on your machine.\n")
    for log, benign in ((notice, "benign-bitsandbytes-cpu"), (tf, "benign-tf-no-cudart")):
        result = explain(log)
        assert not result["classes"] and not result["known_issues"], log
        assert [b["id"] for b in result["benign"]] == [benign]
    for failing in ("model = AutoModelForCausalLM.from_pretrained(name, load_in_8bit=True)\n",
                    "'NoneType' object has no attribute 'cadam32bit_grad_fp32'\n"):
        assert explain(notice + failing)["classes"][0]["id"] == "bitsandbytes", failing
