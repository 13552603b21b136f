"""Simulated GPUs and faults planted inside them, below torch (rocmcheck/simgpu).

`simgpu[:N]` gives the device-facts child and every probe child N simulated GPUs (device type
`simgpu`), so the GPU half of every probe runs without a GPU. The `simgpu-*` faults change what
the device itself does: the probe that targets each one must catch it.
"""
from __future__ import annotations

from typing import Optional

from .. import simgpu
from ..errors import UsageError
from . import fault
from .data import per_call_rate

DEFAULT_COUNT = 2


def _build(arg: Optional[str]) -> None:
    """Build the device once in the parent, so a missing compiler is a one-line error before any child."""
    if int(arg or DEFAULT_COUNT) < 1:
        raise UsageError("fault 'simgpu' takes a GPU count of at least 1")
    simgpu.build()


@fault("simgpu", f"ARG simulated GPUs (default {DEFAULT_COUNT}), device type simgpu, in the device-facts child and "
       "every probe child: the GPU half of every probe (allocator, copies, streams, events, pinned memory, per-GPU "
       "queues) without a GPU; built on first use (needs a C++ compiler and ninja)", args="GPU count", in_facts=True,
       prepare=_build, whole_run=True, simulates=True)
def _simgpu(arg: Optional[str]) -> None:
    simgpu.enable(int(arg or DEFAULT_COUNT))


@fault("simgpu-copy-tail", "the simulated device zeroes the last 1/ARG (default 4) of every non-blocking "
       "host-to-device copy (a copy that returns before it is done)", args="fraction denominator", needs="simgpu")
def _copy_tail(arg: Optional[str]) -> None:
    simgpu.set_fault("copy-tail", int(arg or 4))


@fault("simgpu-stale-side-stream", "a host-to-device copy on a side stream of the simulated device delivers the "
       "previous copy's bytes on that stream (a stale buffer)", needs="simgpu")
def _stale_side_stream(arg: Optional[str]) -> None:
    simgpu.set_fault("stale-side-stream", 1)


@fault("simgpu-wrong-device", "simulated GPU ARG (default 1) computes wrong: one element of every floating-point "
       "result it computes is off; copies and the other GPUs stay right", args="GPU index", needs="simgpu")
def _wrong_device(arg: Optional[str]) -> None:
    simgpu.set_fault("wrong-device", int(arg or 1))


SLOW_FACTOR = 3


def _slow_target(arg: str) -> "tuple":
    """IDX[:FACTOR] -> (GPU index, slowdown factor); ValueError when either is not a whole number."""
    index, _, factor = arg.partition(":")
    if not index.isdigit() or not (factor or str(SLOW_FACTOR)).isdigit():
        raise ValueError(f"IDX[:FACTOR], not {arg}")
    return int(index), int(factor or SLOW_FACTOR)


@fault("simgpu-slow-matmul", f"simulated GPU IDX (default 1) runs its matrix products (mm, addmm, bmm: torch.matmul, "
       f"@, linear) FACTOR times as slow (default {SLOW_FACTOR}); its results stay right and its other work, "
       "copies included, keeps its speed: a GPU at a fraction of its clocks", args="IDX[:FACTOR]", needs="simgpu",
       parse_arg=_slow_target)
def _slow_matmul(arg: Optional[str]) -> None:
    index, factor = _slow_target(arg or "1")
    simgpu.set_fault("slow-matmul-factor", factor)
    simgpu.set_fault("slow-matmul", index)


@fault("simgpu-slow-memory", f"simulated GPU IDX (default 1) does its memory work (copies within it and to or from "
       f"another GPU, and every op but a matrix product: STREAM's copy and triad, peer copies) FACTOR times as slow "
       f"(default {SLOW_FACTOR}); its results stay right, its products and host copies keep their speed: memory at "
       "a fraction of its clock", args="IDX[:FACTOR]", needs="simgpu", parse_arg=_slow_target)
def _slow_memory(arg: Optional[str]) -> None:
    index, factor = _slow_target(arg or "1")
    simgpu.set_fault("slow-memory-factor", factor)
    simgpu.set_fault("slow-memory", index)


def _flip_target(arg: str) -> "tuple":
    """IDX:RATE -> (GPU index, rate per call); ValueError when either is bad."""
    index, colon, rate = arg.partition(":")
    if not (index.isdigit() and colon):
        raise ValueError(f"IDX:RATE, not {arg}")
    return int(index), per_call_rate(rate)


@fault("simgpu-bitflip", "simulated GPU ARG (default 1) flips the lowest mantissa bit of one element of every matrix "
       "product it computes (mm, bmm, addmm, baddbmm: those inside attention and backward too): a one-ulp silent "
       "error that only a bitwise check sees", args="GPU index", needs="simgpu")
def _bitflip(arg: Optional[str]) -> None:
    simgpu.set_bitflip(int(arg or 1), 1.0)


@fault("simgpu-bitflip-rate", "as simgpu-bitflip, now and then: each matrix product on simulated GPU IDX flips one "
       "low bit with probability RATE (a fault that load and time bring out)", args="IDX:RATE, RATE above 0 and "
       "at most 1", needs="simgpu", parse_arg=_flip_target)
def _bitflip_rate(arg: Optional[str]) -> None:
    simgpu.set_bitflip(*_flip_target(arg or ""))


SLOW_COPY_FACTOR = 4  # far beyond the run-to-run noise measured on a loaded 2-core machine (engine.options)


def _slow_factor(arg: Optional[str]) -> None:
    """In the parent: a factor below 2 would slow nothing, a one-line error before any child."""
    if int(arg or SLOW_COPY_FACTOR) < 2:
        raise UsageError(f"fault 'simgpu-slow-copy' takes a slow-down factor of at least 2, not {arg}")


@fault("simgpu-slow-copy", f"every copy between the host and a simulated GPU takes ARG (default {SLOW_COPY_FACTOR}) "
       "times as long (a link that trained down, a slow DMA path): the copies stay right, their bandwidth figures "
       "drop, and `rocmcheck diff` against a healthy baseline names each one", args="slow-down factor",
       needs="simgpu", prepare=_slow_factor)
def _slow_copy(arg: Optional[str]) -> None:
    simgpu.set_fault("slow-copy", int(arg or SLOW_COPY_FACTOR))


def _stuck_target(arg: str) -> "tuple":
    """IDX:ADDRESS[:BIT[:VALUE]] -> (GPU index, byte address, bit 0-7, value 0 or 1); ValueError when bad.
    ADDRESS is decimal or 0x-hexadecimal."""
    parts = arg.split(":")
    if not 2 <= len(parts) <= 4 or not parts[0].isdigit():
        raise ValueError(f"IDX:ADDRESS[:BIT[:VALUE]], not {arg}")
    address = int(parts[1], 0)
    bit = int(parts[2]) if len(parts) > 2 else 0
    value = int(parts[3]) if len(parts) > 3 else 1
    if address < 0 or not 0 <= bit <= 7 or value not in (0, 1):
        raise ValueError(f"ADDRESS at least 0, BIT 0-7, VALUE 0 or 1, not {arg}")
    return int(parts[0]), address, bit, value


@fault("simgpu-stuck-bit", "bit BIT (default 0) of the byte at device address ADDRESS of simulated GPU IDX's memory is "
       "stuck at VALUE (default 1): whatever is written there reads back with that bit (a failing memory cell); the "
       "simulated GPU places its blocks first-fit from address 0, so a block allocated first in a fresh process "
       "starts there", args="IDX:ADDRESS[:BIT[:VALUE]]", needs="simgpu", parse_arg=_stuck_target)
def _stuck_bit(arg: Optional[str]) -> None:
    simgpu.set_stuck_bit(*_stuck_target(arg or ""))


SAG_AFTER_S = 5.0
SAG_FACTOR = 3


def _sag_target(arg: str) -> "tuple":
    """IDX[:AFTER_S] -> (GPU index, seconds of sustained load before the sag); ValueError when bad."""
    index, _, after = arg.partition(":")
    seconds = float(after) if after else SAG_AFTER_S
    if not index.isdigit() or not 0 < seconds < 3600:
        raise ValueError(f"IDX[:AFTER_S], not {arg}")
    return int(index), seconds


@fault("simgpu-sag", f"simulated GPU IDX (default 1) sags under sustained load: once its matrix products have run "
       f"back to back for AFTER_S seconds (default {SAG_AFTER_S:g}), each takes {SAG_FACTOR} times "
       "as long, as a GPU that heats up and clocks down; a pause of a second lets it recover, so short work (the "
       "gate's speed checks) never sees it", args="IDX[:AFTER_S]", needs="simgpu", parse_arg=_sag_target)
def _sag(arg: Optional[str]) -> None:
    index, seconds = _sag_target(arg or "1")
    simgpu.set_sag(index, seconds, SAG_FACTOR)
