"""Failure classes (data/failure_classes.json): which kind of failure a log shows, said in
terms of what it means, what to do, what the text cannot tell and what to collect next.

A log is put in classes by the signatures recognised in it (each names its class), a class from
a specific signature before one from a generic signature, then in the file's precedence order.
The facts the log states then refine the leading class, each refinement from a rule that holds
whatever the report: a CUDA build on an AMD GPU under ZLUDA is a ZLUDA failure, a GPU that
cannot be found under WSL is WSL's runtime, a failure on the CPU's integrated GPU while a
discrete card is present (or on an iGPU nobody computes on) means the iGPU was picked, and an
arch held against the ROCm release the log states is one that release dropped or does not know
yet (data/gpus.json). The advice names the facts the log states ({arch}, ...) and words those it
does not, so no sentence claims what the log does not say.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import DATA
from .known_issues import parse_version
from .logfacts import ALWAYS_INTEGRATED, GPUS, INTEGRATED

CLASSES_FILE = DATA / "failure_classes.json"
# classes whose failure is the GPU not being usable at all: the ones an arch, WSL or ZLUDA explains
NOT_USABLE = ("arch-not-in-build", "no-gpu-visible", "hsa-out-of-resources")
# HSA_OVERRIDE_GFX_VERSION families that run a card's code (the override to suggest for an arch)
FAMILY_OVERRIDES = {"gfx103": "10.3.0", "gfx110": "11.0.0"}
# a watchdog at or past this collective: earlier ones completed, so the GPUs could talk (NCCL/RCCL
# P2P or IOMMU faults stop the first collectives; DDP's setup issues a handful)
PROGRESSED_SEQ = 20
# classes of an NCCL failure that an NCCL older than the card explains
NCCL_FAILURES = ("collective-hang", "nccl-shm", "nccl-network", "duplicate-gpu-rank", "cuda-error")
# the two classes a CUDA 'no kernel image' log that names no card cannot tell apart
TOO_OLD_OR_NOT_BUILT = ("arch-not-in-build", "gpu-too-old")
# an out-of-memory on ROCm with at most this much GPU memory is an APU's carve-out (512 MB by default)
CARVE_OUT_MIB = 1024


@dataclass(frozen=True)
class FailureClass:
    id: str
    title: str
    advice: str
    cannot_tell: Tuple[str, ...]
    collect: Tuple[str, ...]
    confirm: Tuple[str, ...]
    parent: Optional[str]
    rank: int  # precedence: lower leads


def _load() -> Dict[str, FailureClass]:
    data = json.loads(CLASSES_FILE.read_text(encoding="utf-8"))
    return {c["id"]: FailureClass(c["id"], c["title"], c["advice"], tuple(c["cannot_tell"]), tuple(c["collect"]),
                                  tuple(c["confirm"]), c.get("parent"), rank)
            for rank, c in enumerate(data["classes"])}


CLASSES = _load()


def older(version: Optional[str], than: str) -> bool:
    return bool(version) and parse_version(version)[:2] < parse_version(than)[:2]


def refine(leading: str, facts: Dict[str, Any]) -> Tuple[str, List[str]]:
    """The class the facts narrow `leading` to, and why (the facts used)."""
    arch, rocm, system = facts.get("arch"), facts.get("rocm"), facts.get("os", "")
    if facts.get("backend") == "zluda":
        return "zluda", ["the log runs under ZLUDA (a CUDA build on an AMD GPU)"]
    if leading == "collective-hang" and (facts.get("ranks_disagree") or facts.get("progressed") or
                                         facts.get("rank_elsewhere") or facts.get("rank_raised") or
                                         facts.get("collective_seq", 0) >= PROGRESSED_SEQ):
        return "collective-desync", [_desync_evidence(facts)]
    too_old = _nccl_too_old(facts)
    if too_old and leading in NCCL_FAILURES:
        return "nccl-too-old", [too_old]
    if leading == "out-of-memory" and (facts.get("integrated") or (
            facts.get("backend") == "rocm" and facts.get("gpu_total_mib", CARVE_OUT_MIB + 1) <= CARVE_OUT_MIB)):
        return "apu-memory", [f"the GPU is an APU ({arch})" if facts.get("integrated") else
                              f"the GPU has {facts['gpu_total_mib']} MiB in all: an APU's carve-out"]
    if leading == "app-arch-list" and facts.get("hsa_override"):
        return "override-not-in-service", [f"the log sets HSA_OVERRIDE_GFX_VERSION={facts['hsa_override']}, yet the "
                                           "app still rejects the GPU: the override is not in its environment"]
    if leading not in NOT_USABLE:
        return leading, []
    if "wsl" in system and leading != "arch-not-in-build":
        if facts.get("bundled_hsa"):
            return "wsl-bundled-hsa", ["the log comes from WSL and names torch's bundled HSA runtime or a "
                                       "PyTorch-index ROCm wheel"]
        return "wsl-no-device", ["the log comes from WSL"]
    if facts.get("container") and leading == "no-gpu-visible":
        return "container-no-gpu", ["the log comes from a container"]
    if arch and _igpu_picked(arch, facts):
        return "windows-igpu-first", [f"the GPU in use is {arch}, the CPU's integrated GPU"]
    if arch in GPUS["igpu_override"] and "windows" not in system:
        return "igpu-override", [f"the GPU is {arch}, the processor's integrated GPU, and no discrete card is named"]
    support = GPUS["arch_support"].get(arch or "", {})
    if support.get("until") and (older(support["until"], rocm or "0") if rocm else
                                 older(support["until"], "5.0")):
        return "arch-dropped", [f"{arch} was last built in ROCm {support['until']}" +
                                (f"; the log has ROCm {rocm}" if rocm else "")]
    if support.get("since") and rocm and older(rocm, support["since"]):
        return "rocm-older-than-card", [f"{arch} needs ROCm {support['since']}; the log has ROCm {rocm}"]
    return leading, []


def _desync_evidence(facts: Dict[str, Any]) -> str:
    """Why a collective timeout reads as ranks out of step rather than GPUs that cannot talk."""
    if facts.get("ranks_disagree"):
        return "the ranks timed out at different collectives"
    if facts.get("collective_seq", 0) >= PROGRESSED_SEQ:
        return f"the timeout is at collective #{facts['collective_seq']}: earlier ones completed"
    if facts.get("rank_raised"):
        return "a rank raised an error before the timeout: the others waited for it at the next collective"
    if facts.get("rank_elsewhere"):
        return "the log has a rank evaluating, validating or saving: the others wait at the next collective meanwhile"
    return "training made progress before the timeout: earlier collectives completed"


def _nccl_too_old(facts: Dict[str, Any]) -> Optional[str]:
    """Why the NCCL the log states is older than its card needs (data/gpus.json's nccl_min), or None."""
    arch, nccl = facts.get("arch", ""), facts.get("nccl")
    needs = GPUS["nccl_min"].get(arch)
    if not (nccl and needs and older(nccl, needs)):
        return None
    return f"the log has NCCL {nccl}; {arch} needs NCCL {needs} or newer"


def _igpu_picked(arch: str, facts: Dict[str, Any]) -> bool:
    """The GPU in use is the CPU's integrated one while a discrete card is there too, or one
    nobody computes on."""
    if arch in ALWAYS_INTEGRATED:
        return True
    others = [a for a in facts.get("archs", ()) if a != arch and a.startswith("gfx")]
    return arch in INTEGRATED and any(a not in INTEGRATED for a in others)


def classify(found: Sequence[Dict[str, Any]], facts: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The classes a log shows, the leading one first (refined by its facts), each with its
    advice filled from the facts, what the text cannot tell, what to collect and the probes."""
    score: Dict[str, Tuple[bool, int]] = {}
    lines: Dict[str, List[str]] = {}
    for sig in found:
        cls = sig.get("class")
        if cls not in CLASSES:
            continue
        specific = not sig["generic"]
        old = score.get(cls, (False, CLASSES[cls].rank))
        score[cls] = (old[0] or specific, CLASSES[cls].rank)
        lines.setdefault(cls, []).append(sig["id"])
    ranked = sorted(score, key=lambda c: (not score[c][0], score[c][1]))
    if not ranked:
        return []
    leading, why = refine(ranked[0], facts)
    ordered = list(dict.fromkeys([leading, *ranked]))
    undecided = _too_old_or_not_built(leading, lines.get(leading, []), facts)
    if undecided and "gpu-too-old" not in ordered:
        ordered.insert(1, "gpu-too-old")
    out = []
    for n, cls in enumerate(ordered):
        reasons = ([f"recognised: {', '.join(lines[cls])}"] if cls in lines else []) + (why if n == 0 else [])
        if undecided and cls in TOO_OLD_OR_NOT_BUILT:
            reasons.append(undecided)
        described = describe(cls, facts, reasons)
        if undecided and cls in TOO_OLD_OR_NOT_BUILT:
            described["undecided"] = True  # its known issues are possible, not confident (`explain`)
        out.append(described)
    return out


def _too_old_or_not_built(leading: str, signature_ids: Sequence[str], facts: Dict[str, Any]) -> Optional[str]:
    """A CUDA 'no kernel image' whose log names no compute capability cannot tell a card older
    than the build's oldest arch (gpu-too-old) from an arch the build left out (arch-not-in-build):
    both print the same line. Why both stay open, and what decides, or None where the log tells."""
    if leading != "arch-not-in-build" or "cuda-no-kernel-image" not in signature_ids or facts.get("arch"):
        return None
    return ("undecided: the log does not name the card's compute capability, so a card older than the build's "
            "oldest arch and an arch the build left out read the same; decided by the card's compute capability "
            "(nvidia-smi --query-gpu=name,compute_cap) against the build's torch.cuda.get_arch_list()")


def describe(cls: str, facts: Dict[str, Any], why: List[str]) -> Dict[str, Any]:
    c = CLASSES[cls]
    return {"id": c.id, "title": c.title, "advice": fill(c.advice, facts), "why": why,
            "cannot_tell": list(c.cannot_tell), "collect": list(c.collect), "confirm": list(c.confirm),
            "parent": c.parent}


def family_override(arch: Optional[str]) -> Optional[str]:
    """The HSA_OVERRIDE_GFX_VERSION of the family whose code `arch` runs (RDNA2 10.3.0, RDNA3 11.0.0)."""
    return next((v for prefix, v in FAMILY_OVERRIDES.items() if (arch or "").startswith(prefix)), None)


def fill(advice: str, facts: Dict[str, Any]) -> str:
    """`advice` with the facts the log states, and plain words for those it does not."""
    arch, rocm = facts.get("arch"), facts.get("rocm")
    support = GPUS["arch_support"].get(arch or "", {})
    xids = [GPUS["xid"][x] for x in facts.get("xid", ()) if x in GPUS["xid"]]
    values = {
        "arch": arch or "the GPU's arch",
        "arch_named": f" ({arch})" if arch else "",
        "rocm_release": f"ROCm {rocm}" if rocm else "this ROCm release",
        "since": f"ROCm {support['since']}" if support.get("since") else "a ROCm release that lists it",
        "last": f"ROCm {support['until']}" if support.get("until") else "the last release that built it",
        "override_said": f" (the log sets {facts['hsa_override']})" if facts.get("hsa_override") else "",
        "driver_cuda": f" (this one supports CUDA {facts['driver_cuda']})" if facts.get("driver_cuda") else "",
        "xid": " ".join(x + "." for x in xids) + (" " if xids else ""),
        "gpu_total": (f" (the GPU has {facts['gpu_total_mib'] / 1024:.1f} GiB in all)" if facts.get("gpu_total_mib")
                      else ""),
        "nccl_seq": f" #{facts['collective_seq']}" if facts.get("collective_seq") else " after training progressed",
        "assert_check": f"'{facts['assert_check']}'" if facts.get("assert_check") else "its range check",
        "igpu_override": GPUS["igpu_override"].get(arch or "", "the value for its family"),
        "hide_igpu": (f"HIP_VISIBLE_DEVICES={facts['discrete_device']} (the discrete card's index in this log)"
                      if "discrete_device" in facts else
                      "HIP_VISIBLE_DEVICES=1 (the discrete card's index; on Windows set it in the launcher, "
                      "e.g. webui-user.bat)"),
    }
    return re.sub(r"\{(\w+)\}", lambda m: values.get(m.group(1), m.group(0)), advice)
