#!/usr/bin/env python3
"""recap against transformers on the GPU machine (issue 19's proof), by its comparison rule.

    python3 tests/models/compare_hf.py --recap BIN/recap --work /tmp/cmp [--tiny] [--large]

For each model: `recap import-hf` writes a spec, `recap generate --logits-out` runs a prompt
through the prefill entry and greedy tokens through the decode entry (shared KV caches) on the
GPU and writes every position's logits; transformers then computes the logits of the same token
sequence (teacher-forced on recap's tokens) as the reference, and, as the yardstick, at the
dtype recap ran. The rule:
  - max |recap - reference| <= 2 x max |transformers at that dtype - reference| + 1e-6 max|logit|
  - argmax equal wherever the reference's top-1/top-2 margin exceeds 1e-3 (f32) or 3e-2 (bf16)
    x max|logit|; positions under the margin are counted and reported, not failed.
--tiny: the committed fixtures (tests/data/models), prompts of 12 (the committed one), 3 and 60
    tokens, reference float64 on the CPU.
--large: a model at Llama 3.2 1B's shape (hidden 2048, 16 layers, 32 heads, 8 KV heads,
    intermediate 8192, vocabulary 128256, tied embeddings, llama3 RoPE), weights re-drawn at the
    rule's scale and saved in bf16; recap in bf16 and in f32; prompts of 7, 64, 300 and 1000
    tokens; reference float64 on the GPU (f32 with TF32 off is reported beside it).
Prints one line per case and exits non-zero when a case breaks the rule.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "data", "models")
NEW_TOKENS = 4


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("%s failed (%d):\n%s%s" % (" ".join(cmd), r.returncode, r.stdout,
                                                       r.stderr))
    return r.stdout


def recap_logits(recap, spec, prompt, out, vocab):
    """recap's tokens (prompt + generated) and the logits of every position it ran, f32
    [prompt + NEW_TOKENS - 1, vocab]."""
    ids = ",".join(str(t) for t in prompt)
    text = run([recap, "generate", spec, "--device", "cuda", "--prompt-ids", ids, "--max-new",
                str(NEW_TOKENS), "--logits-out", out])
    line = next(l for l in text.splitlines() if l.startswith("generated:"))
    generated = [int(t) for t in line.split(":")[1].split()]
    logits = np.fromfile(out, dtype=np.float32).reshape(-1, vocab)
    return logits, list(prompt) + generated[:NEW_TOKENS - 1]


def hf_logits(folder, tokens, dtype, device):
    """transformers' logits for `tokens`, from a model loaded fresh at `dtype`: converting one
    model between dtypes would also round its RoPE frequencies (a float buffer) for good."""
    import transformers as tf
    m = tf.AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).to(device).eval()
    with torch.no_grad():
        out = m(torch.tensor([tokens], device=device)).logits[0].double().cpu()
    del m
    torch.cuda.empty_cache()
    return out


def judge(name, got, ref, own, dtype):
    got = torch.from_numpy(got).double()
    n = min(got.shape[0], ref.shape[0])
    got, ref, own = got[:n], ref[:n], own[:n]
    top = ref.abs().max().item()
    err = (got - ref).abs().max().item()
    own_err = (own - ref).abs().max().item()
    bound = 2 * own_err + 1e-6 * top
    top2 = torch.topk(ref, 2, dim=-1)
    margin = top2.values[:, 0] - top2.values[:, 1]
    need = (1e-3 if dtype == torch.float32 else 3e-2) * top
    decided = margin > need
    agree = (got.argmax(-1) == ref.argmax(-1))
    wrong = int((decided & ~agree).sum())
    own_wrong = int((decided & (own.argmax(-1) != ref.argmax(-1))).sum())
    under = int((~decided).sum())
    ok = err <= bound and wrong == 0
    print("%-5s %-34s positions %4d  max|err| %.3e  bound %.3e (transformers %.3e)  "
          "argmax wrong %d (transformers at this dtype: %d), under the margin %d" %
          ("PASS" if ok else "FAIL", name, n, err, bound, own_err, wrong, own_wrong, under),
          flush=True)
    return ok


def tiny(args):
    ok = True
    rng = np.random.default_rng(5)
    for name in sorted(os.listdir(FIXTURES)):
        folder = os.path.join(FIXTURES, name)
        expected = json.load(open(os.path.join(folder, "expected.json")))
        spec = os.path.join(args.work, name + ".yaml")
        run([args.recap, "import-hf", folder, "-o", spec, "--dtype", "f32", "--batch", "1"])
        config = json.load(open(os.path.join(folder, "config.json")))
        vocab = config["vocab_size"]
        committed = expected["tokens"][:expected["prompt_length"]]
        for prompt in (committed, [int(t) for t in rng.integers(0, vocab, size=3)],
                       [int(t) for t in rng.integers(0, vocab, size=60)]):
            got, tokens = recap_logits(args.recap, spec, prompt,
                                       os.path.join(args.work, name + ".f32"), vocab)
            own = hf_logits(folder, tokens, torch.float32, "cuda")
            ref = hf_logits(folder, tokens, torch.float64, "cpu")
            ok &= judge("%s f32 (cuda) prompt %d" % (name, len(prompt)), got, ref, own,
                        torch.float32)
            if prompt is committed:
                same = tokens[len(prompt):] == expected["tokens"][len(prompt):len(tokens)]
                print("      greedy %s transformers' %s" % (
                    "equals" if same else "differs from",
                    expected["tokens"][len(prompt):len(tokens)]))
    return ok


def large(args):
    import transformers as tf
    folder = os.path.join(args.work, "llama-1b-shape")
    if not os.path.exists(os.path.join(folder, "config.json")):
        config = tf.LlamaConfig(
            vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
            num_attention_heads=32, num_key_value_heads=8, head_dim=64,
            max_position_embeddings=131072, rms_norm_eps=1e-5, tie_word_embeddings=True,
            rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                             "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 8192})
        with torch.device("cuda"):
            model = tf.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        g = torch.Generator(device="cuda").manual_seed(7)
        with torch.no_grad():
            for pname, p in model.named_parameters():
                noise = torch.randn(p.shape, generator=g, device="cuda")
                p.copy_(1.0 + 0.1 * noise if "norm" in pname else 0.15 * noise)
        model.to(torch.bfloat16).save_pretrained(folder, safe_serialization=True)
        del model
        torch.cuda.empty_cache()
    rng = np.random.default_rng(3)
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    ok = True
    for dtype, flag in ((torch.bfloat16, "bf16"), (torch.float32, "f32")):
        spec = os.path.join(args.work, "llama-1b-%s.yaml" % flag)
        run([args.recap, "import-hf", folder, "-o", spec, "--dtype", flag, "--batch", "1",
             "--max-seq", "1100", "--prefill", "1000"])
        for length in (7, 64, 300, 1000):
            prompt = [int(t) for t in rng.integers(0, 128256, size=length)]
            got, tokens = recap_logits(args.recap, spec, prompt,
                                       os.path.join(args.work, "l.%s.%d" % (flag, length)), 128256)
            ref = hf_logits(folder, tokens, torch.float64, "cuda")
            ref32 = hf_logits(folder, tokens, torch.float32, "cuda")
            own = ref32 if dtype == torch.float32 else hf_logits(folder, tokens, dtype, "cuda")
            ok &= judge("1B-shape %s prompt %d" % (flag, length), got, ref, own, dtype)
            print("      against f32 (TF32 off) instead: max|err| %.3e" %
                  (torch.from_numpy(got).double()[:ref32.shape[0]] - ref32).abs().max().item())
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--recap", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--large", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    ok = True
    if args.tiny:
        ok &= tiny(args)
    if args.large:
        ok &= large(args)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
