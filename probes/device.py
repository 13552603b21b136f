"""Device smoke: the first kernel and reduction on the device, checked against numpy.

Targets "Memory access fault by GPU node-N ... on address (nil)", "invalid device
function" and HSA aborts on the very first `.cuda()` (docs/failure-catalogue.md §6, §10).
Those failures kill the process; the runner turns the signal and the stderr
signature into a `crash` verdict naming them.
"""
import rocmcheck
from rocmcheck.lazy import np, torch

LINKS = (
    "https://github.com/ROCm/legacy-rocm-build/issues/5238",
    "https://github.com/ROCm/legacy-rocm-build/issues/2235",
    "https://github.com/pytorch/pytorch/issues/132570",
    "https://github.com/pytorch/pytorch/issues/143219",
)


@rocmcheck.probe(
    "device-smoke",
    title="First kernel and reduction on the device",
    targets="Memory access fault on the first .cuda(), invalid device function, HSA aborts",
    links=LINKS,
    timeout=60,
    gate=True,
)
def device_smoke(ctx):
    n = 4099  # not a power of two: partial blocks in the kernel and the reduction
    expected = np.arange(n, dtype=np.int64) * 3 + 1
    x = torch.from_numpy(np.arange(n, dtype=np.int32)).to(ctx.device, copy=True)  # a real copy on the CPU too
    y = (x * 3 + 1).to("cpu").numpy()  # elementwise kernel
    ctx.synchronize()
    bad = np.flatnonzero(y != expected)
    if bad.size != 0:
        ctx.fail(f"x*3+1 wrong at {bad.size} of {n} elements "
                 f"(first index {bad[0]}: {y[bad[0]]} != {expected[bad[0]]})")
    total = int(x.to(torch.int64).sum().item())  # reduction kernel
    want = n * (n - 1) // 2
    if total != want:
        ctx.fail(f"sum of 0..{n - 1} is {total}, expected {want}")
    mean = float(torch.ones(1 << 16, device=ctx.device, dtype=torch.float32).mean().item())
    if mean != 1.0:
        ctx.fail(f"mean of 65536 ones is {mean}, expected 1.0")
    ctx.measure(elements=n)

