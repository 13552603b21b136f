"""Caching allocator settings: in effect or silently ignored, canary intact, no runaway reserve.

Targets `expandable_segments` accepted and ignored ("expandable_segments not supported
on this platform": ROCm wheels before 2.12, pytorch #134208), reserved memory growing
every cycle until OOM (a user's OOM after 35-50 batches; pytorch #123548 with
`expandable_segments:True,max_split_size_mb:128`), and a live buffer reading back
zeros under that setting (legacy-rocm-build #6603). Facts: docs/failure-catalogue.md §0, §4.
The growth under that setting is PyTorch's own allocator on CUDA builds too (an H100, torch
2.11.0+cu130): a failure names the setting in effect, so the known issue can name it exactly.

Each setting runs in a fresh interpreter whose environment carries it (the allocator
reads its variable once, at first use), under a name this torch reads; the default setting, which sets
none, runs in a child forked from the zygote, whose allocator is as fresh (its torch never touched the GPU). The
decisions are pure functions of what the child observed, so the tests drive them with
the data the faults produce.

Under `backend:cudaMallocAsync` the memory pool belongs to the CUDA driver: torch refuses
`memory._snapshot()` ("not meaningful", it tracks no blocks) and the native allocator's
options do not apply. The backend is asked first; the canary and growth checks still run,
the snapshot-based ones are skipped and the verdict says so.
"""
import os
import warnings
from typing import Any, Optional

import rocmcheck
from rocmcheck import torchapi
from rocmcheck.faults import patch
from rocmcheck.lazy import np, torch

MiB = 1 << 20
SETTINGS = {
    "default": None,  # whatever the user's environment says
    "expandable": "expandable_segments:True",
    "expandable-split128": "expandable_segments:True,max_split_size_mb:128",
    "gc-split128": "garbage_collection_threshold:0.8,max_split_size_mb:128",
}
EXPANDABLE_WARNING = "expandable_segments not supported on this platform"  # PyTorch's own text
# One "training step" per cycle: activations sized by this step's sequence length (fractions of the unit,
# about 1-300 MiB on a GPU), repeating every PERIOD cycles; a small buffer from each step stays alive.
STEP_PLAN = ((1.0, 0.33, 0.14), (0.12, 0.05), (0.7, 0.25), (0.43,), (0.9, 0.3, 0.1), (0.2, 0.07),
             (0.004, 0.6), (0.55, 0.18))
PERIOD = len(STEP_PLAN)
KEPT_STEPS = 4
# cycles of the step pattern: the long run (200) is the heavy profile, `run --level 2` or 3 (`ctx.heavy`); the gate
# and the level-1 run take 64 (5 s a variant on an H100, against 12-14 s for 200: reports/hardware/, 2026-11-25)
CYCLES = {"full": 200, "gate": 64}
CANARY_BYTES, MAX_UNIT_BYTES = 64 * MiB, 300 * MiB
CANARY_STRIDE = 128  # int32 words: 512 bytes, the smallest block the caching allocator hands out
BIG_COPY_BYTES = 2 << 30  # pytorch #192259: a 2 GiB .to('cuda') hung in hsaKmtMemoryVaMap

LINKS = (
    "https://github.com/pytorch/pytorch/issues/134208",
    "https://github.com/pytorch/pytorch/pull/177974",
    "https://github.com/pytorch/pytorch/issues/123548",
    "https://github.com/ROCm/legacy-rocm-build/issues/6603",
    "https://github.com/pytorch/pytorch/issues/183387",
    "https://github.com/pytorch/pytorch/issues/192259",
)


# --- which variable this torch reads ---------------------------------------------------------


def read_order(torch_version, backend):
    """Allocator variables in the order this torch consults them; the first one set wins.

    Before 2.8 only PYTORCH_CUDA_ALLOC_CONF (on ROCm then PYTORCH_HIP_ALLOC_CONF); from 2.8
    PYTORCH_ALLOC_CONF comes first (pytorch PR #167659), except that CUDA builds 2.9-2.10
    ignored it (pytorch #183387). The in-effect check in the child is the ground truth.
    """
    legacy = ["PYTORCH_CUDA_ALLOC_CONF"] + (["PYTORCH_HIP_ALLOC_CONF"] if backend == "rocm" else [])
    version = torchapi.version_tuple(torch_version)
    ignored = backend == "cuda" and (2, 9) <= version < (2, 11)
    return legacy if version < (2, 8) or ignored else ["PYTORCH_ALLOC_CONF", *legacy]


def variable_to_set(torch_version):
    """The name every build of this version honours: the new one from 2.11, the old one before."""
    return "PYTORCH_ALLOC_CONF" if torchapi.version_tuple(torch_version) >= (2, 11) else "PYTORCH_CUDA_ALLOC_CONF"


def installed_torch_version():
    """torch's version without importing it (the runner never imports torch)."""
    from importlib import metadata

    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return ""


def variant_env(params):
    """The environment of one variant: its setting, under a name this torch reads."""
    conf = SETTINGS[params["setting"]]
    return {variable_to_set(installed_torch_version()): conf} if conf else {}


def effective_conf(environ, order):
    """(variable, value) the allocator reads, or (None, '') when none is set."""
    return next(((name, environ[name]) for name in order if name in environ), (None, ""))


def parse_conf(text):
    """'expandable_segments:True,max_split_size_mb:128' -> {'expandable_segments': 'True', ...}."""
    options = {}
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        key, _, value = part.partition(":")
        options[key.strip().lower()] = value.strip()
    return options


# --- decisions (pure) ----------------------------------------------------------------------


def ignored_options(requested, snapshot, warning_texts):
    """Requested options the allocator does not apply, each with the evidence."""
    settings = snapshot.get("allocator_settings") or {}
    segments = snapshot.get("segments") or []
    problems = []
    if requested.get("expandable_segments", "").lower() == "true":
        why = []
        if any(EXPANDABLE_WARNING in text for text in warning_texts):
            why.append(f"PyTorch warned '{EXPANDABLE_WARNING}'")
        if settings.get("expandable_segments") is False:
            why.append("allocator settings say expandable_segments=False")
        if segments and not any(s.get("is_expandable") for s in segments):
            why.append(f"none of {len(segments)} segments is expandable")
        if why:
            problems.append("expandable_segments:True is silently ignored (" + "; ".join(why) + ")")
    if "max_split_size_mb" in requested and "max_split_size" in settings:
        want = int(float(requested["max_split_size_mb"]) * MiB)
        if int(settings["max_split_size"]) != want:
            problems.append(f"max_split_size_mb:{requested['max_split_size_mb']} is not in effect "
                            f"(allocator reports {settings['max_split_size']} bytes)")
    if "garbage_collection_threshold" in requested and "garbage_collection_threshold" in settings:
        want = float(requested["garbage_collection_threshold"])
        if abs(float(settings["garbage_collection_threshold"]) - want) > 1e-6:
            problems.append(f"garbage_collection_threshold:{want} is not in effect "
                            f"(allocator reports {settings['garbage_collection_threshold']})")
    return problems


def canary_pattern(count):
    """int32 words that are never zero, never a float NaN, and differ from their neighbours."""
    return (np.arange(count, dtype=np.int64) % 65521 + 0x3C000001).astype(np.int32)


def canary_damage(observed, expected):
    """None when bit-identical, else how many words differ and the first one."""
    bad = np.flatnonzero(observed != expected)
    if bad.size == 0:
        return None
    first = int(bad[0])
    zeros = int((observed[bad] == 0).sum())
    return (f"{bad.size} of {expected.size} words changed ({zeros} now zero); first at word {first}: "
            f"{int(observed[first]):#010x} != {int(expected[first]):#010x}")


def unbounded_growth(slack_mib, period=PERIOD, warmup_periods=2, rising=4, min_growth_mib=64.0):
    """A message when reserved-minus-allocated keeps rising period after period, else None.

    The step pattern repeats every `period` cycles, so a healthy caching allocator reaches
    a steady peak after warm-up; a peak that rises in each of the last `rising` periods,
    by `min_growth_mib` in all, is the leak that ends in OOM after tens of batches.
    """
    start = warmup_periods * period
    peaks = [max(slack_mib[i:i + period]) for i in range(start, len(slack_mib) - period + 1, period)]
    tail = peaks[-(rising + 1):]
    if len(tail) < rising + 1:
        return None
    if all(b > a + 1.0 for a, b in zip(tail, tail[1:])) and tail[-1] - tail[0] >= min_growth_mib:
        per_cycle = (tail[-1] - tail[0]) / (rising * period)
        return (f"reserved-minus-allocated kept growing: peak {tail[0]:.0f} -> {tail[-1]:.0f} MiB over the last "
                f"{rising * period} cycles (+{per_cycle:.1f} MiB per cycle) while the step pattern repeats")
    return None


# --- the training-like allocation pattern ------------------------------------------------------


def check_canary(ctx, canary, expected, slack, when, stride=1):
    """Fail the probe (`ctx.fail`) when the canary's words read back differ from `expected`; with
    `stride`, only every stride-th word is read first, and the whole canary only when one differs
    (so the message counts every changed word)."""
    if stride > 1 and canary_damage(canary[::stride].to("cpu", copy=True).numpy(), expected[::stride]) is None:
        return
    damage = canary_damage(canary.to("cpu", copy=True).numpy(), expected)
    if damage:
        ctx.measure(slack_mib=slack)
        ctx.fail(f"canary corrupted {when}: {damage}")


def run_cycles(ctx, cycles, unit_bytes, canary_bytes, where):
    """Allocate, fill and free step-sized buffers around a live canary; check it every cycle and,
    bit for bit, at the end.

    Every cycle reads one word per `CANARY_STRIDE`: the caching allocator hands out blocks of at least
    512 bytes, so a block of the canary given to a step (and filled) changes a word read in that
    cycle. The whole 64 MiB canary is read after the last cycle: reading all of it every cycle was
    most of the probe's time on an H100 (~35 ms a cycle on the host alone, 64 cycles).
    Returns reserved-minus-allocated (MiB) after each cycle. Fails the probe (`ctx.fail`) on canary
    damage or on running out of memory (with the slack history measured either way), its
    message naming the allocator setting `where` ("under VARIABLE='VALUE'").
    """
    device = ctx.device
    import collections

    expected = canary_pattern(canary_bytes // 4)
    canary = torch.empty(expected.size, dtype=torch.int32, device=device)
    canary.copy_(torch.from_numpy(expected))
    kept = collections.deque(maxlen=KEPT_STEPS)
    slack = []
    for cycle in range(cycles):
        try:
            step = [torch.empty(max(int(f * unit_bytes) // 4, 1), dtype=torch.int32, device=device).fill_(cycle)
                    for f in STEP_PLAN[cycle % PERIOD]]
            kept.append(torch.empty((2 * MiB + cycle % 3 * MiB) // 4, dtype=torch.int32, device=device).fill_(cycle))
            del step
        except torchapi.out_of_memory_error() as exc:
            ctx.measure(slack_mib=slack)
            ctx.fail(f"out of memory at cycle {cycle} {where} with reserved-minus-allocated at "
                     f"{slack[-1] if slack else 0:.0f} MiB: {str(exc).splitlines()[0]}")
        slack.append(round((torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)) / MiB, 1))
        check_canary(ctx, canary, expected, slack, f"at cycle {cycle} {where}", stride=CANARY_STRIDE)
    check_canary(ctx, canary, expected, slack, f"by the end of {cycles} cycles {where}")
    return slack


def big_copy(ctx):
    """A 2 GiB host-to-device copy (hung uninterruptibly under expandable segments, pytorch #192259)."""
    ctx.progress("allocator: 2 GiB host-to-device copy")
    host = torch.full((BIG_COPY_BYTES,), 0x5A, dtype=torch.uint8)
    sample = host.to(ctx.device)[:: 1 << 20].to("cpu")
    ctx.synchronize()
    if not (sample == 0x5A).all():
        ctx.fail("the 2 GiB copy read back wrong bytes")


@rocmcheck.probe(
    "allocator",
    title="Allocator setting in effect; canary and reserved memory through a training-like pattern",
    targets="expandable_segments silently ignored, reserved memory growing until OOM, live buffers corrupted",
    links=LINKS,
    timeout=120,
    # its own child, then 64 cycles: 4.8-5.4 s on an H100 and an H200 when each cycle read the whole canary back
    # (and the default setting had a fresh interpreter); 200 cycles 12-15 s
    budget={1: 8.0, 2: 25.0},
    gate=lambda params: params["setting"] == "default",
    requires={"gpu": True, "cuda_runtime": True},  # a simulated GPU has no caching allocator: skipped unstarted
    variants={"setting": list(SETTINGS)},
    # a child of its own: a fresh caching allocator, as the first CUDA call of a fresh `import torch` sets it up. The
    # default variant (no variables) is forked from the zygote, whose torch never touched the GPU, so the gate pays
    # no second `import torch` for it; a setting's variable must be read by `import torch`, so `env` gives each of
    # the others a fresh interpreter (docs/isolation.md §13)
    runs_in="own-child",
    env=variant_env,
)
def allocator(ctx, setting):
    torchapi.cuda_only(ctx.device, "the caching allocator's backend, settings and snapshot")
    backend = torch.cuda.get_allocator_backend()
    ctx.measure(allocator_backend=backend)
    order = read_order(torch.__version__, "rocm" if torch.version.hip else "cuda")
    variable, conf = effective_conf(os.environ, order)
    wanted = SETTINGS[setting]
    if wanted is not None and conf != wanted:
        ctx.warn(f"{variable}={conf!r} is read before the variant's own setting {wanted!r}")
    requested = parse_conf(conf if wanted is None else wanted)
    # failures name the setting: a known issue may belong to one combination of options (pytorch #123548)
    where = f"under {variable}={conf!r}" if variable else "under the allocator's defaults"
    total = torch.cuda.get_device_properties(ctx.device).total_memory
    unit, canary = min(MAX_UNIT_BYTES, total // 24), min(CANARY_BYTES, total // 16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        slack = run_cycles(ctx, CYCLES["full" if ctx.heavy else "gate"], unit, canary, where)
        snapshot = torch.cuda.memory._snapshot() if backend == "native" else {}
    if backend != "native":
        native_only = sorted(set(requested) - {"backend"})
        if native_only:
            ctx.warn(f"{', '.join(native_only)} do not apply under backend:{backend} (options of the native "
                     f"caching allocator)")
        ctx.measure(snapshot_skipped=f"backend:{backend} keeps no per-block records; in-effect checks skipped")
    settings = snapshot.get("allocator_settings") or {}
    ctx.measure(variable=variable, conf=conf, slack_mib=slack, unit_mib=unit // MiB, canary_mib=canary // MiB,
                allocator_settings={k: v for k, v in settings.items() if not isinstance(v, dict)},
                expandable_segments=sum(1 for s in snapshot.get("segments") or [] if s.get("is_expandable")))
    problems = ignored_options(requested, snapshot, [str(w.message) for w in caught])
    ctx.measure(in_effect=not problems)
    for problem in problems:
        ctx.warn(problem)
    growth = unbounded_growth(slack)
    if growth:
        ctx.fail(f"{growth}, {where}")
    if ctx.full and requested.get("expandable_segments", "").lower() == "true" and total > 4 * BIG_COPY_BYTES:
        big_copy(ctx)


# --- the faults this probe proves itself against (`--inject reserved-growth`, `expandable-ignored`) -----------

GROWTH_PER_CALL = 138 << 20  # pytorch #123548: ~138 MiB more reserved every cycle


@rocmcheck.fault("reserved-growth", "reserved memory grows ~138 MiB per cycle while allocated stays flat "
                                   "(pytorch #123548)")
def _reserved_growth(arg: Optional[str]) -> None:
    calls = [0]

    def make(orig: Any) -> Any:
        def memory_reserved(*args: Any, **kwargs: Any) -> int:
            calls[0] += 1
            return orig(*args, **kwargs) + calls[0] * GROWTH_PER_CALL
        return memory_reserved

    patch(torch.cuda, "memory_reserved", make)


def ignore_expandable(snapshot: dict) -> dict:
    """What a build without expandable-segment support reports in a memory snapshot."""
    settings = dict(snapshot.get("allocator_settings") or {}, expandable_segments=False)
    segments = [dict(s, is_expandable=False) for s in snapshot.get("segments") or []]
    return dict(snapshot, allocator_settings=settings, segments=segments)


@rocmcheck.fault("expandable-ignored", "expandable_segments is accepted and silently ignored, with PyTorch's "
                                      "warning (pytorch #134208; ROCm wheels before 2.12)")
def _expandable_ignored(arg: Optional[str]) -> None:
    def make(orig: Any) -> Any:
        def _snapshot(*args: Any, **kwargs: Any) -> dict:
            warnings.warn(EXPANDABLE_WARNING, UserWarning)
            return ignore_expandable(orig(*args, **kwargs))
        return _snapshot

    patch(torch.cuda.memory, "_snapshot", make)
