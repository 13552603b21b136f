"""hf-training: the stack users train with, end to end on the device.

A tiny Llama-style causal LM built from a transformers config (nothing downloaded), wrapped in
peft LoRA adapters, fed by a DataLoader and placed either through
`accelerate.Accelerator().prepare(model, optimizer, dataloader)` (the path a user's report used, where
batches came out corrupted: ROCm/hip#3874) or by hand with `.to(device)`. A few AdamW steps with
gradient checkpointing off or on, in float32 or under bf16 autocast (Accelerate's
`mixed_precision="bf16"`, or `torch.autocast` when placed by hand).

Checked on the device run alone: every batch that reached the model equals the data bit for bit,
losses and LoRA gradients finite, every LoRA tensor gets a non-zero gradient in some step, every
adapter weight changed, every frozen base weight unchanged bit for bit. Against a reference: the
same model from the same seeds trained in float64 on the CPU, with batches sliced straight from
the numpy data (no DataLoader, no Accelerate, no checkpointing, no autocast), per-step losses and
first-step LoRA gradients within a tolerance that depends on the precision.

Skips with its reason when transformers, peft or accelerate is missing (`pip install
'rocmcheck[hf]'`).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Iterator, List

import rocmcheck
from rocmcheck import numeric, torchapi
from rocmcheck.lazy import np, torch

MODEL: Dict[str, Any] = {"vocab_size": 128, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
                         "use_cache": False}
BATCH, SEQ, STEPS, LR = 4, 16, 4, 1e-2
# precision -> (max relative loss difference per step, max relative L2 error of first-step LoRA gradients)
TOLERANCES = {"fp32": (1e-4, 1e-3), "bf16": (3e-2, 1e-1)}
LINKS = ("https://github.com/ROCm/hip/issues/3874", "https://github.com/ROCm/TheRock/issues/8379")


def require_stack(ctx: rocmcheck.ProbeContext) -> None:
    import importlib.util

    missing = [m for m in ("transformers", "peft", "accelerate") if importlib.util.find_spec(m) is None]
    if missing:
        ctx.skip(f"{', '.join(missing)} not installed: pip install 'rocmcheck[hf]'")


def build(checkpointing: bool) -> Any:
    """The LoRA-wrapped model, the same weights on every call (seeded)."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**MODEL))
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    torch.manual_seed(1)
    return get_peft_model(model, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj"]))


@dataclass
class Trace:
    losses: List[float] = field(default_factory=list)
    batches: List[Any] = field(default_factory=list)  # what reached the model, as host numpy
    first_grads: Dict[str, Any] = field(default_factory=dict)
    nonfinite: List[str] = field(default_factory=list)
    ever_nonzero: Dict[str, bool] = field(default_factory=dict)


def train(model: Any, optimizer: Any, batches: Iterable[Any], backward: Any, autocast: Any) -> Trace:
    """The user's loop; `batches` already yields tensors on the model's device."""
    trace = Trace()
    lora = {n: p for n, p in model.named_parameters() if p.requires_grad}
    model.train()
    for step, (ids,) in enumerate(batches, 1):
        trace.batches.append(ids.cpu().numpy())
        with autocast():
            loss = model(input_ids=ids, labels=ids).loss
        backward(loss)
        trace.losses.append(float(loss.item()))
        for n, p in lora.items():
            g = p.grad
            if g is not None and not bool(torch.isfinite(g).all()):
                trace.nonfinite.append(f"step {step}: {n}")
            trace.ever_nonzero[n] = trace.ever_nonzero.get(n, False) or (g is not None and bool((g != 0).any()))
        if step == 1:
            trace.first_grads = {n: numeric.to_numpy(p.grad).astype("float64") for n, p in lora.items()
                                 if p.grad is not None}
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return trace


def on_device(ctx: rocmcheck.ProbeContext, model: Any, data: Any, placement: str, precision: str) -> Trace:
    """Train through Accelerate's prepare() or with plain `.to(device)` placement."""
    from torch.utils.data import DataLoader, TensorDataset

    device = ctx.device
    kind = torch.device(device).type
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=LR)
    loader = DataLoader(TensorDataset(torch.from_numpy(data)), batch_size=BATCH, shuffle=False)
    if placement == "accelerate":
        from accelerate import Accelerator

        torchapi.cuda_only(device, "Accelerate's placement (it knows no simulated device)")
        if kind == "cuda":
            torch.cuda.set_device(device)  # Accelerate places on the current device
        with accelerate_state_released():
            accelerator = Accelerator(mixed_precision="bf16" if precision == "bf16" else "no", cpu=kind == "cpu")
            model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
            if accelerator.device.type != kind:
                ctx.fail(f"Accelerate placed the model on {accelerator.device}, not {device}")
            return train(model, optimizer, loader, accelerator.backward, contextlib.nullcontext)
    model.to(device)
    autocast = (lambda: torch.autocast(kind, dtype=torch.bfloat16)) if precision == "bf16" else contextlib.nullcontext
    return train(model, optimizer, ((ids.to(device),) for (ids,) in loader), lambda loss: loss.backward(), autocast)


@contextlib.contextmanager
def accelerate_state_released() -> Iterator[None]:
    """Accelerate keeps one AcceleratorState per process ("restart your runtime" to change its
    mixed precision), and the variants share a worker process: clear it afterwards, as
    Accelerate's own test case does between tests (accelerate.test_utils.AccelerateTestCase.tearDown)."""
    from accelerate.state import AcceleratorState, GradientState

    try:
        yield
    finally:
        AcceleratorState._reset_state(True)
        GradientState._reset_state()


def reference(data: Any) -> Trace:
    """float64 on the CPU, batches sliced from the numpy data: none of the paths under test."""
    model = build(checkpointing=False).double()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=LR)
    batches = ((torch.from_numpy(data[i:i + BATCH]),) for i in range(0, len(data), BATCH))
    return train(model, optimizer, batches, lambda loss: loss.backward(), contextlib.nullcontext)


def problems(trace: Trace, ref: Trace, data: Any, adapters: List[str], changed: List[str],
             frozen_changed: List[str], precision: str) -> List[str]:
    found = []
    for step, got in enumerate(trace.batches, 1):
        want = data[(step - 1) * BATCH:step * BATCH]
        if got.shape != want.shape or not np.array_equal(got, want):
            bad = int((got != want).sum()) if got.shape == want.shape else got.size
            found.append(f"batch {step} reached the model changed ({bad} of {want.size} tokens differ from the data)")
    if len(trace.losses) != STEPS:
        found.append(f"{len(trace.losses)} steps ran, not {STEPS}")
    if not all(np.isfinite(trace.losses)):
        found.append(f"non-finite loss {trace.losses}")
    if trace.nonfinite:
        found.append(f"{len(trace.nonfinite)} non-finite LoRA gradients ({', '.join(trace.nonfinite[:3])})")
    zero = [n for n, ok in trace.ever_nonzero.items() if not ok]
    if zero:
        found.append(f"{len(zero)} of {len(trace.ever_nonzero)} LoRA tensors got only zero gradients ({zero[0]})")
    unchanged = [n for n in adapters if n not in changed]
    if unchanged:
        found.append(f"{len(unchanged)} of {len(adapters)} adapter weights did not change ({unchanged[0]})")
    if frozen_changed:
        found.append(f"{len(frozen_changed)} frozen base weights changed ({frozen_changed[0]})")
    loss_tol, grad_tol = TOLERANCES[precision]
    diff = max((abs(a - b) / abs(b) for a, b in zip(trace.losses, ref.losses)), default=float("inf"))
    if not diff <= loss_tol:
        found.append(f"loss differs from the CPU float64 run by {diff:.3g} (tolerance {loss_tol:g})")
    names = sorted(ref.first_grads)
    if set(trace.first_grads) != set(names):
        found.append("first-step LoRA gradients missing for " + ", ".join(sorted(set(names) - set(trace.first_grads))))
    else:
        err = numeric.rel_l2(np.concatenate([trace.first_grads[n].ravel() for n in names]),
                             np.concatenate([ref.first_grads[n].ravel() for n in names]))
        if not err <= grad_tol:
            found.append(f"first-step LoRA gradients differ from the CPU float64 run by {err:.3g} "
                         f"(relative L2, tolerance {grad_tol:g})")
    return found


@rocmcheck.probe(
    "hf-training",
    title="transformers + peft LoRA + accelerate trained a few steps on the device vs float64 on the CPU",
    targets="batches corrupted by Accelerate's device placement, zero/NaN LoRA gradients, adapters not training, "
            "base weights moving, losses off the CPU's (checkpointing, bf16, Accelerate or plain placement)",
    links=LINKS,
    timeout=300,
    gate=lambda p: p["placement"] == "accelerate" and p["activations"] == "stored",
    variants={"placement": ["accelerate", "plain"], "precision": ["fp32", "bf16"],
              "activations": ["stored", "checkpointed"]},
    # ~6 s of imports per child otherwise; a GPU initialised by them sends the run to spawn (zygote check)
    preload=("torch._dynamo", "accelerate", "peft", "transformers.models.llama.modeling_llama"),
)
def hf_training(ctx: rocmcheck.ProbeContext, placement: str, precision: str, activations: str) -> None:
    """`activations`: stored for backward, or checkpointed (recomputed: gradient checkpointing)."""
    require_stack(ctx)
    data = np.random.default_rng(0).integers(0, MODEL["vocab_size"], (STEPS * BATCH, SEQ))
    model = build(checkpointing=activations == "checkpointed")
    adapters = [n for n, p in model.named_parameters() if p.requires_grad]
    before = {n: numeric.snapshot_bits(p) for n, p in model.named_parameters()}
    trace = on_device(ctx, model, data, placement, precision)
    ref = reference(data)
    params = dict(model.named_parameters())
    changed = numeric.changed({n: before[n] for n in adapters}, ((n, params[n]) for n in adapters))
    frozen_changed = numeric.changed({n: b for n, b in before.items() if n not in adapters}, params.items())
    ctx.measure(params=sum(p.numel() for p in params.values()), trainable=sum(params[n].numel() for n in adapters),
                losses=[round(v, 5) for v in trace.losses], ref_losses=[round(v, 5) for v in ref.losses])
    found = problems(trace, ref, data, adapters, changed, frozen_changed, precision)
    if found:
        ctx.fail(f"{placement} {precision} {activations}: " + "; ".join(found))
