"""Host-to-device transfers by eight methods, device-to-host and device-to-device copies, checked
bit for bit against the host pattern.

Targets copies that come back as zeros, NaN or stale data, or crash (docs/failure-catalogue.md §1):
HIP #3874 (access violation in memcpy_and_sync, gfx1151), TheRock #8379 (silent zeros,
gfx1201), legacy-rocm-build #6123 (NaN on repeated `.to("cuda")`, gfx1030), pinned-memory
races, and a user's report: CPU->GPU copies returning zeros only inside a training loop,
with all eight methods tried by hand.

`d2h` (`Tensor.cpu()`) and `d2d` (`Tensor.clone()`) start from data staged on the device
with `.to()`; the reference is still the host pattern, and a bad copy is attributed to the
staging, the copy itself or the read-back by checksums on the device. D2H is in the gate
(every read-back depends on it), D2D in the full profile.

Variants are method x context (10 x 2), `rocmcheck run`'s rows. A method or a context is what a
user can change in their code, so each gets its own row in the matrix; dtypes (float32, float16,
bfloat16, int32), sizes, contiguous and strided sources and repeats are looped inside a variant,
with measurements per dtype, because they describe one failure rather than a workaround. The gate
runs one variant of its own instead, `transfer[every-training]` (a `gate_variants` entry): every
method but d2d in turn, in the training context where that user's failure appeared, each source
written once and sent by all nine. Nine variants paid the source patterns, the training load and
the checks nine times (3.7-4.7 s each on an H100, most of the gate's time); a failure names each
failing method, and `rocmcheck run --probe transfer` gives their rows, the isolated ones telling
whether the context matters. Bandwidth is measured by `pcie-link` (probes/pcie.py), with device
events and buffers allocated outside the clock.

Each repeat sends a different pattern (`numeric.Pattern`: never zero, NaN or subnormal, and
different at every index from the previous repeat, so stale data fails). Each copy is compared
bit for bit with its source, and the source itself with the pattern after its last copy (a
comparison of memory is several times cheaper than rebuilding the pattern for every copy, and a
copy that wrote into its source cannot hide: the source no longer matches). A bad read-back is
attributed with a device-side checksum: the device holding the right bytes means the fault is
device-to-host, otherwise host-to-device. The side-stream method waits with `wait_stream` and
`record_stream`, as PyTorch documents (ROCm/pytorch#3194 was closed as correct semantics).

Levels (issue 39): the full sizes below are the heavy profile, run at `rocmcheck run --level 2` or 3 only;
the gate and the level-1 run copy the gate's sizes (0.4 GiB per method, budget 6 s a method's variant and the
gate's every-method one alike; 3.7-4.7 s a variant on an H100 before the pattern was made cheaper, which was most of
that: docs/budgets.md), so the level-1 run of all 20 variants stays within minutes.

Cost (full sizes, GPU host): at most ~30 s per variant on a 16-core host (47.5-85.1 s measured on an H100 with
its allocations and pinning: budget 120 s at level 2). Each byte copied is written once as a pattern and
checked once against it on the host, at ~1.3 GB/s per core for float32 and ~0.65 GB/s for the 16-bit dtypes
(benchmarks/bench_pattern.py; `numeric.Pattern` spreads it over the cores), plus the host
allocations and the copies themselves. So the plan holds each coverage class once, 12.6 GiB
copied per variant (it was 33 GiB, and one variant outlasted 150 s on an H100 host):
- every dtype, contiguous and strided, at 4 KiB and 1 MiB with 10 repeats (the repeat faults:
  NaN on repeated copies, stale data) and at 64 MiB with 3 repeats (repeats 2 and 3 can read
  the previous one's stale data): a dtype reaches a copy through its element size and its
  conversion path, and 64 MiB is past the sizes (a few MiB) where runtimes change copy
  engine or split a pageable copy into staging chunks;
- 512 MiB in float32 only, 3 repeats: a copy moves bytes, so three more dtypes of that size
  would spend 9 GiB on the paths the 64 MiB copies of those dtypes already took;
- one copy past 2**31 elements and 2**32 bytes (bfloat16, 4 GiB + 2 MiB, twice) where memory
  allows, else the largest that fits: 32-bit element indexes and byte counts overflow there,
  and no smaller copy finds that. It replaces an 8 GiB float32 copy of exactly 2**31 elements,
  whose last index still fit an int32: twice the bytes, one overflow fewer.

On `--device cpu` every method still copies into separate storage (`copy=True`, a copy of the array where
`as_tensor` would share memory), so the comparison runs for real; `.cuda()` and the side
stream fall back to `.to(copy=True)` and pinning is skipped (the CPU has neither streams nor
pinned memory), and sizes stop at 1 MiB (64 MiB at level 2 and 3): big copies test a
device, not the comparison.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import rocmcheck
from rocmcheck import numeric, torchapi
from rocmcheck.host import hostgpu
from rocmcheck.lazy import np, torch

METHODS = ("to", "cuda", "to-nonblocking", "pinned", "tensor", "as-tensor", "copy_", "side-stream", "d2h", "d2d")
FROM_DEVICE = ("d2h", "d2d")  # the source is staged on the device; the copy under test starts there
CONTEXTS = ("isolated", "training")
EVERY = "every"  # the gate's one variant: every method of GATE_METHODS in turn, beside one source and one load
GATE_METHODS = tuple(m for m in METHODS if m != "d2d")  # a copy within the device is `run`'s alone
PINNED_METHODS = ("pinned", "side-stream")
KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
ALL = numeric.PATTERN_DTYPES
F32 = ("float32",)

# (bytes, dtypes, repeats) per (device kind, sizes); every entry runs contiguous and strided. The full sizes are
# the heavy profile: `run --level 2` or 3 (`ctx.heavy`); the gate and the level-1 run copy the gate's sizes.
# Why the GPU's full plan is what it is: the module's docstring, "Cost".
PLANS = {
    ("gpu", "gate"): ((4 * KIB, ALL, 3), (MIB, ALL, 3), (64 * MIB, F32, 3)),
    ("gpu", "full"): ((4 * KIB, ALL, 10), (MIB, ALL, 10), (64 * MIB, ALL, 3), (512 * MIB, F32, 3)),
    ("cpu", "gate"): ((4 * KIB, ALL, 2), (MIB, ALL, 2)),
    ("cpu", "full"): ((4 * KIB, ALL, 10), (MIB, ALL, 10)),
}
LARGEST_REPEATS = 2  # the largest copy that fits (full profile): contiguous, the second repeat after the first
# (dtype, cap) of the largest copy. GPU: 2**31 + 2**20 bfloat16 elements (4 GiB + 2 MiB), past an int32 element
# index, an int32 byte offset and a uint32 byte count at once, in half the bytes float32 would take. CPU: no device
# to overflow, so a size that proves the comparison.
LARGEST = {"gpu": ("bfloat16", 4 * GIB + 2 * MIB), "cpu": ("float32", 64 * MIB)}
MAX_ATTRIBUTED = 3  # bad copies whose origin is checked with a device checksum
ATTRIBUTION_WINDOW = 1 << 20  # elements around the first bad one whose checksums decide the direction
UNLIMITED = 1 << 60  # cgroup v1 writes "no limit" as a number near 2**63

LINKS = (
    "https://github.com/ROCm/HIP/issues/3874",
    "https://github.com/ROCm/TheRock/issues/8379",
    "https://github.com/ROCm/legacy-rocm-build/issues/6123",
    "https://github.com/ROCm/legacy-rocm-build/issues/2781",
    "https://github.com/ROCm/pytorch/issues/3194",
)


@dataclass(frozen=True)
class Case:
    nbytes: int
    dtype: str
    contiguous: bool
    repeats: int

    def label(self, repeat: int) -> str:
        size = f"{self.nbytes // MIB} MiB" if self.nbytes >= MIB else f"{self.nbytes // KIB} KiB"
        return f"{self.dtype} {size} {'contiguous' if self.contiguous else 'strided'} repeat {repeat}"


def plan(ctx: rocmcheck.ProbeContext) -> List[Case]:
    cases = [Case(nbytes, dtype, contiguous, repeats)
             for nbytes, dtypes, repeats in PLANS[(_kind(ctx), "full" if ctx.heavy else "gate")]
             for dtype in dtypes for contiguous in (True, False)]
    if ctx.heavy:
        largest = largest_bytes(ctx)
        if largest > max(c.nbytes for c in cases):
            cases.append(Case(largest, LARGEST[_kind(ctx)][0], True, LARGEST_REPEATS))
    return cases


def _kind(ctx: rocmcheck.ProbeContext) -> str:
    return "gpu" if ctx.gpu_sized else "cpu"


def _read_int(path: Path) -> Optional[int]:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max": no limit


def cgroup_free_bytes(root: Path) -> Optional[int]:
    """What this process's memory cgroup (v2 `memory.max` - `memory.current`, v1
    `memory.limit_in_bytes` - `memory.usage_in_bytes`) still allows, the tightest over the
    cgroup and its ancestors; None without a limit. Slurm and Kubernetes limit jobs this way,
    and psutil's `available` does not see it: exceeding it wakes the OOM killer."""
    try:
        lines = (root / "proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    free = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            base, limit_file, usage_file = root / "sys/fs/cgroup", "memory.max", "memory.current"
        elif "memory" in controllers.split(","):
            base = root / "sys/fs/cgroup/memory"
            limit_file, usage_file = "memory.limit_in_bytes", "memory.usage_in_bytes"
        else:
            continue
        group = base / path.strip("/")
        for d in (group, *group.parents):
            limit, usage = _read_int(d / limit_file), _read_int(d / usage_file)
            if limit is not None and limit < UNLIMITED:
                free.append(max(limit - (usage or 0), 0))
            if d == base:
                break
    return min(free) if free else None


def host_free_bytes(root: Path) -> int:
    """Host memory this process can still take: psutil's `available`, capped by the cgroup."""
    import psutil

    limit = cgroup_free_bytes(root)
    available = psutil.virtual_memory().available
    return available if limit is None else min(available, limit)


def largest_bytes(ctx: rocmcheck.ProbeContext) -> int:
    """The biggest single copy worth trying: a third of free device memory, a third of the host
    memory really available (the source, its pinned copy and the read-back are the only full-size
    host buffers: the pattern is written in place and checked chunk by chunk), capped (`LARGEST`)."""
    size = min(host_free_bytes(hostgpu.host_root()) // 3, LARGEST[_kind(ctx)][1])
    if ctx.on_gpu:

        size = min(size, torchapi.memory_info(ctx.device)[0] // 3)
    return size // MIB * MIB


class TrainingLoad:
    """A small transformer and its AdamW state resident on the device; `step()` queues one
    training step without waiting for it, so transfers run with kernels in flight."""

    def __init__(self, device: str, on_gpu: bool):
        torch.manual_seed(0)
        # 3.1M parameters on a GPU, like that user's model; a token load on the CPU, where nothing is in flight
        width, layers, batch, seq = (256, 4, 8, 64) if on_gpu else (32, 1, 2, 16)
        layer = torch.nn.TransformerEncoderLayer(width, 8, 4 * width, dropout=0.0, batch_first=True)
        self.model = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False).to(device)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
        self.x = torch.randn(batch, seq, width, device=device)
        self.params = sum(p.numel() for p in self.model.parameters())
        self.step()  # creates the optimizer state

    def step(self) -> None:
        loss = self.model(self.x).square().mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()


class Sender:
    """One transfer method: `stage` prepares the source, `send` copies."""

    def __init__(self, method: str, device: str, on_gpu: bool):
        self.method, self.device, self.on_gpu = method, device, on_gpu
        self.copy = not on_gpu  # on the CPU, `.to(device)` would return the source itself
        self.side: Any = torchapi.new_stream(device) if on_gpu and method == "side-stream" else None  # send() uses it

    def stage(self, src: Any, src_np: Any) -> Any:
        if self.method in PINNED_METHODS and self.on_gpu:
            return src.pin_memory()
        if self.method in ("tensor", "as-tensor"):
            return src_np
        if self.method in FROM_DEVICE:  # staged on the device (a strided source keeps its layout there)
            whole = src if src.is_contiguous() else src.as_strided((src.numel() * 2 - 1,), (1,))
            dev = whole.to(self.device, copy=True)
            return dev if src.is_contiguous() else dev[::2]
        if self.method == "copy_":
            return src, torch.empty(src.shape, dtype=src.dtype, device=self.device)
        return src

    def send(self, staged: Any, dtype: str) -> Any:
        m = self.method
        if m == "to":
            return staged.to(self.device, copy=self.copy)
        if m == "cuda":
            if not self.on_gpu:
                return staged.to(self.device, copy=True)
            kind = torch.device(self.device).type  # Tensor.cuda(), or Tensor.simgpu() on a simulated GPU
            return getattr(staged, kind)(self.device)
        if m in ("to-nonblocking", "pinned") or (m == "side-stream" and not self.on_gpu):
            return staged.to(self.device, non_blocking=True, copy=self.copy)
        if m in ("tensor", "as-tensor"):
            if m == "as-tensor" and self.copy:  # as_tensor shares a host array's memory on the CPU
                staged = staged.copy()
            out = (torch.tensor if m == "tensor" else torch.as_tensor)(staged, device=self.device)
            return out.view(torch.bfloat16) if dtype == "bfloat16" else out
        if m == "copy_":
            src, dst = staged
            return dst.copy_(src)
        if m == "d2h":
            return staged.cpu()
        if m == "d2d":
            return staged.clone()
        return self._side_stream(staged)

    def _side_stream(self, staged: Any) -> Any:
        """The documented pattern: the side stream waits for the main one, the main one waits
        for the copy, and `record_stream` keeps the allocator from reusing the block early."""
        main = torchapi.current_stream(self.device)
        self.side.wait_stream(main)
        with torchapi.use_stream(self.side):
            out = staged.to(self.device, non_blocking=True)
        main.wait_stream(self.side)
        out.record_stream(main)
        return out


def source(pattern: numeric.Pattern, seed: int, contiguous: bool) -> Any:
    """The pattern for `seed` written straight into a new host buffer (no full-size temporaries):
    contiguous, or every other element of a buffer twice as long (a strided, non-dense source)."""
    buf = np.empty(pattern.n * (1 if contiguous else 2), dtype=pattern.store)
    return pattern.fill(buf if contiguous else buf[::2], seed)


def as_tensor_of(src_np: Any, dtype: str) -> Any:
    t = torch.from_numpy(src_np)
    return t.view(torch.bfloat16) if dtype == "bfloat16" else t


def origin(dst: Any, pattern: numeric.Pattern, seed: int, first_bad: int, method: str = "",
           device_source: Any = None) -> str:
    """Which direction failed, judged on a window of elements around the first bad one (bounded
    time whatever the copy's size): a checksum computed on the device equal to the host's
    means the device holds the right data. `device_source`: where a d2h/d2d copy started."""
    lo = max(0, min(first_bad - ATTRIBUTION_WINDOW // 2, pattern.n - ATTRIBUTION_WINDOW))
    hi = min(pattern.n, lo + ATTRIBUTION_WINDOW)
    where = f"judged on elements {lo}..{hi - 1}"
    want = numeric.checksum(pattern.values(seed, lo, hi))

    def right(t: Any) -> bool:
        return numeric.device_checksum(t.detach().reshape(-1)[lo:hi]) == want

    if right(dst) or (method == "d2h" and right(device_source)):
        return f"device-to-host (the device holds the right data; the read-back is wrong; {where})"
    if method == "d2d" and right(device_source):
        return f"device-to-device (the source on the device is right, its copy is wrong; {where})"
    return f"host-to-device (the device holds wrong data; {where})"


class Tally:
    """Per-dtype counts over every copy, plus the first bad copy for the message."""

    def __init__(self) -> None:
        self.stats: Dict[str, Dict[str, int]] = {}
        self.bad: List[str] = []
        self.copies = 0

    def add(self, case: Case, repeat: int, check: numeric.BitCheck, where: Optional[str]) -> None:
        s = self.stats.setdefault(case.dtype, {"copies": 0, "bad_copies": 0, "mismatches": 0, "zeros": 0,
                                               "nans": 0, "first_bad": -1})
        self.copies += 1
        s["copies"] += 1
        if check.ok:
            return
        if s["first_bad"] < 0:
            s["first_bad"] = check.first_bad
        s["bad_copies"] += 1
        for key in ("mismatches", "zeros", "nans"):
            s[key] += getattr(check, key)
        self.bad.append(f"{case.label(repeat)}: {check.summary()}" + (f"; {where}" if where else ""))

    def measurements(self) -> Dict[str, int]:
        return {f"{dtype}_{key}": value for dtype, s in self.stats.items() for key, value in s.items()}


class Run:
    """One variant's copies: its senders, the training load they run beside, and a tally per method."""

    def __init__(self, ctx: rocmcheck.ProbeContext, methods: Tuple[str, ...], context: str):
        self.ctx = ctx
        self.senders = [Sender(m, ctx.device, ctx.on_gpu) for m in methods]
        self.load = TrainingLoad(ctx.device, ctx.gpu_sized) if context == "training" else None
        # a step queued before each copy keeps kernels in flight on a GPU; on the CPU each step has run to its
        # end before the copy starts, so the load (built with one step) stays resident without more of them
        self.step = self.load.step if self.load and ctx.on_gpu else None
        self.tallies = {m: Tally() for m in methods}

    def copy(self, sender: Sender, case: Case, pattern: numeric.Pattern, repeat: int, src_np: Any) -> None:
        """One copy by `sender` of the source `src_np` (the pattern for `repeat`), compared bit for bit with it;
        a copy that differs is checked against the pattern itself, for what is wrong and where. Its progress line
        names the method in flight: a copy that hangs or raises names it in the verdict's output, also where one
        variant sends by every method."""
        self.ctx.progress(f"transfer {sender.method}: {case.label(repeat)}")
        staged = sender.stage(as_tensor_of(src_np, case.dtype), src_np)
        if self.step:
            self.step()
        dst = sender.send(staged, case.dtype)
        self.ctx.synchronize()
        got = numeric.tensor_bits(dst).reshape(-1)
        check = numeric.BitCheck(pattern.n, 0, 0, 0, -1) if pattern.same(got, src_np) else pattern.check(got, repeat)
        tally, where = self.tallies[sender.method], None
        if not check.ok and len(tally.bad) < MAX_ATTRIBUTED:
            where = origin(dst, pattern, repeat, check.first_bad, sender.method,
                           staged if sender.method in FROM_DEVICE else None)
        tally.add(case, repeat, check, where)

    def all_cases(self) -> int:
        """Every case of the plan by every sender; each source is written once, and checked against its pattern
        after the last copy of it (a copy that wrote into memory it only had to read fails the variant).
        Returns the largest copy's bytes."""
        cases = plan(self.ctx)
        for case in cases:
            pattern = numeric.Pattern(case.nbytes // numeric.Pattern.itemsize(case.dtype), case.dtype)
            for repeat in range(1, case.repeats + 1):
                src_np = source(pattern, repeat, case.contiguous)
                for sender in self.senders:
                    self.copy(sender, case, pattern, repeat, src_np)
                kept = pattern.check(src_np, repeat)
                if not kept.ok:
                    self.ctx.fail(f"the host source of {case.label(repeat)} changed while "
                                  f"{', '.join(s.method for s in self.senders)} copied it: {kept.summary()}")
        return max(c.nbytes for c in cases)


@rocmcheck.probe(
    "transfer",
    title="Host-to-device copies by eight methods, device-to-host and device-to-device, checked bit for bit",
    targets="copies returning zeros, NaN or stale data (HIP #3874, TheRock #8379, #6123), also in a training loop",
    links=LINKS,
    timeout=300,
    # a method's variant: gate sizes 3.7-4.7 s on an H100 (an older, slower pattern), full sizes 47.5-85.1 s; the
    # gate's every-method variant, always at the gate's sizes: nine methods' copies beside one source and one load
    budget=lambda p: 6.0 if p["method"] == EVERY else {1: 6.0, 2: 120.0},
    variants=[{"method": m, "context": c} for c in CONTEXTS for m in METHODS],
    gate_variants=[{"method": EVERY, "context": "training"}],
    preload=("torch._dynamo",),  # AdamW.step imports it: ~0.9 s per child otherwise
)
def transfer(ctx: rocmcheck.ProbeContext, method: str, context: str) -> None:
    run = Run(ctx, GATE_METHODS if method == EVERY else (method,), context)
    biggest = run.all_cases()
    if run.load:
        ctx.measure(training_load_params=run.load.params)
    where = " in a training context" if run.load else ""
    if method != EVERY:
        tally = run.tallies[method]
        ctx.measure(copies=tally.copies, largest_bytes=biggest, **tally.measurements(),
                    source_memory="pinned" if method in PINNED_METHODS and ctx.on_gpu else "pageable")
        if tally.bad:
            ctx.fail(f"{method}: {len(tally.bad)} of {tally.copies} copies wrong{where}; first: {tally.bad[0]}")
        return
    bad = {m: t for m, t in run.tallies.items() if t.bad}
    ctx.measure(copies=sum(t.copies for t in run.tallies.values()), largest_bytes=biggest, methods=len(run.tallies),
                bad_methods=len(bad), **{f"{m}_bad_copies": len(t.bad) for m, t in bad.items()})
    if bad:
        each = ", ".join(f"{m} {len(t.bad)} of {t.copies} copies" for m, t in bad.items())
        first_method, first = next(iter(bad.items()))
        ctx.fail(f"{len(bad)} of {len(run.tallies)} methods wrong{where} ({each}); first: {first_method}: "
                 f"{first.bad[0]}")
