"""The facts a user's log states: its GPUs and their archs, which device failed, the versions
(torch, ROCm, HIP, CUDA, the NVIDIA driver), the OS (Windows paths, WSL, Linux, macOS), a
container, ZLUDA and the HSA override.

explain reasons with them: a remedy for an APU is not given for a log that names a discrete
card, a missing arch is named as the log shows it, an arch is held against the ROCm release
(data/gpus.json). An arch is read where the line says it is the GPU's ("for GPU arch : gfx1036",
"gpu_type=", "Device 1: ..., gfx1103", "CUDA capability sm_120") before any other mention, and a
list of archs (a wheel's, an app's, TensileLibrary files) is never taken for the GPU. A log of
any size costs little: beyond FULL_SCAN characters the facts are read from its head, its tail and
the text around the lines recognised as failures, where logs state them.
"""
from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import DATA
from .signatures import FACT_PATTERNS, could_match, literals

GPUS = json.loads((DATA / "gpus.json").read_text(encoding="utf-8"))
NAMES = [(re.compile(pattern, re.I), arch) for pattern, arch in GPUS["names"]]
NEEDLES = {p: literals(p) for p in [*(n for n, _ in NAMES), *(q for ps in FACT_PATTERNS.values() for q in ps)]}
INTEGRATED = frozenset(GPUS["integrated"])
ALWAYS_INTEGRATED = frozenset(GPUS["always_integrated"])

FULL_SCAN = 128 * 1024  # a log up to this size is read whole
HEAD = TAIL = 32 * 1024
AROUND = 4 * 1024  # characters read either side of a recognised failure line
AROUND_HITS = 16

ARCH = re.compile(r"\b(gfx[0-9]{3,4}[a-f]?|gfx90[0-9a-f]|sm_[0-9]{2,3})\b")
# where a line says which arch the GPU is (group 1; the device index, where stated, in group 2)
GPU_ARCH = [re.compile(p) for p in (
    r"for GPU arch ?: ?(gfx\w+)", r"gpu_type=(gfx\w+)(?: gpu=(\d+))?", r"GPU dev (\d+): (gfx\w+)",
    r"amdgpu \[(\d+)\] (gfx\w+) is not supported", r"CUDA capability (sm_\d+)", r"gcnArchName:\s*(gfx\w+)",
    r"Name:\s+(gfx\w+)", r"amdgcn-amd-amdhsa--(gfx\w+)", r"Device (\d+): [^\n]*?, (gfx\w+)")]
# an arch in a list of what a build, an app or a library has: never the GPU's
LISTED = ("_lazy_", "tensilelibrary_", "capabilities", "supported types", "targets", "rocm_arch", "offload-arch",
          "arch_list", "arch=", "built for", "lists")
CURRENT_DEVICE = re.compile(r"current device: (\d+)")
WHEEL_LIST = re.compile(r"supports CUDA capabilities((?: sm_\d+)+)")
XID = re.compile(r"NVRM: Xid \([^)]*\): (\d+)")
# the collective a watchdog timed out at (NCCL/RCCL's SeqNum, or the last one completed): how far the run got
COLLECTIVE_SEQ = re.compile(r"SeqNum=(\d+)|last completed NCCL work: (\d+)")
# training that got somewhere (a step, an epoch or a progress bar past 0, a finished fit): before a
# collective timeout it means the earlier collectives completed
PROGRESS = re.compile(r"\b[1-9]\d*/\d+ \[\d|[Ee]poch:? ?[1-9]|\b[Ss]tep:? ?[1-9]\d*\b|'loss': |max_epochs\S* reached")
WATCHDOG = re.compile(r"Watchdog caught collective operation timeout|collective operation timeout")
# a rank doing other work around a collective timeout (evaluating, validating, saving, predicting on one rank):
# the others wait at the next collective until the watchdog fires
# (its needles are tested first: a regex with the i flag and no literal prefix costs ~5 ms on 64 KiB)
ELSEWHERE = re.compile(r"evaluat(?:ing|ion)\b|validat(?:ing|ion)\b|saving (?:the )?(?:model|checkpoint)|"
                       r"running predictions|\bon rank ?=? ?0\b|rank 0 only|评估|验证", re.I)
ELSEWHERE_NEEDLES = literals(ELSEWHERE)
# a rank that raised before the watchdog fired: the others wait for it at the next collective
RANK_RAISED = re.compile(r"\[rank\d+\]: (?:Traceback|\w+Error\b)|CUDA out of memory|HIP out of memory")
# the GPU's total memory as torch's out-of-memory message states it
TOTAL_MEMORY = re.compile(r"(\d+(?:\.\d+)?) ([MG]i?B) total capacity|total capaci?ty of (\d+(?:\.\d+)?) ([MG]i?B)")
# torch's own HSA runtime or a wheel from the PyTorch index (which bundles it): what WSL cannot use
BUNDLED_HSA = re.compile(r"libhsa-runtime64|download\.pytorch\.org/whl/(?:nightly/)?rocm")
# the range check a device-side assert names
ASSERT_CHECK = re.compile(r"Assertion [`'\"]?([^`'\"\n]{4,60}?)[`'\"]? failed")

# what says which OS a log comes from (plain strings, looked for in the lower-cased text)
WSL = ("wsl environment detected", "microsoft-standard-wsl", "wsl2", "wsl 2", "librocdxg", "/dev/dxg")
WINDOWS = (*(f"{d}:{sep}" for d in "cdefghij" for sep in "\\/"), "\\appdata\\", "program files", ".dll", ".exe",
           "winerror", "windows", ".bat", "press any key to continue", "powershell")
MACOS = ("/users/", "macos", "darwin", "macbook")
LINUX = ("/home/", "/usr/", "/opt/", "linux", "ubuntu", "fedora", "debian", "manjaro", "centos", "dmesg", "kernel: ",
         "amdgpu 0000:", "[drm")
CONTAINER = re.compile(r"docker run|docker pull|\bpodman\b|\.dockerenv|--ipc=host|--shm-size|rocm/pytorch:|"
                       r"root@[0-9a-f]{12}:|[Kk]ubernetes|\bkubectl\b|[Ss]ingularity|[Aa]pptainer|\bcontainer\b")
ZLUDA = re.compile(r"[Zz][Ll][Uu][Dd][Aa]")
ROCM_MARKS = re.compile(r"\+rocm|\bROCm\b|\bROCM\b|HIP error|hipError|HSA_STATUS|MIOpen|rocBLAS|\bamdgpu\b|"
                        r"\bgfx[0-9]{3}|\bRadeon\b|\bHIP\b|AMD_SERIALIZE_KERNEL")
CUDA_MARKS = re.compile(r"\+cu[0-9]{3}|\bsm_[0-9]{2}|\bNVIDIA\b|\bNVRM\b|nvidia-smi|\bcuDNN\b|CUDNN_|\bGeForce\b|"
                        r"\bRTX\b|CUDA_LAUNCH_BLOCKING|\bTesla\b")


def region(text: str, at: Sequence[int]) -> str:
    """The text facts are read from: all of it up to FULL_SCAN, else its head, its tail and the
    text around positions `at` (recognised failure lines), joined by newlines."""
    if len(text) <= FULL_SCAN:
        return text
    spans = [(0, HEAD), (len(text) - TAIL, len(text))]
    spans += [(max(0, p - AROUND), p + AROUND) for p in sorted(at)[:AROUND_HITS]]
    merged: List[Tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return "\n".join(text[s:e] for s, e in merged)


def _listed(text: str, pos: int) -> bool:
    """Whether the arch at `pos` is in a list (a wheel's, an app's, a library's files), not the GPU's."""
    before = text[max(text.rfind("\n", 0, pos) + 1, pos - 200):pos].lower()
    return any(mark in before for mark in LISTED)


def _archs(text: str) -> Tuple[List[str], Dict[int, str], List[str]]:
    """(archs the lines say are a GPU's, best first; device index -> arch; other archs mentioned
    outside lists, most frequent first)."""
    named: List[str] = []
    devices: Dict[int, str] = {}
    for pattern in GPU_ARCH:
        for m in pattern.finditer(text):
            groups = [g for g in m.groups() if g]
            arch = next(g for g in groups if not g.isdigit())
            index = next((int(g) for g in groups if g.isdigit()), None)
            named.append(arch)
            if index is not None:
                devices.setdefault(index, arch)
    others = Counter(m.group(1) for m in ARCH.finditer(text) if not _listed(text, m.start()))
    return list(dict.fromkeys(named)), devices, [a for a, _ in others.most_common()]


def _names(text: str) -> List[Tuple[str, str]]:
    """(name, arch) of the GPUs the log names, discrete cards first."""
    lowered = text.lower()
    found = [(m.group(0), arch) for pattern, arch in NAMES if could_match(NEEDLES[pattern], lowered)
             for m in pattern.finditer(text)]
    unique = list(dict.fromkeys(found))
    return sorted(unique, key=lambda na: na[1] in INTEGRATED)


def _most_common(text: str, lowered: str, name: str) -> Optional[str]:
    values = Counter(m.group(1) for p in FACT_PATTERNS.get(name, ()) if could_match(NEEDLES[p], lowered)
                     for m in p.finditer(text))
    return values.most_common(1)[0][0] if values else None


def _os(lowered: str) -> Optional[str]:
    for name, marks in (("linux wsl", WSL), ("windows", WINDOWS), ("macos", MACOS), ("linux", LINUX)):
        if any(mark in lowered for mark in marks):
            return name
    return None


def read(text: str, found_ids: Sequence[str] = (), at: Sequence[int] = ()) -> Dict[str, Any]:
    """The facts `text` states (only those it states), `found_ids` being the signatures recognised
    in it (they tell the backend where the text does not) and `at` where they were seen."""
    text = region(text, at)
    lowered = text.lower()
    facts: Dict[str, Any] = {}
    named, devices, mentioned = _archs(text)
    names = _names(text)
    failing = CURRENT_DEVICE.findall(text)
    arch = None
    discrete = [i for i, a in sorted(devices.items()) if a.startswith("gfx") and a not in INTEGRATED]
    if discrete and len(devices) > 1:
        facts["discrete_device"] = discrete[0]
    if failing and int(failing[-1]) in devices:
        facts["device"] = int(failing[-1])
        arch = devices[int(failing[-1])]
    arch = arch or (named[0] if named else None) or (mentioned[0] if mentioned else None) or (
        names[0][1] if names else None)
    if arch:
        facts["arch"] = arch
    archs = list(dict.fromkeys([*named, *devices.values(), *mentioned, *(a for _, a in names)]))
    if len(archs) > 1:
        facts["archs"] = archs
    if names:
        facts["gpu"] = names[0][0]
    if arch in INTEGRATED:
        facts["integrated"] = True
    for key in ("torch", "rocm", "hip", "cuda", "hsa_override", "driver", "driver_cuda", "python", "nccl"):
        value = _most_common(text, lowered, key)
        if value:
            facts[key] = value
    if facts.get("cuda", "").isdigit():  # '+cu121' -> '12.1'
        facts["cuda"] = f"{facts['cuda'][:-1]}.{facts['cuda'][-1]}"
    if facts.get("driver_cuda", "").isdigit():  # 'found version 11040' -> '11.4'
        number = int(facts["driver_cuda"])
        facts["driver_cuda"] = f"{number // 1000}.{number % 1000 // 10}"
    if not facts.get("rocm") and facts.get("hip"):
        facts["rocm"] = facts["hip"]  # HIP's major.minor is the ROCm release's
    wheel = WHEEL_LIST.search(text)
    if wheel:
        facts["wheel_archs"] = wheel.group(1).split()
    xids = list(dict.fromkeys(XID.findall(text)))
    if xids:
        facts["xid"] = xids
    facts.update(_run_facts(text, lowered))
    system = _os(lowered)
    if system:
        facts["os"] = system
    if CONTAINER.search(text):
        facts["container"] = True
    backend = _backend(text, facts, found_ids)
    if backend:
        facts["backend"] = backend
    return facts


def _backend(text: str, facts: Dict[str, Any], found_ids: Sequence[str]) -> Optional[str]:
    """'zluda' for a CUDA build run on an AMD GPU through ZLUDA, else the vendor the log's marks
    point to most ('rocm' or 'cuda'), the arch deciding first."""
    if ZLUDA.search(text):
        return "zluda"
    arch = facts.get("arch", "")
    if facts.get("rocm") or arch.startswith("gfx"):
        return "rocm"
    if facts.get("cuda") or arch.startswith("sm_") or facts.get("driver") or facts.get("xid"):
        return "cuda"
    rocm, cuda = len(ROCM_MARKS.findall(text)), len(CUDA_MARKS.findall(text))
    if rocm or cuda:
        return "rocm" if rocm >= cuda else "cuda"
    if {"hip-no-binary-for-gpu", "hip-error", "hsa-memory-access-fault", "miopen-error"} & set(found_ids):
        return "rocm"
    return None


def _run_facts(text: str, lowered: str) -> Dict[str, Any]:
    """How far a distributed run got (`collective_seq`: the highest collective number a watchdog or
    NCCL names; `ranks_disagree`: the ranks timed out at different collectives; `progressed`: training
    steps before the watchdog fired; `rank_elsewhere`: the log says a rank was evaluating, validating or saving;
    `rank_raised`: a rank raised an error before the watchdog fired), the GPU's total
    memory in MiB from an out-of-memory message, a bundled HSA runtime (`bundled_hsa`) and the
    check a device-side assert names."""
    facts: Dict[str, Any] = {}
    seqs = [int(a or b) for a, b in COLLECTIVE_SEQ.findall(text)]
    if seqs:
        facts["collective_seq"] = max(seqs)
        timed_out = {int(n) for n in re.findall(r"WorkNCCL\(SeqNum=(\d+)", text)}
        if len(timed_out) > 1:
            facts["ranks_disagree"] = True
    watchdog = WATCHDOG.search(text)
    if watchdog and PROGRESS.search(text, 0, watchdog.start()):
        facts["progressed"] = True
    if watchdog and could_match(ELSEWHERE_NEEDLES, lowered) and ELSEWHERE.search(text):
        facts["rank_elsewhere"] = True
    if watchdog and RANK_RAISED.search(text, 0, watchdog.start()):
        facts["rank_raised"] = True
    total = TOTAL_MEMORY.search(text)
    if total:
        value, unit = (total.group(1), total.group(2)) if total.group(1) else (total.group(3), total.group(4))
        facts["gpu_total_mib"] = round(float(value) * (1024 if unit.startswith("G") else 1))
    if BUNDLED_HSA.search(text):
        facts["bundled_hsa"] = True
    check = ASSERT_CHECK.search(text)
    if check:
        facts["assert_check"] = check.group(1).strip()
    return facts
