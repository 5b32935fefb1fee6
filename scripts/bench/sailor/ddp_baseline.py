"""PyTorch's own DistributedDataParallel (Gloo) training the same model, batch
and sequence length as `sailor-run launch --nprocs N -- train`: the baseline of
scripts/bench/sailor/sailor_run.sh. Prints {"tokens_per_s": ...} (median step after
warm-up, whole job).

Usage: ddp_baseline.py MODEL_DIR NPROCS BATCH SEQ_LEN STEPS WARMUP
"""
import json
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import transformers


def worker(rank, world, port, model_dir, batch, seq_len, steps, warmup, out):
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = transformers.LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    model.train()
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(ddp.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
    generator = torch.Generator().manual_seed(rank)
    vocab = model.config.vocab_size
    times = []
    for step in range(warmup + steps):
        tokens = torch.randint(0, vocab, (batch, seq_len), generator=generator)
        start = time.perf_counter()
        loss = ddp(input_ids=tokens, labels=tokens).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(ddp.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        dist.barrier()
        if step >= warmup:
            times.append(time.perf_counter() - start)
    if rank == 0:
        out.put(world * batch * seq_len / statistics.median(times))
    dist.destroy_process_group()


def main():
    model_dir, world, batch, seq_len, steps, warmup = sys.argv[1], *map(int, sys.argv[2:7])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    mp.spawn(worker, args=(world, port, model_dir, batch, seq_len, steps, warmup, out), nprocs=world)
    print(json.dumps({"tokens_per_s": out.get()}))


if __name__ == "__main__":
    main()
