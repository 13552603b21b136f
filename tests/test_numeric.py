"""Properties of the numeric checks the probes rely on (rocmcheck.numeric: references, tolerances, comparisons).

torch appears here only as an oracle for what the device path produces on the CPU; the
module under test computes its references with numpy alone.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import assume, example, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rocmcheck import numeric

DTYPES = [np.float16, np.float32, np.float64, np.int32, np.int64, np.uint8]


@st.composite
def arrays(draw, dtypes=DTYPES, max_side=6):
    """An array of any listed dtype and 0-3 dims (sides 0..max_side), often a strided view of a bigger one."""
    dtype = draw(st.sampled_from(dtypes))
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=max_side))
    base = draw(hnp.arrays(dtype, tuple(2 * s for s in shape)))
    view = base[tuple(slice(None, None, 2) for _ in shape) or ...]  # every other element: non-contiguous
    if draw(st.booleans()):
        view = view.T
    return view if draw(st.booleans()) else np.ascontiguousarray(view)


def flat_position(a, index):
    """The C-order position of `index` in `a`'s logical shape."""
    return int(np.ravel_multi_index(index, a.shape)) if a.ndim else 0


@given(arrays())
def test_identical_arrays_have_no_mismatch(a):
    check = numeric.bitwise(a, a.copy())
    assert check.ok and check.mismatches == check.zeros == check.nans == 0 and check.first_bad == -1
    assert check.total == a.size


@given(arrays(), st.data())
def test_one_flipped_bit_is_one_mismatch_at_its_index(a, data):
    assume(a.size > 0)
    index = tuple(data.draw(st.integers(0, s - 1)) for s in a.shape)
    got = a.copy()
    bits = numeric.bits(got)
    bits[index] ^= bits.dtype.type(1)
    check = numeric.bitwise(got, a)
    assert (check.mismatches, check.first_bad) == (1, flat_position(a, index))


@given(arrays())
def test_strided_and_contiguous_copies_compare_alike(a):
    got = a.copy()
    if got.size:
        numeric.bits(got).reshape(-1)[-1] ^= 1  # the last element in C order
    strided = numeric.bitwise(got, a)
    dense = numeric.bitwise(np.ascontiguousarray(got), np.ascontiguousarray(a))
    assert strided == dense


@given(arrays(dtypes=[np.float16, np.float32, np.float64]), st.data())
def test_zeros_and_nans_are_counted_apart(a, data):
    assume(a.size > 1)
    want = np.where(np.isfinite(a) & (a != 0), a, a.dtype.type(1))
    got = want.copy()
    flat = got.reshape(-1) if got.flags.c_contiguous else None
    assume(flat is not None)
    i, j = data.draw(st.lists(st.integers(0, a.size - 1), min_size=2, max_size=2, unique=True))
    flat[i], flat[j] = 0, np.nan
    check = numeric.bitwise(got, want)
    assert (check.mismatches, check.zeros, check.nans, check.first_bad) == (2, 1, 1, min(i, j))


def test_nan_payloads_differ_bitwise_but_match_as_a_class():
    quiet, signalling = np.array([0x7FC00000, 0x7F800001], dtype=np.uint32).view(np.float32)
    got, want = np.array([quiet, 1.0], np.float32), np.array([signalling, 1.0], np.float32)
    assert numeric.bitwise(got, want).mismatches == 1
    assert numeric.bitwise(got, want).nans == 0  # NaN where NaN was expected is not an unexpected NaN
    assert numeric.bitwise(got, want, nan_equal=True).ok


def test_mismatched_shapes_are_refused():
    with pytest.raises(ValueError):
        numeric.bitwise(np.zeros(3, np.float32), np.zeros(4, np.float32))


@given(st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True))
def test_bf16_rounding_matches_the_cpu_cast(x):
    want = torch.tensor([x], dtype=torch.float32).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    got = numeric.bf16_bits(np.array([x], np.float32))
    assert numeric.bitwise(got, want, fmt="bfloat16", nan_equal=True).ok


@given(st.integers(0, 0xFFFF))
def test_bf16_values_round_trip_exactly(b):
    bits = np.array([b], np.uint16)
    assume(not numeric.classify(bits, "bfloat16")[1][0])  # NaN comes back canonical
    assert numeric.bf16_bits(numeric.bf16_value(bits))[0] == b


@given(hnp.arrays(np.float64, st.integers(0, 20), elements=st.floats(allow_nan=False, width=64)),
       st.sampled_from(["float16", "bfloat16", "float32", "float64"]))
def test_round_to_is_idempotent(x, dtype):
    once = numeric.round_to(x, dtype)
    np.testing.assert_array_equal(numeric.round_to(once, dtype), once)


# finite float32 values whose float16 truncation is exact: zero or a normal float16 magnitude
_FP16_NORMAL = st.one_of(st.just(0.0), st.floats(float(np.finfo(np.float16).tiny), float(np.finfo(np.float16).max),
                                                 width=32).flatmap(lambda v: st.sampled_from([v, -v])))


@given(st.data(), st.sampled_from(["float16", "bfloat16", "float32"]))
def test_truncate_to_gives_values_the_format_holds_and_torch_casts_unchanged(data, dtype):
    """gemm's operands (issue 39): cut in place to the dtype, they must be what the device holds, so the
    float64 reference made from them is the reference of the device's product."""
    finite = st.floats(width=32, allow_nan=False, allow_infinity=False)
    x = data.draw(hnp.arrays(np.float32, st.integers(1, 20), elements=_FP16_NORMAL if dtype == "float16" else finite))
    cut = numeric.truncate_to(x.copy(), dtype)
    as_torch = torch.from_numpy(cut).to(getattr(torch, dtype)).to(torch.float32).numpy()
    np.testing.assert_array_equal(as_torch, cut)
    np.testing.assert_array_equal(numeric.round_to(cut, dtype), cut)
    assert (np.abs(cut) <= np.abs(x)).all()  # toward zero, by less than one unit of the format's last place
    assert (np.abs(x - cut) <= np.abs(x) * 2.0 ** -numeric.FLOAT_FORMATS[dtype][1]).all()


def test_truncate_to_works_in_place_and_refuses_what_it_cannot_hold_exactly():
    x = np.array([0.3, 0.7], np.float32)
    assert numeric.truncate_to(x, "bfloat16") is x and x[0] != np.float32(0.3)
    for values, dtype in (([1e-6], "float16"), ([7e4], "float16"), ([-7e4, 1.0], "float16")):
        with pytest.raises(ValueError, match="float16 holds exactly only"):
            numeric.truncate_to(np.array(values, np.float32), dtype)
    with pytest.raises(ValueError, match="takes float32 values"):
        numeric.truncate_to(np.ones(2), "float16")
    with pytest.raises(ValueError, match="takes float32 values"):
        numeric.truncate_to(np.ones(2, np.float32), "float64")


@given(arrays(dtypes=DTYPES + [np.int16], max_side=5))
@example(np.lib.stride_tricks.as_strided(np.zeros(2, np.float32), shape=(1,), strides=(8,)))  # stride 2, 1 element
def test_host_and_device_checksums_agree(a):
    assert numeric.checksum(a) == numeric.device_checksum(torch.from_numpy(np.ascontiguousarray(a)))
    assert numeric.checksum(a) == numeric.device_checksum(torch.from_numpy(a.copy()))


@given(arrays(dtypes=[np.float32, np.int32, np.float16]), st.data())
def test_checksum_sees_any_single_bit_flip(a, data):
    assume(a.size > 0)
    got = np.ascontiguousarray(a).copy()
    flat = numeric.bits(got).reshape(-1)
    flat[data.draw(st.integers(0, a.size - 1))] ^= flat.dtype.type(1) << data.draw(st.integers(0, 8 * a.itemsize - 1))
    assert numeric.checksum(got) != numeric.checksum(a)


@given(st.integers(2, 3000), st.data())
def test_checksum_sees_a_swap_of_different_elements(n, data):
    a = np.arange(n, dtype=np.int32) * 7 + 1
    i, j = data.draw(st.lists(st.integers(0, n - 1), min_size=2, max_size=2, unique=True))
    b = a.copy()
    b[[i, j]] = b[[j, i]]
    assert numeric.checksum(b) != numeric.checksum(a)


@given(st.sampled_from(numeric.PATTERN_DTYPES), st.integers(0, 3000), st.integers(1, 127), st.integers(1, 127))
def test_patterns_are_never_zero_nan_or_subnormal_and_change_everywhere(dtype, n, s1, s2):
    pattern = numeric.Pattern(n, dtype)
    a = pattern.values(s1)
    assert a.shape == (n,) and a.dtype.itemsize == numeric.Pattern.itemsize(dtype)
    if dtype == "int32":
        assert np.all(a != 0)
    else:
        values = numeric.bf16_value(a) if dtype == "bfloat16" else a
        assert np.all(np.isfinite(values)) and np.all(np.abs(values) >= np.finfo(values.dtype).tiny)
    if s1 != s2:
        assert numeric.bitwise(pattern.values(s2), a, fmt=dtype).mismatches == n


def pattern_oracle(dtype, seed, index):
    """The pattern's bits, element by element in uint64 arithmetic: the formula `Pattern` computes in blocks."""
    width, exp_bits, man_bits, exp_lo, exp_span = {"float32": (32, 8, 23, 64, 128), "bfloat16": (16, 8, 7, 64, 128),
                                                   "float16": (16, 5, 10, 8, 15), "int32": (32, 0, 31, 0, 0)}[dtype]
    h = index.astype(np.uint64)
    h = (h * 0x9E3779B1) % 2**32
    h ^= h >> 16
    h = (h * 0x85EBCA6B) % 2**32
    h ^= h >> 13
    if not exp_bits:
        base = h | 1
    else:
        exponent = exp_lo + (h >> man_bits) % exp_span
        base = ((h >> 31) << (width - 1)) | (exponent << man_bits) | (h & ((1 << man_bits) - 1))
    return (base ^ numeric.Pattern(1, dtype).mask(seed)).astype(f"u{width // 8}")


@pytest.mark.parametrize("dtype", numeric.PATTERN_DTYPES)
@pytest.mark.parametrize("start", [0, 2**31 - 5000, 2**32 - 10_000])
def test_pattern_bits_follow_the_formula_at_any_index(dtype, start):
    """Past 2**31 too: the largest copy of the full profile has more elements than an int32 can index."""
    pattern = numeric.Pattern(2**32 - 1, dtype)
    got = numeric.bits(pattern.values(5, start, start + 9_999 - (start == 2**32 - 10_000)))
    assert np.array_equal(got, pattern_oracle(dtype, 5, np.arange(start, start + len(got), dtype=np.uint64)))


@given(st.sampled_from(numeric.PATTERN_DTYPES), st.integers(1, 3000), st.integers(1, 300), st.integers(1, 64),
       st.booleans(), st.data())
def test_threads_chunks_and_blocks_change_no_bit_and_no_first_bad(dtype, n, chunk, block, strided, data):
    """Small chunks and blocks on 4 threads write and check exactly what one thread does in one block
    (`bitwise` against `values`), bad elements at chunk and block edges included."""
    serial = numeric.Pattern(n, dtype, threads=1)
    serial.CHUNK = serial.BLOCK = n
    parallel = numeric.Pattern(n, dtype, threads=4)
    parallel.CHUNK, parallel.BLOCK = chunk, min(block, chunk)
    buffers = []
    for pattern in (serial, parallel):
        buf = np.zeros(2 * n if strided else n, dtype=pattern.store)
        buffers.append(pattern.fill(buf[::2] if strided else buf, 7))
    assert np.array_equal(numeric.bits(buffers[0]), numeric.bits(buffers[1]))
    assert np.array_equal(numeric.bits(buffers[0]), pattern_oracle(dtype, 7, np.arange(n)))
    edges = [i for i in range(n) if i % chunk in (0, chunk - 1) or i % parallel.BLOCK in (0, parallel.BLOCK - 1)]
    planted = data.draw(st.lists(st.sampled_from(edges) | st.integers(0, n - 1), max_size=6, unique=True))
    got = numeric.bits(buffers[1]).copy()
    for k, i in enumerate(planted):
        got[i] = 0 if k % 2 else got[i] ^ 1  # zeros and flipped bits
    want = numeric.bitwise(got, numeric.bits(serial.values(7)), fmt=dtype)
    for pattern in (serial, parallel):
        check = pattern.check(got, 7)
        assert (check.total, check.measurements()) == (want.total, want.measurements())
    assert want.mismatches == len(planted) and want.first_bad == (min(planted) if planted else -1)


def test_threads_follow_the_cores_this_process_may_use(monkeypatch):
    import os

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(3)), raising=False)
    assert numeric.Pattern(10, "float32").threads == 3
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(96)), raising=False)
    assert numeric.Pattern(10, "float32").threads == numeric.Pattern.MAX_THREADS
    assert numeric.Pattern(10, "float32", threads=1).threads == 1


@given(hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=2, max_side=8),
                  elements=st.floats(1e-3, 1e3)), st.sampled_from(["float16", "bfloat16", "float32"]))
def test_close_accepts_half_the_tolerance_and_rejects_twice_it(ref, dtype):
    tol = numeric.TOLERANCE[dtype]
    assert numeric.close(ref * (1 + tol / 2), ref, dtype).ok
    check = numeric.close(ref * (1 + 2 * tol), ref, dtype)
    assert check.bad == ref.size and check.first_bad == 0 and check.max_err == pytest.approx(2 * tol)


@given(hnp.arrays(np.float64, st.integers(2, 50), elements=st.floats(1e-3, 1e3)), st.data())
def test_close_counts_nan_and_unexpected_zeros(ref, data):
    i, j = data.draw(st.lists(st.integers(0, ref.size - 1), min_size=2, max_size=2, unique=True))
    got = ref.copy()
    got[i], got[j] = np.nan, 0.0
    check = numeric.close(got, ref, "float32")
    assert (check.bad, check.nans, check.zeros, check.first_bad) == (2, 1, 1, min(i, j))
    assert check.zero_fraction == pytest.approx(1 / ref.size) and check.ref_zero_fraction == 0


def conv_case(seed=11):
    """A bf16 conv2d of numerics[ops-bf16]'s shapes (4624 outputs): float64 reference, |x|.|w| scale, and a result
    rounded to bf16 with an error of 0.2% of the scale per element (what the H100's cuDNN measured: 0.45%)."""
    rng = np.random.default_rng(seed)
    img, k, kb = (numeric.round_to(rng.standard_normal(s), "bfloat16") for s in ((2, 3, 17, 17), (8, 3, 3, 3), (8,)))
    ref = numeric.conv2d_ref(img, k, kb).ravel()
    scale = numeric.conv2d_ref(np.abs(img), np.abs(k), np.abs(kb)).ravel()
    got = numeric.round_to(ref + 2e-3 * scale * rng.uniform(-1, 1, ref.shape), "bfloat16")
    assert numeric.close(got, ref, "bfloat16", scale=scale).ok
    return got, ref, scale


def test_close_accepts_zeros_within_the_tolerance_of_a_near_cancelling_sum():
    """numerics[ops-bf16] on an H100 (torch 2.11.0+cu130, cuDNN 9.19): 4 of 4624 bf16 conv2d outputs were exact
    zeros where the float64 reference is about 2e-4 of the scale |x|.|w| (max error 0.00448, tolerance 0.02).
    A sum that nearly cancels may round to zero: such a zero is as close as any other in-tolerance result."""
    got, ref, scale = conv_case()
    nearest = np.argsort(np.abs(ref) / scale)[:4]
    assert np.all(np.abs(ref[nearest]) / scale[nearest] < 1e-3) and np.all(ref[nearest] != 0)
    got[nearest] = 0.0
    check = numeric.close(got, ref, "bfloat16", scale=scale)
    assert check.ok and check.bad == check.zeros == 0, check.summary()
    assert check.zero_fraction == pytest.approx(4 / 4624) and check.ref_zero_fraction == 0  # still measured


def test_close_still_fails_zeros_where_the_reference_is_not_near_zero():
    """The zeroing faults (bf16 turning to zeros, half a tall-skinny product zeroed, rocm-libraries #5706):
    zeros where the reference is large, a block of zeros, an all-zero result each fail and count as zeros."""
    got, ref, scale = conv_case()
    ratio = np.abs(ref) / scale
    largest = np.argsort(ratio)[-4:]
    few = got.copy()
    few[largest] = 0.0
    check = numeric.close(few, ref, "bfloat16", scale=scale)
    assert check.bad == check.zeros == 4 and check.first_bad == largest.min()
    block = got.copy()
    block[ref.size // 2:] = 0.0  # the matmul-zeros fault's shape: the second half
    check = numeric.close(block, ref, "bfloat16", scale=scale)
    outside = int(np.count_nonzero(ratio[ref.size // 2:] > numeric.TOLERANCE["bfloat16"]))
    assert check.bad == check.zeros == outside > 0.9 * (ref.size // 2)
    assert check.first_bad >= ref.size // 2 and check.zero_fraction >= 0.5
    check = numeric.close(np.zeros_like(got), ref, "bfloat16", scale=scale)
    assert check.bad == check.zeros == int(np.count_nonzero(ratio > numeric.TOLERANCE["bfloat16"])) > 0.9 * ref.size


@given(hnp.arrays(np.float64, st.integers(1, 30), elements=st.floats(-1e3, 1e3).filter(lambda v: abs(v) >= 1e-3)),
       st.sampled_from(["float16", "bfloat16", "float32"]), st.floats(0.01, 0.5), st.floats(2.0, 100.0))
def test_a_zero_is_wrong_exactly_when_it_is_outside_the_tolerance(ref, dtype, inside, outside):
    """A zero result's error is |ref| / scale: within `tol` it passes, beyond it fails and counts as a zero."""
    tol = numeric.TOLERANCE[dtype]
    near = numeric.close(np.zeros_like(ref), ref, dtype, scale=np.abs(ref) / (inside * tol))
    assert near.ok and near.zeros == 0 and near.zero_fraction == 1.0
    far = numeric.close(np.zeros_like(ref), ref, dtype, scale=np.abs(ref) / (outside * tol))
    assert far.bad == far.zeros == ref.size and far.first_bad == 0


def test_close_on_empty_and_special_values():
    empty = numeric.close(np.zeros(0), np.zeros(0), "float32")
    assert empty.ok and empty.total == 0 and empty.max_err == 0.0
    special = np.array([np.inf, -np.inf, np.nan, 0.0])
    assert numeric.close(special, special, "bfloat16").ok
    # a zero is expected where the reference rounds to zero in the result dtype
    assert numeric.close(np.array([0.0]), np.array([1e-9]), "float16", scale=np.array([1.0])).zeros == 0


@given(hnp.arrays(np.float32, st.integers(0, 40), elements=st.floats(allow_nan=False, width=32)))
def test_bf16_tensors_travel_through_numpy_exactly(x):
    t = numeric.from_numpy(x, "bfloat16")
    assert t.dtype == torch.bfloat16
    np.testing.assert_array_equal(numeric.to_numpy(t), numeric.round_to(x, "bfloat16").astype(np.float32))
    np.testing.assert_array_equal(numeric.tensor_bits(t), numeric.bf16_bits(x))


def test_rel_l2():
    x = np.array([3.0, 4.0])
    assert numeric.rel_l2(x, x) == 0.0
    assert numeric.rel_l2(np.zeros(2), x) == 1.0
    assert numeric.rel_l2(x, np.zeros(2)) == float("inf") and numeric.rel_l2(np.zeros(2), np.zeros(2)) == 0.0
