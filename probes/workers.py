"""DataLoader worker processes and tensors shared across processes.

Targets DataLoader workers with pin_memory delivering wrong or stale batches, and
tensors shared with another process (torch.multiprocessing) whose changes do not come
back: "PyTorch multiprocess fails to create memory with IPC" on ROCm (pytorch #143728,
ROCR-Runtime #270), cross-process races (pytorch PR #171346). On Windows, sharing GPU
tensors between processes is documented as unsupported (pytorch #13117): that is a
skip with the reason, not a failure. Facts: docs/failure-catalogue.md §8.
"""
import sys

import rocmcheck
from rocmcheck import torchapi
from rocmcheck.lazy import np, torch

LINKS = (
    "https://github.com/pytorch/pytorch/issues/143728",
    "https://github.com/ROCm/ROCR-Runtime/issues/270",
    "https://github.com/pytorch/pytorch/pull/171346",
    "https://github.com/pytorch/pytorch/issues/13117",
    "https://github.com/pytorch/pytorch/issues/12831",
)
ROWS, COLUMNS, BATCH = 96, 257, 8
IPC_ELEMENTS = 1 << 16
# Run in the spawned child: `tensor` arrives through torch.multiprocessing (CUDA IPC handle or
# shared memory). A builtin (exec) is the target because probe modules are not importable by name
# in a fresh interpreter.
IPC_CHILD = """
import torch
tensor.add_(1)
if tensor.is_cuda:
    torch.cuda.synchronize(tensor.device)
"""


def rows_pattern():
    """Row i holds i * COLUMNS + j + 0.5: every batch is distinct and none is zeros."""
    return np.arange(ROWS * COLUMNS, dtype=np.float64).reshape(ROWS, COLUMNS).astype(np.float32) + 0.5


@rocmcheck.probe(
    "workers-dataloader",
    title="DataLoader with worker processes (2) or without (0), and pin_memory, gives the exact batches",
    targets="worker processes or the pin-memory thread delivering wrong, stale or reordered batches",
    links=LINKS,
    timeout=90,
    variants={"num_workers": [2, 0]},  # 0: loading in the main process, the usual workaround
)
def workers_dataloader(ctx, num_workers):
    from torch.utils.data import DataLoader, TensorDataset

    want = rows_pattern()
    dataset = TensorDataset(torch.from_numpy(want.copy()), torch.arange(ROWS))
    pin = ctx.on_gpu  # pinning needs an accelerator; the CPU run checks the worker path alone
    loader = DataLoader(dataset, batch_size=BATCH, num_workers=num_workers, pin_memory=pin)
    problems, pinned = [], 0
    batches = 0
    for index, (rows, ids) in enumerate(loader):
        batches += 1
        pinned += bool(rows.is_pinned()) if pin else 0
        expect = slice(index * BATCH, (index + 1) * BATCH)
        if not np.array_equal(ids.numpy(), np.arange(ROWS)[expect]):
            problems.append(f"batch {index} holds rows {ids.tolist()}")
        elif not np.array_equal(rows.numpy().view(np.uint32), want[expect].view(np.uint32)):
            wrong = int((rows.numpy() != want[expect]).sum())
            problems.append(f"batch {index}: {wrong} values differ from the dataset")
    ctx.measure(batches=batches, pin_memory=pin, pinned_batches=pinned)
    if batches != ROWS // BATCH:
        ctx.fail(f"{batches} batches instead of {ROWS // BATCH}")
    if problems:
        ctx.fail("; ".join(problems[:4]))
    if pin and pinned < batches:
        ctx.warn(f"pin_memory=True but only {pinned} of {batches} batches arrived pinned")


@rocmcheck.probe(
    "workers-ipc",
    title="A tensor sent to a spawned process, changed there, verified in the parent",
    targets="GPU IPC failing or silently not sharing (pytorch #143728); unsupported on Windows",
    links=LINKS,
    timeout=90,
)
def workers_ipc(ctx):
    import torch.multiprocessing as mp

    torchapi.cuda_only(ctx.device, "sharing device tensors between processes (CUDA IPC handles)")
    if ctx.on_gpu and sys.platform.startswith("win"):
        ctx.skip("sharing GPU tensors between processes is unsupported on Windows (pytorch #13117); "
                 "use num_workers=0 or return CPU tensors from workers")
    start = (np.arange(IPC_ELEMENTS, dtype=np.int64) % 4093 * 3 + 7).astype(np.int32)
    tensor = torch.from_numpy(start.copy()).to(ctx.device, copy=True)
    if not ctx.on_gpu:
        tensor.share_memory_()
    ctx.synchronize()
    child = mp.get_context("spawn").Process(target=exec, args=(IPC_CHILD, {"tensor": tensor}))
    child.start()
    child.join()
    if child.exitcode != 0:
        ctx.fail(f"the spawned process exited with {child.exitcode}")
    ctx.synchronize()
    got = tensor.to("cpu", copy=True).numpy()
    changed = int((got == start + 1).sum())
    ctx.measure(elements=IPC_ELEMENTS, changed=changed, shared_on=ctx.device)
    if changed != IPC_ELEMENTS:
        ctx.fail(f"{IPC_ELEMENTS - changed} of {IPC_ELEMENTS} elements do not show the child's change "
                 f"({int((got == start).sum())} still hold the old value)")
