#!/usr/bin/env python3
"""Judges tensor-parallel generation against one GPU (scripts/gpu/gpu_tp.sh; issue 27):

    python3 tests/models/compare_tp.py EXPECTED_JSON DIR [WORLD]

DIR holds what `recap generate --logits-out` wrote for the checkpoint of EXPECTED_JSON
(tests/models/make_tp_checkpoints.py), greedy from its prompt, at TP 1 and at TP WORLD (default
2; N below): tp1_f32.logits, tpN_f32.logits, tp1_bf16.logits, tpN_bf16.logits (f32 rows of the
vocabulary: the prompt's positions, then one per decode step) and tp1_f32.tokens,
tpN_f32.tokens (the generated ids, one line). Checks, with TP 2 standing for TP N:

- f32: TP 1 and TP 2 each within the importer's rule of transformers' float64 logits (max
  |error| <= 2 x transformers' own f32 error + 1e-6 x max |logit|) at every position up to
  where their greedy tokens leave transformers' (a near-tie: margin <= 1e-3 x max |logit|);
  max |TP 2 - TP 1| within the same bound; TP 2's greedy tokens equal TP 1's (a difference is
  allowed only at a near-tie of the reference).
- bf16, over the prompt's positions (teacher-forced alike): max |TP 2 bf16 - TP 1 f32| at most
  1.5 x max |TP 1 bf16 - TP 1 f32|.
Prints one PASS/FAIL line per check and exits 1 on any failure.
"""
import array
import json
import sys


def rows(path, vocab):
    """The file's little-endian f32 rows (plain Python: no numpy needed)."""
    data = array.array("f")
    with open(path, "rb") as f:
        data.frombytes(f.read())
    if sys.byteorder != "little":
        data.byteswap()
    return [data[i:i + vocab] for i in range(0, len(data) - vocab + 1, vocab)]


def max_abs_difference(a, b, n):
    return max((abs(x - y) for ra, rb in zip(a[:n], b[:n]) for x, y in zip(ra, rb)), default=0.0)


def main():
    expected = json.load(open(sys.argv[1]))
    folder = sys.argv[2]
    world = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    ref = expected["logits"]
    vocab = len(ref[0])
    prompt = expected["prompt_length"]
    tokens = expected["tokens"]
    margin = expected["margin"]
    biggest = expected["max_abs_logit"]
    tol = 2 * expected["transformers_f32_max_error"] + 1e-6 * biggest
    near_tie = [m <= 1e-3 * biggest for m in margin]
    failed = 0

    def verdict(ok, text):
        nonlocal failed
        failed += 0 if ok else 1
        print("%s  %s" % ("PASS" if ok else "FAIL", text))

    split = "tp%d" % world
    gen = {}
    for tp in (1, world):
        gen[tp] = [int(t) for t in open("%s/tp%d_f32.tokens" % (folder, tp)).read().split()]
    logits = {k: rows("%s/%s.logits" % (folder, k), vocab)
              for k in ("tp1_f32", split + "_f32", "tp1_bf16", split + "_bf16")}
    # Row t predicts token t + 1: comparable while every token before it is transformers'.
    def agreeing(generated):
        n = prompt
        for i, t in enumerate(generated):
            if prompt + i >= len(tokens) or t != tokens[prompt + i]:
                break
            n += 1
        return n

    for tp in (1, world):
        n = min(agreeing(gen[tp]), len(logits["tp%d_f32" % tp]), len(ref))
        err = max_abs_difference(logits["tp%d_f32" % tp], ref, n)
        verdict(err <= tol, "TP %d f32 vs transformers float64 over %d positions: max |error| "
                "%.3g, bound %.3g" % (tp, n, err, tol))
    n = min(agreeing(gen[1]), agreeing(gen[world]), len(logits["tp1_f32"]),
            len(logits[split + "_f32"]))
    diff = max_abs_difference(logits[split + "_f32"], logits["tp1_f32"], n)
    verdict(diff <= tol, "TP %d vs TP 1, f32, %d positions: max |difference| %.3g, bound %.3g"
            % (world, n, diff, tol))
    first = next((i for i, (a, b) in enumerate(zip(gen[1], gen[world])) if a != b), None)
    if first is None:
        verdict(gen[1] == gen[world], "TP %d greedy tokens equal TP 1's (%d tokens): %s"
                % (world, len(gen[1]), " ".join(map(str, gen[world]))))
    else:
        row = prompt + first - 1
        tie = row < len(near_tie) and bool(near_tie[row])
        verdict(tie, "TP %d greedy tokens leave TP 1's at new token %d (%s)"
                % (world, first, "a near-tie of the reference: allowed" if tie else "clear margin"))
    e1 = max_abs_difference(logits["tp1_bf16"], logits["tp1_f32"], prompt)
    e2 = max_abs_difference(logits[split + "_bf16"], logits["tp1_f32"], prompt)
    verdict(e2 <= 1.5 * e1, "bf16 over the prompt's %d positions: |TP %d bf16 - TP 1 f32| %.4g "
            "<= 1.5 x |TP 1 bf16 - TP 1 f32| %.4g (ratio %.2f)"
            % (prompt, world, e2, e1, e2 / e1 if e1 else 0))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
