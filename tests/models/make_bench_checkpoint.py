#!/usr/bin/env python3
"""Writes a checkpoint folder at the shape of a published decoder with random bf16 weights, for
timing: what the weights hold does not change the work. The default is Llama 3.2 1B (hidden
2048, 16 layers, 32 heads, 8 KV heads, intermediate 8192, vocabulary 128256, tied embeddings,
llama3 RoPE); --shape picks another, so the serving benchmark can show that the batch-1
bandwidth fraction holds beyond the one shape it was tuned on. Runs where torch and safetensors
are (the GPU machine); seconds on a GPU.

    python3 tests/models/make_bench_checkpoint.py /tmp/llama-1b-shape [--shape llama-1b]

Other shapes, where launch overhead matters more than bandwidth (the decode loop's benchmark):

    python3 tests/models/make_bench_checkpoint.py /tmp/small --layers 4 --hidden 512 \
        --heads 8 --kv-heads 2 --ffn 2048 --vocab 32000

(the flags override the --shape's values; the head size is then hidden / heads).
"""
import argparse
import json
import os

import torch
from safetensors.torch import save_file

LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
               "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}

# name: (model_type, hidden, layers, heads, kv_heads, head_dim, intermediate, vocab, tied,
#        rope parameters). The published configs' shapes; qwen2 has q/k/v biases, qwen3 q/k norms.
SHAPES = {
    "llama-1b": ("llama", 2048, 16, 32, 8, 64, 8192, 128256, True, LLAMA3_ROPE),
    "llama-3b": ("llama", 3072, 28, 24, 8, 128, 8192, 128256, True, LLAMA3_ROPE),
    "qwen2-0.5b": ("qwen2", 896, 24, 14, 2, 64, 4864, 151936, True,
                   {"rope_type": "default", "rope_theta": 1000000.0}),
    "qwen3-1.7b": ("qwen3", 2048, 28, 16, 8, 128, 6144, 151936, True,
                   {"rope_type": "default", "rope_theta": 1000000.0}),
}
ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
                 "qwen3": "Qwen3ForCausalLM"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="llama-1b")
    for flag in ("--hidden", "--layers", "--heads", "--kv-heads", "--ffn", "--vocab"):
        ap.add_argument(flag, type=int)
    args = ap.parse_args()
    kind, hidden, layers, heads, kv_heads, head_dim, ffn, vocab, tied, rope = SHAPES[args.shape]
    if args.hidden or args.heads:
        hidden, heads = args.hidden or hidden, args.heads or heads
        head_dim = hidden // heads
    layers, kv_heads = args.layers or layers, args.kv_heads or kv_heads
    ffn, vocab = args.ffn or ffn, args.vocab or vocab
    os.makedirs(args.folder, exist_ok=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator(device=device).manual_seed(11)

    def random(*shape):
        return (0.02 * torch.randn(*shape, generator=g, device=device)).to(torch.bfloat16).cpu()

    def ones(n):
        return torch.ones(n, dtype=torch.bfloat16)

    weights = {"model.embed_tokens.weight": random(vocab, hidden), "model.norm.weight": ones(hidden)}
    if not tied:
        weights["lm_head.weight"] = random(vocab, hidden)
    for i in range(layers):
        p = "model.layers.%d." % i
        weights[p + "input_layernorm.weight"] = ones(hidden)
        weights[p + "post_attention_layernorm.weight"] = ones(hidden)
        for name, rows in (("q", heads), ("k", kv_heads), ("v", kv_heads)):
            weights[p + "self_attn.%s_proj.weight" % name] = random(rows * head_dim, hidden)
            if kind == "qwen2":
                weights[p + "self_attn.%s_proj.bias" % name] = random(rows * head_dim)
        if kind == "qwen3":
            weights[p + "self_attn.q_norm.weight"] = ones(head_dim)
            weights[p + "self_attn.k_norm.weight"] = ones(head_dim)
        weights[p + "self_attn.o_proj.weight"] = random(hidden, heads * head_dim)
        weights[p + "mlp.gate_proj.weight"] = random(ffn, hidden)
        weights[p + "mlp.up_proj.weight"] = random(ffn, hidden)
        weights[p + "mlp.down_proj.weight"] = random(hidden, ffn)
    save_file(weights, os.path.join(args.folder, "model.safetensors"), metadata={"format": "pt"})
    config = {
        "architectures": [ARCHITECTURES[kind]], "model_type": kind, "hidden_size": hidden,
        "num_hidden_layers": layers, "num_attention_heads": heads,
        "num_key_value_heads": kv_heads, "head_dim": head_dim, "intermediate_size": ffn,
        "vocab_size": vocab, "max_position_embeddings": 131072 if kind == "llama" else 32768,
        "rms_norm_eps": 1e-5 if kind == "llama" else 1e-6, "tie_word_embeddings": tied,
        "hidden_act": "silu", "dtype": "bfloat16", "rope_parameters": rope,
    }
    with open(os.path.join(args.folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    print("wrote %s (%s shape): %.2f GB of bf16 weights" %
          (args.folder, args.shape, sum(t.numel() for t in weights.values()) * 2 / 1e9))


if __name__ == "__main__":
    main()
