#!/usr/bin/env bash
# What the multi-GPU scripts share (gpu_run_multi.sh, gpu_tp.sh, gpu_tp_loop.sh,
# gpu_tp_world.sh), sourced from the staged folder:
#   . "$here/gpu_multi_lib.sh" WORKDIR    # then: row NAME OK DETAIL; llama_config DIR ...;
#                                         # kill_rank1_after PATTERN LOG PID; tokens_agree A B;
#                                         # tokens_of LOG RANK; gen LOG GPUS SPEC FLAGS...
# Sets here, out (the device tool's $OUT), work (WORKDIR, emptied), recap, start, gpu_name,
# rows and failed; NVLink multicast stays off on shared hosts (recap refuses any other value).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${OUT:-/tmp/recap_gpu_out}
work=$1
rm -rf "$work"
mkdir -p "$out" "$work"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu:$here/bin:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0
recap=$here/bin/recap
start=$(date +%s)
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
rows=()
failed=0
row() { # NAME OK DETAIL
  local v=PASS
  [ "$2" = 1 ] || { v=FAIL; failed=$((failed + 1)); }
  rows+=("$(printf '%-28s %s  %s' "$1" "$v" "$3")")
}
# A Llama config.json for import-hf --random-weights:
#   llama_config DIR HIDDEN LAYERS HEADS KV_HEADS INTERMEDIATE TIED(true|false)
llama_config() {
  mkdir -p "$1"
  cat >"$1/config.json" <<JSON
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": $2,
 "num_hidden_layers": $3, "num_attention_heads": $4, "num_key_value_heads": $5,
 "intermediate_size": $6, "vocab_size": 128256, "max_position_embeddings": 8192,
 "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": $7,
 "hidden_act": "silu", "torch_dtype": "bfloat16"}
JSON
}
# Waits until LOG shows PATTERN (or the launch PID has ended), a second more, then SIGKILLs
# rank 1's process and waits for the launch: sets victim (empty if none was found), killed_at,
# code (the launch's exit status) and ended_at.
kill_rank1_after() { # PATTERN LOG PID
  for _ in $(seq 1 240); do
    grep -q "$1" "$2" && break
    kill -0 "$3" 2>/dev/null || break # the launch ended already: the caller reports it
    sleep 0.5
  done
  sleep 1
  victim=$(pgrep -f -- "--rank 1 --init" | head -1)
  [ -n "$victim" ] && kill -9 "$victim"
  killed_at=$(date +%s)
  wait "$3"
  code=$?
  ended_at=$(date +%s)
}
# Per-request token files of serve-bench --tokens-out (lines "ID: t,t,..."): "SAME/ALL MEAN" where
# SAME requests have equal tokens and MEAN is the mean common prefix over the requests' lengths.
tokens_agree() {
  python3 - "$1" "$2" <<'PY' 2>/dev/null
import sys
a = [l.split(":", 1)[1].strip() for l in open(sys.argv[1])]
b = [l.split(":", 1)[1].strip() for l in open(sys.argv[2])]
same = sum(x == y for x, y in zip(a, b))
pre = []
for x, y in zip(a, b):
    x, y, k = x.split(","), y.split(","), 0
    while k < min(len(x), len(y)) and x[k] == y[k]:
        k += 1
    pre.append(k / max(len(x), 1))
print("%d/%d %.3f" % (same, len(a), sum(pre) / max(len(pre), 1)) if a and len(a) == len(b) else "")
PY
}
# The generated ids of rank RANK in a launch log ("rank R of N: generated: ...").
# tokens_of LOG RANK
tokens_of() { grep -m1 "^rank $2 of [0-9]*: generated:" "$1" | sed 's/.*generated: //'; }
# recap generate under recap launch: gen LOG GPUS SPEC FLAGS...
gen() { # LOG GPUS SPEC FLAGS...: recap generate under recap launch
  local log=$1 gpus=$2 spec=$3
  shift 3
  timeout 120 "$recap" launch --gpus "$gpus" --timeout 60 -- generate "$spec" "$@" >"$log" 2>&1
}
