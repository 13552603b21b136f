"""Attention forward and backward under each SDPA backend, against a float64 reference.

Targets `loss.backward()` through attention hanging (a user's 2.9M-parameter
actor-critic on Windows ROCm; flash/efficient with left padding on gfx1100,
pytorch #186174) and wrong outputs or gradients (efficient + custom mask,
pytorch #147460; non-contiguous V, ROCm/pytorch #3230; hdim80 NaN, ROCm/aotriton #183).
Facts: docs/failure-catalogue.md §3.

Each backend is forced with `torchapi.sdpa_kernel` (torch.nn.attention.sdpa_kernel, or the older
`torch.backends.cuda.sdp_kernel` flags on torch 2.2) in its own child; a
backend that hangs ends as `hang` for that variant only, and the progress lines in the
evidence name the backend, the case and the phase (forward/backward) it hung in. The
generous timeout covers first-call kernel loading. References are numpy float64 (SDPA
cases, MultiheadAttention) or explicit float64 ops on the CPU with `torch.autograd.grad`
(the model), so neither touches the SDPA kernels nor `loss.backward()`.
"""
import rocmcheck
from rocmcheck import torchapi
from rocmcheck.lazy import np, torch

BACKENDS = {"math": "MATH", "flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
            "cudnn": "CUDNN_ATTENTION"}
DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
# max |got - ref| / max |ref| for (outputs, gradients); docs/failure-catalogue.md §3: ~1e-2 and ~5e-2 in half precision
TOLERANCE = {"fp32": (1e-3, 2e-3), "fp16": (1e-2, 5e-2), "bf16": (3e-2, 5e-2)}
# Each case: head dim d, sequence length, causal, left padding per batch row, V non-contiguous.
CASES = {
    "d64": dict(d=64),
    "d80": dict(d=80),
    "d128": dict(d=128),
    "causal": dict(d=64, causal=True),
    "left-pad": dict(d=64, causal=True, pad=(0, 5, 19)),
    "v-strided": dict(d=64, strided_v=True),
    "len-77": dict(d=64, length=77),
}
GATE_CASES = ("d64", "causal", "left-pad")
HEADS, LENGTH, MHA_EMBED = 4, 64, 256
UNSUPPORTED = ("no available kernel", "no viable backend", "not compiled with")  # SDPA's own "no kernel" texts

LINKS = (
    "https://github.com/pytorch/pytorch/issues/186174",
    "https://github.com/pytorch/pytorch/issues/147460",
    "https://github.com/ROCm/pytorch/issues/3230",
    "https://github.com/ROCm/aotriton/issues/183",
    "https://github.com/pytorch/pytorch/issues/138764",
    "https://github.com/ROCm/TheRock/issues/1364",
)


class Unsupported(Exception):
    """The forced backend has no kernel for this case: a fact about the build, not a fault."""


# --- float64 references (numpy) ----------------------------------------------------------


def exact_values(rng, shape):
    """Multiples of 1/64 in [-2, 2]: exact in fp32, fp16 and bf16, so inputs carry no rounding."""
    return np.round(rng.uniform(-2.0, 2.0, shape) * 64) / 64


def attention_reference(q, k, v, allowed, grad_out):
    """softmax(q k^T / sqrt(d)) v and its gradients in float64; fully masked rows give 0."""
    scale = 1.0 / np.sqrt(q.shape[-1])
    scores = q @ np.swapaxes(k, -1, -2) * scale
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)
    peak = scores.max(-1, keepdims=True)
    weights = np.exp(scores - np.where(np.isfinite(peak), peak, 0.0))
    total = weights.sum(-1, keepdims=True)
    probs = np.divide(weights, total, out=np.zeros_like(weights), where=total > 0)
    d_probs = grad_out @ np.swapaxes(v, -1, -2)
    d_scores = probs * (d_probs - (d_probs * probs).sum(-1, keepdims=True))
    return {"out": probs @ v, "dq": d_scores @ k * scale, "dk": np.swapaxes(d_scores, -1, -2) @ q * scale,
            "dv": np.swapaxes(probs, -1, -2) @ grad_out}


def mha_reference(x, w_in, b_in, w_out, b_out, heads, grad_out):
    """nn.MultiheadAttention (batch_first, no mask) forward and backward in float64."""
    batch, length, embed = x.shape

    def split(t):
        return t.reshape(batch, length, heads, embed // heads).transpose(0, 2, 1, 3)

    def merge(t):
        return t.transpose(0, 2, 1, 3).reshape(batch, length, embed)

    q, k, v = (split(t) for t in np.split(x @ w_in.T + b_in, 3, axis=-1))
    att = attention_reference(q, k, v, None, split(grad_out @ w_out))
    d_proj = np.concatenate([merge(att[g]) for g in ("dq", "dk", "dv")], -1)
    return {"out": merge(att["out"]) @ w_out.T + b_out, "dx": d_proj @ w_in,
            "dw_in": d_proj.reshape(-1, 3 * embed).T @ x.reshape(-1, embed)}


def defined_positions(allowed):
    """(query rows, keys) whose results are defined under mask `allowed`, shaped to broadcast over
    (..., length, d); (None, None) without a mask.

    A fully masked row's output is 0/0: torch's math backend (>= 2.5) and the reference return 0,
    cuDNN and older fused kernels NaN. That is a convention, not a wrong result, and a key that no
    query sees gets a gradient only through such rows. So out and dq are compared on rows that see
    a key, dk and dv on keys some row sees; NaN that leaks from a fully masked row into those is wrong.
    """
    if allowed is None:
        return None, None
    return allowed.any(-1, keepdims=True), allowed.any(-2)[..., None]


def relative_error(got, ref, select=None):
    """(max |got - ref| / max |ref|, count of non-finite values) over the selected entries."""
    if select is not None:
        got, ref = got[np.broadcast_to(select, got.shape)], ref[np.broadcast_to(select, ref.shape)]
    bad = int((~np.isfinite(got)).sum())
    if bad or got.size == 0:
        return float("inf") if bad else 0.0, bad
    return float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-12)), 0


# --- running under a forced backend -------------------------------------------------------


def simulated_limit(ctx, backend):
    """A simulated GPU runs SDPA through the CPU's kernels: forcing a GPU backend there proves nothing."""
    if backend != "math":
        torchapi.cuda_only(ctx.device, f"SDPA's {backend} kernels")


def forced(backend, fn):
    """Run `fn()` under the forced backend; a missing kernel becomes Unsupported with torch's reason."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with torchapi.sdpa_kernel([BACKENDS[backend]]):
                return fn()
        except RuntimeError as exc:
            text = str(exc)
            if not any(marker in text.lower() for marker in UNSUPPORTED):
                raise
            reasons = [str(w.message).splitlines()[0] for w in caught if "sdp" in str(w.message).lower()
                       or "attention" in str(w.message).lower()]
            raise Unsupported("; ".join([text.splitlines()[0], *reasons[:2]])) from None


def forward_backward(ctx, backend, label, grad_out, forward):
    """`forward()`, then `sum(out * grad_out).backward()`, under the forced backend, phase by phase."""

    def run():  # one progress line per phase: a hang's output tail says where it stopped
        ctx.progress(f"attention {label}: forward")
        out = forward()
        ctx.synchronize()
        ctx.progress(f"attention {label}: backward")
        (out * grad_out).sum().backward()
        ctx.synchronize()
        return out

    return forced(backend, run)


def to_device(array, ctx, dtype, grad=True):
    t = torch.from_numpy(array).to(device=ctx.device, dtype=getattr(torch, DTYPES[dtype]), copy=True)
    return t.requires_grad_(grad)


def host(t):
    return t.detach().to("cpu", dtype=torch.float64, copy=True).numpy()


def _causal(length):
    return np.tril(np.ones((length, length), dtype=bool))


def sdpa_case(ctx, backend, dtype, label, d, length=LENGTH, causal=False, pad=None, strided_v=False):
    """One SDPA case forward + backward; returns {quantity: (relative error, non-finite count)}."""
    import torch.nn.functional as F

    rng = np.random.default_rng(d * 1000 + length)
    batch = len(pad) if pad else 2
    shape = (batch, HEADS, length, d)
    q_np, k_np, v_np, g_np = (exact_values(rng, shape) for _ in range(4))
    allowed = _causal(length) if causal else None
    if pad:  # left-padded batch with a causal mask: the first pad[b] rows of row b see no key at all
        pos = np.arange(length)
        key_ok = pos[None, :] >= np.array(pad)[:, None]  # (batch, keys)
        allowed = key_ok[:, None, None, :] & (pos[None, None, None, :] <= pos[None, None, :, None])
    rows, keys = defined_positions(allowed)
    if rows is not None:
        g_np = g_np * rows  # no upstream gradient from rows that are fully masked
    ref = attention_reference(q_np, k_np, v_np, allowed, g_np)
    q, k = to_device(q_np, ctx, dtype), to_device(k_np, ctx, dtype)
    v_leaf = to_device(np.ascontiguousarray(v_np.transpose(0, 2, 1, 3)) if strided_v else v_np, ctx, dtype)
    v = v_leaf.transpose(1, 2) if strided_v else v_leaf  # (B, L, H, D) storage seen as (B, H, L, D)
    grad_out = to_device(g_np, ctx, dtype, grad=False)
    mask = torch.from_numpy(allowed).to(ctx.device, copy=True) if pad else None

    out = forward_backward(ctx, backend, label, grad_out, lambda: F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=causal and not pad))
    dv = v_leaf.grad.transpose(1, 2) if strided_v else v_leaf.grad
    return {"out": relative_error(host(out), ref["out"], rows), "dq": relative_error(host(q.grad), ref["dq"], rows),
            "dk": relative_error(host(k.grad), ref["dk"], keys), "dv": relative_error(host(dv), ref["dv"], keys)}


def mha_case(ctx, backend, dtype, label):
    """nn.MultiheadAttention(need_weights=False) forward + backward against the float64 reference."""
    rng = np.random.default_rng(7)
    embed = MHA_EMBED
    x_np, g_np = exact_values(rng, (2, LENGTH, embed)), exact_values(rng, (2, LENGTH, embed))
    w_in, w_out = exact_values(rng, (3 * embed, embed)) / 16, exact_values(rng, (embed, embed)) / 16
    b_in, b_out = exact_values(rng, (3 * embed,)), exact_values(rng, (embed,))
    ref = mha_reference(x_np, w_in, b_in, w_out, b_out, HEADS, g_np)
    mha = torch.nn.MultiheadAttention(embed, HEADS, batch_first=True)
    with torch.no_grad():
        for param, value in ((mha.in_proj_weight, w_in), (mha.in_proj_bias, b_in), (mha.out_proj.weight, w_out),
                             (mha.out_proj.bias, b_out)):
            param.copy_(torch.from_numpy(value))
    mha = mha.to(device=ctx.device, dtype=getattr(torch, DTYPES[dtype]))
    x, grad_out = to_device(x_np, ctx, dtype), to_device(g_np, ctx, dtype, grad=False)

    out = forward_backward(ctx, backend, label, grad_out, lambda: mha(x, x, x, need_weights=False)[0])
    return {"out": relative_error(host(out), ref["out"]), "dx": relative_error(host(x.grad), ref["dx"]),
            "dw_in": relative_error(host(mha.in_proj_weight.grad), ref["dw_in"])}


def judge(results, tolerance):
    """Problems (strings) in {case: {quantity: (error, non-finite)}} against (out, grad) tolerances."""
    problems = []
    for case, quantities in results.items():
        for name, (error, nonfinite) in quantities.items():
            limit = tolerance[0] if name == "out" else tolerance[1]
            if nonfinite:
                problems.append(f"{case}: {name} has {nonfinite} NaN/Inf")
            elif error > limit:
                problems.append(f"{case}: {name} error {error:.3g} > {limit:g}")
    return problems


@rocmcheck.probe(
    "attention-sdpa",
    title="SDPA and MultiheadAttention forward + backward per backend",
    targets="attention backward hanging or returning wrong outputs/grads under one SDPA backend "
            "(left padding, non-contiguous V, head dims 64/80/128, odd lengths)",
    links=LINKS,
    timeout=120,
    # cuDNN's fp16 and bf16 took 5.3-7.3 s on an H100 and an H200 (its kernel search); the others under 1 s
    budget=lambda p: 10.0 if p["backend"] == "cudnn" else 2.0,
    variants={"backend": list(BACKENDS), "dtype": list(DTYPES)},
)
def attention_sdpa(ctx, backend, dtype):
    """Each case runs on its own, so one case's error keeps the others' results (measured:
    cases, unsupported, case_errors). FAIL if any case is wrong; else ERROR if any raised (a cuDNN
    frontend "No execution plans support the graph", an AOTriton shape error); SKIP only if every
    case has no kernel for this backend; PASS otherwise."""
    simulated_limit(ctx, backend)
    if dtype == "fp32":
        ctx.strict_fp32()
    names = list(CASES) if ctx.full else list(GATE_CASES)
    results, unsupported, errors = {}, {}, {}
    for name in [*names, "mha"]:
        label = f"{backend}/{dtype} {name}"
        try:
            if name == "mha":
                results[name] = mha_case(ctx, backend, dtype, label)
            else:
                results[name] = sdpa_case(ctx, backend, dtype, label, **CASES[name])
        except Unsupported as exc:
            unsupported[name] = str(exc)
        except Exception as exc:  # noqa: BLE001 - recorded per case, reported below (ctx.skip passes through)
            errors[name] = exc
    case_errors = {c: f"{type(e).__name__}: " + str(e).strip().split("\n")[0] for c, e in errors.items()}
    ctx.measure(cases={c: {q: round(e, 6) if e != float("inf") else "inf" for q, (e, _) in r.items()}
                       for c, r in results.items()}, unsupported=unsupported, case_errors=case_errors)
    problems = judge(results, TOLERANCE[dtype])
    if problems:
        ctx.fail(f"{backend} {dtype}: " + "; ".join(problems))
    if errors:
        first = next(iter(errors))
        raise RuntimeError(f"{backend} {dtype}: {', '.join(errors)} raised, {len(results)} other cases compared; "
                           f"{first}: {case_errors[first]}") from errors[first]
    if not results:
        reason = next(iter(unsupported.values()))
        ctx.skip(f"{backend} attention is not available for {dtype} on {ctx.device}: {reason}")


# --- the reported model: a ~2.9M-parameter actor-critic with attention ------------------------

OBS, EMBED, MODEL_HEADS, HIDDEN, BLOCKS, ACTIONS = 64, 256, 8, 512, 4, 16
AGENTS, TOKENS, MICRO_BATCHES = 16, 8, 4
# Per-parameter max |got - ref| / max |ref|. Broken attention gradients (zeros, NaN, garbage) give ~1;
# bf16 autocast rounding reaches ~5e-2 on small cancellation-prone tensors (measured on the CPU).
MODEL_TOLERANCE = {"fp32": 2e-3, "bf16": 0.15}


def explicit_attention(mha, x):
    """What nn.MultiheadAttention computes, spelled out with matmul and softmax (no SDPA kernel)."""
    batch, length, embed = x.shape
    heads = mha.num_heads
    q, k, v = (t.reshape(batch, length, heads, -1).transpose(1, 2)
               for t in (x @ mha.in_proj_weight.T + mha.in_proj_bias).chunk(3, -1))
    probs = torch.softmax(q @ k.transpose(-1, -2) / (embed // heads) ** 0.5, -1)
    merged = (probs @ v).transpose(1, 2).reshape(batch, length, embed)
    return merged @ mha.out_proj.weight.T + mha.out_proj.bias


def actor_critic():
    """Observation encoder, attention blocks over tokens, policy and value heads (~2.9M parameters)."""
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1, self.norm2 = nn.LayerNorm(EMBED), nn.LayerNorm(EMBED)
            self.attn = nn.MultiheadAttention(EMBED, MODEL_HEADS, batch_first=True)
            self.ff = nn.Sequential(nn.Linear(EMBED, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, EMBED))

        def forward(self, x, explicit):
            h = self.norm1(x)
            x = x + (explicit_attention(self.attn, h) if explicit else self.attn(h, h, h, need_weights=False)[0])
            return x + self.ff(self.norm2(x))

    def head(out):
        return nn.Sequential(nn.Linear(EMBED, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, HIDDEN), nn.Tanh(),
                             nn.Linear(HIDDEN, out))

    class ActorCritic(nn.Module):
        def __init__(self):
            super().__init__()
            self.encode = nn.Linear(OBS, EMBED)
            self.blocks = nn.ModuleList(Block() for _ in range(BLOCKS))
            self.actor, self.critic = head(ACTIONS), head(1)

        def forward(self, obs, explicit=False):
            x = self.encode(obs)
            for block in self.blocks:
                x = block(x, explicit)
            pooled = x.mean(1)
            return self.actor(pooled), self.critic(pooled).squeeze(-1)

    torch.manual_seed(0)
    return ActorCritic()


def actor_critic_loss(model, obs, actions, returns, explicit=False):
    """The loss in the dtype of `returns`: float32 on the device (autocast outputs included), float64
    for the reference. Mixing the two in `mse_loss` raises in backward on torch < 2.13."""
    import torch.nn.functional as F

    logits, value = model(obs, explicit)
    return F.cross_entropy(logits.to(returns.dtype), actions) + F.mse_loss(value.to(returns.dtype), returns)


def reference_gradients(model, obs, actions, returns):
    """Float64, CPU, explicit attention, `torch.autograd.grad` over the whole batch at once (consumes `model`).

    Equal micro-batches and no batch-coupling layers: accumulated micro-batch gradients must equal these.
    """
    ref = model.to("cpu", torch.float64)
    params = list(ref.parameters())
    loss = actor_critic_loss(ref, obs.double(), actions, returns.double(), explicit=True)
    return [g.numpy() for g in torch.autograd.grad(loss, params)]


def accumulate_gradients(ctx, backend, model, obs, actions, returns, autocast_dtype):
    """The reported training loop: batched forward per micro-batch, loss.backward(), gradients accumulated."""
    chunks = list(zip(obs.chunk(MICRO_BATCHES), actions.chunk(MICRO_BATCHES), returns.chunk(MICRO_BATCHES)))
    device_type = torch.device(ctx.device).type
    for index, (o, a, r) in enumerate(chunks):
        label = f"{backend} model micro-batch {index + 1}/{MICRO_BATCHES}"
        with torch.autocast(device_type, dtype=autocast_dtype or torch.float32, enabled=autocast_dtype is not None):
            ctx.progress(f"attention {label}: forward")
            loss = actor_critic_loss(model, o, a, r) / MICRO_BATCHES
        ctx.synchronize()
        ctx.progress(f"attention {label}: backward")
        loss.backward()
        ctx.synchronize()


@rocmcheck.probe(
    "attention-model",
    title="Actor-critic with attention: batched forward, loss.backward(), gradient accumulation",
    targets="a user's 2.9M-parameter attention model hanging in loss.backward() or getting wrong gradients",
    links=LINKS,
    timeout=120,
    gate=lambda params: params["backend"] in ("math", "flash"),  # the reported path and AOTriton's (flash = efficient)
    variants={"backend": list(BACKENDS)},
)
def attention_model(ctx, backend):
    import copy

    simulated_limit(ctx, backend)
    ctx.strict_fp32()
    rng = np.random.default_rng(3)
    obs = torch.from_numpy(exact_values(rng, (AGENTS, TOKENS, OBS))).float()
    actions = torch.from_numpy(rng.integers(0, ACTIONS, AGENTS))
    returns = torch.from_numpy(exact_values(rng, (AGENTS,))).float()
    model = actor_critic()
    ctx.measure(parameters=sum(p.numel() for p in model.parameters()))
    initial = copy.deepcopy(model)
    model = model.to(ctx.device)
    inputs = [t.to(ctx.device, copy=True) for t in (obs, actions, returns)]
    for dtype in ("fp32", "bf16"):  # fused backends may have no fp32 kernel: train as users would, in bf16
        try:
            forced(backend, lambda: accumulate_gradients(
                ctx, backend, model, *inputs, None if dtype == "fp32" else torch.bfloat16))
            break
        except Unsupported as exc:
            model.zero_grad(set_to_none=True)
            reason = str(exc)
    else:
        ctx.skip(f"{backend} attention has no kernel for this model on {ctx.device}: {reason}")
    reference = reference_gradients(initial, obs, actions, returns)
    results = {name: relative_error(host(p.grad), ref) for (name, p), ref in zip(model.named_parameters(), reference)}
    worst = max(results, key=lambda n: results[n])
    ctx.measure(dtype=dtype, worst_gradient=worst, worst_error=results[worst][0])
    problems = judge({"model": results}, (0, MODEL_TOLERANCE[dtype]))
    if problems:
        more = f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""
        ctx.fail(f"{backend} {dtype} " + "; ".join(problems[:3]) + more)
