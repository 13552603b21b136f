"""Numeric checks for probes: float64 references, per-dtype tolerances and the comparisons of a
result with them (transfer, numerics, GEMM, conv, training). Not `diff`, which compares runs.

Every reference here is computed with numpy, never with torch, so a fault injected into
torch (or a broken device) cannot make the reference agree with the result it checks.
numpy and torch are `rocmcheck.lazy` handles, imported on first use (probe modules import this
module at load time, and `rocmcheck list` must stay instant); torch is used only by the helpers
that take tensors.

- `bitwise`: bit-for-bit comparison with counts of zeros, NaN and the first bad index.
- `close`: tolerance comparison against a float64 reference, with dtype-scaled tolerances.
- `round_to`, `bf16_bits`, `bf16_value`: round-to-nearest-even into bf16/fp16, in numpy; `truncate_to`:
  float32 values cut to what fp16/bf16 hold, in place.
- `checksum` / `device_checksum`: one position-weighted checksum, on the host or the device.
- `conv2d_ref`, `conv2d_backward_ref`: convolution forward and backward by explicit im2col.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

from .lazy import np, torch

# name -> (exponent bits, mantissa bits) of the IEEE-style binary formats.
FLOAT_FORMATS = {"float16": (5, 10), "bfloat16": (8, 7), "float32": (8, 23), "float64": (11, 52)}

# Error bound relative to the problem's scale (|A|.|B| for a product), per result dtype.
# fp32/fp16/bf16 values: docs/failure-catalogue.md §9; "tf32" is fp32 with TF32 math.
TOLERANCE = {"float64": 1e-12, "float32": 1e-5, "tf32": 2e-3, "float16": 1e-2, "bfloat16": 2e-2}

# Weights 1..65521 (a prime) on 16-bit pieces, summed per chunk of 2**24 pieces in int64
# (< 2**56, no overflow) and across chunks in Python ints: any size, any device.
_CHECKSUM_WEIGHTS = 65521
_CHECKSUM_CHUNK = 1 << 24


def dtype_name(dtype: Any) -> str:
    """'float32' for np.float32, torch.float32 or the string itself."""
    return str(dtype).replace("torch.", "")


# --- bit-for-bit ------------------------------------------------------------------------------


@dataclass(frozen=True)
class BitCheck:
    """How a read-back differs from what was sent, element by element."""

    total: int
    mismatches: int
    zeros: int  # differing elements that read back as zero
    nans: int  # differing elements that read back as NaN where NaN was not expected
    first_bad: int  # C-order index of the first differing element, -1 if none

    @property
    def ok(self) -> bool:
        return self.mismatches == 0

    def measurements(self) -> Dict[str, int]:
        return {"mismatches": self.mismatches, "zeros": self.zeros, "nans": self.nans, "first_bad": self.first_bad}

    def summary(self) -> str:
        if self.ok:
            return f"all {self.total} elements identical"
        return (f"{self.mismatches} of {self.total} elements differ ({self.zeros} zeros, {self.nans} NaN), "
                f"first at index {self.first_bad}")


def bits(a: Any) -> Any:
    """The unsigned-integer bit patterns of a numpy array (same shape and strides)."""
    a = np.asarray(a)
    return a.view(np.dtype(f"u{a.dtype.itemsize}"))


def classify(b: Any, fmt: Optional[str]) -> "tuple":
    """(is_zero, is_nan) masks of bit patterns `b` read as float format `fmt` (None: integers)."""
    if fmt not in FLOAT_FORMATS:
        return b == 0, np.zeros(b.shape, dtype=bool)
    exp_bits, man_bits = FLOAT_FORMATS[fmt]
    b = b.astype(np.uint64)
    man_mask = np.uint64((1 << man_bits) - 1)
    exp_mask = np.uint64(((1 << exp_bits) - 1) << man_bits)
    magnitude = b & (exp_mask | man_mask)
    return magnitude == 0, ((b & exp_mask) == exp_mask) & ((b & man_mask) != 0)


def _float_format(a: Any, fmt: Optional[str]) -> Optional[str]:
    if fmt is not None:
        return fmt
    return a.dtype.name if a.dtype.kind == "f" and a.dtype.name in FLOAT_FORMATS else None


def bitwise(got: Any, want: Any, fmt: Optional[str] = None, nan_equal: bool = False) -> BitCheck:
    """Compare two same-shape arrays bit for bit.

    `fmt` names the float format when the arrays hold raw bits (bfloat16 travels as 16-bit
    integers, numpy has no bfloat16); otherwise it follows the dtype. `nan_equal` accepts any
    NaN for any NaN: IEEE 754 leaves NaN payloads to the implementation (CPU casts give
    0x7FC0, CUDA's 0x7FFF), so casts are compared by NaN class, transfers by exact bits.
    """
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or got.dtype.itemsize != want.dtype.itemsize:
        raise ValueError(f"cannot compare {got.dtype}{list(got.shape)} with {want.dtype}{list(want.shape)}")
    fmt = _float_format(want, fmt)
    gb, wb = bits(got), bits(want)
    differ = gb != wb
    if nan_equal and fmt is not None:
        differ &= ~(classify(gb, fmt)[1] & classify(wb, fmt)[1])
    count = int(np.count_nonzero(differ))
    if not count:
        return BitCheck(got.size, 0, 0, 0, -1)
    bad_got, bad_want = gb[differ], wb[differ]  # only the differing elements are classified
    zero, nan = classify(bad_got, fmt)
    want_nan = classify(bad_want, fmt)[1]
    first = int(np.flatnonzero(differ)[0])
    return BitCheck(got.size, count, int(np.count_nonzero(zero)), int(np.count_nonzero(nan & ~want_nan)), first)


# --- checksums --------------------------------------------------------------------------------


def _weighted_sum(pieces: Any, arange: Any, widen: Any) -> int:
    """sum(piece_i * (i % 65521 + 1)) over unsigned 16-bit pieces, chunked to bound memory and int64 range."""
    total = 0
    for start in range(0, pieces.shape[0], _CHECKSUM_CHUNK):
        piece = widen(pieces[start:start + _CHECKSUM_CHUNK]) & 0xFFFF
        weights = arange(start, start + piece.shape[0]) % _CHECKSUM_WEIGHTS + 1
        total += int((piece * weights).sum())
    return total


def checksum(a: Any) -> int:
    """Position-weighted checksum of a numpy array's bytes in C order."""
    flat = np.ascontiguousarray(a).reshape(-1)
    pieces = flat.view(np.uint8 if flat.dtype.itemsize == 1 else np.uint16)
    return _weighted_sum(pieces, np.arange, lambda p: p.astype(np.int64))


def device_checksum(t: Any) -> int:
    """`checksum` of a tensor computed where it lives (on the device for a device tensor).

    Equal to the host checksum of the data sent means the device holds the right bytes,
    so a bad read-back is a device-to-host fault; different means host-to-device.
    """
    flat = t.detach().contiguous().reshape(-1)
    if not flat.numel():
        return 0  # an empty tensor cannot be viewed as another dtype
    if flat.stride(-1) != 1:  # one element counts as contiguous whatever its stride, but cannot be viewed so
        flat = flat.clone(memory_format=torch.contiguous_format)
    pieces = flat.view(torch.uint8 if flat.element_size() == 1 else torch.int16)
    return _weighted_sum(pieces, lambda s, e: torch.arange(s, e, device=flat.device), lambda p: p.to(torch.int64))


# --- rounding to bf16 / fp16 in numpy -------------------------------------------------------


def bf16_bits(x: Any) -> Any:
    """float32 values -> bfloat16 bit patterns (uint16), round to nearest, ties to even.

    NaN becomes the canonical quiet NaN 0x7FC0; overflow rounds to +-inf.
    """
    with np.errstate(over="ignore"):
        x = np.ascontiguousarray(x, dtype=np.float32)
    u = x.view(np.uint32)
    # in uint32: only NaN patterns (above 0xFFFF8000) wrap, and every NaN is replaced below
    rounded = ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        rounded[nan] = 0x7FC0
    return rounded


def bf16_value(b: Any) -> Any:
    """bfloat16 bit patterns -> float32 values (exact)."""
    return (np.asarray(b).astype(np.uint32) << 16).view(np.float32)


# float32 mantissa bits that float16 and bfloat16 lack (23 - 10, 23 - 7)
_MANTISSA_BITS_LACKED = {"float32": 0, "float16": 13, "bfloat16": 16}


def truncate_to(x: Any, dtype: Any) -> Any:
    """`x` (finite float32 values, in place) truncated toward zero to values `dtype` holds exactly; returned.

    One pass that clears the mantissa bits the format lacks, where `round_to` makes float64 copies and
    rounds: operands drawn this way go to the device and into a float64 reference unchanged (gemm's
    at a GPU's sizes, 25M elements: issue 39). float16 holds the result exactly only within its normal
    range (and zero): a value outside it raises ValueError; bfloat16 has float32's exponent range.
    """
    name = dtype_name(dtype)
    if x.dtype != np.float32 or name not in _MANTISSA_BITS_LACKED:
        raise ValueError(f"truncate_to takes float32 values to float32, float16 or bfloat16, not {x.dtype} "
                         f"to {name}")
    if name == "float16" and x.size:
        tiny, top = np.finfo(np.float16).tiny, np.finfo(np.float16).max
        if not tiny <= x.min() <= x.max() <= top:  # two reductions answer for positive operands, gemm's
            mags = np.abs(x)
            if mags.max() > top or np.any((mags < tiny) & (mags != 0)):
                raise ValueError(f"float16 holds exactly only zero and its normal values, {tiny} to {top} "
                                 "in magnitude")
    lacked = _MANTISSA_BITS_LACKED[name]
    if lacked:
        x.view(np.uint32)[...] &= np.uint32((0xFFFFFFFF >> lacked) << lacked)
    return x


def round_to(x: Any, dtype: Any) -> Any:
    """float64 copy of `x` rounded to `dtype` (float64/float32/float16/bfloat16).

    bfloat16 rounds through float32 first; the double rounding this implies differs from a
    direct float64 -> bfloat16 rounding only on float32 ties, never on zeros or NaN.
    """
    name = dtype_name(dtype)
    x = np.asarray(x)
    with np.errstate(over="ignore"):  # values beyond the format's range round to inf, as they should
        if name == "bfloat16":
            return bf16_value(bf16_bits(x.astype(np.float32))).astype(np.float64)
        return x.astype(name).astype(np.float64)


# --- tolerance comparison ---------------------------------------------------------------------


@dataclass(frozen=True)
class CloseCheck:
    """How a low-precision result compares with a float64 reference."""

    total: int
    bad: int  # elements outside the tolerance (NaN and unexpected zeros included)
    nans: int  # NaN where the reference is not NaN
    zeros: int  # exact zeros outside the tolerance where the reference, rounded to the result dtype, is not zero
    first_bad: int
    max_err: float  # largest |got - ref| / scale over elements where both are finite
    tol: float
    zero_fraction: float
    ref_zero_fraction: float

    @property
    def ok(self) -> bool:
        return self.bad == 0

    def measurements(self) -> Dict[str, Any]:
        return {"bad": self.bad, "nans": self.nans, "zeros": self.zeros, "first_bad": self.first_bad,
                "max_err": self.max_err, "tol": self.tol, "zero_fraction": self.zero_fraction,
                "ref_zero_fraction": self.ref_zero_fraction}

    def summary(self) -> str:
        text = f"max error {self.max_err:.3g} (tolerance {self.tol:.3g})"
        if self.ok:
            return text
        return (f"{self.bad} of {self.total} elements wrong ({self.nans} NaN, {self.zeros} unexpected zeros), "
                f"first at index {self.first_bad}, {text}")


def close(got: Any, ref: Any, dtype: Any, scale: Any = None, tol: Optional[float] = None) -> CloseCheck:
    """Compare `got` (a result in `dtype`) with a float64 reference `ref`.

    The error is |got - ref| / scale, with `scale` defaulting to |ref| (floored at the dtype's
    smallest normal); pass |A|.|B| for products. `tol` defaults to TOLERANCE[dtype].
    Equal values (inf included) and NaN-for-NaN always pass. A zero is judged like any value: a sum
    that nearly cancels may round to zero within the tolerance; zeroing faults put zeros far outside it.
    """
    name = dtype_name(dtype)
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        raise ValueError(f"cannot compare shape {list(got.shape)} with {list(ref.shape)}")
    tol = TOLERANCE[name] if tol is None else tol
    tiny = float(np.finfo(np.float32 if name == "bfloat16" else name).tiny)
    scale = np.maximum(np.abs(ref) if scale is None else np.asarray(scale, dtype=np.float64), tiny)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(got - ref) / scale
        nan = np.isnan(got) & ~np.isnan(ref)
        zero = (got == 0) & (round_to(ref, name) != 0)
        good = (err <= tol) | (got == ref) | (np.isnan(got) & np.isnan(ref))
    bad = ~good
    zero &= bad
    finite = np.isfinite(err)
    count = int(np.count_nonzero(bad))
    n = max(got.size, 1)
    return CloseCheck(
        total=got.size, bad=count, nans=int(np.count_nonzero(nan)), zeros=int(np.count_nonzero(zero)),
        first_bad=int(np.flatnonzero(bad)[0]) if count else -1,
        max_err=float(err[finite].max()) if finite.any() else 0.0, tol=tol,
        zero_fraction=float(np.count_nonzero(got == 0)) / n, ref_zero_fraction=float(np.count_nonzero(ref == 0)) / n,
    )


def rel_l2(got: Any, ref: Any) -> float:
    """||got - ref|| / ||ref|| in float64 (inf when ref is all zero and got is not; NaN propagates)."""
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    num = float(np.linalg.norm((got - ref).ravel()))
    den = float(np.linalg.norm(ref.ravel()))
    if den == 0.0:
        return 0.0 if num == 0.0 else float("inf")
    return num / den


# --- convolution references (float64 numpy, im2col) ---------------------------------------------


def windows(x: Any, k: int, stride: int, pad: int) -> Any:
    """im2col view of NCHW `x`: shape (N, C, Ho, Wo, k, k)."""
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    return np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3))[:, :, ::stride, ::stride]


def conv2d_ref(x: Any, w: Any, b: Any, stride: int = 1, pad: int = 1) -> Any:
    return np.einsum("nchwij,ocij->nohw", windows(x, w.shape[-1], stride, pad), w, optimize=True) \
        + b[None, :, None, None]


def conv2d_backward_ref(x: Any, w: Any, g: Any, stride: int = 1, pad: int = 1) -> "tuple":
    """(grad of x, grad of w, grad of b) of sum(conv2d(x, w, b) * g): the weight gradient
    from the same windows, the input gradient by scattering each window's share back (col2im)."""
    k = w.shape[-1]
    cols = windows(x, k, stride, pad)
    dw = np.einsum("nohw,nchwij->ocij", g, cols, optimize=True)
    dcols = np.einsum("nohw,ocij->nchwij", g, w, optimize=True)
    n, c, h, wd = x.shape
    ho, wo = g.shape[2:]
    dxp = np.zeros((n, c, h + 2 * pad, wd + 2 * pad))
    for i in range(k):
        for j in range(k):
            dxp[:, :, i:i + stride * ho:stride, j:j + stride * wo:stride] += dcols[..., i, j]
    return dxp[:, :, pad:pad + h, pad:pad + wd], dw, g.sum((0, 2, 3))


# --- patterns that cannot be mistaken for zeros, NaN or stale data -----------------------------

# dtype -> (numpy type the pattern is stored as, exponent bits, mantissa bits, lowest exponent, exponent span).
# bfloat16 is stored as its 16-bit patterns (int16): numpy has no bfloat16.
_PATTERN_FORMATS = {"float32": ("float32", 8, 23, 64, 128), "bfloat16": ("int16", 8, 7, 64, 128),
                    "float16": ("float16", 5, 10, 8, 15), "int32": ("int32", 0, 31, 0, 0)}
PATTERN_DTYPES = tuple(_PATTERN_FORMATS)


class Pattern:
    """Per-index data for `n` elements of `dtype`, fresh for every seed.

    Floats are normal numbers with exponents well inside the format's range (never zero,
    subnormal, inf or NaN); integers are odd (never zero). `values(seed)` XORs a seed-specific
    non-zero mantissa mask into one hashed base, so two different seeds below 2**7 differ at
    every index: data left over from an earlier repeat cannot pass for the current one.
    Every element is computed from its index alone, so a pattern of GiBs is written in place
    (`fill`) and checked (`check`) without full-size temporaries, and any slice can be rebuilt
    without the rest.

    Speed (benchmarks/bench_pattern.py): the full transfer profile writes and checks tens of
    GiB per variant, so this work must not bound the probe on a big host. Each `CHUNK` of
    elements is one task for a thread (numpy's loops release the GIL, so chunks run on as many
    cores as `threads`); inside a chunk, `BLOCK` elements at a time are hashed in place in a few
    scratch arrays that stay in a core's cache. The result does not depend on either size nor on
    the number of threads: each element's bits come from its index, chunks are combined in order.
    """

    CHUNK = 1 << 20  # elements per thread's task: 16 tasks for a 64 MiB float32 copy
    # elements per block: 4 scratch arrays of 512 KiB stay near the core; smaller blocks spend more of their time
    # in Python between numpy's loops, holding the GIL (~6% of a block's time at this size, 12% at half of it)
    BLOCK = 1 << 17
    MAX_THREADS = 16  # the GIL share above bounds the gain from more threads to about this many

    def __init__(self, n: int, dtype: str, threads: Optional[int] = None):
        store, self.exp_bits, self.man_bits, self.exp_lo, self.exp_span = _PATTERN_FORMATS[dtype]
        self.n, self.dtype, self.store = n, dtype, store
        self.width = np.dtype(store).itemsize * 8
        self.threads = threads or _usable_cores(self.MAX_THREADS)

    @staticmethod
    def itemsize(dtype: str) -> int:
        return np.dtype(_PATTERN_FORMATS[dtype][0]).itemsize

    def mask(self, seed: int) -> int:
        """Non-zero for seeds 1..127 and distinct between them (37 is odd: a bijection mod 2**7)."""
        low = (seed * 37) % 128
        return low << 1 if self.man_bits == 31 else low << (self.man_bits - 7)

    def _blocks(self, seed: int, start: int, stop: int) -> Iterator[Tuple[int, Any]]:
        """(lo, the bits of elements lo..lo+len(bits) for `seed`) over start..stop, BLOCK at a time,
        in one reused array (valid until the next step): the index hashed in place (h), the
        exponent built in two scratch arrays (t, q), the fields ORed into h, then the seed's mask
        XORed in on the way into the store's width (16-bit formats keep the low half). The
        constants are numpy scalars made once: what a block spends outside numpy's loops holds
        the GIL, and bounds how many threads help."""
        u32 = np.uint32
        k1, k2, s16, s13, s31, one = u32(0x9E3779B1), u32(0x85EBCA6B), u32(16), u32(13), u32(31), u32(1)
        man, span, exp_lo, top = u32(self.man_bits), u32(self.exp_span), u32(self.exp_lo), u32(self.width - 1)
        man_mask, mask = u32((1 << self.man_bits) - 1), u32(self.mask(seed))
        ramp = np.arange(min(self.BLOCK, stop - start), dtype=u32)
        h, t, q = np.empty_like(ramp), np.empty_like(ramp), np.empty_like(ramp)
        out = np.empty(len(ramp), dtype=f"u{self.width // 8}")
        for lo in range(start, stop, self.BLOCK):
            if stop - lo < len(h):  # the last block is shorter
                m = stop - lo
                ramp, h, t, q, out = ramp[:m], h[:m], t[:m], q[:m], out[:m]
            np.add(ramp, u32(lo), out=h)
            h *= k1
            h ^= np.right_shift(h, s16, out=t)
            h *= k2
            h ^= np.right_shift(h, s13, out=t)
            if not self.exp_bits:  # integers: odd, so never zero
                h |= one
            else:
                # exponent = exp_lo + (h >> man_bits) % exp_span; numpy vectorises a division by a
                # scalar but not a remainder (20x slower), so the remainder is t - span * (t // span)
                np.right_shift(h, man, out=t)
                np.floor_divide(t, span, out=q)
                q *= span
                t -= q
                t += exp_lo
                t <<= man
                np.right_shift(h, s31, out=q)  # the sign, into the format's top bit
                q <<= top
                t |= q
                h &= man_mask
                h |= t
            yield lo, np.bitwise_xor(h, mask, out=out, casting="unsafe")

    def _map(self, task: Callable[[int, int], List[Any]]) -> List[Any]:
        """task(start, stop) for every chunk of 0..n, their lists joined in order; on `threads`
        threads when there is more than one chunk (a pool per call: no thread outlives it, so a
        child forked later inherits none)."""
        chunks = [(start, min(start + self.CHUNK, self.n)) for start in range(0, self.n, self.CHUNK)]
        if self.threads == 1 or len(chunks) < 2:
            results = [task(*c) for c in chunks]
        else:
            from concurrent.futures import ThreadPoolExecutor  # on first use, like numpy: `rocmcheck list` loads this

            with ThreadPoolExecutor(min(self.threads, len(chunks))) as pool:
                results = list(pool.map(lambda c: task(*c), chunks))
        return [item for result in results for item in result]

    def values(self, seed: int, start: int = 0, stop: Optional[int] = None) -> Any:
        """A new contiguous array of elements start..stop of the pattern for `seed` (as `self.store`)."""
        stop = self.n if stop is None else stop
        out = np.empty(stop - start, dtype=f"u{self.width // 8}")
        for lo, block in self._blocks(seed, start, stop):
            out[lo - start:lo - start + len(block)] = block
        return out.view(np.dtype(self.store))

    def fill(self, out: Any, seed: int) -> Any:
        """Write the pattern for `seed` into the 1-D array `out` (any stride)."""
        flat = bits(out)

        def chunk(start: int, stop: int) -> List[Any]:
            for lo, block in self._blocks(seed, start, stop):
                flat[lo:lo + len(block)] = block
            return []

        self._map(chunk)
        return out

    def same(self, got: Any, want: Any) -> bool:
        """Whether `got` holds the bits of `want` (1-D arrays of `n` elements: a copy and its source, written by
        `fill`), CHUNK at a time on the threads: a comparison of memory, several times cheaper than `check`,
        which rebuilds the pattern (64 MiB of float32: 14 ms against 110 ms on two cores)."""
        got_bits, want_bits = bits(got), bits(want)
        return all(self._map(lambda start, stop: [bool(np.array_equal(got_bits[start:stop], want_bits[start:stop]))]))

    def check(self, got: Any, seed: int) -> BitCheck:
        """`bitwise(got, values(seed))` for a 1-D array `got`, one block of the reference at a time;
        only a block with a differing element goes through `bitwise` to be classified."""
        got_bits = bits(got)

        def chunk(start: int, stop: int) -> List[Tuple[int, BitCheck]]:
            parts, same = [], np.empty(min(self.BLOCK, stop - start), dtype=bool)
            for lo, block in self._blocks(seed, start, stop):
                hi = lo + len(block)
                if not np.equal(got_bits[lo:hi], block, out=same[:len(block)]).all():
                    parts.append((lo, bitwise(got[lo:hi], block, fmt=self.dtype)))
            return parts

        bad = self._map(chunk)
        first = bad[0][0] + bad[0][1].first_bad if bad else -1
        return BitCheck(self.n, sum(p.mismatches for _, p in bad), sum(p.zeros for _, p in bad),
                        sum(p.nans for _, p in bad), first)


def _usable_cores(cap: int) -> int:
    """The cores this process may run on (its affinity mask, which a cpuset or a scheduler's
    binding narrows; the machine's count where the platform has no mask), at most `cap`."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        cores = os.cpu_count() or 1
    return max(1, min(cores, cap))


# --- torch <-> numpy without torch's own casts -------------------------------------------------


def tensor_bits(t: Any) -> Any:
    """A host numpy array of a tensor's bit patterns (uint, same shape), read back with `.cpu()`
    from a device (a host tensor is read in place: its read-back already happened)."""
    int_type = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    t = t.detach().view(int_type)
    return bits((t if t.device.type == "cpu" else t.cpu()).numpy())


def snapshot_bits(t: Any) -> Any:
    """`tensor_bits` as a copy even of a host tensor, so later updates of `t` cannot change it."""
    return tensor_bits(t).copy()


def changed(before: Dict[str, Any], named_tensors: Iterable[Tuple[str, Any]]) -> List[str]:
    """Names of the tensors whose bits differ from their `snapshot_bits` in `before`."""
    return [n for n, t in named_tensors if n in before and not bitwise(tensor_bits(t), before[n]).ok]


def to_numpy(t: Any) -> Any:
    """A host numpy copy of a tensor's values; bfloat16 is widened to float32 in numpy, exactly."""
    if dtype_name(t.dtype) == "bfloat16":
        return bf16_value(tensor_bits(t))
    return np.array(t.detach().cpu().numpy(), copy=True)


def from_numpy(x: Any, dtype: Any) -> Any:
    """A CPU tensor holding `x` rounded to `dtype` by numpy (`round_to`), not by torch's cast."""
    name = dtype_name(dtype)
    x = np.ascontiguousarray(x)
    if name == "bfloat16":
        return torch.from_numpy(bf16_bits(x).view(np.int16)).view(torch.bfloat16)
    with np.errstate(over="ignore"):
        return torch.from_numpy(x.astype(name))
