"""`rocmcheck explain` on big logs: time grows linearly with the text.

Run: python -m pytest benchmarks/bench_explain.py --benchmark-columns=min,median,max

A training log of 1 MiB and one of 4 MiB (progress lines, a NCCL watchdog line and a
hipErrorNoBinaryForGpu near the end), and a 1 MiB log that is a single line. Bar: the
4 MiB log costs about 4x the 1 MiB one (linear, no line-by-line regex blow-up), and 1 MiB
stays well under a second on the project's 2-core machine. A log of a MiB or more is first
reduced to the byte pairs it holds (numpy), so most of the ~190 signature needles are ruled out
without a scan of the text (issue 41 added 33 signatures; measured on the 2-core machine, same
run: 1 MiB 148 -> 116 ms, 4 MiB 382 -> 242 ms, one-line MiB 103 -> 73 ms, min of 5 rounds).
Round 2 of issue 41 (8 signatures, facts about a rank elsewhere) kept that cost: on the same
machine under a load average of ~12, CPU time (process_time), min of 9, rounds interleaved with
6042f96: 1 MiB 77-83 -> 80 ms, 4 MiB 168-181 -> 168-174 ms, one-line MiB 53-69 -> 53 ms.
"""
from __future__ import annotations

import pytest

from rocmcheck.knowledge.explain import explain

LINE = "step 1234/100000 | loss 2.3412 | lr 3.0e-04 | grad_norm 0.812 | 41.2 samples/s | gfx1100\n"
TAIL = ("[rank0]:[E321 02:07:08 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=1580, OpType=ALLREDUCE) ran for 600060 milliseconds before timing out.\n"
        "hipErrorNoBinaryForGpu: Unable to find code object for all current devices!\n")


def _log(mib: int) -> str:
    body = LINE * (mib * (1 << 20) // len(LINE))
    return body + TAIL


@pytest.mark.parametrize("mib", [1, 4])
@pytest.mark.benchmark(group="explain")
def test_explain_training_log(benchmark, mib: int) -> None:
    text = _log(mib)
    result = benchmark(explain, text)
    assert [i["id"] for i in result["known_issues"]][:2] == ["hip-no-binary-for-gpu", "rccl-hang"]
    benchmark.extra_info["bytes"] = len(text)


@pytest.mark.benchmark(group="explain")
def test_explain_one_line_megabyte(benchmark) -> None:
    text = "x" * (1 << 20) + " HIP error: invalid device function"
    result = benchmark(explain, text)
    assert result["known_issues"][0]["id"] == "invalid-device-function"
