"""`conv` and `compile`: each detector proven on the CPU through the real runner.

The conv reference is checked against finite differences; faults patch
`torch.nn.functional.conv2d` and `torch.compile` in the child; a compile failure is made for
real (the CPU backend pointed at a C++ compiler that does not exist, with an empty cache).
"""
from __future__ import annotations

import pytest

from conftest import by_variant
from rocmcheck.testing import Status, run_inline

PARTS = ("output", "grad_input", "grad_weight", "grad_bias")
CASES = ("k3", "k3-stride2", "k1", "k3-channels-last")


def test_conv_backward_reference_matches_finite_differences():
    import numpy as np

    from rocmcheck import numeric

    rng = np.random.default_rng(1)
    x, w, b = rng.standard_normal((2, 3, 7, 6)), rng.standard_normal((4, 3, 3, 3)), rng.standard_normal(4)
    for stride, pad in ((1, 1), (2, 1), (2, 0)):
        g = rng.standard_normal(numeric.conv2d_ref(x, w, b, stride, pad).shape)
        dx, dw, db = numeric.conv2d_backward_ref(x, w, g, stride, pad)
        loss = lambda x_, w_, b_: float((numeric.conv2d_ref(x_, w_, b_, stride, pad) * g).sum())  # noqa: E731
        eps = 1e-6
        for grad, arg in ((dx, 0), (dw, 1), (db, 2)):
            for index in [tuple(rng.integers(0, s) for s in grad.shape) for _ in range(5)]:
                args = [x.copy(), w.copy(), b.copy()]
                args[arg][index] += eps
                estimate = (loss(*args) - loss(x, w, b)) / eps
                assert abs(estimate - grad[index]) < 1e-4, (stride, pad, arg, index)


def test_conv_forward_and_backward_pass_in_every_dtype_with_first_use_apart(rocm_run):
    verdicts = by_variant(rocm_run(probe="conv"))
    assert set(verdicts) == {"conv[fp32]", "conv[fp16]", "conv[bf16]"}
    for v in verdicts.values():
        m = v["measurements"]
        assert v["status"] == "pass", v["message"]
        assert set(m["max_err"]) == {f"{c} {p}" for c in CASES for p in PARTS}
        assert 0 < max(m["max_err"].values()) <= m["tol"]  # a real comparison ran, within tolerance
        assert m["first_use_s"] > 0 and m["check_s"] > 0
    assert verdicts["conv[fp32]"]["measurements"]["fp32_flags"]["cudnn_allow_tf32"] is False


def test_wrong_convolution_forward_or_backward_fails_conv():
    """The probe's verdict under the fault, in this process: no child is needed to judge it."""
    fwd = run_inline("conv", dtype="fp32", inject="conv-wrong")
    assert fwd.status is Status.FAIL and "k3 output (first call)" in fwd.message
    assert "200 of 1600 elements wrong" in fwd.message  # output channel 0 of 8, 2x10x10 each
    bwd = run_inline("conv", dtype="bf16", inject="conv-wrong:backward")
    m = bwd.measurements
    assert bwd.status is Status.FAIL and "k3 grad_input (first call)" in bwd.message
    for case in CASES:  # the output stays right; every gradient is 50% off
        assert m["max_err"][f"{case} output"] <= m["tol"]
        assert all(m["max_err"][f"{case} {p}"] > 0.4 for p in PARTS[1:])


def test_numerics_conv_first_call_is_timed_apart(rocm_run):
    (v,) = rocm_run(probe="numerics", keyword="ops-fp16")
    assert v["status"] == "pass" and v["measurements"]["first_use_s"] > 0


@pytest.mark.parametrize("inject, status, words", [
    ("", "pass", "ok"),
    ("compile-wrong", "fail", "torch.compile (inductor) differs from eager beyond 1e-05: first call output "
                              "relative error 0.01; first call input gradient relative error 0.0201"),
])
def test_compiled_model_is_compared_with_eager(rocm_run, inject, status, words):
    (v,) = rocm_run(probe="compile", inject=inject)
    assert v["status"] == status and v["message"].startswith(words), v["message"]
    m = v["measurements"]
    assert m["first_use_s"] > 0 and len(m["rel_err"]) == 2 * 6  # two calls: output, input and 4 parameter grads
    assert (max(m["rel_err"].values()) <= m["tol"]) == (status == "pass")


def test_a_compile_failure_is_an_error_naming_the_backend(rocm_run, tmp_path):
    (v,) = rocm_run(probe="compile", env={"CXX": str(tmp_path / "no-such-g++"),
                                          "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")})
    assert v["status"] == "error"
    assert v["message"].startswith("torch.compile with the inductor backend failed (C++ kernels): InductorError")
    assert "no-such-g++" in v["message"]
