"""Training smoke: a small transformer trained a few steps on the device and, from the same
weights and data, in float64 on the CPU.

Targets training that silently goes wrong: zero or NaN gradients, a loss that does not fall, results
far from the CPU's (a user's 2.9M-parameter model and bf16 zeros; docs/failure-catalogue.md §2,
§9). The model is a causal transformer (embedding 256, 8 heads, feed-forward 512, 4 layers, 2.4M
parameters, like that user's) trained with AdamW on one fixed batch; on `--device cpu`, where the run
is a self-test of the checks, it shrinks to 0.1M parameters (`params` says so). Variants: plain,
gradient checkpointing, bf16 autocast, fp16 autocast with GradScaler, and LoRA through `peft` when
it is installed (adapters must train while the base weights stay bit-for-bit frozen; otherwise
`skip`).

Checks on the device run alone: every loss and every gradient finite (a step GradScaler skips
for overflow is allowed, not most of them), every trainable tensor gets a non-zero gradient in
some step, the loss falls. Against the reference: per-step loss and first-step gradients within
a tolerance that depends on the variant's precision.

Why the reference stays independent on `--device cpu`, where both runs are CPU runs: faults are
installed before the probe starts, so the reference cannot run "before" them. It runs in
float64 without autocast, checkpointing or GradScaler, which are separate kernels and code
paths; faults that model a broken low-precision path (`grad-zeros` fires on a backward after an
autocast forward, `bf16-zeros` on bf16 results) never touch it. A fault that breaks every dtype
(`matmul-nan`) corrupts the reference too, but the device run's own checks (finite losses and
gradients) fail first, without the reference.
"""
from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import rocmcheck
from rocmcheck import numeric, torchapi
from rocmcheck.lazy import np, torch


@dataclass(frozen=True)
class Config:
    vocab: int
    seq: int
    batch: int
    width: int
    heads: int
    ff: int
    layers: int


CONFIGS = {"gpu": Config(vocab=512, seq=32, batch=8, width=256, heads=8, ff=512, layers=4),  # 2.4M parameters
           "cpu": Config(vocab=128, seq=16, batch=4, width=64, heads=4, ff=128, layers=2)}
STEPS = {"gate": 4, "full": 8}
# variant -> (autocast dtype, learning rate, max relative loss difference per step,
#             max relative L2 error of first-step gradients); LoRA's few weights need a larger rate.
MODES = {
    "plain": (None, 1e-3, 1e-4, 1e-3),
    "checkpoint": (None, 1e-3, 1e-4, 1e-3),
    "bf16-autocast": ("bfloat16", 1e-3, 3e-2, 1e-1),
    "fp16-scaler": ("float16", 1e-3, 1e-2, 3e-2),
    "lora": (None, 1e-2, 1e-4, 1e-3),
}
MAX_SKIPPED_FRACTION = 0.5  # GradScaler may skip an overflowing step, not most of them

LINKS = (
    "https://github.com/pytorch/pytorch/issues/182952",
    "https://github.com/unslothai/unsloth/issues/3385",
    "https://github.com/ROCm/rocm-libraries/issues/9055",
)


def build_model(cfg: Config, checkpointing: bool) -> Any:
    """The causal transformer, initialised from seed 0 (the same weights on every call)."""
    from torch.utils.checkpoint import checkpoint

    class TinyLM(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(cfg.vocab, cfg.width)
            self.pos = torch.nn.Parameter(torch.randn(cfg.seq, cfg.width) * 0.02)
            self.layers = torch.nn.ModuleList(
                torch.nn.TransformerEncoderLayer(cfg.width, cfg.heads, cfg.ff, dropout=0.0, batch_first=True,
                                                 norm_first=True)
                for _ in range(cfg.layers))
            self.norm = torch.nn.LayerNorm(cfg.width)
            self.head = torch.nn.Linear(cfg.width, cfg.vocab)
            self.checkpointing = checkpointing

        def forward(self, ids: Any) -> Any:
            h = self.embed(ids) + self.pos[: ids.shape[1]]
            mask = torch.nn.Transformer.generate_square_subsequent_mask(ids.shape[1], device=h.device, dtype=h.dtype)
            for layer in self.layers:
                run = lambda t, layer=layer: layer(t, src_mask=mask, is_causal=True)  # noqa: E731
                h = checkpoint(run, h, use_reentrant=False) if self.checkpointing and self.training else run(h)
            return self.head(self.norm(h))

    torch.manual_seed(0)
    return TinyLM()


def with_lora(ctx: rocmcheck.ProbeContext, model: Any) -> Any:
    """Wrap the feed-forward layers in LoRA adapters; skip when peft is not installed."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as exc:
        ctx.skip(f"peft is not installed ({exc}); the LoRA variant needs it")
    torch.manual_seed(1)
    return get_peft_model(model, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0,
                                            target_modules=["linear1", "linear2"]))


@dataclass
class Trace:
    """What one training run produced."""

    losses: List[float] = field(default_factory=list)
    first_grads: Dict[str, Any] = field(default_factory=dict)  # float64 numpy, step 1
    nonfinite: List[str] = field(default_factory=list)  # "step N: name" for non-finite gradients
    ever_nonzero: Dict[str, bool] = field(default_factory=dict)
    skipped: int = 0  # steps GradScaler skipped for overflow

    def record(self, step: int, loss: float, grads: Dict[str, Any], scaled: bool) -> None:
        self.losses.append(loss)
        bad = [n for n, g in grads.items() if g is not None and not bool(torch.isfinite(g).all())]
        if bad and scaled:
            self.skipped += 1  # GradScaler.step() skips this step, as it should
        else:
            self.nonfinite += [f"step {step}: {n}" for n in bad]
        for n, g in grads.items():
            self.ever_nonzero[n] = self.ever_nonzero.get(n, False) or (g is not None and bool((g != 0).any()))
        if step == 1:
            self.first_grads = {n: numeric.to_numpy(g).astype("float64") if g is not None else None
                                for n, g in grads.items()}


def train(model: Any, cfg: Config, device: str, steps: int, lr: float, autocast: Optional[str], scaler: bool) -> Trace:
    """AdamW on one fixed batch; the data comes from numpy, so both runs see the same tokens."""
    import torch.nn.functional as F

    ids = torch.from_numpy(np.random.default_rng(0).integers(0, cfg.vocab, (cfg.batch, cfg.seq + 1)))
    inputs, targets = ids[:, :-1].to(device), ids[:, 1:].reshape(-1).to(device)
    trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
    opt = torch.optim.AdamW(trainable.values(), lr=lr, weight_decay=0.01)
    loss_dtype = next(iter(trainable.values())).dtype  # float32 under autocast, float64 for the reference
    kind = torch.device(device).type
    grad_scaler = torchapi.grad_scaler(kind, init_scale=2.0 ** 10) if scaler else None
    trace = Trace()
    model.train()
    for step in range(1, steps + 1):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(kind, dtype=getattr(torch, autocast)) if autocast else contextlib.nullcontext():
            logits = model(inputs)
        loss = F.cross_entropy(logits.to(loss_dtype).reshape(-1, cfg.vocab), targets)
        if grad_scaler:
            grad_scaler.scale(loss).backward()
            grad_scaler.unscale_(opt)
        else:
            loss.backward()
        trace.record(step, float(loss.item()), {n: p.grad for n, p in trainable.items()}, scaled=bool(grad_scaler))
        if grad_scaler:
            grad_scaler.step(opt)
            grad_scaler.update()
        else:
            opt.step()
    return trace


def flat(grads: Dict[str, Any], names: List[str]) -> Any:
    return np.concatenate([grads[n].ravel() if grads.get(n) is not None else np.zeros(0) for n in names])


def self_checks(trace: Trace, steps: int) -> List[str]:
    """What must hold for the device run whatever the reference says."""
    problems = []
    if not all(abs(loss) < float("inf") for loss in trace.losses):
        problems.append(f"non-finite loss {trace.losses}")
    if trace.nonfinite:
        problems.append(f"{len(trace.nonfinite)} non-finite gradients ({', '.join(trace.nonfinite[:3])})")
    if trace.skipped > MAX_SKIPPED_FRACTION * steps:
        problems.append(f"GradScaler skipped {trace.skipped} of {steps} steps: gradients overflow")
    zero = [n for n, ok in trace.ever_nonzero.items() if not ok]
    if zero:
        problems.append(f"{len(zero)} of {len(trace.ever_nonzero)} trainable tensors got only zero gradients "
                        f"({', '.join(zero[:3])})")
    first, last = trace.losses[0], trace.losses[-1]
    if not last < first * 0.99:
        problems.append(f"loss did not fall: {first:.4f} -> {last:.4f}")
    return problems


def reference_checks(trace: Trace, ref: Trace, loss_tol: float, grad_tol: float) -> Dict[str, Any]:
    names = sorted(ref.first_grads)
    loss_diff = max(abs(a - b) / abs(b) for a, b in zip(trace.losses, ref.losses))
    grad_err = numeric.rel_l2(flat(trace.first_grads, names), flat(ref.first_grads, names))
    return {"loss_rel_diff": loss_diff, "loss_tol": loss_tol, "grad_rel_err": grad_err, "grad_tol": grad_tol}


@rocmcheck.probe(
    "training",
    title="A small transformer trained a few steps on the device vs float64 on the CPU",
    targets="zero or NaN gradients, loss not falling, results off the CPU's (plain, checkpointing, autocast, LoRA)",
    links=LINKS,
    timeout=300,
    gate=lambda p: p["mode"] in ("plain", "bf16-autocast"),
    variants={"mode": list(MODES)},
    preload=("torch._dynamo",),  # AdamW.step imports it: ~0.9 s per child otherwise
)
def training(ctx: rocmcheck.ProbeContext, mode: str) -> None:
    autocast, lr, loss_tol, grad_tol = MODES[mode]
    ctx.strict_fp32()
    cfg = CONFIGS["gpu" if ctx.gpu_sized else "cpu"]
    model = build_model(cfg, checkpointing=mode == "checkpoint")
    if mode == "lora":
        model = with_lora(ctx, model)
    reference = copy.deepcopy(model).double()  # taken before the device run touches anything
    reference.checkpointing = False
    frozen = {n: numeric.snapshot_bits(p) for n, p in model.named_parameters() if not p.requires_grad}
    steps = STEPS[ctx.profile]
    trace = train(model.to(ctx.device), cfg, ctx.device, steps, lr, autocast, scaler=mode == "fp16-scaler")
    ref = train(reference, cfg, "cpu", steps, lr, None, scaler=False)
    result = reference_checks(trace, ref, loss_tol, grad_tol)
    ctx.measure(params=sum(p.numel() for p in model.parameters()),
                trainable=sum(p.numel() for p in model.parameters() if p.requires_grad),
                losses=[round(v, 5) for v in trace.losses], ref_losses=[round(v, 5) for v in ref.losses],
                skipped_steps=trace.skipped, **result)
    problems = self_checks(trace, steps)
    if result["loss_rel_diff"] > loss_tol:
        problems.append(f"loss differs from the CPU float64 run by {result['loss_rel_diff']:.3g} "
                        f"(tolerance {loss_tol:g})")
    if not result["grad_rel_err"] <= grad_tol:
        problems.append(f"first-step gradients differ from the CPU float64 run by {result['grad_rel_err']:.3g} "
                        f"(relative L2, tolerance {grad_tol:g})")
    if frozen:
        changed = numeric.changed(frozen, model.named_parameters())
        if changed:
            problems.append(f"{len(changed)} frozen base weights changed ({', '.join(changed[:3])})")
    if problems:
        ctx.fail(f"{mode}: " + "; ".join(problems))
