#!/usr/bin/env python3
"""Writes the two small Hugging Face checkpoints scripts/gpu/gpu_tp.sh splits over two GPUs, with
transformers' outputs, where transformers and PyTorch are (the GPU machine; seconds on the CPU):

    python3 tests/models/make_tp_checkpoints.py OUT_DIR

OUT_DIR/llama: grouped-query attention (8 heads, 4 KV heads: 2 per rank at TP 2), untied LM
head, vocabulary 1001 (padded to 1002 at TP 2). OUT_DIR/gpt2: biases, fused c_attn, tied head,
vocabulary 1003. Both 4 layers of hidden 256. Each folder gets config.json, model.safetensors
and expected.json as tests/models/make_fixtures.py writes them (its re-initialization, so that
logits have clear margins, and its reference: transformers' float64 greedy continuation of the
prompt, float64 logits at every position and transformers' own float32 error), over a
32-token prompt and 16 new tokens.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures  # noqa: E402  (the fixtures' initialization and reference)

import json  # noqa: E402

import torch  # noqa: E402

make_fixtures.PROMPT = [(37 * i + 11) % 997 for i in range(32)]
make_fixtures.CONTINUE = 16


def configs():
    import transformers as tf
    yield "llama", tf.LlamaConfig(
        vocab_size=1001, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
        num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=512,
        rms_norm_eps=1e-5, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    yield "gpt2", tf.GPT2Config(vocab_size=1003, n_embd=256, n_layer=4, n_head=8, n_positions=512,
                                n_inner=None, layer_norm_epsilon=1e-5, bos_token_id=1,
                                eos_token_id=2)


def main():
    out = sys.argv[1]
    generator = torch.Generator().manual_seed(27)
    for name, config in configs():
        model = make_fixtures.model_for(config)
        make_fixtures.reinitialize(model, generator)
        folder = os.path.join(out, name)
        model.save_pretrained(folder, safe_serialization=True)
        expected = make_fixtures.reference(model)
        with open(os.path.join(folder, "expected.json"), "w") as f:
            json.dump(expected, f)
        print("%-6s prompt %d tokens, greedy %s" % (name, expected["prompt_length"],
                                                    expected["tokens"][expected["prompt_length"]:]))


if __name__ == "__main__":
    main()
