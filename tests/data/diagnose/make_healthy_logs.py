"""Writes the two generated logs of the healthy corpus (run from the repository root:
``python tests/data/diagnose/make_healthy_logs.py``; the output is committed, gzip, byte-stable).

``single_node_train.log.gz``: 33,000 lines of a healthy one-Spark fine-tune in a container without
``/dev/infiniband`` — torchrun on one node, NCCL INFO of a communicator of ``nranks 1`` with its
``NET/IB : No device found``, torch's capability warning, tqdm bars and loss lines.
``two_node_train.log.gz``: a healthy two-Spark run (hosts spark-fb97 and spark-4440, ``nranks 2``,
RoCE through both twins, GPU Direct RDMA disabled as on every GB10), loss lines from rank 0.
The NCCL lines follow the shape of ``tests/data/gb10/nccl_debug_two_spark_1.txt`` (a real two-Spark
init); the rest is what transformers' Trainer and tqdm print.
"""

from __future__ import annotations

import gzip
import random
from pathlib import Path

HERE = Path(__file__).parent / "healthy"


def _nccl(host: str, pid: int, nranks: int, rank: int, ib: bool) -> list[str]:
    p = f"{host}:{pid}:{pid} [0] NCCL INFO"
    t = f"{host}:{pid}:{pid + 71} [0] NCCL INFO"
    net = ([f"{t} NET/IB : Using [0]rocep1s0f1:1/RoCE [1]roceP2p1s0f1:1/RoCE [RO]; OOB enp1s0f1np1:192.168.100.1{5 + rank}<0>",
            f"{t} Using network IB", f"{t} GPU Direct RDMA Disabled for HCA 0 'rocep1s0f1'",
            f"{t} dlvsym failed on mlx5dv_reg_dmabuf_mr - /lib/aarch64-linux-gnu/libmlx5.so: undefined symbol: "
            "mlx5dv_reg_dmabuf_mr, version MLX5_1.25"]
           if ib else
           [f"{t} NET/IB : No device found.", f"{t} NET/Socket : Using [0]enP7s7:192.168.1.20<0>",
            f"{t} Using network Socket"])
    return [f"{p} cudaDriverVersion 13000", f"{p} Bootstrap: Using enP7s7:192.168.1.2{rank}<0>",
            f"{p} NCCL version 2.28.9+cuda13.0", f"{t} NET/Plugin: Could not find: libnccl-net.so", *net,
            f"{t} ncclCommInitRankConfig comm 0xaaab1c2d3e40 rank {rank} nranks {nranks} cudaDev 0 nvmlDev 0 "
            "busId f01000 commId 0x5e1f2a3b4c5d6e7f - Init START",
            f"{t} Channel 00/0{nranks} : {rank}[0] -> {(rank + 1) % nranks}[0] via {'NET/IB/0' if ib else 'P2P/IPC'}",
            f"{t} comm 0xaaab1c2d3e40 rank {rank} nranks {nranks} cudaDev 0 nvmlDev 0 busId f01000 "
            "commId 0x5e1f2a3b4c5d6e7f - Init COMPLETE"]


def _training(rng: random.Random, lines: int, prefix: str = "") -> list[str]:
    out, step, loss = [], 0, 2.9
    total = lines // 3
    while len(out) < lines:
        step += 1
        loss = max(0.4, loss - 0.0003 * rng.randint(0, 1))
        pct = step * 100 // total
        out.append(f"{prefix}{pct:3d}%|{'█' * (pct // 10)}{' ' * (10 - pct // 10)}| {step}/{total} "
                   f"[{step // 60:02d}:{step % 60:02d}<{(total - step) // 60:02d}:{(total - step) % 60:02d},  1.{rng.choice('2468')}0it/s]")
        out.append(f"{prefix}{{'loss': {loss:.4f}, 'grad_norm': {rng.choice(('0.61', '0.74', '0.83', '0.97'))}, "
                   f"'learning_rate': {2e-5 * (1 - step / total):.3e}, 'epoch': {step / total:.2f}}}")
        if step % 500 == 0:
            out.append(f"{prefix}Saving model checkpoint to /workspace/out/checkpoint-{step}")
    return out[:lines]


def single_node() -> list[str]:
    rng = random.Random(1)
    head = ["+ torchrun --nnodes=1 --nproc_per_node=1 train.py --bf16 --per_device_train_batch_size 4",
            "UserWarning: Found GPU0 NVIDIA GB10 which is of cuda capability 12.1.",
            "    Minimum and Maximum cuda capability supported by this version of PyTorch is (8.0) - (12.0)",
            "Loading checkpoint shards: 100%|██████████| 4/4 [00:41<00:00, 10.32s/it]",
            *_nccl("spark-92ad", 4242, 1, 0, ib=False)]
    return head + _training(rng, 33_000 - len(head) - 2) + ["Training completed. Do not forget to share your model!",
                                                            "{'train_runtime': 18342.1, 'train_loss': 0.9135}"]


def two_node() -> list[str]:
    rng = random.Random(2)
    head = ["+ torchrun --nnodes=2 --nproc_per_node=1 --rdzv_endpoint=192.168.100.15:29500 train.py",
            *_nccl("spark-fb97", 23491, 2, 0, ib=True), *_nccl("spark-4440", 24302, 2, 1, ib=True)]
    return head + _training(rng, 12_000, "[rank0]: ")


def main() -> None:
    for name, lines in (("single_node_train.log.gz", single_node()), ("two_node_train.log.gz", two_node())):
        data = ("\n".join(lines) + "\n").encode()
        (HERE / name).write_bytes(gzip.compress(data, mtime=0))


if __name__ == "__main__":
    main()
