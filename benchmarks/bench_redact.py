"""Redaction cost: every string of a verdict passes `safetext.clean` (redaction included), and
`rocmcheck report` redacts whatever report it is given, megabytes included.

Run: python -m pytest benchmarks/bench_redact.py --benchmark-columns=min,median,max,rounds
Bar (docs/design.md, "Performance bars"): linear time; a 2 MB adversarial text in seconds, a
typical verdict message in well under a millisecond.
"""
from __future__ import annotations

import pytest

from rocmcheck.redact import Redactor
from rocmcheck.safetext import clean

# Inputs that made a backtracking rule quadratic (a URL rule took 1 s on 16 kB).
ADVERSARIAL = ["a://" + "a:" * 40_000, "@" * 80_000, "KEY" * 30_000, "--" + "key" * 30_000, "a='" * 30_000,
               "a." * 40_000, "-----BEGIN PRIVATE KEY-----" * 4_000, "-----END PRIVATE KEY-----" * 4_000,
               "eyJ" * 30_000, "a+" * 40_000 + "://", "Authorization: " * 6_000]
MESSAGE = ("max abs error 3.1e-02 > atol 1e-03 at index (0, 17); dtype bfloat16, shape (64, 128), "
           "PYTORCH_HIP_ALLOC_CONF=expandable_segments:True, torch 2.13.0+rocm7.2 gfx1100")


@pytest.mark.parametrize("megabytes", [0.5, 2])
def test_adversarial_text(benchmark, megabytes):
    chunk = "".join(ADVERSARIAL)
    text = (chunk * (int(megabytes * 2**20) // len(chunk) + 1))[:int(megabytes * 2**20)]
    benchmark.pedantic(Redactor().text, args=(text,), rounds=3, iterations=1)


def test_typical_message(benchmark):
    assert benchmark(clean, MESSAGE) == MESSAGE
