#!/usr/bin/env python3
"""Writes a checkpoint folder at the shape of Llama 3.2 1B (hidden 2048, 16 layers, 32 heads,
8 KV heads, intermediate 8192, vocabulary 128256, tied embeddings, llama3 RoPE) with random
bf16 weights, for timing: what the weights hold does not change the work. Runs where torch and
safetensors are (the GPU machine); a few seconds on a GPU.

    python3 tests/models/make_bench_checkpoint.py /tmp/llama-1b-shape

Other shapes, where launch overhead matters more than bandwidth (the decode loop's benchmark):

    python3 tests/models/make_bench_checkpoint.py /tmp/small --layers 4 --hidden 512 \
        --heads 8 --kv-heads 2 --ffn 2048 --vocab 32000
"""
import argparse
import json
import os

import torch
from safetensors.torch import save_file

HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, FFN, VOCAB = 2048, 16, 32, 8, 64, 8192, 128256


def main():
    global HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, FFN, VOCAB
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder")
    parser.add_argument("--hidden", type=int, default=HIDDEN)
    parser.add_argument("--layers", type=int, default=LAYERS)
    parser.add_argument("--heads", type=int, default=HEADS)
    parser.add_argument("--kv-heads", type=int, default=KV_HEADS)
    parser.add_argument("--ffn", type=int, default=FFN)
    parser.add_argument("--vocab", type=int, default=VOCAB)
    args = parser.parse_args()
    HIDDEN, LAYERS, HEADS, KV_HEADS, FFN, VOCAB = (args.hidden, args.layers, args.heads,
                                                   args.kv_heads, args.ffn, args.vocab)
    HEAD_DIM = HIDDEN // HEADS
    folder = args.folder
    os.makedirs(folder, exist_ok=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator(device=device).manual_seed(11)

    def matrix(rows, cols):
        return (0.02 * torch.randn(rows, cols, generator=g, device=device)).to(torch.bfloat16).cpu()

    def norm():
        return torch.ones(HIDDEN, dtype=torch.bfloat16)

    weights = {"model.embed_tokens.weight": matrix(VOCAB, HIDDEN), "model.norm.weight": norm()}
    for i in range(LAYERS):
        p = "model.layers.%d." % i
        weights[p + "input_layernorm.weight"] = norm()
        weights[p + "post_attention_layernorm.weight"] = norm()
        weights[p + "self_attn.q_proj.weight"] = matrix(HEADS * HEAD_DIM, HIDDEN)
        weights[p + "self_attn.k_proj.weight"] = matrix(KV_HEADS * HEAD_DIM, HIDDEN)
        weights[p + "self_attn.v_proj.weight"] = matrix(KV_HEADS * HEAD_DIM, HIDDEN)
        weights[p + "self_attn.o_proj.weight"] = matrix(HIDDEN, HEADS * HEAD_DIM)
        weights[p + "mlp.gate_proj.weight"] = matrix(FFN, HIDDEN)
        weights[p + "mlp.up_proj.weight"] = matrix(FFN, HIDDEN)
        weights[p + "mlp.down_proj.weight"] = matrix(HIDDEN, FFN)
    save_file(weights, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": HIDDEN,
        "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM, "intermediate_size": FFN,
        "vocab_size": VOCAB, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5,
        "tie_word_embeddings": True, "hidden_act": "silu", "dtype": "bfloat16",
        "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 8192},
    }
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    print("wrote %s: %.2f GB of bf16 weights" %
          (folder, sum(t.numel() for t in weights.values()) * 2 / 1e9))


if __name__ == "__main__":
    main()
