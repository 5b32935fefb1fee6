#!/usr/bin/env python3
"""Our Llama against transformers' LlamaForCausalLM in float32.

For random tiny configs (grouped-query and multi-head attention, tied and
untied embeddings, sharded and bfloat16 checkpoints, linear and Llama 3.1
rotary scaling): transformers builds and
saves the model, we load it and compute logits of a full forward and of
prefill + KV-cache decode; both must match transformers' logits within 1e-4
relative. Then we write a random model and transformers loads it: same logits.

Usage: check_llama.py PATH/TO/model_helper
"""
import json
import os
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file
from transformers import LlamaConfig, LlamaForCausalLM

HELPER = sys.argv[1]
TOLERANCE = 1e-4

CONFIGS = [
    dict(name="gqa-untied", hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=8,
         num_key_value_heads=2, tie_word_embeddings=False),
    dict(name="gqa-tied", hidden_size=48, intermediate_size=112, num_hidden_layers=2, num_attention_heads=6,
         num_key_value_heads=3, tie_word_embeddings=True, rope_theta=500000.0),
    dict(name="mha-sharded", hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
         num_key_value_heads=4, tie_word_embeddings=False, rms_norm_eps=1e-5, shard="20KB"),
    dict(name="gqa-bf16", hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
         num_key_value_heads=1, tie_word_embeddings=False, dtype=torch.bfloat16),
    # Llama 3.1's rotary scaling: with head_dim 24 and an original context of
    # 32, frequencies fall in all three bands (kept, blended, stretched).
    dict(name="llama3-rope", hidden_size=96, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
         num_key_value_heads=2, tie_word_embeddings=True,
         rope_scaling={"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                       "original_max_position_embeddings": 32}),
    dict(name="linear-rope", hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
         num_key_value_heads=4, tie_word_embeddings=False, rope_scaling={"type": "linear", "factor": 3.0}),
]


def relative_error(ours, ref):
    return float((ours - ref).abs().max() / ref.abs().max())


def randomize(model, seed):
    """Spread every weight (norms included) so that mistakes show in the logits."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.5 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.15 * torch.randn(p.shape, generator=gen))


def run_helper(*args):
    result = subprocess.run([HELPER, *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"model_helper {' '.join(args)} failed: {result.stderr.strip()}")


def check_loading(tmp, spec, seed):
    spec = dict(spec)
    name, shard, dtype = spec.pop("name"), spec.pop("shard", None), spec.pop("dtype", torch.float32)
    config = LlamaConfig(vocab_size=211, max_position_embeddings=64, **spec)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    randomize(model, seed)
    with torch.no_grad():
        # The reference computes in float32 from the weights as stored (rounded to bfloat16 there).
        for p in model.parameters():
            p.copy_(p.to(dtype).to(torch.float32))
    tokens = torch.randint(0, config.vocab_size, (1, 23), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        ref = model(tokens).logits[0]
    folder = os.path.join(tmp, name)
    model.to(dtype).save_pretrained(folder, safe_serialization=True, **({"max_shard_size": shard} if shard else {}))
    request = os.path.join(tmp, name + ".json")
    with open(request, "w") as f:
        json.dump({"tokens": tokens[0].tolist(), "prefill": 15}, f)
    out = os.path.join(tmp, name + ".logits.safetensors")
    run_helper("logits", folder, request, out)
    ours = load_file(out)
    failures = 0
    for key in ("full", "cached"):
        err = relative_error(ours[key], ref)
        ok = err <= TOLERANCE
        failures += not ok
        print(f"{name}: {key} logits relative error {err:.2e} {'ok' if ok else 'FAIL'}")
    files = sorted(f for f in os.listdir(folder) if f.endswith(".safetensors"))
    if shard and len(files) < 2:
        print(f"{name}: expected a sharded checkpoint, got {files}")
        failures += 1
    return failures


def check_saving(tmp):
    """A model we initialise and save loads in transformers with the same logits."""
    config_path = os.path.join(tmp, "ours-config.json")
    with open(config_path, "w") as f:
        json.dump({"vocab_size": 150, "hidden_size": 40, "intermediate_size": 72, "num_hidden_layers": 2,
                   "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": True,
                   "initializer_range": 0.3, "eos_token_id": [2, 5],
                   "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 2.0, "original_max_position_embeddings": 64}}, f)
    folder = os.path.join(tmp, "ours")
    run_helper("random", config_path, "1234", folder)
    model = LlamaForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()
    if model.config.rope_scaling.get("rope_type") != "llama3" or model.config.eos_token_id != [2, 5]:
        print(f"saved config read back by transformers differs: {model.config}")
        return 1
    tokens = torch.randint(0, 150, (1, 17), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ref = model(tokens).logits[0]
    request = os.path.join(tmp, "ours.json")
    with open(request, "w") as f:
        json.dump({"tokens": tokens[0].tolist(), "prefill": 17}, f)
    out = os.path.join(tmp, "ours.logits.safetensors")
    run_helper("logits", folder, request, out)
    err = relative_error(load_file(out)["full"], ref)
    ok = err <= TOLERANCE and ref.abs().max() > 0
    print(f"saved by us, loaded by transformers: relative error {err:.2e} {'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


def main():
    torch.set_num_threads(1)
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, spec in enumerate(CONFIGS):
            failures += check_loading(tmp, spec, seed=10 + i)
        failures += check_saving(tmp)
    if failures:
        print(f"FAILED: {failures} comparisons")
        return 1
    print("all logits match transformers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
