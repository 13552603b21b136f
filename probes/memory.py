"""GPU memory tested in patterns: most of a GPU's free memory written and read back, as DCGM's
memory diagnostic, RVS `mem` and cuda_memtest do.

HBM and GDDR cells fail in the field: a bit stuck at 0 or 1, a cell that flips once its neighbours
are written, an address line that makes two addresses one. ECC corrects some of it and counts it
(node-health reads those counts); what it misses, or a GPU without ECC, hands the job wrong data
with no error. So this probe writes patterns over the memory and reads them back, all on the
device (torch ops: fills, integer arithmetic, comparisons): per pass the host reads back one count,
and only where it is not zero the first bad words (their offsets, and the bits that differ).

Patterns (one round; 32-bit words; after each writing pass every word is compared with what was
written, on the device):
- `walking-ones` / `walking-zeros`: every word 1 << b (its complement), b = 0..31: a bit stuck at
  0 (1), a bit that follows its neighbour;
- `own-address`: every word its own index: two addresses that reach one cell (an address line);
- `moving-inversions`: pseudo-random words (a counter hash, regenerated to compare, never stored
  twice), then checked and inverted chunk by chunk upward, checked and inverted back downward,
  checked again (MATS+ as memtest's moving inversions, with random data): a cell disturbed by
  writes to others.

Size: on a real GPU most of its free memory (`FREE_SHARE` of it, less `RESERVE` for torch and the
driver), cut down to what one round covers in `PACE_MARGIN` of the probe's budget at the pace
measured on one chunk (`calibrate`); on the CPU and the simulated GPUs (whose memory is host RAM) the
same rule capped at `HOST_CAP` bytes, at least `MIN_BYTES`. Levels: the probe's share (`LEVEL_SHARE`)
of the level's budget per GPU (`rocmcheck.engine.options.LEVEL_BUDGETS_S`, or `--duration`); rounds
repeat while the next one still ends within it; a host slower than measured has its round cut at the
deadline, and the verdict says after how many passes (`cut_short_after_passes`). A failure names the
GPU, the pattern, the byte offsets (from the start of the tested memory, and the device address) and
the bit positions, and points at the GPU's ECC/RAS counts read before and after (node-health's readers).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, List, Optional, Tuple

import rocmcheck
from rocmcheck import torchapi
from rocmcheck.host import nodehealth
from rocmcheck.lazy import torch

MIB = 1 << 20
LEVEL_SHARE = 0.25  # of each GPU's level-2/3 budget: sdc 0.35, sustained-load 0.4 take the rest
FREE_SHARE = 0.9  # a real GPU: this share of its free memory, less RESERVE
RESERVE = 1024 * MIB  # left to torch's allocator, the patterns' temporaries and the driver
HOST_CAP = 256 * MIB  # the CPU and the simulated GPUs (host RAM): at most this much
MIN_BYTES = 1 * MIB
# one op's span: bounds the int64 temporaries of a chunk; on the CPU small enough that the pace is measured
# in well under a second (an 8 MiB chunk's random words took 3 s to measure on a loaded 2-core host)
CHUNK_BYTES = {"gpu": 256 * MIB, "cpu": 2 * MIB}
FIRST_BAD = 8  # bad words read back and named
MASK = 0xFFFFFFFF
SEED = 0x5EED
# one round is sized to this share of the budget: the pace measured on one chunk alone was up to 1.7x the
# pace of whole rounds while the node's other GPUs worked too (two simulated GPUs on a loaded 2-core host)
PACE_MARGIN = 0.5
PASSES = 32 + 32 + 1 + 3  # writing-and-checking passes over the memory in one round (walking x2, address, MI)

LINKS = (
    "https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/dcgm-diagnostics.html",
    "https://github.com/ROCm/ROCmValidationSuite/tree/master/rvs/conf",
    "https://github.com/ComputationalRadiationPhysics/cuda_memtest",
    "https://www.memtest.org/",
)


@dataclass
class BadWord:
    """One word that read back wrong: its index in the tested memory, what was written and read."""

    index: int
    wrote: int
    read: int

    @property
    def bits(self) -> List[int]:
        """The bit positions (0-31 of the 32-bit word) that differ."""
        return [b for b in range(32) if ((self.wrote ^ self.read) >> b) & 1]

    def byte_offsets(self) -> List[int]:
        """The offsets, from the start of the tested memory, of the bytes that differ (little endian)."""
        return sorted({self.index * 4 + b // 8 for b in self.bits})


@dataclass
class Tested:
    """What the rounds covered, and the first failure found."""

    words: int
    rounds: int = 0
    passes: int = 0
    bytes_checked: int = 0
    pattern: Optional[str] = None  # the pattern that found bad words
    bad_count: int = 0
    bad: List[BadWord] = field(default_factory=list)
    cut_short: int = 0  # passes of an unfinished round, stopped at the budget (0: every round was whole)


# --- patterns: what each word holds, computed on the device from its index -------------------------


def as_int32(values: Any) -> Any:
    """int64 values in [0, 2**32) as the int32 words with those bits."""
    return torch.where(values >= 1 << 31, values - (1 << 32), values).to(torch.int32)


def own_address(start: int, count: int, device: str) -> Any:
    index = torch.arange(start, start + count, dtype=torch.int64, device=device)
    return as_int32((index ^ (index >> 32)) & MASK)  # the low 32 bits, with the high ones folded in


def random_words(start: int, count: int, device: str) -> Any:
    """Pseudo-random words: three rounds of xorshift32 over (index + seed), a bijection of the index's
    low 32 bits, so the compare regenerates exactly what was written."""
    x = (torch.arange(start, start + count, dtype=torch.int64, device=device) + SEED) & MASK
    for _ in range(3):
        x = x ^ ((x << 13) & MASK)
        x = x ^ (x >> 17)
        x = x ^ ((x << 5) & MASK)
    return as_int32(x)


def constant(value: int) -> Callable[[int, int, str], Any]:
    word = value - (1 << 32) if value >= 1 << 31 else value
    return lambda start, count, device: word


@dataclass(frozen=True)
class Step:
    """One pass: write `pattern` (or not), check the memory against it (its complement with
    `inverted`), then invert every chunk in order (upward, or `downward`) when `invert_after`."""

    name: str
    pattern: Callable[[int, int, str], Any]
    write: bool = True
    inverted: bool = False
    invert_after: bool = False
    downward: bool = False


def steps() -> List[Step]:
    """One round's passes (PASSES of them)."""
    found = [Step("walking-ones", constant(1 << bit)) for bit in range(32)]
    found += [Step("walking-zeros", constant(MASK ^ (1 << bit))) for bit in range(32)]
    found.append(Step("own-address", own_address))
    found += [Step("moving-inversions", random_words, invert_after=True),  # write R, check R, invert upward
              Step("moving-inversions", random_words, write=False, inverted=True, invert_after=True, downward=True),
              Step("moving-inversions", random_words, write=False)]  # R again after two inversions
    return found


# --- the memory -------------------------------------------------------------------------------------


def tested_bytes(ctx: rocmcheck.ProbeContext, round_s_per_byte: float, budget: float) -> int:
    """How much memory one round covers: most of the free memory (HOST_CAP on the CPU and simulated
    GPUs), cut to what one round covers in PACE_MARGIN of `budget` at the pace measured (`calibrate`)."""
    if ctx.gpu_sized:
        most = int(torchapi.memory_info(ctx.device)[0] * FREE_SHARE) - RESERVE
    else:
        most = HOST_CAP
    affordable = int(budget * PACE_MARGIN / max(round_s_per_byte, 1e-15))
    return max(MIN_BYTES, min(most, affordable)) // MIB * MIB  # the last chunk may be short


def chunk_bytes(ctx: rocmcheck.ProbeContext) -> int:
    return CHUNK_BYTES["gpu" if ctx.gpu_sized else "cpu"]


class Memory:
    """The tested memory: one block of int32 words, worked on in chunks, checked on the device."""

    def __init__(self, ctx: rocmcheck.ProbeContext, words: int) -> None:
        self.device = ctx.device
        self.words = torch.empty(words, dtype=torch.int32, device=ctx.device)  # first: the lowest free addresses
        self.chunk = chunk_bytes(ctx) // 4
        self.bad = torch.zeros((), dtype=torch.int64, device=ctx.device)

    def spans(self, downward: bool = False) -> List[Tuple[int, int]]:
        starts = range(0, self.words.numel(), self.chunk)
        found = [(s, min(self.chunk, self.words.numel() - s)) for s in starts]
        return found[::-1] if downward else found

    def write(self, pattern: Callable[[int, int, str], Any]) -> None:
        for start, count in self.spans():
            value = pattern(start, count, self.device)
            view = self.words[start:start + count]
            view.fill_(value) if isinstance(value, int) else view.copy_(value)

    def check(self, pattern: Callable[[int, int, str], Any], inverted: bool) -> None:
        """Count the words that differ from `pattern` (its complement with `inverted`), queued on the device."""
        for start, count in self.spans():
            expected = pattern(start, count, self.device)
            self.bad += (self.words[start:start + count] != (~expected if inverted else expected)).sum()

    def invert(self, downward: bool) -> None:
        """Write each word's complement, chunk after chunk, upward or downward (moving inversions)."""
        for start, count in self.spans(downward):
            self.words[start:start + count].bitwise_not_()

    def bad_count(self) -> int:
        """The count so far, read back (the one wait of a pass); reset to zero."""
        count = int(self.bad.item())
        self.bad.zero_()
        return count

    def first_bad(self, pattern: Callable[[int, int, str], Any], inverted: bool) -> List[BadWord]:
        """The first FIRST_BAD words that differ from `pattern`: read back only those."""
        found: List[BadWord] = []
        for start, count in self.spans():
            view = self.words[start:start + count]
            expected = pattern(start, count, self.device)
            expected = ~expected if inverted else expected
            where = (view != expected).nonzero().flatten()[:FIRST_BAD - len(found)]
            if where.numel():
                read = view[where].tolist()
                wrote = (expected[where] if not isinstance(expected, int) else
                         torch.full_like(where, expected)).tolist()
                found += [BadWord(start + int(i), w & MASK, r & MASK) for i, w, r in zip(where.tolist(), wrote, read)]
            if len(found) >= FIRST_BAD:
                break
        return found


def one_round(memory: Memory, tested: Tested, progress: Callable[[str], None], deadline: float) -> None:
    """Every pass of one round; stops at the first pass that finds bad words (their details read back),
    or at `deadline` (a host slower than the pace measured: the budget is kept, `cut_short` says so)."""
    said = None
    steps_of_round = steps()
    for step in steps_of_round:
        if step.name != said:
            progress(f"gpu-memory: round {tested.rounds + 1}, {step.name}")
            said = step.name
        if step.write:
            memory.write(step.pattern)
        memory.check(step.pattern, step.inverted)
        tested.passes += 1
        tested.bytes_checked += memory.words.numel() * 4
        count = memory.bad_count()
        if count:
            tested.pattern, tested.bad_count = step.name, count
            tested.bad = memory.first_bad(step.pattern, step.inverted)
            return
        if step.invert_after:
            memory.invert(step.downward)
        if time.time() > deadline and step is not steps_of_round[-1]:
            tested.cut_short = steps_of_round.index(step) + 1
            return
    tested.rounds += 1


def calibrate(ctx: rocmcheck.ProbeContext) -> float:
    """Seconds one round takes per byte tested, from one chunk: a constant's writing-and-checking pass
    (64 of a round's passes) and a random-data one (own address and moving inversions compute their
    words: 4 passes), each timed after a warm-up."""
    memory = Memory(ctx, chunk_bytes(ctx) // 4)
    timed = {}
    for pattern in (constant(MASK), random_words):
        for _ in range(2):  # the first is a warm-up
            began = time.perf_counter()
            memory.write(pattern)
            memory.check(pattern, False)
            memory.bad_count()
            timed[pattern] = time.perf_counter() - began
    del memory
    constant_s, computed_s = timed.values()
    return (64 * constant_s + (PASSES - 64) * computed_s) / chunk_bytes(ctx)


def describe(ctx: rocmcheck.ProbeContext, tested: Tested, base: int) -> str:
    """The failure in words: GPU, pattern, byte offsets and address range, bits."""
    offsets = sorted({o for b in tested.bad for o in b.byte_offsets()})
    words = "; ".join(f"byte offset {b.index * 4:#x} (word {b.index}): wrote {b.wrote:#010x}, read {b.read:#010x}, "
                      f"word bit{'s' if len(b.bits) > 1 else ''} {', '.join(map(str, b.bits))} "
                      f"(bit {b.bits[0] % 8} of byte {b.index * 4 + b.bits[0] // 8:#x}) "
                      f"{'stuck high' if b.read & ~b.wrote & MASK else 'stuck low'}" for b in tested.bad)
    return (f"{ctx.device}: pattern {tested.pattern} read back {tested.bad_count} bad word"
            f"{'s' if tested.bad_count > 1 else ''} in the {tested.words * 4 // MIB} MiB tested, byte offsets "
            f"{offsets[0]:#x}-{offsets[-1]:#x} (device addresses {base + offsets[0]:#x}-{base + offsets[-1]:#x}): "
            f"{words}")


@rocmcheck.probe(
    "gpu-memory",
    title="GPU memory in patterns: walking ones and zeros, own address, moving inversions with random data, "
          "over most of the free memory",
    targets="failing GPU memory (HBM/GDDR cells stuck or disturbed, address faults) that ECC misses or a GPU "
            "without ECC hands the job as wrong data",
    links=LINKS,
    timeout=90,
    variants=[{"level": 2}, {"level": 3}],
    level_share=LEVEL_SHARE,
)
def gpu_memory(ctx: rocmcheck.ProbeContext, level: int) -> None:
    budget = ctx.budget_s or 0.0  # its share of the level's budget (level_share)
    deadline = ctx.started + budget
    before = nodehealth.of_device(ctx.device_facts, ctx.device)
    ctx.progress("gpu-memory: measuring one chunk's pace")
    round_s_per_byte = calibrate(ctx)
    size = tested_bytes(ctx, round_s_per_byte, max(deadline - time.time(), 0.0))
    memory = Memory(ctx, size // 4)
    tested = Tested(memory.words.numel())
    began = time.time()
    while True:
        one_round(memory, tested, ctx.progress, deadline)
        now = time.time()
        if tested.pattern or tested.cut_short or now + (now - began) / max(tested.rounds, 1) > deadline:
            break
    after = nodehealth.of_device(ctx.device_facts, ctx.device)
    counts = nodehealth.error_counts_change(before, after) if ctx.on_gpu else "the CPU has no GPU ECC/RAS counters"
    where = "host RAM: the CPU" if not ctx.on_gpu else ("host RAM behind a simulated GPU" if ctx.simulated
                                                        else "GPU memory")
    ctx.measure(level=level, budget_s=round(budget, 3), elapsed_s=round(time.time() - ctx.started, 3),
                tested_bytes=size, tested_where=where, rounds=tested.rounds, passes=tested.passes,
                cut_short_after_passes=tested.cut_short,
                checked_gb=round(tested.bytes_checked / 1e9, 3), round_s_per_gib=round(round_s_per_byte * (1 << 30), 3),
                ecc=counts, size_rule=f"{FREE_SHARE:.0%} of free less {RESERVE // MIB} MiB on a GPU, "
                                      f"{HOST_CAP // MIB} MiB at most on the CPU and simulated GPUs, cut to one "
                                      f"round ({PASSES} passes) in the budget")
    if tested.pattern:
        base = memory.words.data_ptr()
        ctx.measure(pattern=tested.pattern, bad_words=tested.bad_count,
                    first_bad=[{"byte_offset": b.index * 4, "wrote": b.wrote, "read": b.read, "bits": b.bits}
                               for b in tested.bad])
        ctx.measure(action=f"drain the node; run the vendor's memory diagnostic on {ctx.device} (dcgmi diag -r 4, "
                           "rvs mem) and replace it if it confirms: its memory reads back wrong bits")
        ctx.fail(describe(ctx, tested, base) + f"; {counts}")
    cut = f" and {tested.cut_short} passes of one more, stopped at the budget" if tested.cut_short else ""
    ctx.measure(summary=f"{size // MIB} MiB of {where} in {tested.rounds} whole round(s) of {PASSES} passes{cut}; "
                        f"{counts}")
