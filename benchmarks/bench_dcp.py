"""Inert's DCP storage layer against PyTorch's own, measured side by side in one run.

    python benchmarks/bench_dcp.py [--gib 1.0] [--repeat 5] [--only dcp|tensors|metadata] [--stdlib-crc]

(a) ``dcp.save``/``dcp.load`` of a state of about 1 GiB (64 float32 and bf16
    parameters with Adam's exp_avg, exp_avg_sq and step, plus param_groups) with
    ``inert.torch`` versus ``torch.distributed.checkpoint``'s FileSystemWriter/Reader.
    Both write with ``sync_files=False`` (fsync measures the disk, not the format)
    and read from a warm page cache; Inert verifies every CRC-32 (and is also timed without).
(b) reading the parameters alone: ``dcp.load`` with Inert, and ``inert.torch.load_tensors``
    (the same reader and checks without DCP's planning), each with CRC-32 verification and
    without (safetensors verifies nothing: without is the like-for-like figure), all into the
    same preallocated tensors, versus
    safetensors ``load_file`` plus materializing (a copy into preallocated tensors, as a
    load does) and versus ``np.fromfile`` of the raw bytes (the memory-bandwidth limit here).
(c) ``loads_metadata`` of a synthetic 70B-parameter model with Adam sharded 64 ways
    (about 2,900 entries and 140,000 chunks) versus ``pickle.loads`` of the same
    ``Metadata``, with both encoded sizes.

Ratios above 1 favour Inert.  Runs take turns (every one sees the same background
load); each time is the best of ``--repeat`` runs, with the ratio of medians beside it.
The CRC-32 is computed by zlib-ng or isal when installed (``--stdlib-crc``: by zlib).
torch's own copies (PyTorch's reader, the safetensors copy) split across torch's intra-op
threads, which stall whenever another process holds a core: ``--torch-threads 1`` keeps
those baselines steady on a shared machine.
"""

from __future__ import annotations

import argparse
import gc
import os
import pickle
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import safetensors
import torch
import torch.distributed.checkpoint as dcp
from safetensors.torch import load_file, save_file
from torch.distributed.checkpoint.metadata import (
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    StorageMeta,
    TensorProperties,
    TensorStorageMetadata,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from limits import file_ranges, load_line, memcpy_limit, pread_limit, report, write_limit  # noqa: E402

warnings.filterwarnings("ignore")


def best(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def interleaved(runs: dict[str, Callable[[], Any]], repeat: int) -> dict[str, list[float]]:
    """Each run's times, taken in turns: on a shared machine, every run sees the same background load."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeat):
        for name, fn in runs.items():
            times[name].append(best(fn, 1))
    return times


def make_state(gib: float) -> dict[str, Any]:
    """64 parameters (half float32, half bf16) and their Adam state, about ``gib`` GiB in total."""
    per_param = int(gib * (1 << 30) / 3 / 64)
    params = {}
    for i in range(64):
        dtype = torch.float32 if i % 2 == 0 else torch.bfloat16
        cols = 1024
        rows = max(1, per_param // (cols * dtype.itemsize))
        params[f"layer{i}.weight"] = torch.randn(rows, cols).to(dtype)
    state = {name: {"step": torch.tensor(10.0), "exp_avg": torch.randn_like(p, dtype=torch.float32).to(p.dtype),
                    "exp_avg_sq": torch.rand_like(p, dtype=torch.float32).to(p.dtype)} for name, p in params.items()}
    groups = [{"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0, "amsgrad": False,
               "params": list(params)}]
    return {"model": params, "optim": {"state": state, "param_groups": groups}}


def like(state: Any) -> Any:
    if isinstance(state, torch.Tensor):
        return torch.empty_like(state)
    if isinstance(state, dict):
        return {k: like(v) for k, v in state.items()}
    if isinstance(state, list):
        return [like(v) for v in state]
    return state


def nbytes(state: Any) -> int:
    if isinstance(state, torch.Tensor):
        return state.numel() * state.element_size()
    if isinstance(state, dict):
        return sum(nbytes(v) for v in state.values())
    return 0


def bench_dcp(root: Path, repeat: int, gib: float) -> dict[str, float]:
    state = make_state(gib)
    size = nbytes(state)
    print(f"(a) dcp.save / dcp.load of {size / (1 << 30):.2f} GiB ({sum(1 for _ in state['model'])} parameters + Adam state)")
    target = like(state)
    kinds = {
        "torch": (lambda p: dcp.FileSystemWriter(p, sync_files=False), dcp.FileSystemReader),
        "inert": (lambda p: it.FileSystemWriter(p, sync_files=False), it.FileSystemReader),
    }
    runs: dict[str, Callable[[], Any]] = {}
    for name, (writer, reader) in kinds.items():
        path = root / name
        runs[f"save_{name}"] = lambda w=writer, p=path: dcp.save(state, storage_writer=w(p))
        runs[f"load_{name}"] = lambda r=reader, p=path: dcp.load(target, storage_reader=r(p))
    unchecked = it.FileSystemReader(root / "inert", verify_checksums=False)
    runs["load_unchecked"] = lambda: dcp.load(target, storage_reader=unchecked)
    times = interleaved(runs, repeat)
    results = {key: min(values) for key, values in times.items()}
    medians = {key: statistics.median(values) for key, values in times.items()}
    for op in ("save", "load"):
        t, i = results[f"{op}_torch"], results[f"{op}_inert"]
        print(f"    {op}: torch {t:.3f} s ({size / t / 1e9:.2f} GB/s)   inert {i:.3f} s ({size / i / 1e9:.2f} GB/s)"
              f"   ratio {t / i:.2f}x (of medians {medians[f'{op}_torch'] / medians[f'{op}_inert']:.2f}x)")
    nocheck = results["load_unchecked"]
    print(f"    inert load without CRC-32 verification: {nocheck:.3f} s, median {medians['load_unchecked']:.3f} s"
          f" (checksums cost {results['load_inert'] / nocheck - 1:+.0%})")
    files = sorted(p for p in (root / "inert").iterdir() if p.is_file())
    # Inert's writer runs thread_count=1 (DCP's default), its reader 2 threads: the limits on the same.
    saved = write_limit([p.stat().st_size for p in files], root, threads=1, sync=False, repeat=repeat)
    print(report("the save", saved, medians["save_inert"], "the same file sizes written, 1 thread, no fsync"))
    read = pread_limit(file_ranges(files), threads=2, repeat=repeat)
    print(report("the load", read, medians["load_inert"], "the same files read with os.preadv, 2 threads"))
    return results


def bench_tensors(root: Path, repeat: int) -> None:
    tensors = {k: v for k, v in make_state(0.75)["model"].items()}
    size = nbytes(tensors)
    print(f"(b) reading {len(tensors)} tensors, {size / (1 << 20):.0f} MiB")
    save_file(tensors, str(root / "t.safetensors"))
    dcp.save(tensors, storage_writer=it.FileSystemWriter(root / "t_inert", sync_files=False))
    raw = root / "t.raw"
    with open(raw, "wb") as out:
        for t in tensors.values():
            out.write(memoryview(t.contiguous().view(-1).view(torch.uint8).numpy()))  # type: ignore[arg-type]
    dest = like(tensors)

    def safetensors_read() -> None:
        loaded = load_file(str(root / "t.safetensors"))
        for k, v in loaded.items():
            dest[k].copy_(v)

    def inert_read() -> None:
        dcp.load(dest, storage_reader=it.FileSystemReader(root / "t_inert"))

    def fromfile() -> None:
        np.fromfile(raw, dtype=np.uint8)

    def inert_unchecked() -> None:
        dcp.load(dest, storage_reader=it.FileSystemReader(root / "t_inert", verify_checksums=False))

    def planned_unchecked() -> None:  # what inert.torch.load plans with: DCP's plan, without its resharding search
        dcp.load(dest, storage_reader=it.FileSystemReader(root / "t_inert", verify_checksums=False),
                 planner=it.CrossReleaseLoadPlanner())

    def direct_read() -> None:
        it.load_tensors(root / "t_inert", dest)

    def direct_unchecked() -> None:
        it.load_tensors(root / "t_inert", dest, verify_checksums=False)

    runs: dict[str, Callable[[], Any]] = {"inert": inert_read, "unchecked": inert_unchecked,
                                          "planned": planned_unchecked, "direct": direct_read,
                                          "direct_unchecked": direct_unchecked, "safetensors": safetensors_read,
                                          "fromfile": fromfile}
    times = interleaved(runs, repeat)
    b = {k: min(v) for k, v in times.items()}
    m = {k: statistics.median(v) for k, v in times.items()}

    def line(label: str, key: str) -> str:
        return f"{label} {b[key]:.3f} s ({size / b[key] / 1e9:.2f} GB/s, median {m[key]:.3f} s)"

    print("    " + line("inert dcp.load, CRC-32 verified", "inert"))
    print("    " + line("inert dcp.load, no verification", "unchecked"))
    print("    " + line("inert dcp.load, no verification, planner=CrossReleaseLoadPlanner()", "planned"))
    print("    " + line("inert load_tensors, CRC-32 verified", "direct"))
    print("    " + line("inert load_tensors, no verification", "direct_unchecked"))
    print("    " + line("safetensors load_file+copy (verifies nothing)", "safetensors"))
    print("    " + line("np.fromfile of the raw bytes", "fromfile"))
    limit = pread_limit(file_ranges(sorted(p for p in (root / "t_inert").iterdir() if p.is_file())), threads=2,
                        repeat=repeat)
    for label, key in (("dcp.load, verified", "inert"), ("load_tensors, verified", "direct"),
                       ("load_tensors, unverified", "direct_unchecked")):
        print(report(label, limit, m[key], "the checkpoint's files read with os.preadv into preallocated buffers, 2 threads"))
    for label, key in (("dcp.load unchecked (like for like: safetensors checks no checksum)", "unchecked"),
                       ("dcp.load unchecked, CrossReleaseLoadPlanner", "planned"),
                       ("dcp.load CRC-32 verified", "inert"), ("load_tensors unchecked", "direct_unchecked"),
                       ("load_tensors CRC-32 verified", "direct")):
        print(f"    {label}: {b['safetensors'] / b[key]:.2f}x safetensors (of medians {m['safetensors'] / m[key]:.2f}x),"
              f" {b[key] / b['fromfile']:.2f}x np.fromfile's time (of medians {m[key] / m['fromfile']:.2f}x)")


def synthetic_70b() -> Metadata:
    """Llama-70B-like: 80 layers of 9 parameters, embeddings, head; Adam state; FSDP 64-way on dim 0."""
    from inert.torch._metadata import InertStorageInfo  # imported in main(), after --stdlib-crc

    hidden, inter, vocab, kv = 8192, 28672, 128256, 1024
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab, hidden), "model.norm.weight": (hidden,),
                                          "lm_head.weight": (vocab, hidden)}
    for layer in range(80):
        p = f"model.layers.{layer}."
        shapes.update({p + "self_attn.q_proj.weight": (hidden, hidden), p + "self_attn.k_proj.weight": (kv, hidden),
                       p + "self_attn.v_proj.weight": (kv, hidden), p + "self_attn.o_proj.weight": (hidden, hidden),
                       p + "mlp.gate_proj.weight": (inter, hidden), p + "mlp.up_proj.weight": (inter, hidden),
                       p + "mlp.down_proj.weight": (hidden, inter), p + "input_layernorm.weight": (hidden,),
                       p + "post_attention_layernorm.weight": (hidden,)})
    ranks = 64
    sd_meta: dict[str, Any] = {}
    storage: dict[Any, Any] = {}
    planner: dict[str, Any] = {}
    offsets = [0] * ranks
    props = TensorProperties(dtype=torch.bfloat16)
    for name, shape in shapes.items():
        entries = {f"model.{name}": (shape, torch.bfloat16)}
        for key in ("exp_avg", "exp_avg_sq"):
            entries[f"optim.state.{name}.{key}"] = (shape, torch.float32)
        entries[f"optim.state.{name}.step"] = ((), torch.float32)
        for fqn, (size, dtype) in entries.items():
            planner[fqn] = tuple(fqn.split(".", 2)) if fqn.startswith("optim") else ("model", fqn[6:])
            chunks = []
            if not size:
                chunks.append(ChunkStorageMetadata(offsets=torch.Size([]), sizes=torch.Size([])))
            else:
                rows = -(-size[0] // ranks)
                for r in range(ranks):
                    start = min(r * rows, size[0])
                    chunks.append(ChunkStorageMetadata(offsets=torch.Size([start, *[0] * (len(size) - 1)]),
                                                       sizes=torch.Size([min(rows, size[0] - start), *size[1:]])))
            for index, chunk in enumerate(chunks):
                rank = index % ranks
                length = 64 + chunk.sizes.numel() * dtype.itemsize
                storage[MetadataIndex(fqn, chunk.offsets, index)] = InertStorageInfo(
                    f"__{rank}_0.distcp", offsets[rank], length, crc32=(hash(fqn) + index) & 0xFFFFFFFF)
                offsets[rank] += -(-length // 64) * 64
            sd_meta[fqn] = TensorStorageMetadata(properties=TensorProperties(dtype=dtype, layout=props.layout),
                                                 size=torch.Size(size), chunks=chunks)
    return Metadata(state_dict_metadata=sd_meta, planner_data=planner, storage_data=storage,
                    storage_meta=StorageMeta(checkpoint_id="/ckpt/step-1000", save_id="a" * 32), version="1.0.0")


def bench_metadata(repeat: int) -> None:
    metadata = synthetic_70b()
    chunks = sum(len(m.chunks) for m in metadata.state_dict_metadata.values())
    pickled = pickle.dumps(metadata)
    encoded = it.dumps_metadata(metadata)
    assert it.loads_metadata(encoded) == metadata
    print(f"(c) metadata of a 70B model + Adam, 64-way: {len(metadata.state_dict_metadata)} entries, {chunks} chunks")
    p = best(lambda: pickle.loads(pickled), repeat)
    i = best(lambda: it.loads_metadata(encoded), repeat)
    gc.disable()  # pickle.loads as DCP calls it runs with the cyclic GC on; this is its best case
    try:
        q = best(lambda: pickle.loads(pickled), repeat)
    finally:
        gc.enable()
    print(f"    pickle.loads {p * 1e3:.0f} ms ({q * 1e3:.0f} ms with the GC off), {len(pickled) / (1 << 20):.1f} MiB"
          f"   inert loads_metadata {i * 1e3:.0f} ms, {len(encoded) / (1 << 20):.1f} MiB")
    sizes = len(pickled) / len(encoded)
    print(f"    speed ratio {p / i:.2f}x ({q / i:.2f}x against the GC-off pickle)   size ratio {sizes:.2f}x")
    print(report("the metadata load", memcpy_limit(len(encoded), repeat=repeat), i, "memcpy of the encoded bytes"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--only", choices=("dcp", "tensors", "metadata"))
    parser.add_argument("--stdlib-crc", action="store_true", help="checksum with zlib even if zlib-ng or isal is installed")
    parser.add_argument("--torch-threads", type=int,
                        help="torch.set_num_threads (torch's copies: 1 where other processes load the cores)")
    args = parser.parse_args()
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    if args.stdlib_crc:
        sys.modules["zlib_ng"] = sys.modules["isal"] = None  # type: ignore[assignment]
    global it
    import inert.torch as it
    from inert.torch._payload import CRC32_IMPLEMENTATION
    torch.manual_seed(0)
    print(load_line())
    root = Path(tempfile.mkdtemp(prefix="inert-bench-"))
    try:
        if args.only in (None, "metadata"):
            bench_metadata(args.repeat)
        if args.only in (None, "dcp"):
            bench_dcp(root, args.repeat, args.gib)
        if args.only in (None, "tensors"):
            bench_tensors(root, args.repeat)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"torch {torch.__version__} ({torch.get_num_threads()} intra-op threads), safetensors {safetensors.__version__},"
          f" CRC-32 by {CRC32_IMPLEMENTATION}; {load_line()}")


if __name__ == "__main__":
    main()
