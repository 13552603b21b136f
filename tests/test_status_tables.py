"""The status rules as tables: each row one input and the status (or word) it must give.

Pure functions only, no child and no torch: `verdicts.outcome` (how a probe ended, in the child),
`verdicts.assemble` (what the watchdog saw and the child wrote, in the parent), the order and
predicates of `model.Status`, `model.node_status`, and `diff.classify`.
"""
from __future__ import annotations

import signal
from typing import Optional

import pytest

from rocmcheck.engine.killpolicy import KillStep
from rocmcheck.engine.task import TaskResult
from rocmcheck.engine.verdicts import assemble, outcome
from rocmcheck.engine.watchdog import ChildEnd
from rocmcheck.errors import Hang, ProbeFailure, Skip
from rocmcheck.model import ExitCode, ProbeSpec, Status, Variant, count_statuses, is_bad, node_status
from rocmcheck.outputs.diff import classify

# --- in the child: outcome(exception, warnings) ------------------------------------------------

OUTCOMES = [
    # (what ended the probe, its warnings, status, words the message holds)
    (None, [], Status.PASS, "ok"),
    (None, ["slow link"], Status.WARN, "slow link"),
    (Skip("no GPU"), [], Status.SKIP, "no GPU"),
    (Skip("no GPU"), ["slow link"], Status.SKIP, "no GPU"),  # a skip wins over warnings
    (Hang("stuck in a collective"), [], Status.HANG, "stuck in a collective"),
    (ProbeFailure("3 of 8 elements wrong"), [], Status.FAIL, "3 of 8 elements wrong"),
    (AssertionError("tensors differ"), [], Status.FAIL, "tensors differ"),
    (AssertionError("tensors differ"), ["slow link"], Status.FAIL, "tensors differ"),
    (ValueError("bad shape"), [], Status.ERROR, "bad shape"),
    (SystemExit(3), [], Status.ERROR, "sys.exit(3)"),
    (KeyboardInterrupt(), [], Status.ERROR, "KeyboardInterrupt"),
    (RuntimeError("HIP out of memory"), [], Status.ERROR, "out of memory"),
    (type("OutOfMemoryError", (RuntimeError,), {})("tried 2 GiB"), [], Status.ERROR, "out of memory"),
]


@pytest.mark.parametrize("ended, warnings, status, words", OUTCOMES,
                         ids=[f"{type(r[0]).__name__}-{len(r[1])}w" for r in OUTCOMES])
def test_outcome_table(ended, warnings, status, words):
    result = outcome(ended, warnings)
    assert result.status is status
    assert words in result.message
    if status in (Status.FAIL, Status.ERROR):  # the exception's fields travel with a bad status
        assert result.exception is not None and result.exception.type == type(ended).__name__


# --- in the parent: assemble(what the watchdog saw, what the child wrote) ------------------------

SPEC = ProbeSpec("table-probe", "a probe for the table", "nothing", func=lambda ctx: None)
VARIANT = Variant(SPEC, {"size": 4})
SEGV, KILL = -int(signal.SIGSEGV), -int(signal.SIGKILL)
KILLED = [KillStep.STACK_DUMP, KillStep.TERM, KillStep.KILL]


def written(status: Status, message: str = "m") -> Optional[TaskResult]:
    """What a child writes, read back as the parent reads it."""
    return TaskResult.from_dict({"status": status.value, "message": message})


ASSEMBLED = [
    # (id, ChildEnd fields, the child's result, status, words the message holds)
    ("result-pass", dict(returncode=0), written(Status.PASS, "ok"), Status.PASS, "ok"),
    ("result-fail", dict(returncode=0), written(Status.FAIL, "wrong"), Status.FAIL, "wrong"),
    ("result-warn", dict(returncode=0), written(Status.WARN, "slow"), Status.WARN, "slow"),
    ("result-skip", dict(returncode=0), written(Status.SKIP, "no GPU"), Status.SKIP, "no GPU"),
    # a result written, then the process died on its way out: the result counts
    ("result-then-segv", dict(returncode=SEGV), written(Status.PASS, "ok"), Status.PASS, "ok"),
    ("worker-alive", dict(returncode=None, alive=True), written(Status.PASS, "ok"), Status.PASS, "ok"),
    ("no-result-exit-0", dict(returncode=0), None, Status.ERROR, "exit 0"),
    ("no-result-exit-3", dict(returncode=3), None, Status.CRASH, "without a result"),
    ("no-result-segv", dict(returncode=SEGV), None, Status.CRASH, "crashed"),
    ("no-result-sigkill", dict(returncode=KILL), None, Status.CRASH, "OOM killer"),
    ("no-result-server-lost", dict(returncode=None, lost=True), None, Status.CRASH, "isolation server died"),
    ("timeout", dict(returncode=KILL, timed_out=True, kill_steps=KILLED), None, Status.HANG, "no verdict within 30s"),
    # the watchdog's word wins over a result the child managed to write
    ("timeout-with-result", dict(returncode=KILL, timed_out=True, kill_steps=KILLED), written(Status.PASS),
     Status.HANG, "no verdict within 30s"),
    ("never-started", dict(returncode=KILL, timed_out=True, never_started=True, kill_steps=KILLED), None,
     Status.HANG, "never started its task"),
    ("declared-hang", dict(returncode=KILL, timed_out=True, declared_hang="peer stuck", kill_steps=KILLED), None,
     Status.HANG, "peer stuck"),
    ("first-use-limit", dict(returncode=KILL, timed_out=True, in_first_use=True, first_use_limit=5.0,
                             kill_steps=KILLED), None, Status.HANG, "past its 5s limit"),
    ("first-use-in-timeout", dict(returncode=KILL, timed_out=True, in_first_use=True, kill_steps=KILLED), None,
     Status.HANG, "first use included"),
    ("unkillable", dict(returncode=None, timed_out=True, unkillable=True, state={"status": "D"},
                        kill_steps=KILLED), None, Status.HANG, "could not be killed (state D"),
]


@pytest.mark.parametrize("end_fields, result, status, words", [r[1:] for r in ASSEMBLED],
                         ids=[r[0] for r in ASSEMBLED])
def test_assemble_table(end_fields, result, status, words):
    verdict = assemble(VARIANT, ChildEnd(elapsed_s=1.5, **end_fields), result, stack="", timeout=30)
    assert verdict.status is status
    assert words in verdict.message
    assert (verdict.probe, verdict.variant, verdict.params) == ("table-probe", "table-probe[4]", {"size": 4})
    if end_fields.get("timed_out"):  # every hang says how the child was killed
        assert "SIGKILL" in verdict.evidence["kill_steps"]


# --- model.py: the order and the predicates ------------------------------------------------------

STATUS_RULES = [
    # (status, its place worst first, is_bad, worked, is_notable)
    (Status.HANG, 0, True, False, True),
    (Status.CRASH, 1, True, False, True),
    (Status.ERROR, 2, True, False, True),
    (Status.FAIL, 3, True, False, True),
    (Status.WARN, 4, False, True, True),
    (Status.SKIP, 5, False, False, False),
    (Status.PASS, 6, False, True, False),
]


@pytest.mark.parametrize("status, place, bad, worked, notable", STATUS_RULES, ids=[r[0].value for r in STATUS_RULES])
def test_status_rules_table(status, place, bad, worked, notable):
    assert list(Status).index(status) == place
    assert status.severity == len(STATUS_RULES) - 1 - place
    assert (status.is_bad, is_bad(status.value)) == (bad, bad)
    assert status.worked is worked
    assert status.is_notable is notable


WORST = [
    (["pass"], Status.PASS),
    (["pass", "skip"], Status.SKIP),
    (["skip", "warn", "pass"], Status.WARN),
    (["warn", "fail"], Status.FAIL),
    (["fail", "error"], Status.ERROR),
    (["error", "crash", "fail"], Status.CRASH),
    (["crash", "hang", "pass"], Status.HANG),
    (["hang", "pass", "pass"], Status.HANG),  # the order given does not matter
]


@pytest.mark.parametrize("statuses, worst", WORST, ids=["-".join(r[0]) for r in WORST])
def test_worst_table(statuses, worst):
    assert Status.worst(statuses) is worst
    assert next(iter(count_statuses(statuses))) == worst.value  # counts print worst first


NODE_STATUS = [
    (ExitCode.OK, "GO"),
    (ExitCode.FAILED, "NO-GO"),
    (ExitCode.USAGE, "UNKNOWN"),
    (ExitCode.INTERRUPTED, "UNKNOWN"),
    (0, "GO"),
    (1, "NO-GO"),
    (-11, "UNKNOWN"),
    (99, "UNKNOWN"),
]


@pytest.mark.parametrize("exit_code, word", NODE_STATUS, ids=[str(int(r[0])) for r in NODE_STATUS])
def test_node_status_table(exit_code, word):
    assert node_status(exit_code) == word


# --- outputs/diff.py: one variant's baseline and current status -> the kind of change -------------

CLASSIFIED = [
    # (baseline, current, kind)
    (None, "pass", "new"),
    (None, "skip", "new"),
    (None, "warn", "new"),
    (None, "fail", "regression"),  # a new variant that is bad is a regression, not news
    (None, "hang", "regression"),
    ("pass", "pass", "same"),
    ("fail", "fail", "same"),
    ("pass", "fail", "regression"),
    ("skip", "crash", "regression"),
    ("warn", "error", "regression"),
    ("fail", "pass", "fix"),
    ("hang", "warn", "fix"),
    ("crash", "skip", "changed"),  # skipped now: nothing learnt, no fix
    ("fail", "crash", "changed"),  # bad both times, worse
    ("hang", "fail", "changed"),
    ("pass", "warn", "changed"),
    ("pass", "skip", "changed"),
    ("skip", "pass", "changed"),
]


@pytest.mark.parametrize("baseline, current, kind", CLASSIFIED, ids=[f"{r[0]}-{r[1]}" for r in CLASSIFIED])
def test_diff_classify_table(baseline, current, kind):
    assert classify(baseline, current) == kind
