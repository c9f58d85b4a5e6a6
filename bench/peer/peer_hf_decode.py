#!/usr/bin/env python3
"""transformers' fastest batch-1 decode, the peer of `recap bench-decode --batch 1` (issue
"Generation API ... serving benchmarks against transformers", docs/SERVING.md):

    python3 peer_hf_decode.py CHECKPOINT_DIR [--context 512] [--tokens 128] [--json FILE]

The checkpoint's model in bf16 on the GPU with SDPA attention and a StaticCache of
max_cache_len 640; a prompt of --context random tokens is prefilled, then model.forward is
compiled with torch.compile(mode="reduce-overhead", fullgraph=True) (CUDA graphs); of --tokens
greedy decode steps (decode tokens 1 to --tokens, within the cache's 640 positions) the first 3
warm up and the rest run back to back, each between two CUDA events; the
next token is the argmax on the device, so no step waits for the host. Reports the median step,
and the bytes a step must read (every weight once, plus the keys and values of the mean
context, as recap bench-decode counts them) over the median step against a device-to-device
copy measured in this run (bytes read + written, as recap measures it).
"""
import argparse
import inspect
import json
import statistics
import sys
import time

import torch
from transformers import AutoModelForCausalLM, StaticCache

MAX_CACHE_LEN = 640
WARMUP = 3  # the first decode steps, run after compiling and not timed


def copy_bandwidth(device):
    """Read + write bytes per second of a 1 GiB device-to-device copy, median of 20."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    times = []
    for _ in range(20):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    return 2 * src.numel() / statistics.median(times)


def static_cache(config, device):
    """A StaticCache for batch 1 whatever this transformers' constructor takes: its keyword
    arguments changed between releases (max_batch_size, device and dtype went lazy in 5.x)."""
    params = inspect.signature(StaticCache.__init__).parameters
    kwargs = {"config": config, "max_cache_len": MAX_CACHE_LEN}
    if "max_batch_size" in params:
        kwargs["max_batch_size"] = 1
    if "device" in params:
        kwargs["device"] = device
    if "dtype" in params:
        kwargs["dtype"] = torch.bfloat16
    return StaticCache(**kwargs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.context + args.tokens > MAX_CACHE_LEN or args.tokens <= WARMUP:
        sys.exit("peer_hf_decode: --context + --tokens must fit the cache's 640, and --tokens "
                 "must exceed the %d warmup steps" % WARMUP)
    device = "cuda"
    model = AutoModelForCausalLM.from_pretrained(
        args.checkpoint, dtype=torch.bfloat16, attn_implementation="sdpa").to(device).eval()
    cfg = model.config
    cache = static_cache(cfg, device)
    vocab = cfg.vocab_size
    g = torch.Generator(device=device).manual_seed(3)
    prompt = torch.randint(0, vocab, (1, args.context), generator=g, device=device)

    with torch.inference_mode():
        positions = torch.arange(args.context, device=device)
        out = model(input_ids=prompt, past_key_values=cache, cache_position=positions,
                    position_ids=positions.unsqueeze(0), use_cache=True)
        token = out.logits[:, -1:].argmax(-1)
        forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
        compile_start = time.time()

        def step(pos):
            cache_position = torch.tensor([pos], device=device)
            logits = forward(input_ids=token, past_key_values=cache,
                             cache_position=cache_position,
                             position_ids=cache_position.unsqueeze(0), use_cache=True).logits
            # The compiled graph's output buffer is reused by its next replay: keep a copy.
            return logits[:, -1:].argmax(-1).clone()

        pos = args.context
        for _ in range(WARMUP):
            token = step(pos)
            pos += 1
        torch.cuda.synchronize()
        compile_s = time.time() - compile_start
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(args.tokens - WARMUP)]
        for a, b in events:
            a.record()
            token = step(pos)
            b.record()
            pos += 1
        torch.cuda.synchronize()
    step_ms = statistics.median(a.elapsed_time(b) for a, b in events)

    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    heads = cfg.num_attention_heads
    kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    mean_context = args.context + (WARMUP + args.tokens + 1) / 2
    kv_bytes = 2 * cfg.num_hidden_layers * kv_heads * head_dim * 2 * mean_context
    step_bytes = weight_bytes + kv_bytes
    copy = copy_bandwidth(device)
    achieved = step_bytes / (step_ms / 1e3)
    result = {
        "peer": "transformers StaticCache + torch.compile(reduce-overhead, fullgraph)",
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "gpu": torch.cuda.get_device_name(),
        "context": args.context,
        "tokens": args.tokens,
        "compile_and_warmup_s": compile_s,
        "step_ms_median": step_ms,
        "tokens_per_s": 1e3 / step_ms,
        "bytes_per_step": step_bytes,
        "copy_bytes_per_s": copy,
        "bandwidth_fraction": achieved / copy,
    }
    print("transformers %s, torch %s on %s: batch-1 decode %.3f ms/step (median of %d), "
          "%.0f GB/s = %.1f%% of a %.0f GB/s copy; compile and warmup %.1f s"
          % (result["transformers"], result["torch"], result["gpu"], step_ms, args.tokens - WARMUP,
             achieved / 1e9, 100 * achieved / copy, copy / 1e9, compile_s))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
