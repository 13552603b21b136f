"""What each gate variant costs on the CPU and on a simulated GPU, as benchmark results (issue 39, item 6).

Run: python -m pytest benchmarks/bench_gate_costs.py --benchmark-columns=min,median,max
     --benchmark-group-by=param:device --benchmark-autosave      (then --benchmark-compare to see a change)
(not collected by the default `pytest`, whose testpaths are tests/).

One benchmark per gate variant and device ("cpu", and "simgpu:0" where the simulated GPU builds):
the variant runs in this process (`rocmcheck.testing.run_inline`, in the gate's profile: attention's
gate cases, gemm's gate shapes), so what is timed is the probe's own cost, setup and work, without a
child's start or a runtime init (`bench_runtime_inits.py` counts those, `bench_plugin_gate.py` times
the whole gate). A variant with a level works for its budget by design (sdc[1]: 2 s), so its figure
is that budget plus its setup. The list comes from the registry: a new gate variant is benchmarked
without a line here. A cost regression shows as a slower result against a saved run
(`--benchmark-compare`, `--benchmark-compare-fail=median:25%`), not as a timed test. The host's share
at a GPU's sizes is held to each variant's budget by tests/test_gpu_sizes.py; the variants whose host
work goes on after a read-back are benchmarked whole at those sizes too (group
"gate-variant-at-a-gpus-sizes").
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple
from unittest import mock

import pytest

from rocmcheck import simgpu
from rocmcheck.context import ProbeContext
from rocmcheck.model import Status
from rocmcheck.registry import load_all
from rocmcheck.testing import run_inline

ROUNDS = 3
ENDED_WELL = {Status.PASS, Status.WARN, Status.SKIP}


def _gate_variants() -> List[Tuple[str, str, Dict[str, Any]]]:
    return [(v.id, v.spec.id, dict(v.params)) for spec in load_all().values() for v in spec.expand() if v.in_gate()]


VARIANTS = _gate_variants()
# The gate variants whose host work goes on after their first read-back (gemm's float64 references and row sums,
# transfer's copies compared with their sources): tests/test_gpu_sizes.py, on the meta device, cannot see it.
# They run here whole at a GPU's sizes on the CPU, which does the device's share too (tests/test_gpu_sizes_whole.py
# runs them to their verdict in CI): gemm's operands rounded through float64 copies cost 0.3-0.4 s a variant here.
HOST_WORK_AFTER_READBACK = [v for v in VARIANTS if v[1] in ("gemm", "transfer")]


@pytest.fixture(scope="module", autouse=True)
def simulated_gpu() -> Optional[str]:
    """One simulated GPU in this process (built once per machine, cached), before any benchmark:
    torch's autograd engine sizes its device queues at its first backward, so a device registered
    after a CPU variant's backward fails its own. Returns why there is none, or None."""
    reason = simgpu.missing_tools()
    if reason is None:
        simgpu.enable(count=1, init_seconds=0.0)
    return reason


@pytest.mark.benchmark(group="gate-variant")
@pytest.mark.parametrize("device", ["cpu", "simgpu:0"])
@pytest.mark.parametrize("variant, probe_id, params", VARIANTS, ids=[v[0] for v in VARIANTS])
def test_gate_variant_cost(benchmark, simulated_gpu: Optional[str], device: str, variant: str, probe_id: str,
                           params: Dict[str, Any]) -> None:
    if device != "cpu" and simulated_gpu:
        pytest.skip(f"the simulated GPU cannot build here: {simulated_gpu}")
    result = benchmark.pedantic(run_inline, args=(probe_id, device), kwargs={**params, "profile": "gate"},
                                rounds=ROUNDS, iterations=1, warmup_rounds=1)
    benchmark.extra_info.update(variant=variant, status=result.status.value)
    assert result.status in ENDED_WELL, f"{variant} on {device}: {result.status.value}: {result.message}"


@pytest.mark.benchmark(group="gate-variant-at-a-gpus-sizes")
@pytest.mark.parametrize("variant, probe_id, params", HOST_WORK_AFTER_READBACK,
                         ids=[v[0] for v in HOST_WORK_AFTER_READBACK])
def test_gate_variant_cost_at_a_gpus_sizes(benchmark, variant: str, probe_id: str, params: Dict[str, Any]) -> None:
    with mock.patch.object(ProbeContext, "gpu_sized", property(lambda self: True)):
        result = benchmark.pedantic(run_inline, args=(probe_id, "cpu"), kwargs={**params, "profile": "gate"},
                                    rounds=ROUNDS, iterations=1, warmup_rounds=1)
    benchmark.extra_info.update(variant=variant, status=result.status.value)
    assert result.status is Status.PASS, f"{variant} at a GPU's sizes: {result.status.value}: {result.message}"
