#!/usr/bin/env python3
"""transformers' continuous batching, the peer of `recap serve-bench --generate` (issue
"Generation API ... serving benchmarks against transformers", docs/SERVING.md):

    python3 peer_hf_generate_batch.py CHECKPOINT_DIR REQUESTS.json [--max-running 64]
        [--sweep-requests 128] [--json FILE]

REQUESTS.json is the request set `recap serve-bench --generate --save-requests FILE` served
(prompt token ids and each request's output length), so both sides do the same work: greedy,
stop tokens ignored, every request submitted at once, at most --max-running sequences in a
batch. The model runs in bf16 on the GPU through transformers' ContinuousBatchingManager with
its paged attention ("paged|sdpa") and its CUDA graphs on.

Its settings are swept, as the issue asks, on the first --sweep-requests requests: the token
budget of a batch (max_batch_tokens) over three values with the default page size, then the page
size (its KV block) over three values at the best budget. The best pair then serves the whole set,
once to warm up (graphs captured) and once timed. Output tokens/s is every output token over the
wall time from the first submit to the last result. transformers' API moved between 5.x releases
(block_size became page_size in 5.17); the script passes only the settings this release has and
prints what it used.
"""
import argparse
import dataclasses
import inspect
import json
import sys
import time

import torch
import transformers
from transformers import AutoModelForCausalLM, GenerationConfig

try:
    from transformers.generation import ContinuousBatchingConfig
except ImportError:  # releases before the config class took every setting
    ContinuousBatchingConfig = None

BATCH_TOKENS = (256, 512, 1024)
PAGE_SIZES = (64, 128, 256)


def config_fields():
    if ContinuousBatchingConfig is None:
        return set()
    return {f.name for f in dataclasses.fields(ContinuousBatchingConfig)}


def make_config(max_running, batch_tokens, page_size):
    """The ContinuousBatchingConfig for one setting, with the names this release knows."""
    fields = config_fields()
    wanted = {"use_cuda_graph": True, "max_requests_per_batch": max_running,
              "max_batch_tokens": batch_tokens, "scheduler_type": "fifo",
              "allow_block_sharing": False}
    # Prefix sharing would let transformers skip work recap does (random prompts share no
    # prefix, but the sort it implies changes the order); off keeps the work the same.
    wanted["page_size" if "page_size" in fields else "block_size"] = page_size
    used = {k: v for k, v in wanted.items() if k in fields}
    return (ContinuousBatchingConfig(**used) if ContinuousBatchingConfig else None), used


def serve(model, requests, max_running, batch_tokens, page_size):
    """Serves the requests once; returns (output tokens, wall seconds, settings used)."""
    gen = GenerationConfig(do_sample=False, max_new_tokens=max(r["max_new_tokens"]
                                                               for r in requests),
                           eos_token_id=-1, pad_token_id=0)
    cb_config, used = make_config(max_running, batch_tokens, page_size)
    params = inspect.signature(model.init_continuous_batching).parameters
    kwargs = {"generation_config": gen}
    if "continuous_batching_config" in params and cb_config is not None:
        kwargs["continuous_batching_config"] = cb_config
    manager = model.init_continuous_batching(**kwargs)
    manager.start()
    try:
        start = time.perf_counter()
        ids = [manager.add_request(r["prompt"], max_new_tokens=r["max_new_tokens"],
                                   eos_token_id=-1) for r in requests]
        pending, tokens = set(ids), 0
        while pending:
            result = manager.get_result(timeout=60)
            if result is None:
                raise RuntimeError("transformers' manager returned no result for 60 s "
                                   "(%d requests pending)" % len(pending))
            if result.request_id not in pending:
                continue
            if getattr(result, "error", None):
                raise RuntimeError("request %s failed: %s" % (result.request_id, result.error))
            pending.discard(result.request_id)
            tokens += len(result.generated_tokens)
        torch.cuda.synchronize()
        wall = time.perf_counter() - start
    finally:
        manager.stop(block=True)
    return tokens, wall, used


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint")
    ap.add_argument("requests")
    ap.add_argument("--max-running", type=int, default=64)
    ap.add_argument("--sweep-requests", type=int, default=128)
    ap.add_argument("--json")
    args = ap.parse_args()
    requests = json.load(open(args.requests))["requests"]
    if not requests:
        sys.exit("peer_hf_generate_batch: %s holds no requests" % args.requests)
    model = AutoModelForCausalLM.from_pretrained(
        args.checkpoint, dtype=torch.bfloat16, attn_implementation="paged|sdpa").to("cuda").eval()
    print("transformers %s, torch %s, %s; ContinuousBatchingConfig fields: %s"
          % (transformers.__version__, torch.__version__, torch.cuda.get_device_name(),
             sorted(config_fields()) or "none"))

    sweep_set = requests[:args.sweep_requests]
    rates = {}  # (max_batch_tokens, page size) -> output tokens/s on the sweep set
    sweep = []

    def rate(batch_tokens, page_size):
        if (batch_tokens, page_size) not in rates:
            serve(model, sweep_set, args.max_running, batch_tokens, page_size)  # graphs captured
            tokens, wall, used = serve(model, sweep_set, args.max_running, batch_tokens,
                                       page_size)
            rates[(batch_tokens, page_size)] = tokens / wall
            sweep.append({"settings": used, "output_tokens_per_s": tokens / wall})
            print("sweep %s: %.1f output tokens/s" % (used, tokens / wall), flush=True)
        return rates[(batch_tokens, page_size)]

    best_tokens = max(BATCH_TOKENS, key=lambda b: rate(b, PAGE_SIZES[-1]))
    best_page = max(PAGE_SIZES, key=lambda p: rate(best_tokens, p))

    serve(model, requests, args.max_running, best_tokens, best_page)
    tokens, wall, used = serve(model, requests, args.max_running, best_tokens, best_page)
    result = {"peer": "transformers continuous batching (ContinuousBatchingManager)",
              "transformers": transformers.__version__, "torch": torch.__version__,
              "device": torch.cuda.get_device_name(), "requests": len(requests),
              "max_running": args.max_running, "settings": used, "sweep": sweep,
              "output_tokens": tokens, "wall_s": wall, "output_tokens_per_s": tokens / wall}
    print("%d requests with %s: %d output tokens in %.3f s, %.1f output tokens/s"
          % (len(requests), used, tokens, wall, tokens / wall))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
