"""Silent data corruption: a deterministic workload whose outputs must agree bit for bit.

Hardware silent data corruption is mostly finite and small (a gate-level fault-injection study
finds NaN/Inf in about 1% of outcomes): a one-ulp error passes every tolerance against float64
(gemm, numerics, conv). What catches it is bitwise agreement of deterministic work (Meta's
fleet scans, Gemini's deterministic replay, Megatron's bit-exact suites). So this probe runs a
fixed workload under deterministic settings and compares bits, three ways:

- *against the exact answer*: matrix products of small integers, bounded so that every product
  and partial sum is exactly representable in the dtype (fp32: |x| <= 8, |sum| <= 64 K < 2**24;
  fp16: |x| <= 4, K <= 64, |sum| <= 1024 < 2**11; bf16: |x| <= 2, K <= 64, |sum| <= 256 = 2**8),
  have one right result in any summation order. Any difference is wrong on this GPU alone: it
  names the faulty GPU with no other GPU to compare with. The host knows that answer without
  doing the product: B is a known low-rank integer matrix, B = X @ Y with X (k x r) and Y (r x n)
  of {-1, 0, 1} and r <= the dtype's |x| bound, so A @ B = (A @ X) @ Y costs the host r(mk + mn)
  multiply-adds (the host's float32 BLAS, exact: every partial sum is an integer below 2**24)
  while the GPU does all m*k*n of the full product. (int64 products at the GPU's sizes took numpy
  43 s, 55 s of CPU time on this project's 2-core machine: issue 39; the gate's budget is 2 s.)
  The answer never comes from the GPU.
- *across repeats*: the same work again and again for the level's budget, every output compared
  bit for bit with the first run's (on the device, read back once a second).
- *across the node's GPUs* (and a fleet): the first run's outputs are hashed on the device
  (`digest`: an exact weighted sum of their bits, 8 bytes read back per output rather than every
  output's bytes, hundreds of MB at a GPU's sizes; sha256 of those sums on the host) into a
  `WorkloadHashes` record with its key (arch, device, torch, ROCm/CUDA, the BLAS chosen and the
  library versions torch tells; on the CPU and the simulated GPUs, the CPU's vector ISA, BLAS and
  thread count, which change the bits); the runner compares the records
  of a node's GPUs (`rocmcheck.agreement`), `rocmcheck matrix` a fleet's.

The workload: a chain of matrix products in fp32, fp16 and bf16 (every link compared), exact
products in the same dtypes, an fp32 convolution, attention forward and backward (the math
SDPA backend), and one AdamW step of a small MLP. Inputs are windows of one pool of uniform
numbers drawn by numpy with a fixed seed (`Pool`: the host draws as many numbers as the largest
input holds, twice, not every input's), copied to the device. Settings:
`torch.use_deterministic_algorithms(True)`, TF32 off, cuDNN benchmark off (put back after each
task in a worker), CUBLAS_WORKSPACE_CONFIG=:4096:8 before the runtime starts (every child of a
run gets it, `torchapi.child_cublas_env`, so the variant shares its GPU's worker; a user's value
that is not deterministic gives it a fresh interpreter with ours), cuBLAS (rocBLAS on ROCm) as
the BLAS where torch lets one choose. A real GPU gets larger work than the CPU and the simulated
GPUs (SIZES); how much of it runs follows the device: the work repeats at the measured pace
until the budget is spent, so a faster GPU compares more rounds, not larger shapes.

The host's share at a GPU's sizes (tests/test_gpu_sizes.py runs it with free device work):
the pool, the exact answers and the dtype roundings, O(elements) each; held to the budget.

Levels (the variant's `level`, chosen by `rocmcheck run --level`; budgets per GPU in
`rocmcheck.engine.options.LEVEL_BUDGETS_S`, `--duration` replaces those of levels 2 and 3; at levels 2
and 3 this probe takes `LEVEL_SHARE` of it, beside gpu-memory and sustained-load): the work
repeats until the budget is spent (at least twice), a round starting only when it ends in time
at the pace so far. First use (kernel search, the first attention backward) is bounded apart,
as everywhere, and is not budgeted.

The rule for work that is not deterministic here: when an op's repeat differs from its first
run, it runs CONFIRM more times. If all but one of these runs (the first included) agree, the
op is deterministic and the odd run was a wrong result: fail. If more disagree and every exact
answer was right, the op is not deterministic on this device and library even with these
settings: it is left out (`left_out`, with the reason) rather than a false NO-GO. An op torch
refuses under deterministic mode (the ops its docs list) is left out with torch's message. An
op that is not deterministic only rarely could still read as a fault; the ops chosen here are
deterministic under these settings by torch's reproducibility notes.
"""
from __future__ import annotations

import contextlib
import hashlib
import platform
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import rocmcheck
from rocmcheck import numeric, torchapi
from rocmcheck.lazy import np, torch
from rocmcheck.model import SDC_EXACT, SDC_MEASUREMENTS, WorkloadHashes

# a change of the work is a new version: records of two versions are never compared (sdc-2: low-rank
# exact products, inputs from one pool, hashes summed on the device)
WORKLOAD = "sdc-2"
SEED = 33
WEIGHT_STEP = 40503  # odd: a word's weight in `bit_sum` is (position x WEIGHT_STEP mod 2**15) | 1
CONFIRM = 8  # further runs of an op whose repeat differed: a wrong result, or work that is not deterministic
LEVEL_SHARE = 0.35  # of each GPU's level-2/3 budget (gpu-memory 0.25, sustained-load 0.4); level 1 is sdc's alone
CHECK_EVERY_S = 1.0  # how often the device's mismatch counts are read back (each read waits for the device)
DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
# dtype -> the largest |x| of an exact product's integer inputs
EXACT_LIMIT = {"float32": 8, "float16": 4, "bfloat16": 2}

# name -> size on a GPU, on the CPU (a simulated GPU computes on the CPU: the CPU's sizes)
SIZES: Dict[str, Any] = {
    "chain": ((2048, 2048, 4), (64, 128, 4)),  # rows, width, links (the CPU's fp16 products are slow)
    "exact-fp32": ((8, 1024, 1024, 1024), (0, 128, 256, 128)),  # batch (0: 2-D), m, k, n
    # fp16 and bf16: k <= 64 keeps every sum exact, so the product is bound by writing its output (64
    # multiply-adds an element); 8 M elements a product keep the host's exact answer at ~0.1 s
    "exact-half": ((8, 1024, 64, 1024), (0, 128, 64, 128)),
    "conv": (((16, 64, 64, 64), (128, 64, 3, 3)), ((4, 8, 32, 32), (16, 8, 3, 3))),  # input, weight
    "attention": ((8, 16, 512, 64), (2, 4, 64, 32)),  # batch, heads, length, head dim
    "mlp": ((512, 1024, 4096), (64, 128, 256)),  # batch, width, hidden
}

LINKS = (
    "https://pytorch.org/docs/stable/notes/randomness.html",
    "https://docs.nvidia.com/cuda/cublas/index.html#results-reproducibility",
    "https://arxiv.org/abs/2102.11245",
    "https://arxiv.org/abs/2407.21783",
)


@dataclass
class Work:
    """One op of the workload: `run()` computes its outputs on the device from inputs already there."""

    name: str
    run: Callable[[], List[Any]]
    exact: Optional[List[Any]] = None  # host arrays: the one right answer, where there is one


@dataclass
class Tally:
    """How much was compared, and what differed."""

    rounds: int = 0
    outputs: int = 0
    bytes: int = 0
    exact_outputs: int = 0
    problems: List[str] = field(default_factory=list)
    exact_wrong: List[str] = field(default_factory=list)


def size(ctx: rocmcheck.ProbeContext, name: str) -> Any:
    gpu, cpu = SIZES[name]
    return gpu if ctx.gpu_sized else cpu


def on_device(ctx: rocmcheck.ProbeContext, x: Any, dtype: str = "float32") -> Any:
    """A host array rounded to `dtype` by numpy, copied to the device."""
    return numeric.from_numpy(x, dtype).to(ctx.device)


class Pool:
    """The inputs' numbers: windows of one uniform draw in [-1, 1), at offsets that differ per input.

    Drawing every input apart cost the host ~50 M float64 normals at a GPU's sizes (about 2 s of
    the 2 s budget on this project's CPU machine); uniform float32 numbers cost a fraction of
    normal ones, and inputs that share numbers at other offsets are as good for comparing bits
    (each op's outputs are compared with its own first run, answer and other GPUs)."""

    STRIDE = 7919  # a prime: successive windows start at unrelated offsets

    def __init__(self, rng: Any, largest: int):
        self.numbers = rng.random(2 * largest, dtype=np.float32) * np.float32(2) - np.float32(1)  # [-1, 1)
        self.largest = largest
        self.taken = 0

    def take(self, shape: Tuple[int, ...], scale: float = 1.0) -> Any:
        count = int(np.prod(shape))
        if count > self.largest:
            raise ValueError(f"an input of {count} numbers from a pool for {self.largest}")
        start = (self.taken * self.STRIDE) % (self.largest + 1)
        self.taken += 1
        window = self.numbers[start:start + count].reshape(shape)
        return window * np.float32(scale) if scale != 1.0 else window


def largest_input(ctx: rocmcheck.ProbeContext) -> int:
    """The most numbers one input of the workload holds at this device's sizes."""
    rows, width, _ = size(ctx, "chain")
    (shape, kernel), attention_shape = size(ctx, "conv"), size(ctx, "attention")
    batch, width_mlp, hidden = size(ctx, "mlp")
    return max(rows * width, width * width, int(np.prod(shape)), int(np.prod(kernel)),
               int(np.prod(attention_shape)), width_mlp * hidden, batch * width_mlp)


def exact_bound(dtype: str) -> int:
    """Every integer of magnitude up to this one is exact in `dtype`: 2**(mantissa bits + 1)."""
    return 1 << (numeric.FLOAT_FORMATS[dtype][1] + 1)


def exact_product(ctx: rocmcheck.ProbeContext, dtype: str, shape: Any, rng: Any) -> Work:
    """A @ B of small integers with its exact answer: |x| <= EXACT_LIMIT and k bounded, so every
    product and partial sum is an integer the dtype holds exactly, whatever the summation order.
    B = X @ Y with X, Y of {-1, 0, 1} and inner size r = EXACT_LIMIT, so |B| <= r and the host's
    answer (A @ X) @ Y costs r(mk + mn) multiply-adds, not mkn."""
    batch, m, k, n = shape
    limit = EXACT_LIMIT[dtype]
    if k * limit * limit > exact_bound(dtype):
        raise ValueError(f"{dtype} {m}x{k}x{n} with |x| <= {limit} has sums beyond {exact_bound(dtype)}: not exact")
    lead = (batch,) if batch else ()
    a = rng.integers(-limit, limit + 1, lead + (m, k), dtype=np.int8).astype(np.float32)
    # one B for the batch (torch folds the batch into one product of batch*m rows: every multiply-add still runs)
    x = rng.integers(-1, 2, (k, limit), dtype=np.int8).astype(np.float32)
    y = rng.integers(-1, 2, (limit, n), dtype=np.int8).astype(np.float32)
    # every partial sum is an integer of magnitude <= k * limit**2 <= 2**24: exact in the host's float32 BLAS
    answer = np.matmul(np.matmul(a, x), y)
    ta, tb = on_device(ctx, a, dtype), on_device(ctx, np.matmul(x, y), dtype)
    return Work(f"exact-{dtype_key(dtype)}", lambda: [torch.matmul(ta, tb)], [answer])


def dtype_key(dtype: str) -> str:
    return next(k for k, v in DTYPES.items() if v == dtype)


def chain(ctx: rocmcheck.ProbeContext, dtype: str, pool: Pool) -> Work:
    """x @ W1 @ W2 @ ...; every link is an output (a low bit lost in a later rounding still shows)."""
    rows, width, links = size(ctx, "chain")
    x = on_device(ctx, pool.take((rows, width)), dtype)
    weights = [on_device(ctx, pool.take((width, width), 1 / np.sqrt(width)), dtype) for _ in range(links)]

    def run() -> List[Any]:
        outs, y = [], x
        for w in weights:
            y = torch.matmul(y, w)
            outs.append(y)
        return outs

    return Work(f"chain-{dtype_key(dtype)}", run)


def convolution(ctx: rocmcheck.ProbeContext, pool: Pool) -> Work:
    shape, kernel = size(ctx, "conv")
    x, w = on_device(ctx, pool.take(shape)), on_device(ctx, pool.take(kernel, 1 / 8))
    b = on_device(ctx, pool.take((kernel[0],)))
    return Work("conv-fp32", lambda: [torch.nn.functional.conv2d(x, w, b, padding=1)])


def attention(ctx: rocmcheck.ProbeContext, pool: Pool) -> Work:
    """Scaled dot-product attention forward and backward under the math backend (the fused
    backends' backward is not deterministic on CUDA: torch's reproducibility notes)."""
    shape = size(ctx, "attention")
    q0, k0, v0, grad = (on_device(ctx, pool.take(shape)) for _ in range(4))

    def run() -> List[Any]:
        q, k, v = (t.detach().requires_grad_() for t in (q0, k0, v0))
        with torchapi.sdpa_kernel(["MATH"]):
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            out.backward(grad)
        return [out.detach(), q.grad, k.grad, v.grad]

    return Work("attention-fp32", run)


def optimizer_step(ctx: rocmcheck.ProbeContext, pool: Pool) -> Work:
    """One AdamW step of a small MLP from the same weights each time: the loss and the weights after it."""
    batch, width, hidden = size(ctx, "mlp")
    model = torch.nn.Sequential(torch.nn.Linear(width, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, width))
    model.to(ctx.device)
    params = list(model.parameters())
    start = [on_device(ctx, pool.take(tuple(p.shape), 1 / np.sqrt(p.shape[-1]))) for p in params]
    x, y = on_device(ctx, pool.take((batch, width))), on_device(ctx, pool.take((batch, width)))

    def run() -> List[Any]:
        with torch.no_grad():
            for p, s in zip(params, start):
                p.copy_(s)
                p.grad = None
        opt = torch.optim.AdamW(params, lr=1e-3)
        loss = (model(x) - y).square().mean()  # not mse_loss: the simulated GPU warns on its 0-d output
        loss.backward()
        opt.step()
        return [loss.detach(), *[p.detach().clone() for p in params]]

    return Work("optimizer-fp32", run)


def workload(ctx: rocmcheck.ProbeContext) -> List[Work]:
    """The ops, their inputs made on the host from fixed seeds and already on the device."""
    rng = np.random.default_rng(SEED)
    pool = Pool(rng, largest_input(ctx))
    works = [chain(ctx, dtype, pool) for dtype in DTYPES.values()]
    works += [exact_product(ctx, dtype, size(ctx, "exact-fp32" if dtype == "float32" else "exact-half"), rng)
              for dtype in DTYPES.values()]
    return works + [convolution(ctx, pool), attention(ctx, pool), optimizer_step(ctx, pool)]


# --- bits -----------------------------------------------------------------------------------------


def int_view(t: Any) -> Any:
    return t.detach().view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def differing(outs: List[Any], refs: List[Any]) -> Any:
    """How many elements of `outs` differ in any bit from `refs`, as a device scalar (no wait)."""
    return sum((int_view(o) != int_view(r)).sum() for o, r in zip(outs, refs))


def bit_sum(t: Any) -> Any:
    """An exact sum of `t`'s bits on its device, as a 0-d int64 tensor: its 16-bit words (signed)
    times odd weights that follow the position, so a change of any one word changes the sum (by
    an odd multiple of a power of two below 2**16, never zero), and no sum overflows (|word x
    weight| < 2**30, 2**33 words at most). Integer sums are exact in any order: deterministic."""
    words = t.detach().contiguous().reshape(-1).view(torch.int16).to(torch.int64)
    weights = torch.bitwise_or(torch.arange(words.numel(), dtype=torch.int64, device=words.device) * WEIGHT_STEP
                               % (1 << 15), 1)
    return (words * weights).sum()


def digest(outs: List[Any]) -> str:
    """sha256 of each output's dtype, shape and `bit_sum`, computed on the device: 8 bytes of
    each output read back, not all of its bytes (hundreds of MB at a GPU's sizes)."""
    sums = torch.stack([bit_sum(t) for t in outs]).cpu().tolist()
    h = hashlib.sha256()
    for t, total in zip(outs, sums):
        h.update(f"{t.dtype} {tuple(t.shape)} {total};".encode())
    return h.hexdigest()


# --- settings and key -------------------------------------------------------------------------------


@contextlib.contextmanager
def deterministic() -> Iterator[None]:
    """Deterministic algorithms inside, put back after (a probe run inline shares its caller's
    process; a worker puts them back too). cuDNN's benchmark mode, which could pick another
    deterministic algorithm in each process, is off inside (a worker puts it back after a
    probe that turned it on, but one run inline may not have)."""
    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    benchmark = torch.backends.cudnn.benchmark
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.manual_seed(SEED)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
        torch.backends.cudnn.benchmark = benchmark


def fixed_blas(ctx: rocmcheck.ProbeContext) -> str:
    """Choose cuBLAS (rocBLAS/hipBLAS on ROCm) where torch lets one choose; what computes the products."""
    if not ctx.gpu_sized:
        return "cpu" + (" (simulated GPU)" if ctx.simulated else "")
    preferred = torchapi.preferred_blas_library()
    if preferred is None:
        return "default (this torch cannot choose its BLAS)"
    return str(preferred("cublas").name).lower()


def cpu_build() -> Dict[str, str]:
    """The CPU's vector ISA torch computes with, its BLAS and the BLAS's version, as torch's build
    configuration (`torch.__config__.show()`) states them."""
    config = torch._C._show_config()
    found = {"cpu_capability": re.search(r"CPU capability usage: (\w+)", config),
             "cpu_blas": re.search(r"BLAS_INFO=(\w+)", config),
             "mkl": re.search(r"Math Kernel Library Version ([\w.]+)", config)}
    return {name: match.group(1) for name, match in found.items() if match}


def workload_key(ctx: rocmcheck.ProbeContext, blas: str) -> Dict[str, str]:
    """What the bits depend on: a GPU's model and arch, torch, the runtime and the BLAS; on the
    CPU (and a simulated GPU, which computes there) its vector ISA, BLAS and thread count."""
    key: Dict[str, Any] = {"torch": torch.__version__, "blas": blas}
    if ctx.gpu_sized:
        index = torch.device(ctx.device).index or 0
        devices = ctx.device_facts.get("devices") or []
        facts = (devices[index] if index < len(devices) else None) or {}
        key.update(device=torchapi.device_properties(ctx.device).name, arch=facts.get("arch"),
                   hip=torch.version.hip, cuda=torch.version.cuda, hipblaslt=ctx.device_facts.get("hipblaslt"),
                   dnn=ctx.device_facts.get("cudnn"))
    else:
        key.update(device="simulated GPU" if ctx.simulated else "cpu", arch=platform.machine(),
                   threads=torch.get_num_threads(), **cpu_build())
    return {name: str(value) for name, value in key.items() if value not in (None, "")}


# --- the checks ---------------------------------------------------------------------------------------


def first_run(work: Work, left_out: Dict[str, str]) -> Optional[List[Any]]:
    """The op's first outputs, or None where torch refuses it under deterministic mode (left out)."""
    try:
        return work.run()
    except RuntimeError as exc:
        if "deterministic" not in str(exc):
            raise
        left_out[work.name] = f"torch has no deterministic implementation here: {str(exc).splitlines()[0]}"
        return None


def confirm(work: Work, first: str) -> Counter:
    """The op's outcomes (hashes) over its first run and CONFIRM more."""
    return Counter([first, *(digest(work.run()) for _ in range(CONFIRM))])


def judge_repeat(work: Work, count: int, first: str, rounds: str, tally: Tally, left_out: Dict[str, str]) -> bool:
    """An inexact op's repeat differed in `count` elements: a wrong result (True: this GPU fails), or
    work not deterministic here (left out), by CONFIRM more runs."""
    outcomes = confirm(work, first)
    agreeing = outcomes.most_common(1)[0][1]
    runs = sum(outcomes.values())
    if agreeing >= runs - 1 or tally.exact_wrong:
        tally.problems.append(f"{work.name}: its repeats in rounds {rounds} differed from its first run ({count} "
                              f"elements in all), yet {agreeing} of {runs} runs (the first and {CONFIRM} more) agree "
                              "bit for bit: a wrong result")
        return True
    left_out[work.name] = (f"not deterministic here even with deterministic settings: {len(outcomes)} different "
                           f"results in {runs} runs, while every exact answer was right")
    return False


def check_counts(works: List[Work], counts: Dict[str, Any], hashes: Dict[str, str], rounds: str, tally: Tally,
                 left_out: Dict[str, str]) -> bool:
    """Read the mismatch counts back (this waits for the device), then zero them; True when this GPU
    computed wrong. An op left out stops running."""
    wrong = False
    for work in list(works):
        count = int(counts[work.name])
        counts[work.name].zero_()
        if not count:
            continue
        if work.exact is not None:
            tally.exact_wrong.append(work.name)
            tally.problems.append(f"{work.name}: {count} elements differ from the exact answer in rounds {rounds}")
            wrong = True
        elif judge_repeat(work, count, hashes[work.name], rounds, tally, left_out):
            wrong = True
        else:
            works.remove(work)
            hashes.pop(work.name)
    return wrong


def compare(work: Work, outs: List[Any], refs: Dict[str, List[Any]], counts: Dict[str, Any], tally: Tally) -> None:
    """Queue the bitwise comparison of one run's outputs with the op's reference; count what was compared."""
    counts[work.name] += differing(outs, refs[work.name])
    tally.outputs += len(outs)
    tally.bytes += sum(o.numel() * o.element_size() for o in outs)
    tally.exact_outputs += len(outs) if work.exact is not None else 0


def first_round(ctx: rocmcheck.ProbeContext, works: List[Work], tally: Tally, left_out: Dict[str, str]
                ) -> Tuple[Dict[str, List[Any]], Dict[str, str], Dict[str, Any]]:
    """Run every op once: its hash, its reference (the exact answer, else these outputs) and its
    mismatch count, with the exact ones compared already. An op torch refuses is left out."""
    refs: Dict[str, List[Any]] = {}
    hashes: Dict[str, str] = {}
    counts: Dict[str, Any] = {}
    for work in list(works):
        outs = first_run(work, left_out)
        if outs is None:
            works.remove(work)
            continue
        hashes[work.name] = digest(outs)
        counts[work.name] = torch.full((), 0, dtype=torch.int64, device=ctx.device)
        if work.exact is None:
            refs[work.name] = outs
            continue
        refs[work.name] = [on_device(ctx, e, numeric.dtype_name(o.dtype)) for e, o in zip(work.exact, outs)]
        compare(work, outs, refs, counts, tally)
    tally.rounds = 1
    return refs, hashes, counts


def sustained(works: List[Work], refs: Dict[str, List[Any]], hashes: Dict[str, str], counts: Dict[str, Any],
              tally: Tally, left_out: Dict[str, str], deadline: float) -> None:
    """Repeat the work until the deadline (at least once), comparing every output with its reference
    on the device and reading the counts back every CHECK_EVERY_S and at the end; a round starts
    only when it ends in time at the pace so far. Stops at the first fault."""
    began = checked = time.time()
    before, unchecked = tally.rounds, 1
    while works:  # every op left out: nothing to repeat
        for work in works:
            compare(work, work.run(), refs, counts, tally)
        tally.rounds += 1
        now = time.time()
        last = now + (now - began) / (tally.rounds - before) > deadline
        if last or now - checked >= CHECK_EVERY_S:
            if check_counts(works, counts, hashes, f"{unchecked}-{tally.rounds}", tally, left_out):
                return
            checked, unchecked = time.time(), tally.rounds + 1
        if last:
            return


@rocmcheck.probe(
    "sdc",
    title="Silent data corruption: a deterministic workload's bits against the exact answer, its repeats and "
          "the node's other GPUs",
    targets="a GPU that silently computes wrong bits (one-ulp errors no tolerance sees), at once or now and then "
            "under sustained load",
    links=LINKS,
    timeout=120,
    # beyond its level's work (LEVEL_BUDGETS_S): building the inputs and exact answers on the host (~1 s of CPU
    # at a GPU's sizes, tests/test_gpu_sizes.py), first use, and a fresh interpreter where the user's own
    # CUBLAS_WORKSPACE_CONFIG needs one (own_cublas_env)
    budget={1: 2.0, 2: 10.0},
    gate=lambda p: p["level"] == 1,
    variants=[{"level": 1}, {"level": 2}, {"level": 3}],
    level_share=LEVEL_SHARE,
    env=lambda p: torchapi.own_cublas_env(),  # none where every child has a deterministic cuBLAS workspace
    preload=("torch._dynamo",),  # AdamW.step imports it: ~1 s of the budget otherwise
)
def sdc(ctx: rocmcheck.ProbeContext, level: int) -> None:
    budget = ctx.budget_s or 0.0  # at levels 2 and 3 already its share (level_share)
    ctx.strict_fp32()
    with deterministic():
        blas = fixed_blas(ctx)
        works = workload(ctx)
        left_out: Dict[str, str] = {}
        tally = Tally()
        began = time.time()
        with ctx.first_use():  # the first convolution, attention and products may search kernels
            refs, hashes, counts = first_round(ctx, works, tally, left_out)
        first_use = time.time() - began  # bounded apart (--first-use-timeout), not budgeted
        sustained(works, refs, hashes, counts, tally, left_out, ctx.started + first_use + budget)
    elapsed = time.time() - ctx.started - first_use
    record = WorkloadHashes(f"{WORKLOAD}-{'gpu' if ctx.gpu_sized else 'cpu'}", workload_key(ctx, blas), hashes,
                            left_out, {"rounds": tally.rounds, "outputs": tally.outputs, "bytes": tally.bytes,
                                       "exact_outputs": tally.exact_outputs, "seconds": round(elapsed)})
    exact = {"ops": sorted(w.name for w in works if w.exact is not None), "wrong": tally.exact_wrong}
    ctx.measure(**{SDC_MEASUREMENTS: record.to_dict(), SDC_EXACT: exact}, level=level, budget_s=budget,
                elapsed_s=round(elapsed, 3))
    if tally.problems:
        where = "this GPU" if ctx.on_gpu else "the CPU"
        ctx.fail(f"{where} computed wrong bits (silent data corruption): " + "; ".join(tally.problems))
