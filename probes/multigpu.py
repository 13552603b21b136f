"""Multi-GPU: inventory, peer copies, DataParallel, and DDP/FSDP over torch.distributed.

Targets the DataParallel deadlock users report on ROCm, RCCL/NCCL collectives that hang (ROCm/rccl
#1129 without iommu=pt; ROCm/vllm #390 and rocm-systems #11348 unless
NCCL_P2P_DISABLE=1), peer copies that silently corrupt data (legacy-rocm-build #6342,
rocm-systems #5109), mixed-architecture machines, and FSDP failing to initialise.
Facts: docs/failure-catalogue.md §5.

The distributed checks are an ordinary torch.distributed program: this file is also the
rank program. Inside rocmcheck the probe starts two ranks on this machine (forked on
the CPU with gloo, fresh interpreters for GPUs) with `ctx.start_process`, in its own
process group: a stuck rank is declared with `ctx.hang` and killed by rocmcheck's
watchdog with the rest of the probe's tree. On a fleet, run
the same checks across nodes with torchrun, one process per GPU:

    torchrun --nnodes=$NODES --nproc-per-node=$GPUS_PER_NODE --rdzv-backend=c10d \\
        --rdzv-endpoint=$HEAD_NODE:29500 -m rocmcheck.probes.multigpu --backend nccl --timeout 120

(`--backend gloo` checks the CPU path; add NCCL_P2P_DISABLE=1 to compare.) Each rank
prints one JSON line with its checks; a rank exits 0 only when all passed, and a rank
stuck longer than --timeout prints its Python stack and exits 1.
"""
import argparse
import json
import os
import socket
import sys

import rocmcheck
from rocmcheck import torchapi
from rocmcheck.lazy import np, torch

LINKS = (
    "https://github.com/ROCm/rccl/issues/1129",
    "https://github.com/ROCm/vllm/issues/390",
    "https://github.com/ROCm/rocm-systems/issues/11348",
    "https://github.com/ROCm/legacy-rocm-build/issues/6342",
    "https://github.com/pytorch/pytorch/issues/109709",
    "https://github.com/ROCm/rocm-libraries/issues/3413",
)
CHECKS = ("all_reduce", "ddp", "fsdp")
WORLD = 2
ROWS_PER_RANK, FEATURES, LR = 8, 32, 0.1
STEP_TOLERANCE = 1e-5  # fp32 step against a float64 step, relative to the largest parameter
FSDP_ON_CPU = (2, 6)  # before it fully_shard moves a CPU model to CUDA (pytorch #132471); 2.11+ shard on the CPU
HANG_MARGIN_S = 1.5  # left between a rank's own deadline and the task's: time to dump its stack and exit
PEER_SIZES = {"gate": (1 << 20,), "full": (1 << 20, 256 << 20)}
PEER_REPEATS = {"gate": 3, "full": 10}
MIB = 1 << 20
P2P_BYTES = {"gpu": 256 * MIB, "cpu": 16 * MIB}  # a simulated GPU's copies run on the CPU: its sizes
SPEED_SAMPLES = 5
BUSBW_BYTES = {"nccl": 256 * MIB, "gloo": 16 * MIB}  # gloo: the rank program's self-test on the CPU
BUSBW_SAMPLES = 10


# --- inventory (pure decision) ---------------------------------------------------------------


def inventory_risks(archs, cmdline, backend):
    """Known risks of this machine's GPU set: mixed architectures, RCCL without iommu=pt."""
    risks = []
    distinct = sorted(set(a for a in archs if a))
    if len(distinct) > 1:
        risks.append(f"mixed architectures {', '.join(distinct)}: libraries may run another arch's kernels "
                     f"(rocm-libraries #3413); limit HIP_VISIBLE_DEVICES to one arch")
    iommu_ok = cmdline is None or any(o in ("iommu=pt", "amd_iommu=off", "iommu=off") for o in cmdline)
    if backend == "rocm" and len(archs) > 1 and not iommu_ok:
        risks.append("kernel command line lacks iommu=pt: RCCL collectives may hang (ROCm/rccl #1129)")
    return risks


@rocmcheck.probe(
    "multigpu-inventory",
    per_device=False,
    title="GPU inventory: archs, peer access, IOMMU options",
    targets="mixed-architecture machines, missing iommu=pt for RCCL, peer access matrix",
    links=LINKS,
    timeout=60,
    requires={"gpu": True},
)
def multigpu_inventory(ctx):
    from rocmcheck.host.fingerprint import bare_arch, kernel_cmdline

    kind = torch.device(ctx.device).type
    count = torchapi.device_count(kind)
    props = [torchapi.device_properties(f"{kind}:{i}") for i in range(count)]
    if kind != "cuda":  # a simulated GPU: no arch, every pair reaches the other through host memory
        archs, peer = [kind] * count, [[True] * count for _ in range(count)]
    else:
        archs = [bare_arch(getattr(p, "gcnArchName", None)) if torch.version.hip else f"sm_{p.major}{p.minor}"
                 for p in props]
        peer = [[i == j or torch.cuda.can_device_access_peer(i, j) for j in range(count)] for i in range(count)]
    cmdline = kernel_cmdline()
    ctx.measure(devices=[{"index": i, "name": p.name, "arch": a} for i, (p, a) in enumerate(zip(props, archs))],
                peer_access=peer, kernel_cmdline=cmdline)
    for risk in inventory_risks(archs, cmdline, "rocm" if torch.version.hip else "cuda"):
        ctx.warn(risk)


# --- peer copies ------------------------------------------------------------------------------


def byte_pattern(size, salt):
    """Bytes 1..251 in a salted sequence: never zero, and a stale or shifted copy cannot match."""
    return ((np.arange(size, dtype=np.int64) * 7 + salt) % 251 + 1).astype(np.uint8)


def first_difference(got, want):
    bad = np.flatnonzero(got != want)
    return None if bad.size == 0 else f"{bad.size} of {want.size} bytes differ (first at {bad[0]}: " \
                                      f"{got[bad[0]]} != {want[bad[0]]}; zeros {int((got[bad] == 0).sum())})"


@rocmcheck.probe(
    "multigpu-peer-copy",
    per_device=False,
    title="Copies between every GPU pair, direct and staged through the host, bitwise",
    targets="peer-to-peer copies returning zeros or garbage on consumer multi-GPU machines",
    links=LINKS,
    timeout=120,
    requires={"gpus": 2},
    variants={"path": ["direct", "staged"]},
)
def multigpu_peer_copy(ctx, path):
    kind = torch.device(ctx.device).type
    count = torchapi.device_count(kind)
    problems, copies = [], 0
    for size in PEER_SIZES[ctx.profile if ctx.gpu_sized else "gate"]:  # a simulated GPU copies on the CPU
        for src in range(count):
            for dst in (d for d in range(count) if d != src):
                for repeat in range(PEER_REPEATS[ctx.profile] if size <= 1 << 20 else 2):
                    want = byte_pattern(size, salt=src * 31 + dst * 7 + repeat)
                    on_src = torch.from_numpy(want).to(f"{kind}:{src}", copy=True)
                    hop = on_src if path == "direct" else on_src.to("cpu", copy=True)
                    got = hop.to(f"{kind}:{dst}", copy=True).to("cpu", copy=True)
                    torchapi.synchronize(f"{kind}:{dst}")
                    diff = first_difference(got.numpy(), want)
                    copies += 1
                    if diff:
                        problems.append(f"{kind}:{src}->{kind}:{dst} {size >> 20} MiB: {diff}")
    ctx.measure(copies=copies, wrong=len(problems))
    if problems:
        ctx.fail(f"{path} peer copies wrong: " + "; ".join(problems[:4]))


# --- DataParallel -----------------------------------------------------------------------------


def small_mlp(torch, features=FEATURES):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(features, 64), torch.nn.Tanh(), torch.nn.Linear(64, 4))


def batch(rows, features=FEATURES):
    """Inputs and targets from numpy, identical in every process."""
    rng = np.random.default_rng(11)
    return rng.standard_normal((rows, features)), rng.standard_normal((rows, 4))


def relative_gap(got, want):
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-12))


@rocmcheck.probe(
    "multigpu-dataparallel",
    per_device=False,
    title="nn.DataParallel forward and backward against a float64 CPU reference",
    targets="nn.DataParallel deadlocking or computing wrong outputs/gradients across GPUs",
    links=LINKS,
    timeout=120,
    requires={"gpus": 2},
)
def multigpu_dataparallel(ctx):
    import copy

    torchapi.cuda_only(ctx.device, "nn.DataParallel (its scatter and gather are CUDA-only)")
    ctx.strict_fp32()
    x_np, _ = batch(64)
    model = small_mlp(torch)
    ref = copy.deepcopy(model).double()
    ref_out = ref(torch.from_numpy(x_np))
    ref_grads = torch.autograd.grad(ref_out.square().mean(), list(ref.parameters()))
    first = torch.device(ctx.device).index
    devices = [first] + [i for i in range(torch.cuda.device_count()) if i != first]  # outputs gather on ctx.device
    parallel = torch.nn.DataParallel(model.to(ctx.device), device_ids=devices)
    x = torch.from_numpy(x_np).float().to(ctx.device)
    ctx.progress("dataparallel: forward")
    out = parallel(x)
    ctx.progress("dataparallel: backward")
    out.square().mean().backward()
    ctx.synchronize()
    gaps = {"out": relative_gap(out.detach().double().cpu().numpy(), ref_out.detach().numpy())}
    for (name, p), g in zip(model.named_parameters(), ref_grads):
        gaps[name] = relative_gap(p.grad.double().cpu().numpy(), g.numpy())
    ctx.measure(gaps=gaps)
    bad = {k: v for k, v in gaps.items() if not v <= 1e-4}
    if bad:
        ctx.fail("DataParallel differs from one device: " + ", ".join(f"{k} {v:.3g}" for k, v in bad.items()))


# --- the rank program (torch.distributed) -------------------------------------------------------


def reference_step(torch, model, x, y):
    """One SGD step on the whole batch in one process, float64 on the CPU: what every rank must reach."""
    import copy

    ref = copy.deepcopy(model).to("cpu", torch.float64)
    params = list(ref.parameters())
    loss = torch.nn.functional.mse_loss(ref(torch.from_numpy(x)), torch.from_numpy(y))
    return [(p - LR * g).detach().numpy() for p, g in zip(params, torch.autograd.grad(loss, params))]


def step_gap(torch, params, reference):
    got = [(p.full_tensor() if hasattr(p, "full_tensor") else p).detach().to("cpu", torch.float64).numpy()
           for p in params]
    scale = max(float(np.abs(r).max()) for r in reference)
    return max(float(np.abs(g - r).max()) for g, r in zip(got, reference)) / scale


def check_all_reduce(torch, dist, device, rank, world):
    """Each rank contributes (rank + 1) * pattern; everyone must get the exact sum."""
    pattern = np.arange(4099, dtype=np.int64) % 1000 + 1
    tensor = torch.from_numpy(pattern * (rank + 1)).to(device=device, dtype=torch.float32, copy=True)
    dist.all_reduce(tensor)
    want = pattern * (world * (world + 1) // 2)
    got = tensor.to("cpu", torch.float64).numpy()
    bad = np.flatnonzero(got != want)
    message = f"{bad.size} of {want.size} sums wrong (first {got[bad[0]]:g} != {want[bad[0]]})" if bad.size else "ok"
    return {"ok": not bad.size, "message": message}


def check_ddp(torch, dist, device, rank, world):
    """A DDP step on this rank's slice must equal one process stepping on the whole batch."""
    from torch.nn.parallel import DistributedDataParallel

    x, y = batch(ROWS_PER_RANK * world)
    model = small_mlp(torch)
    reference = reference_step(torch, model, x, y)
    ddp = DistributedDataParallel(model.to(device), device_ids=[device.index] if device.type == "cuda" else None)
    mine = slice(rank * ROWS_PER_RANK, (rank + 1) * ROWS_PER_RANK)
    xs, ys = (torch.from_numpy(a[mine]).float().to(device) for a in (x, y))
    torch.nn.functional.mse_loss(ddp(xs), ys).backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= LR * p.grad
    gap = step_gap(torch, list(model.parameters()), reference)
    return {"ok": gap <= STEP_TOLERANCE, "message": f"step differs from one process by {gap:.3g}", "gap": gap}


def check_fsdp(torch, dist, device, rank, world):
    """FSDP (fully_shard) initialises, trains one step, and matches one process."""
    fully_shard = torchapi.fully_shard()
    if device.type == "cpu" and torchapi.version_tuple(torch.__version__) < FSDP_ON_CPU:
        raise rocmcheck.Skip(f"FSDP2 on the CPU needs torch 2.6; torch {torch.__version__} puts it on CUDA "
                             f"(pytorch #132471: 'FSDP requires CUDA for streams' without a GPU)")
    x, y = batch(ROWS_PER_RANK * world)
    model = small_mlp(torch)
    reference = reference_step(torch, model, x, y)
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(device.type, (world,))  # the rank's own device: FSDP's default is the accelerator's
    model = model.to(device)
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    mine = slice(rank * ROWS_PER_RANK, (rank + 1) * ROWS_PER_RANK)
    xs, ys = (torch.from_numpy(a[mine]).float().to(device) for a in (x, y))
    torch.nn.functional.mse_loss(model(xs), ys).backward()
    with torch.no_grad():
        for p in model.parameters():
            p.sub_(LR * p.grad)
    gap = step_gap(torch, list(model.parameters()), reference)
    return {"ok": gap <= STEP_TOLERANCE, "message": f"step differs from one process by {gap:.3g}", "gap": gap}


def check_all_reduce_busbw(torch, dist, device, rank, world):
    """nccl-tests' bus bandwidth of a float32 all_reduce of BUSBW_BYTES, each sample timed with this
    rank's device events (the wall clock on the CPU: it waits on the other ranks) after warm-up:
    algbw = bytes / time, busbw = algbw x 2(n-1)/n (the bandwidth each link needs for a ring
    all-reduce, comparable across GPU counts)."""
    nbytes = BUSBW_BYTES[dist.get_backend()]
    tensor = torch.ones(nbytes // 4, device=device)
    timer = torchapi.clock(device, waits=True)
    seconds = torchapi.time_samples(timer, lambda: dist.all_reduce(tensor), BUSBW_SAMPLES, warmup=2)
    busbw = [nbytes / s / 1e9 * 2 * (world - 1) / world for s in seconds]
    return {"ok": True, "message": f"median bus bandwidth {sorted(busbw)[len(busbw) // 2]:.1f} GB/s",
            "busbw_gbps": busbw}


RANK_CHECKS = {"all_reduce": check_all_reduce, "ddp": check_ddp, "fsdp": check_fsdp,
               "all_reduce_busbw": check_all_reduce_busbw}


def rank_main(argv):
    """One rank: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT from the environment (torchrun's)."""
    import faulthandler
    from datetime import timedelta

    parser = argparse.ArgumentParser(prog="multigpu.py", description="rocmcheck distributed checks (one rank)")
    parser.add_argument("--backend", default="nccl", choices=["nccl", "gloo"])
    parser.add_argument("--checks", default=",".join(CHECKS), help="comma-separated subset of " + ",".join(CHECKS))
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds before a stuck rank gives up")
    parser.add_argument("--result", help="write the JSON result here instead of stdout")
    parser.add_argument("--stack", help="where a stuck rank writes its stack (default stderr)")
    args = parser.parse_args(argv)
    stack = open(args.stack, "w") if args.stack else sys.stderr
    faulthandler.dump_traceback_later(args.timeout, exit=True, file=stack)  # a hung rank reports itself
    import torch.distributed as dist

    from rocmcheck.context import pin_fp32

    fp32_flags = pin_fp32()  # the DDP/FSDP steps are held to fp32 tolerances
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    device = torch.device("cuda", local) if args.backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    # the collective library's own timeout comes later, so a stuck rank reports its stack first
    dist.init_process_group(args.backend, rank=rank, world_size=world, timeout=timedelta(seconds=args.timeout + 60))
    results = {name: run_check(name, torch, dist, device, rank, world) for name in args.checks.split(",")}
    dist.destroy_process_group()
    faulthandler.cancel_dump_traceback_later()
    write_result(args.result, {"rank": rank, "world": world, "backend": args.backend, "fp32_flags": fp32_flags,
                               "checks": results})
    return 0 if all(r["ok"] for r in results.values()) else 1


def run_check(name, torch, dist, device, rank, world):
    """One check's result; its exception is the result too, so the other checks still run and report.

    A check this torch cannot run (Skip: FSDP2 before torch 2.4) is ok and says why."""
    print(f"rank {rank}: {name}", flush=True)
    try:
        return RANK_CHECKS[name](torch, dist, device, rank, world)
    except rocmcheck.Skip as exc:
        return {"ok": True, "skipped": str(exc), "message": f"skipped: {exc}"}
    except Exception as exc:  # noqa: BLE001 - reported as this check's error
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return {"ok": False, "error": f"{type(exc).__name__}: {first}",
                "message": f"raised {type(exc).__name__}: {exc}"}


def write_result(path, record):
    line = json.dumps(record)
    if path:
        with open(path, "w") as fh:
            fh.write(line)
    else:  # one write() per line: two ranks sharing torchrun's stdout must not interleave
        sys.stdout.flush()
        os.write(sys.stdout.fileno(), (line + "\n").encode())


def rank_entry(argv):
    """rank_main, with an exception before any check (the process group's init) in the result, not lost."""
    import faulthandler

    try:
        return rank_main(argv)
    # Skip is an outcome, not an Exception: one raised before any check (torchapi, for an API this torch
    # lacks) must reach the result file too, not end the rank with no result
    except (Exception, rocmcheck.Skip) as exc:  # noqa: BLE001 - the rank's own failure, for the probe's verdict
        import traceback

        faulthandler.cancel_dump_traceback_later()  # the rank's own deadline: it has its answer
        traceback.print_exc()
        result = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--result"), None)
        write_result(result, {"rank": int(os.environ.get("RANK", -1)), "error": f"{type(exc).__name__}: {exc}"})
        return 1


# --- launching ranks from the probe --------------------------------------------------------------


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rocmcheck_path_env():
    """PYTHONPATH for fresh rank interpreters that makes this `rocmcheck` importable.

    From a source checkout (nothing installed) the ranks, started as `python <probes>/multigpu.py`,
    would otherwise fail on `import rocmcheck`. Site directories are on every interpreter's path
    already and are not repeated (a site directory in PYTHONPATH would come before the stdlib).
    """
    import site

    root = os.path.dirname(os.path.dirname(os.path.abspath(torchapi.__file__)))  # the folder holding rocmcheck/
    current = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    sites = {os.path.abspath(p) for p in [*site.getsitepackages(), site.getusersitepackages()]}
    if root in sites or root in current:
        return {}
    return {"PYTHONPATH": os.pathsep.join([*current, root])}


def start_ranks(ctx, backend, workdir, timeout, world=WORLD, checks=CHECKS):
    """`world` ranks on this machine: forked when torch never touched a GPU here, else fresh interpreters."""
    port = free_port()
    fork = backend == "gloo" and hasattr(os, "fork") and not torch.cuda.is_initialized()
    ranks = []
    for rank in range(world):
        env = {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(port)}
        argv = ["--backend", backend, "--checks", ",".join(checks), "--timeout", f"{timeout:.1f}",
                "--result", os.path.join(workdir, f"{rank}.json"), "--stack", os.path.join(workdir, f"{rank}.stack")]
        if fork:  # a reproducer embeds this module (no file of its own) and forks: it shares this sys.path
            ranks.append(ctx.start_process(argv, env, fork=lambda argv=argv: rank_entry(argv)))
        else:
            ranks.append(ctx.start_process([os.path.abspath(__file__), *argv], {**rocmcheck_path_env(), **env}))
    return ranks


def run_distributed(ctx, backend, world=WORLD, names=CHECKS):
    """Run the rank checks `names` on `world` ranks; their results by rank (a hang, a rank's error or a
    failed check ends the probe as such)."""
    import tempfile

    # the deadline runs from the task's start, not from this process's: under spawn isolation a
    # standby interpreter may have waited through the previous probe before it got this task
    rank_timeout = max(ctx.time_left(HANG_MARGIN_S), 1.0)
    ctx.measure(rank_timeout_s=round(rank_timeout, 2))
    with tempfile.TemporaryDirectory(prefix="rocmcheck-ranks-") as workdir:
        ranks = start_ranks(ctx, backend, workdir, rank_timeout, world, names)
        codes = ctx.wait_processes(ranks, margin_s=HANG_MARGIN_S / 2)  # a stuck rank is left to the watchdog
        results, stacks = {}, {}
        for rank in range(world):
            for suffix, store in ((".json", results), (".stack", stacks)):
                path = os.path.join(workdir, f"{rank}{suffix}")
                if os.path.exists(path) and os.path.getsize(path):
                    with open(path) as fh:
                        store[rank] = fh.read()
    stuck = stacks or {r: "(still running: no stack)" for r, c in enumerate(codes) if c is None}
    if stuck:  # a collective hung: the ranks' stacks show where (the collective each is blocked in)
        for rank, text in stuck.items():
            ctx.progress(f"rank {rank} did not finish; its stack:\n{text}")
        ctx.hang("; ".join(f"rank {rank} did not finish" for rank in stuck))
    missing = [f"rank {r} exited with {codes[r]} without a result" for r in range(world) if r not in results]
    if missing:
        raise RuntimeError("; ".join(missing))
    lines = {r: json.loads(text) for r, text in results.items()}
    failed = [f"rank {r}: {line['error']}" for r, line in lines.items() if "error" in line]
    if failed:
        raise RuntimeError("; ".join(failed))
    checks = {r: line["checks"] for r, line in lines.items()}
    ctx.measure(ranks=checks, rank_fp32_flags={r: line["fp32_flags"] for r, line in lines.items()})
    skipped = sorted({f"{name}: {c['skipped']}" for rc in checks.values() for name, c in rc.items() if "skipped" in c})
    if skipped:
        ctx.measure(skipped_checks=skipped)
    errors = [f"rank {r} {name}: {c['error']}" for r, rc in checks.items() for name, c in rc.items() if "error" in c]
    problems = [f"rank {r} {name}: {c['message']}" for r, rc in checks.items() for name, c in rc.items()
                if not c["ok"] and "error" not in c]
    if problems:
        ctx.fail("; ".join(problems + errors))
    if errors:
        raise RuntimeError("; ".join(errors) + " (the other checks passed)")
    return checks


def measure_p2p(ctx, kind, count):
    """Copy bandwidth of every ordered GPU pair: a buffer of P2P_BYTES copied from `src` into one
    allocated on `dst`, timed by `src`'s events (torch runs a peer copy on the source's current
    stream and makes both devices wait for it)."""
    nbytes = P2P_BYTES["gpu" if ctx.gpu_sized else "cpu"]
    module = torchapi.device_module(f"{kind}:0")
    host_source, host_target = torch.ones(nbytes // 4), torch.empty(nbytes // 4)
    on_host = (lambda: host_target.copy_(host_source)) if ctx.simulated else None  # what bounds a simulated GPU's
    for src in range(count):
        for dst in (d for d in range(count) if d != src):
            source = torch.ones(nbytes // 4, device=f"{kind}:{src}")
            target = torch.empty(nbytes // 4, device=f"{kind}:{dst}")
            module.set_device(src)
            seconds, host_seconds = torchapi.time_beside(torchapi.clock(f"{kind}:{src}"),
                                                         lambda: target.copy_(source), on_host, SPEED_SAMPLES)
            ctx.measure_speed(f"p2p-{src}-{dst}", "GB/s", [float(f"{nbytes / s / 1e9:.4g}") for s in seconds],
                              f"device events of GPU {src}, 1 warm-up, {len(seconds)} samples of a "
                              f"{nbytes // MIB} MiB copy_ from {kind}:{src} to {kind}:{dst}"
                              + (", each followed by the same copy host to host" if on_host else ""),
                              [float(f"{nbytes / s / 1e9:.4g}") for s in host_seconds])


@rocmcheck.probe(
    "multigpu-speed",
    per_device=False,
    title="Peer-to-peer copy bandwidth per GPU pair and all-reduce bus bandwidth, judged against the spec",
    targets="a slow link between two GPUs (a bridge or xGMI/NVLink link down, traffic through the host), "
            "collectives far below the node's bus bandwidth",
    links=LINKS + ("https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md",),
    timeout=300,
    requires={"gpus": 2},
)
def multigpu_speed(ctx):
    """The figures `p2p-I-J` (GB/s) and, on CUDA/ROCm GPUs, `all-reduce-busbw` over every GPU (NCCL/RCCL,
    nccl-tests' bus bandwidth); the runner judges them against the spec table."""
    kind = torch.device(ctx.device).type
    count = torchapi.device_count(kind)
    measure_p2p(ctx, kind, count)
    if kind != "cuda":
        ctx.measure(not_measured={"all-reduce-busbw": f"no collective library (NCCL/RCCL) for {kind} devices"})
        return
    checks = run_distributed(ctx, "nccl", world=count, names=("all_reduce_busbw",))
    per_rank = [checks[r]["all_reduce_busbw"]["busbw_gbps"] for r in sorted(checks)]
    samples = [min(rates) for rates in zip(*per_rank)]  # the slowest rank bounds each collective
    ctx.measure_speed("all-reduce-busbw", "GB/s", [float(f"{b:.4g}") for b in samples],
                      f"device events on each of {count} ranks, 2 warm-up, {len(samples)} float32 all_reduce of "
                      f"{BUSBW_BYTES['nccl'] // MIB} MiB (NCCL/RCCL); busbw = algbw x 2(n-1)/n, the slowest rank's")


@rocmcheck.probe(
    "multigpu-gloo",
    per_device=False,
    title="torch.distributed on the CPU (gloo, 2 ranks): all_reduce, DDP step, FSDP init",
    targets="collectives that hang or sum wrong; DDP/FSDP steps differing from one process",
    links=LINKS,
    timeout=120,
    budget=15.0,  # two gloo ranks started and joined: 9.8 s on an H100 host
)
def multigpu_gloo(ctx):
    run_distributed(ctx, "gloo")


@rocmcheck.probe(
    "multigpu-nccl",
    per_device=False,
    title="torch.distributed on 2 GPUs (NCCL/RCCL): all_reduce, DDP step, FSDP init, with and without P2P",
    targets="RCCL/NCCL collectives hanging (P2P, IOMMU) or summing wrong; DDP/FSDP failing on GPUs",
    links=LINKS,
    timeout=180,
    requires={"gpus": 2},
    variants={"p2p": ["default", "disabled"]},
    env=lambda params: {"NCCL_P2P_DISABLE": "1"} if params["p2p"] == "disabled" else {},
)
def multigpu_nccl(ctx, p2p):
    torchapi.cuda_only(ctx.device, "NCCL/RCCL")
    run_distributed(ctx, "nccl")


if __name__ == "__main__":
    from rocmcheck.faults.system import install_exported

    install_exported("multigpu-*")  # faults a probe injected reach ranks in fresh interpreters too
    sys.exit(rank_entry(sys.argv[1:]))
