"""`torch.compile` with the default inductor backend against eager: output and gradients.

Targets a compile stack that is missing or broken (Triton absent or built for another ROCm, LLVM
"Cannot select intrinsic" aborts on gfx1032, no C compiler for the CPU backend) and kernels that
compile but compute wrong (docs/failure-catalogue.md §10). A tiny MLP (Linear-Tanh-Linear) is
compiled with `fullgraph=True, dynamic=False`, the cheapest configuration: one graph, static shapes,
no recompiles. The first compiled forward (where Dynamo traces and inductor generates and builds its
kernels) runs inside `ctx.first_use()`, so its compile time is `first_use_s`, out of the timeout;
the backward's kernels are built in the first checked call, within the timeout; a second call checks
the cached kernels. A compile failure is `error` naming the backend; output, input gradient and
parameter gradients further from eager than fp32's tolerance (relative L2 error, TF32 pinned off)
are `fail`. Eager is the reference: the path under test is the compiled one, and the eager math
itself is checked against numpy by `numerics` and `training`.

Cost on the project's 2-core CPU, cold inductor cache: about 25 s (imports 5 s, forward
compile 14 s, backward 5 s); with the cache warm a few seconds. Full profile only.
"""
from __future__ import annotations

import copy
from typing import Any, Dict

import rocmcheck
from rocmcheck import numeric, torchapi
from rocmcheck.lazy import torch

BACKEND = "inductor"
TOL = numeric.TOLERANCE["float32"]

LINKS = (
    "https://pytorch.org/docs/stable/generated/torch.compile.html",
    "https://github.com/unslothai/unsloth/pull/7682",
)


def forward_backward(call: Any, model: Any, x: Any) -> Dict[str, Any]:
    """Output and every gradient (input and `model`'s parameters) of `call(x)` as numpy arrays."""
    x = x.detach().clone().requires_grad_()
    for p in model.parameters():
        p.grad = None
    out = call(x)
    out.square().mean().backward()
    grads = {f"{n} gradient": p.grad for n, p in model.named_parameters()}
    return {name: numeric.to_numpy(t) for name, t in {"output": out, "input gradient": x.grad, **grads}.items()}


@rocmcheck.probe(
    "compile",
    title="torch.compile (inductor) of a tiny MLP against eager: output and gradients",
    targets="torch.compile/Triton missing or broken (error naming the backend), compiled kernels computing wrong",
    links=LINKS,
    timeout=120,
    budget=15.0,  # torch.compile's first compile: 7.3-7.5 s on an H100 and an H200, in a child of its own
    preload=("torch._dynamo",),
    runs_in="own-child",  # inductor keeps a pool of compile workers and graph caches: nothing a worker can put back
)
def compile_smoke(ctx: rocmcheck.ProbeContext) -> None:
    torchapi.cuda_only(ctx.device, "torch.compile's inductor backend (it needs a registered device interface)")
    ctx.strict_fp32()
    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4)).to(ctx.device)
    model = copy.deepcopy(eager)
    x = torch.randn(4, 8).to(ctx.device)
    want = forward_backward(eager, eager, x)
    try:
        compiled = torch.compile(model, backend=BACKEND, dynamic=False, fullgraph=True)
        with ctx.first_use():  # the first forward call: Dynamo traces, inductor builds the forward kernels
            compiled(x.detach().clone().requires_grad_())  # as forward_backward calls it: no recompile there
        runs = {"first call": forward_backward(compiled, model, x)}
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        raise RuntimeError(f"torch.compile with the {BACKEND} backend failed ({'Triton' if ctx.on_gpu else 'C++'} "
                           f"kernels): {type(exc).__name__}: {first}") from exc
    runs["second call"] = forward_backward(compiled, model, x)
    errors = {f"{which} {name}": numeric.rel_l2(got[name], ref) for which, got in runs.items()
              for name, ref in want.items()}
    ctx.measure(backend=BACKEND, rel_err=errors, tol=TOL)
    wrong = [f"{name} relative error {err:.3g}" for name, err in errors.items() if not err <= TOL]
    if wrong:
        ctx.fail(f"torch.compile ({BACKEND}) differs from eager beyond {TOL:g}: "
                 + "; ".join(wrong[:3]))
