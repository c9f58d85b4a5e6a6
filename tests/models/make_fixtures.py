#!/usr/bin/env python3
"""Makes the tiny Hugging Face checkpoints recap's model tests read, with transformers' outputs.

Run where transformers and PyTorch are installed (the GPU machine), then commit what it writes:

    python3 tests/models/make_fixtures.py OUT_DIR

For each architecture it writes OUT_DIR/<name>/ with config.json and model.safetensors (from
transformers' save_pretrained, float32) and expected.json: `tokens`, a prompt of
`prompt_length` tokens and its free-running greedy continuation (float64); `logits`,
transformers' float64 CPU logits at every position of `tokens` (row t predicts token t + 1);
each row's `argmax` and top-1 / top-2 `margin`; `max_abs_logit`; and
`transformers_f32_max_error`, how far transformers' own float32 logits are from the float64 ones
(the comparison rule's yardstick).

Random weights at transformers' default scale (std 0.02) give nearly flat logits, where two
correct implementations disagree on argmax at near-ties; so matrices are re-drawn N(0, 0.15) and
norm weights 1 + N(0, 0.1) (issue 19's comparison rule). Each checkpoint stays under 1 MB: 2
layers, hidden 64, intermediate 128, 128 positions, vocabulary 256, 2 KV heads where the
architecture has grouped-query attention.
"""
import json
import os
import sys

import torch

SEED = 1234
PROMPT = [1, 17, 42, 99, 3, 200, 7, 64, 128, 5, 250, 31]
CONTINUE = 16
COMMON = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)


def configs():
    import transformers as tf
    yield "llama", tf.LlamaConfig(
        **COMMON, rms_norm_eps=1e-5, tie_word_embeddings=False,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 32})
    yield "llama_tied", tf.LlamaConfig(
        **COMMON, rms_norm_eps=1e-6, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    yield "mistral", tf.MistralConfig(**COMMON, rms_norm_eps=1e-5, sliding_window=None,
                                      rope_parameters={"rope_type": "default",
                                                       "rope_theta": 1000000.0})
    yield "qwen2", tf.Qwen2Config(**COMMON, rms_norm_eps=1e-6, tie_word_embeddings=True,
                                  use_sliding_window=False,
                                  rope_parameters={"rope_type": "default",
                                                   "rope_theta": 1000000.0})
    # head_dim given and not hidden / heads: the importer must read it, never derive it.
    yield "qwen3", tf.Qwen3Config(**COMMON, head_dim=32, rms_norm_eps=1e-6,
                                  tie_word_embeddings=False, use_sliding_window=False,
                                  rope_parameters={"rope_type": "default",
                                                   "rope_theta": 1000000.0})
    yield "gpt2", tf.GPT2Config(vocab_size=256, n_embd=64, n_layer=2, n_head=4,
                                n_positions=128, n_inner=None, layer_norm_epsilon=1e-5,
                                bos_token_id=1, eos_token_id=2)


def model_for(config):
    import transformers as tf
    return tf.AutoModelForCausalLM.from_config(config, dtype=torch.float32)


def reinitialize(model, generator):
    """Matrices and embeddings N(0, 0.15); norm weights 1 + N(0, 0.1); biases N(0, 0.15)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=generator, dtype=torch.float64)
            is_norm = "norm" in name or name.split(".")[-2].startswith("ln_")
            if is_norm and name.endswith("weight"):
                p.copy_(1.0 + 0.1 * noise)
            else:
                p.copy_(0.15 * noise)


def reference(model):
    """Greedy continuation, then float64 CPU logits over prompt + continuation (teacher-forced:
    position t's logits predict token t + 1), and how far transformers' own float32 logits are
    from them."""
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        m64 = model.to(torch.float64).eval()
        tokens = list(PROMPT)
        for _ in range(CONTINUE):
            tokens.append(m64(torch.tensor([tokens])).logits[0, -1].argmax().item())
        sequence = torch.tensor([tokens])
        logits = m64(sequence).logits[0]
        m32 = model.to(torch.float32)
        f32_error = (m32(sequence).logits[0].double() - logits).abs().max().item()
        top2 = torch.topk(logits, 2, dim=-1)
    return {
        "prompt_length": len(PROMPT),
        "tokens": tokens,
        "logits": [[float("%.9g" % v) for v in row] for row in logits.tolist()],
        "argmax": top2.indices[:, 0].tolist(),
        "margin": (top2.values[:, 0] - top2.values[:, 1]).tolist(),
        "max_abs_logit": logits.abs().max().item(),
        "transformers_f32_max_error": f32_error,
        "reference": "transformers %s, float64 on the CPU" % __import__("transformers").__version__,
    }


def main():
    out = sys.argv[1]
    generator = torch.Generator().manual_seed(SEED)
    for name, config in configs():
        model = model_for(config)
        reinitialize(model, generator)
        folder = os.path.join(out, name)
        model.save_pretrained(folder, safe_serialization=True)
        expected = reference(model)
        expected["architecture"] = model.config.architectures[0] if model.config.architectures \
            else type(model).__name__
        with open(os.path.join(folder, "expected.json"), "w") as f:
            json.dump(expected, f)
        for extra in ("generation_config.json",):
            path = os.path.join(folder, extra)
            if os.path.exists(path):
                os.remove(path)
        size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
        print("%-11s %-24s %7d bytes, greedy %s" % (name, expected["architecture"], size,
                                                     expected["tokens"][len(PROMPT):]))


if __name__ == "__main__":
    main()
