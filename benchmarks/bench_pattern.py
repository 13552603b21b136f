"""Host-side cost of the transfer probe's reference: writing a `numeric.Pattern` into a host
buffer (`fill`) and checking a read-back against it bit for bit (`check`), per dtype.

Run: python -m pytest benchmarks/bench_pattern.py --benchmark-columns=min,median,max,rounds
Per core: add --benchmark-timer=time.process_time (CPU time of all threads: steady where other
jobs share the cores, and the rate to multiply by a host's core count).

extra_info["GBps"] is the pattern's bytes over the median time of one fill plus one check, the
work the probe does per byte copied: divide a variant's copied bytes by it for its host time.
`threads` 1 is one core's rate; 2 shows how chunks spread over cores.
The buffer is touched before timing, so page faults (the probe's allocation, not the pattern's
cost) stay out.
"""
from __future__ import annotations

import numpy as np
import pytest

from rocmcheck import numeric

NBYTES = 128 << 20


def fill_and_check(pattern: numeric.Pattern, buf: np.ndarray) -> numeric.BitCheck:
    pattern.fill(buf, 1)
    return pattern.check(buf, 1)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", numeric.PATTERN_DTYPES)
def test_fill_and_check(benchmark, dtype, threads):
    pattern = numeric.Pattern(NBYTES // numeric.Pattern.itemsize(dtype), dtype, threads=threads)
    buf = np.zeros(pattern.n, dtype=pattern.store)
    check = benchmark.pedantic(fill_and_check, args=(pattern, buf), rounds=3, iterations=1)
    assert check.ok and check.total == pattern.n
    benchmark.extra_info["GBps"] = round(NBYTES / benchmark.stats.stats.median / 1e9, 3)
