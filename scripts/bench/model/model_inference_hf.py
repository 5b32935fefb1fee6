#!/usr/bin/env python3
"""Prefill and decode speed of transformers' LlamaForCausalLM on a model folder,
measured exactly like bench_model_inference (same batch, lengths, greedy
decoding with the KV cache, best of REPEATS after one warm-up), as JSON.

Usage: model_inference_hf.py MODEL_DIR BATCH PROMPT_LEN NEW_TOKENS THREADS REPEATS [cpu|cuda]
On cuda the model runs in bfloat16 and every timing ends with a synchronisation.
"""
import json
import os
import sys
import time

# torch.set_num_threads does not reach the BLAS library's own thread pool
# (Debian's torch uses OpenBLAS built with pthreads, which otherwise starts
# one thread per core); it must be sized before torch loads it, as
# `--threads` does for our programs.
if len(sys.argv) > 5:
    for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(variable, sys.argv[5])

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import LlamaForCausalLM  # noqa: E402

folder, batch, prompt, new_tokens, threads, repeats = sys.argv[1], *map(int, sys.argv[2:7])
device = sys.argv[7] if len(sys.argv) > 7 else "cpu"
torch.set_num_threads(threads)
dtype = torch.bfloat16 if device == "cuda" else torch.float32
# transformers 5 renamed torch_dtype to dtype.
dtype_argument = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
model = LlamaForCausalLM.from_pretrained(folder, **{dtype_argument: dtype}).eval().to(device)
tokens = torch.randint(0, model.config.vocab_size, (batch, prompt), generator=torch.Generator().manual_seed(0)).to(device)


def now():
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter()

best_prefill = best_decode = float("inf")
with torch.inference_mode():
    for r in range(repeats + 1):
        t0 = now()
        out = model(tokens, use_cache=True)
        past, nxt = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
        t1 = now()
        for _ in range(new_tokens):
            out = model(nxt, past_key_values=past, use_cache=True)
            past, nxt = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
        t2 = now()
        if r:
            best_prefill, best_decode = min(best_prefill, t1 - t0), min(best_decode, t2 - t1)
print(json.dumps({"device": device, "prefill_tokens_per_s": batch * prompt / best_prefill,
                  "decode_tokens_per_s": batch * new_tokens / best_decode}))
