#!/usr/bin/env bash
# The `recap` command line end to end on the host backend: exit codes (0 ok, 1 failure,
# 2 usage), --help everywhere, strict flags, validate's FILE:LINE:COL errors, plan, ops, dot,
# run's JSON and .safetensors output (with the data checked by recomputing a spec in Python),
# bench's JSON and SVG, import-hf of a checkpoint (validated, run, and generating transformers'
# greedy tokens), serve-bench with 4 workers and its JSON, and that the overlap pair of specs
# (timed against each other on the GPU by scripts/gpu/gpu_run.sh) stays one computation.
set -uo pipefail
recap=$1
specs=specs # //specs:all, in the runfiles tree the test starts in
bad_specs=tests/data/bad_specs
tmp=${TEST_TMPDIR:-$(mktemp -d)}
failures=0

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# expect CODE DESCRIPTION -- COMMAND...: runs it, keeps stdout/stderr in $tmp/out, $tmp/err.
expect() {
  local want=$1 what=$2
  shift 3
  "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  if [ "$got" -ne "$want" ]; then
    fail "$what: exit $got, expected $want ($*)"
    sed 's/^/    /' "$tmp/err" | head -20
  fi
}

check_json() { # FILE: parses as JSON
  python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$1" 2>>"$tmp/err" ||
    fail "$1 is not valid JSON"
}

# --help on every subcommand, usage errors.
for cmd in info validate plan ops dot run bench bench-ops bench-gemm bench-capture bench-decode \
  bench-loop serve-bench memviz launch import-hf generate env schema completion man; do
  expect 0 "$cmd --help" -- "$recap" "$cmd" --help
  grep -q "usage: recap $cmd" "$tmp/out" || fail "$cmd --help prints no usage line"
  grep -q "^exit status: " "$tmp/out" || fail "$cmd --help has no exit status line"
  # `recap help COMMAND` and `recap --help COMMAND` print the same page.
  "$recap" help "$cmd" >"$tmp/help_cmd" 2>&1 || fail "recap help $cmd failed"
  cmp -s "$tmp/out" "$tmp/help_cmd" || fail "recap help $cmd differs from $cmd --help"
  "$recap" --help "$cmd" >"$tmp/help_cmd" 2>&1 || fail "recap --help $cmd failed"
  cmp -s "$tmp/out" "$tmp/help_cmd" || fail "recap --help $cmd differs from $cmd --help"
  # Help speaks for itself: no references into an issue tracker the user cannot see.
  grep -qiE "issue ?#?[0-9]" "$tmp/out" && fail "$cmd --help refers to an issue number"
done
expect 0 "run --help" -- "$recap" run --help
for flag in --world --rank --init --timeout; do
  grep -q -- "$flag" "$tmp/out" || fail "run --help does not list $flag"
done
# --help is printed from each command's option tables (cli/options.h): the key flags and the
# exit status line are there.
help_lists() { # COMMAND FLAG...: `recap COMMAND --help` lists every FLAG
  local cmd=$1 flag
  shift
  "$recap" "$cmd" --help >"$tmp/help" 2>&1 || fail "$cmd --help failed"
  for flag in "$@"; do
    grep -q -- "^ *$flag\b" "$tmp/help" || fail "$cmd --help does not list $flag"
  done
  grep -q "^exit status: " "$tmp/help" || fail "$cmd --help has no exit status line"
}
help_lists run --mode --device --iters --json --save-tensors --memory-snapshot --no-fusion
help_lists bench --iters --rotate --svg --base-dir
help_lists import-hf "-o, --output" --paged --dtype
help_lists generate --prompt-ids --max-tokens --top-p --logits-out
help_lists serve-bench --threads --generate --prompt-len --kv-fraction
help_lists launch --gpus --grace
grep -q "^exit status: 0 when every result matches" <("$recap" serve-bench --help) ||
  fail "serve-bench --help lost its own exit status"

# `recap completion bash`, generated from the same tables: valid bash that completes the
# commands, a command's flags and a flag's fixed values.
expect 0 "completion bash" -- "$recap" completion bash
cp "$tmp/out" "$tmp/completion.bash"
bash -n "$tmp/completion.bash" || fail "completion bash is not valid bash"
complete_words() { # WORD...: what the completion offers for the last word
  bash -c 'complete() { :; }; source "$1"; shift; COMP_WORDS=("$@")
    COMP_CWORD=$(($# - 1)); _recap; printf "%s\n" "${COMPREPLY[@]}"' _ "$tmp/completion.bash" "$@"
}
# grep reads the words from a here-string, not a pipe: it stops at its match, and a pipe's
# writer still printing would die of SIGPIPE and fail the check under pipefail.
grep -qx "bench-decode" <<<"$(complete_words recap ben)" || fail "completion: no commands"
grep -qx -- "--iters" <<<"$(complete_words recap run --it)" || fail "completion: no run flags"
grep -qx "eager graph " <<<"$(complete_words recap run --mode "" | sort | tr '\n' ' ')" ||
  fail "completion: --mode's values are not eager and graph"
grep -qx -- "--device" <<<"$(complete_words recap bench-ops --dev)" ||
  fail "completion: no bench-ops flags"
grep -q . <<<"$(complete_words recap run --iters "")" && fail "completion offers values for --iters"
grep -qx "help" <<<"$(complete_words recap he)" || fail "completion: no help command"
grep -qx "generate" <<<"$(complete_words recap help gen)" ||
  fail "completion: recap help does not complete a command's name"
expect 2 "completion without a shell" -- "$recap" completion
expect 2 "completion of another shell" -- "$recap" completion fish

# `recap man`: a roff page with every section and every command (docs_test.sh keeps
# docs/recap.1 equal to it); rendered when man is installed.
expect 0 "man" -- "$recap" man
cp "$tmp/out" "$tmp/recap.1"
for section in NAME SYNOPSIS DESCRIPTION OPTIONS COMMANDS ENVIRONMENT "EXIT STATUS"; do
  grep -q "^\.SH $section\$" "$tmp/recap.1" || grep -q "^\.SH \"$section\"\$" "$tmp/recap.1" ||
    fail "man has no $section section"
done
grep -q '^\.TH RECAP 1 ' "$tmp/recap.1" || fail "man has no .TH line"
for cmd in run bench import-hf launch completion; do
  grep -q "^\.SS $cmd\$" "$tmp/recap.1" || fail "man has no section for $cmd"
done
grep -q '^\\fB\\-\\-save\\-tensors\\fR \\fIF\\fR$' "$tmp/recap.1" ||
  fail "man does not list run's --save-tensors"
grep -q '^\\fBRECAP_ALLOC_CONF\\fR$' "$tmp/recap.1" || fail "man does not list RECAP_ALLOC_CONF"
if command -v man >/dev/null && command -v groff >/dev/null; then
  MANWIDTH=100 man -l "$tmp/recap.1" >"$tmp/man.txt" 2>"$tmp/man.err" || fail "man -l failed"
  grep -q "save-tensors" "$tmp/man.txt" || fail "the rendered man page lacks --save-tensors"
fi
expect 2 "man with an argument" -- "$recap" man extra

expect 0 "recap help" -- "$recap" help
grep -q "^commands:" "$tmp/out" || fail "recap help does not list the commands"
expect 2 "recap help of an unknown command" -- "$recap" help nosuch
grep -q "unknown command 'nosuch'" "$tmp/err" || fail "recap help nosuch does not say why"
expect 2 "recap help with two commands" -- "$recap" help run plan
expect 2 "recap --version with an argument" -- "$recap" --version extra
grep -q "takes no arguments" "$tmp/err" || fail "recap --version extra does not say why"
expect 0 "recap --help" -- "$recap" --help
# The environment section comes from the table of variables (runtime/env_table.c), which lists
# the tests' own variables for `recap env` only.
grep -q "^environment:" "$tmp/out" || fail "recap --help has no environment section"
grep -q "RECAP_ALLOC_CONF" "$tmp/out" || fail "recap --help does not list RECAP_ALLOC_CONF"
grep -q "RECAP_TEST_SEED" "$tmp/out" && fail "recap --help lists a test-only variable"
RECAP_FUSION=off expect 0 "recap env" -- "$recap" env
grep -A1 "^RECAP_FUSION " "$tmp/out" | grep -q "set: 'off'" || fail "recap env does not show a value"
grep -A1 "^RECAP_TEST_SEED " "$tmp/out" | grep -q "(tests only)" ||
  grep -q "^RECAP_TEST_SEED .*(tests only)" "$tmp/out" || fail "recap env does not mark test-only"
expect 2 "recap env with an argument" -- "$recap" env extra
# recap env marks values recap would ignore or refuse, with what it expects.
RECAP_FUSION=maybe RECAP_TUNE=3 RECAP_ALLOC_CONF=garbage:1 expect 0 "recap env, bad values" -- \
  "$recap" env
for var in FUSION TUNE ALLOC_CONF; do
  grep -A1 "^RECAP_$var " "$tmp/out" | grep -q "INVALID: " || fail "recap env: RECAP_$var not marked"
done
grep -A1 "^RECAP_ALLOC_CONF " "$tmp/out" | grep -q "unknown setting 'garbage'" ||
  fail "recap env does not say why RECAP_ALLOC_CONF is invalid"
# A malformed RECAP_ALLOC_CONF is the environment's usage error, before any spec is read.
expect 2 "run with a bad RECAP_ALLOC_CONF" -- env RECAP_ALLOC_CONF=garbage:1 "$recap" run \
  "$specs/elementwise_chain.yaml"
grep -qx "recap run: RECAP_ALLOC_CONF='garbage:1': unknown setting 'garbage' (.*)" "$tmp/err" ||
  fail "run: a bad RECAP_ALLOC_CONF is not named up front ($(head -1 "$tmp/err"))"
grep -q "elementwise_chain.yaml:" "$tmp/err" && fail "run blames the spec for RECAP_ALLOC_CONF"
# So is a malformed RECAP_DECODE_LOOP, which the generator reads only after loading its spec.
expect 2 "generate with a bad RECAP_DECODE_LOOP" -- env RECAP_DECODE_LOOP=-3 "$recap" generate \
  "$specs/elementwise_chain.yaml" --prompt-ids 1
grep -qx "recap generate: RECAP_DECODE_LOOP='-3' is not a step count in \[0, 4096\] (.*)" \
  "$tmp/err" || fail "generate: a bad RECAP_DECODE_LOOP is not named up front ($(head -1 "$tmp/err"))"
expect 2 "no command" -- "$recap"
expect 2 "unknown command" -- "$recap" frobnicate
expect 2 "unknown flag" -- "$recap" run "$specs/fork_join.yaml" --bogus
grep -q -- "--bogus" "$tmp/err" || fail "the unknown flag is not named"
expect 2 "bad number" -- "$recap" bench "$specs/fork_join.yaml" --iters 3x
grep -q -- "--iters" "$tmp/err" || fail "the bad number's flag is not named"
expect 2 "negative number" -- "$recap" run "$specs/fork_join.yaml" --iters -1
expect 2 "missing value" -- "$recap" run "$specs/fork_join.yaml" --iters
expect 2 "bad mode" -- "$recap" run "$specs/fork_join.yaml" --mode fast
expect 2 "bad dim" -- "$recap" plan "$specs/mlp_decode.yaml" --dim B=9
expect 2 "unknown dim" -- "$recap" run "$specs/mlp_decode.yaml" --dim Q=3
# The range a --dim value is refused outside of is the one the spec takes (below 2^62).
expect 2 "--dim at 2^62" -- "$recap" run "$specs/mlp_decode.yaml" --dim D=4611686018427387904
grep -q "expects an integer in \[1, 4611686018427387903\]" "$tmp/err" ||
  fail "--dim at 2^62: $(head -1 "$tmp/err")"
expect 2 "no spec" -- "$recap" validate

# info: the host device's memory is its capacity (physical memory, or the
# RECAP_HOST_MEMORY_BYTES cap), what recap has allocated from it (nothing, in `info` itself) and
# what the system has available; not a "free" equal to the total.
expect 0 "info" -- "$recap" info
cp "$tmp/out" "$tmp/info.txt"
expect 0 "info with a host memory cap" -- env RECAP_HOST_MEMORY_BYTES=1073741824 "$recap" info
cp "$tmp/out" "$tmp/info_cap.txt"
python3 - "$tmp/info.txt" "$tmp/info_cap.txt" <<'EOF' || fail "info: host memory"
import re, sys
meminfo = {l.split(":")[0]: int(l.split()[1]) * 1024 for l in open("/proc/meminfo")}
def host(path):
    text = open(path).read()
    section = text[text.index("  host:0"):]
    get = lambda label: re.search(rf"^    {label} +([0-9.]+) GiB(.*)$", section, re.M)
    return get("memory capacity"), get("allocated by recap"), get("memory available"), section
cap, used, avail, section = host(sys.argv[1])
assert "memory free" not in section, section
assert abs(float(cap.group(1)) * 2**30 - meminfo["MemTotal"]) < 0.01 * 2**30, (cap.group(0), meminfo)
assert "physical memory" in cap.group(2), cap.group(0)
assert float(used.group(1)) == 0, used.group(0)
assert abs(float(avail.group(1)) * 2**30 - meminfo["MemAvailable"]) < 0.1 * meminfo["MemTotal"]
cap, used, avail, section = host(sys.argv[2])
assert cap.group(1) == "1.00" and "RECAP_HOST_MEMORY_BYTES" in cap.group(2), cap.group(0)
assert float(avail.group(1)) <= 1.0, avail.group(0)
EOF

# validate: every example is valid; a bad spec fails with positioned errors.
expect 0 "validate specs" -- "$recap" validate "$specs"/*.yaml
expect 1 "validate a bad spec" -- "$recap" validate "$bad_specs/dim_zero.yaml"
grep -qE "dim_zero.yaml:[0-9]+:[0-9]+: error: " "$tmp/err" || fail "no FILE:LINE:COL error"
# A tensor past 2^56 bytes (the planner's limit) is a spec error at the tensor, the same in
# every command that loads a spec, whatever the device's memory.
huge=$bad_specs/tensor_over_2_56_bytes.yaml
for cmd in validate plan dot run; do
  expect 1 "$cmd of a tensor past 2^56 bytes" -- "$recap" "$cmd" "$huge"
  grep -q "tensor_over_2_56_bytes.yaml:4:3: error: tensor 'x' .* is larger than 2^56 bytes" \
    "$tmp/err" || fail "$cmd: the 2^56 limit is not reported at the tensor ($(head -1 "$tmp/err"))"
done
expect 1 "validate a missing file" -- "$recap" validate "$tmp/no_such.yaml"
# Messages speak of the spec, not of recap's source: no function names or recap file:line,
# unless a developer asks for them with RECAP_ERROR_LOCATIONS=1.
grep -q "cannot open spec" "$tmp/err" || fail "validate of a missing file does not say why"
grep -qE "recap__|\.c:[0-9]+\)" "$tmp/err" && fail "a user-facing error names recap's code: $(cat "$tmp/err")"
expect 1 "validate a missing file, locations on" -- env RECAP_ERROR_LOCATIONS=1 "$recap" validate "$tmp/no_such.yaml"
grep -qE "recap__[a-z_]+ \([a-z_]+\.c:[0-9]+\): cannot open spec" "$tmp/err" ||
  fail "RECAP_ERROR_LOCATIONS=1 does not show where the error was raised"

# validate reads weight files' headers (not their data) and checks sizes against the spec's
# device when it knows its memory, and says what it could not check.
mkdir -p "$tmp/val"
python3 - "$tmp/val" <<'EOF'
import json, struct, sys
h = json.dumps({"w": {"dtype": "F32", "shape": [1024, 1024], "data_offsets": [0, 4 << 20]}}).encode()
open(sys.argv[1] + "/good.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + bytes(4 << 20))
open(sys.argv[1] + "/corrupt.safetensors", "wb").write(struct.pack("<Q", 1 << 20) + b"{")
EOF
for f in good corrupt; do
  cat >"$tmp/val/$f.yaml" <<EOF
device: host
tensors:
  x: {shape: [1, 1024], role: input}
  w: {shape: [1024, 1024], role: param, path: $f.safetensors}
ops:
  - {op: linear, in: [x, w], out: y}
EOF
done
expect 0 "validate a spec with a weights file" -- "$recap" validate "$tmp/val/good.yaml"
grep -q "sizes checked against host:0's" "$tmp/out" || fail "validate: no memory check reported"
grep -q "not checked: the data of 1 tensor in 1 file" "$tmp/out" ||
  fail "validate: the file's data is not listed as unchecked"
expect 1 "validate a corrupt safetensors file" -- "$recap" validate "$tmp/val/corrupt.yaml"
grep -q "corrupt.yaml:4:47: error: .*safetensors header length" "$tmp/err" ||
  fail "validate: the corrupt header is not reported at the path (got: $(head -1 "$tmp/err"))"
# 4 MiB of params on a host capped at 1 MiB can never run.
expect 1 "validate params beyond the host cap" -- env RECAP_HOST_MEMORY_BYTES=1048576 \
  "$recap" validate "$tmp/val/good.yaml"
grep -q "good.yaml:4:3: error: tensor 'w' \[1024, 1024\] f32 needs 4194304 bytes, more than the device memory (1048576" \
  "$tmp/err" || fail "validate: params beyond the host cap not refused (got: $(head -1 "$tmp/err"))"
# A YAML escape that decodes to a terminal control sequence is refused at the string, and
# never printed raw.
printf '%s\n' 'name: "\e[2J\e[31mowned"' 'device: host' 'tensors: {x: {shape: [4], role: input}}' \
  'ops: [{op: relu, in: x, out: y}]' >"$tmp/val/escape.yaml"
expect 1 "validate a name with an escape sequence" -- "$recap" validate "$tmp/val/escape.yaml"
grep -q "escape.yaml:1:7: error: .*control character U+001B" "$tmp/err" ||
  fail "validate: the control character is not reported at the name"
cat "$tmp/out" "$tmp/err" | grep -q $'\e' && fail "validate printed a raw ESC byte"
# A CUDA spec on a machine without a GPU: a run falls back to the host backend, so validate
# checks the sizes against the host's memory and says so (a cap the run would hit fails it).
if ! "$recap" info 2>/dev/null | grep -qE "^ *cuda:0 "; then
  expect 0 "validate a CUDA spec without a GPU" -- "$recap" validate "$specs/mlp_decode.yaml"
  grep -q "sizes checked against host:0's .*, the host backend a run uses here" "$tmp/out" ||
    fail "validate: the host fallback's memory is not said"
  expect 1 "validate a CUDA spec beyond the host's cap" -- env RECAP_HOST_MEMORY_BYTES=1048576 \
    "$recap" validate "$specs/mlp_decode.yaml"
  grep -q "needs 33554432 bytes, more than the device memory (1048576" "$tmp/err" ||
    fail "validate: the host fallback's cap is not checked"
fi

# A FIFO where a file is expected is refused at once (opening one to read blocks until a writer
# comes): a spec, a param file named by a spec, a memory snapshot, bench-capture's spec.
mkfifo "$tmp/fifo.yaml" "$tmp/param.fifo"
printf 'name: fifo-param\ndevice: host\ndtype: f32\ntensors:\n  x: {shape: [4], role: input}\n  w: {shape: [4], role: param, path: param.fifo}\nops:\n  - {op: add, in: [x, w], out: y}\noutputs: [y]\n' >"$tmp/fifo_param.yaml"
for args in "validate $tmp/fifo.yaml" "plan $tmp/fifo.yaml" "run $tmp/fifo.yaml --device host" \
  "memviz $tmp/fifo.yaml" "bench-capture --device host --bucket-spec $tmp/fifo.yaml" \
  "validate $tmp/fifo_param.yaml" "run $tmp/fifo_param.yaml"; do
  # shellcheck disable=SC2086
  expect 1 "a FIFO ($args)" -- timeout 30 "$recap" $args
  grep -qE "FIFO|not a regular file" "$tmp/err" || fail "$args: the FIFO is not named as the cause"
done

# backend:cudaMallocAsync (no private pools): every command that creates a pipeline works, in
# graph mode, and computes what the caching allocator computes.
for cmd in "run --iters 2" "bench --iters 3" "serve-bench --threads 2 --requests 8" "dot --graph"; do
  # shellcheck disable=SC2086
  expect 0 "$cmd under backend:cudaMallocAsync" -- env RECAP_ALLOC_CONF=backend:cudaMallocAsync \
    "$recap" $cmd "$specs/fork_join.yaml" --device host
done
expect 0 "bench-capture under backend:cudaMallocAsync" -- \
  env RECAP_ALLOC_CONF=backend:cudaMallocAsync "$recap" bench-capture --device host
expect 0 "run, caching allocator" -- "$recap" run "$specs/fork_join.yaml" --device host --seed 9 \
  --iters 2 --json -
mv "$tmp/out" "$tmp/caching.json"
expect 0 "run, cudaMallocAsync" -- env RECAP_ALLOC_CONF=backend:cudaMallocAsync "$recap" run \
  "$specs/fork_join.yaml" --device host --seed 9 --iters 2 --json -
python3 - "$tmp/caching.json" "$tmp/out" <<'PY' || fail "cudaMallocAsync changed the outputs"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert a["outputs"] == b["outputs"], (a["outputs"], b["outputs"])
assert b["stats"]["replays"] > 0 and b["stats"]["eager_runs"] == 0, b["stats"]
PY

# The overlap pair, which scripts/gpu/gpu_run.sh times against each other on the GPU, must stay one
# computation: the same file apart from the comments, the name and the `stream:` keys, with
# the branches on streams 1 and 2 in one and everything on stream 0 in the other.
same_ops() { grep -v -e '^#' -e '^name:' "$1" | sed 's/, stream: [0-9]*//'; }
diff <(same_ops "$specs/overlap_streams.yaml") <(same_ops "$specs/overlap_serial.yaml") \
  >/dev/null || fail "overlap_streams.yaml and overlap_serial.yaml differ beyond stream keys"
grep -q "stream: 1" "$specs/overlap_streams.yaml" && grep -q "stream: 2" "$specs/overlap_streams.yaml" ||
  fail "overlap_streams.yaml does not use side streams 1 and 2"
grep -v "^#" "$specs/overlap_serial.yaml" | grep -q "stream:" && fail "overlap_serial.yaml uses a side stream"

# ops lists the registry, without cuBLAS: the binary does not link it (it is opened on the
# first GEMM on a GPU; kernels/gemm/cuda_blas.h).
ldd "$recap" | grep -q cublas && fail "recap links cuBLAS: $(ldd "$recap" | grep cublas)"
expect 0 "ops" -- "$recap" ops
for op in matmul softmax linear attention; do
  grep -q "^$op\$" "$tmp/out" || fail "ops does not list $op"
done
grep -q "causal" "$tmp/out" || fail "ops shows no attributes"
# What a spec gets: an optional dtype attribute defaults to the spec's dtype, not f32; rope's
# positions and attention's len say their shapes and edge cases.
expect 0 "ops fill rope attention" -- "$recap" ops fill random_normal rope attention
[ "$(grep -cE "^ +dtype +dtype +spec's " "$tmp/out")" = 2 ] ||
  fail "ops: fill's and random_normal's dtype default is not the spec's"
grep -q "\[1\], a start" "$tmp/out" || fail "ops rope: the [1] form of positions is undocumented"
grep -q "len 0" "$tmp/out" && grep -q "is zeros" "$tmp/out" ||
  fail "ops attention: len 0 is undocumented"
expect 1 "ops with an unknown op" -- "$recap" ops sofmax
grep -q "softmax" "$tmp/err" || fail "no suggestion for a misspelt op"

# plan prints the totals.
expect 0 "plan" -- "$recap" plan "$specs/mlp_decode.yaml"
for word in "arena:" "naive:" "max live:"; do
  grep -q "$word" "$tmp/out" || fail "plan prints no '$word'"
done
# Bytes outside the arena are counted too: mlp_decode's outputs, inputs and params (bf16, H 4096,
# B 8: y and x 8 x 4096 x 2 = 65536 B each).
grep -q "own buffers: outputs 64.00 KiB (65536 B), inputs 64.00 KiB (65536 B), params " "$tmp/out" ||
  fail "plan does not count the outputs, inputs and params outside the arena"
expect 0 "plan of one bucket" -- "$recap" plan "$specs/mlp_decode.yaml" --dim B=2
# --dim means what it means to run: a batch of the bucketed dim shows the bucket that holds it,
# any other dim is replaced (mlp_decode: x [B, H] and w1 [H, H], bf16; buckets 1 2 4 8; the
# plan's bytes are the largest bucket's, which every bucket shares).
bytes_of() { awk -v t="$1" '$1 == t { print $3 }' "$tmp/out"; }
expect 0 "plan --dim B=3" -- "$recap" plan "$specs/mlp_decode.yaml" --dim B=3
grep -q "B=3 runs in bucket B=4" "$tmp/out" || fail "plan --dim B=3 does not name bucket 4"
expect 0 "plan --dim H=1024 --dim B=3" -- "$recap" plan "$specs/mlp_decode.yaml" --dim H=1024 \
  --dim B=3
[ "$(bytes_of w1)" = $((1024 * 1024 * 2)) ] && [ "$(bytes_of x)" = $((8 * 1024 * 2)) ] ||
  fail "plan --dim H=1024: w1 $(bytes_of w1) B, x $(bytes_of x) B"
grep -q "H=1024" "$tmp/out" || fail "plan does not say which dims it replaced"
expect 2 "plan --dim of an unknown dim" -- "$recap" plan "$specs/mlp_decode.yaml" --dim Q=3
expect 0 "dot --dim B=3 --dim H=1024" -- "$recap" dot "$specs/mlp_decode.yaml" --dim B=3 \
  --dim H=1024
grep -qF 'label="x\ninput bf16 [4, 1024]"' "$tmp/out" || fail "dot --dim: x is not [4, 1024]"
grep -qF 'label="w1\nparam bf16 [1024, 1024]"' "$tmp/out" || fail "dot --dim: w1 is not [1024, 1024]"
expect 0 "dot --graph --dim H=1024" -- "$recap" dot "$specs/mlp_decode.yaml" --graph --device host \
  --dim H=1024 --dim B=1
# A replaced dim that breaks a shape is a spec error at its position (transformer_block splits
# D into heads of Dh).
expect 1 "plan --dim that breaks a shape" -- "$recap" plan "$specs/transformer_block.yaml" \
  --dim D=1000
grep -qE "transformer_block.yaml:[0-9]+:[0-9]+: error: " "$tmp/err" ||
  fail "plan --dim D=1000: no positioned error (got: $(head -1 "$tmp/err"))"
# Dim aliases (`Bs: T`): validate and plan say what an alias stands for; --dim sets one.
cat >"$tmp/serve.yaml" <<'EOF'
device: host
dims: {T: [4, 8], Bs: 2, W: 4}
entries:
  prefill: {dims: {T: [4, 8], Bs: 2}}
  decode:  {dims: {T: [1, 2, 4, 8], Bs: T}}
tensors:
  x: {shape: [T, W], role: input}
  s: {shape: [Bs, W], role: input}
ops:
  - {op: relu, in: [x], out: y}
  - {op: relu, in: [s], out: z}
EOF
expect 0 "validate a spec with an aliased dim" -- "$recap" validate "$tmp/serve.yaml"
grep -q "entry 'decode': ok (2 ops, 4 buckets; Bs = T)" "$tmp/out" ||
  fail "validate does not show the decode entry's alias (got: $(cat "$tmp/out"))"
expect 0 "plan an entry with an alias" -- "$recap" plan "$tmp/serve.yaml" --entry decode --dim T=3
grep -q "dim aliases: Bs = T (4)" "$tmp/out" || fail "plan does not show Bs = T (4)"
[ "$(bytes_of s)" = $((8 * 4 * 4)) ] || fail "plan --entry decode: s is $(bytes_of s) B"
expect 0 "plan --dim Bs=T" -- "$recap" plan "$tmp/serve.yaml" --dim Bs=T
grep -q "dim aliases: Bs = T (8)" "$tmp/out" || fail "plan --dim Bs=T does not alias Bs"
expect 0 "run an entry with an alias" -- "$recap" run "$tmp/serve.yaml" --entry decode --dim T=3 \
  --iters 2 --warmup 1
expect 2 "plan --dim alias of an unknown dim" -- "$recap" plan "$tmp/serve.yaml" --dim Bs=Q
grep -q "no dim 'Q'" "$tmp/err" || fail "--dim Bs=Q: the unknown dim is not named"
expect 2 "plan --dim aliases in a cycle" -- "$recap" plan "$tmp/serve.yaml" --entry decode \
  --dim T=Bs
grep -q "cycle (T = Bs, Bs = T)" "$tmp/err" || fail "--dim T=Bs: the cycle is not named"

# plan shows what the fusion pass fused; --no-fusion and RECAP_FUSION=0 turn it off.
expect 0 "plan fused" -- "$recap" plan "$specs/elementwise_chain.yaml"
grep -q "100 spec ops became" "$tmp/out" || fail "plan shows no fused ops"
grep -q "fused\[add,mul,tanh,scale," "$tmp/out" || fail "plan does not name the fused op"
expect 0 "plan unfused" -- "$recap" plan "$specs/elementwise_chain.yaml" --no-fusion
grep -q "fusion: off" "$tmp/out" || fail "plan --no-fusion still fuses"
expect 0 "plan RECAP_FUSION=0" -- env RECAP_FUSION=0 "$recap" plan "$specs/elementwise_chain.yaml"
grep -q "fusion: off" "$tmp/out" || fail "plan with RECAP_FUSION=0 still fuses"
# Boolean switches take 1/0, true/false, yes/no, on/off; anything else warns, naming the variable.
expect 0 "plan RECAP_FUSION=off" -- env RECAP_FUSION=off "$recap" plan "$specs/elementwise_chain.yaml"
grep -q "fusion: off" "$tmp/out" || fail "plan with RECAP_FUSION=off still fuses"
expect 0 "plan RECAP_FUSION=maybe" -- env RECAP_FUSION=maybe "$recap" plan "$specs/elementwise_chain.yaml"
grep -q "100 spec ops became" "$tmp/out" || fail "RECAP_FUSION=maybe did not keep the default (on)"
[ "$(grep -c "RECAP_FUSION='maybe'" "$tmp/err")" = 1 ] ||
  fail "RECAP_FUSION=maybe: no single warning naming the variable"

# plan counts the streams the ops use (not the highest index + 1) and says how many waits it
# lists: fork_join with its second branch on stream 63 uses 3 streams, with 4 waits between
# ops and 2 joins at the end of the pipeline.
sed 's/stream: 2/stream: 63/' "$specs/fork_join.yaml" >"$tmp/fork_join_63.yaml"
expect 0 "plan with stream 63" -- "$recap" plan "$tmp/fork_join_63.yaml"
grep -q "6 ops, 12 tensors, 3 streams (0, 1, 63)," "$tmp/out" ||
  fail "plan miscounts the streams: $(grep '^plan for' "$tmp/out")"
grep -q "^waits (4 between ops, 2 end-of-pipeline joins):$" "$tmp/out" ||
  fail "plan's waits header: $(grep '^waits' "$tmp/out")"
[ "$(grep -c -e "^  op .* waits for op" -e "^  end of pipeline joins" "$tmp/out")" = 6 ] ||
  fail "plan does not list 6 waits and joins"
expect 0 "dot with stream 63" -- "$recap" dot "$tmp/fork_join_63.yaml"
[ "$(grep -c "subgraph cluster_stream" "$tmp/out")" = 3 ] || fail "dot draws clusters of unused streams"

# dot: the DAG, and the captured graph.
expect 0 "dot" -- "$recap" dot "$specs/fork_join.yaml"
grep -q "^digraph" "$tmp/out" || fail "dot prints no digraph"
grep -q "wait" "$tmp/out" || fail "dot shows no cross-stream wait for fork_join"
expect 0 "dot --graph" -- "$recap" dot "$specs/elementwise_chain.yaml" --graph --device host
grep -q "digraph" "$tmp/out" || fail "dot --graph prints no digraph"

# Blocks: plan, dot and errors show the instances' names; the layer count is a dim. Each layer's
# two residual adds fold into the bias-free linears before them (engine/fuse.h): 90 spec ops,
# 82 after fusion with 4 layers, 42 with 2. With RECAP_FUSION_PROLOGUES=1 its two RMSNorms and
# the final one fold into the linears that read them too: 73 ops.
expect 0 "plan of a blocked spec, prologue folds on" -- env RECAP_FUSION_PROLOGUES=1 "$recap" plan \
  "$specs/decoder_blocks.yaml"
grep -q "^plan for 'decoder-blocks': 73 ops," "$tmp/out" &&
  grep -q "^fusion: 38 spec ops became 21 fused ops" "$tmp/out" ||
  fail "plan: decoder_blocks' norms are not folded with RECAP_FUSION_PROLOGUES=1"
expect 0 "plan of a blocked spec" -- "$recap" plan "$specs/decoder_blocks.yaml"
grep -q "^plan for 'decoder-blocks': 82 ops," "$tmp/out" || fail "plan: decoder_blocks is not 82 ops"
grep -q "^fusion: 16 spec ops became 8 fused ops" "$tmp/out" ||
  fail "plan: decoder_blocks' residual adds are not folded"
grep -q "^layers.3.wqkv " "$tmp/out" || fail "plan shows no layers.3.wqkv"
grep -q "'layers.3.attention' writes it" "$tmp/out" || fail "plan does not name op layers.3.attention"
expect 0 "plan of a blocked spec --dim L=2" -- "$recap" plan "$specs/decoder_blocks.yaml" --dim L=2
grep -q "^plan for 'decoder-blocks': 42 ops," "$tmp/out" && ! grep -q "^layers.2\." "$tmp/out" ||
  fail "plan --dim L=2 does not make two layers"
expect 0 "dot of a blocked spec" -- "$recap" dot "$specs/decoder_blocks.yaml"
grep -qF 'label="layers.3.attention\nattention"' "$tmp/out" || fail "dot does not name layers.3.attention"
# Layer 3's output projection gets a width of its own (W3), which does not fit.
sed -e 's/wo:    {shape: \[D, D\]/wo:    {shape: [D, "W{i}"]/' \
  -e 's/^  L: 4 .*/&\n  W0: 256\n  W1: 256\n  W2: 256\n  W3: 128/' \
  "$specs/decoder_blocks.yaml" >"$tmp/blocks_bad.yaml"
expect 1 "validate a block with a bad shape in layer 3" -- "$recap" validate "$tmp/blocks_bad.yaml"
grep -qE "blocks_bad.yaml:[0-9]+:[0-9]+: error: in layers.3 \(block 'layer', i = 3\): op 'layers.3.out_proj'" \
  "$tmp/err" && [ "$(grep -c error: "$tmp/err")" = 1 ] ||
  fail "a block's error does not name layer 3 once (got: $(cat "$tmp/err"))"

# run with JSON on the small specs.
for spec in elementwise_chain fork_join; do
  expect 0 "run $spec" -- "$recap" run "$specs/$spec.yaml" --device host --iters 2 --warmup 1 \
    --json - --seed 5
  cp "$tmp/out" "$tmp/$spec.json"
  check_json "$tmp/$spec.json"
done
expect 0 "run eager" -- "$recap" run "$specs/fork_join.yaml" --device host --mode eager \
  --iters 1 --seed 5 --json -
cp "$tmp/out" "$tmp/fork_join_eager.json"
# Same seed, same inputs: graph and eager agree.
python3 - "$tmp/fork_join.json" "$tmp/fork_join_eager.json" <<'EOF' || fail "run: graph and eager outputs differ"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["mode"] == "graph" and b["mode"] == "eager"
for x, y in zip(a["outputs"], b["outputs"]):
    assert x["shape"] == y["shape"] and abs(x["sum"] - y["sum"]) <= 1e-3 * max(1, abs(y["sum"])), (x, y)
EOF

# Non-finite outputs stay visible: run --json writes NaN and infinities as "nan", "inf" and
# "-inf" (JSON has no such numbers) and counts them per output; the text says so too.
mkdir -p "$tmp/nonfinite"
python3 -c 'import struct, sys
open(sys.argv[1], "wb").write(struct.pack("<4f", 1, 0, -1, 2))' "$tmp/nonfinite/m.bin"
cat >"$tmp/nonfinite/spec.yaml" <<'EOF'
name: nonfinite
device: host
tensors:
  big: {shape: [4], role: input, value: 100}
  m:   {shape: [4], role: input, path: m.bin}
ops:
  - {op: exp, in: [big], out: pos_inf}
  - {op: neg, in: [pos_inf], out: neg_inf}
  - {op: div, in: [m, m], out: one_nan}
  - {op: add, in: [m, m], out: finite}
outputs: [pos_inf, neg_inf, one_nan, finite]
EOF
expect 0 "run --json with non-finite outputs" -- "$recap" run "$tmp/nonfinite/spec.yaml" --iters 1 \
  --warmup 0 --json -
cp "$tmp/out" "$tmp/nonfinite.json"
python3 - "$tmp/nonfinite.json" <<'EOF' || fail "run --json hides non-finite outputs"
import json, sys
outs = {o["name"]: o for o in json.load(open(sys.argv[1]))["outputs"]}
o = outs["pos_inf"]
assert (o["sum"], o["abs_sum"], o["first"], o["nonfinite"]) == ("inf", "inf", ["inf"] * 4, 4), o
o = outs["neg_inf"]
assert (o["sum"], o["abs_sum"], o["first"], o["nonfinite"]) == ("-inf", "inf", ["-inf"] * 4, 4), o
o = outs["one_nan"]
assert (o["sum"], o["abs_sum"], o["first"], o["nonfinite"]) == ("nan", "nan", [1, "nan", 1, 1], 1), o
o = outs["finite"]
assert (o["sum"], o["abs_sum"], o["first"], o["nonfinite"]) == (4, 8, [2, 0, -2, 4], 0), o
EOF
expect 0 "run with non-finite outputs" -- "$recap" run "$tmp/nonfinite/spec.yaml" --iters 1 \
  --warmup 0
grep -q "one_nan .*1 non-finite" "$tmp/out" || fail "run's text does not count non-finite elements"

# Seeds: --seed takes the whole range a spec's seed: takes (0 .. 2^64 - 1), so every printed
# seed is accepted back, and JSON carries seeds as decimal strings (exact beyond 2^53).
expect 0 "run --seed 2^64-1" -- "$recap" run "$specs/fork_join.yaml" --device host --iters 1 \
  --warmup 0 --seed 18446744073709551615 --json -
cp "$tmp/out" "$tmp/seed_max.json"
expect 2 "run --seed 2^64" -- "$recap" run "$specs/fork_join.yaml" --seed 18446744073709551616
expect 2 "run --seed -1" -- "$recap" run "$specs/fork_join.yaml" --seed -1
# Without seed: in the spec nor --seed, a fresh seed, printed.
grep -v "^seed:" "$specs/fork_join.yaml" >"$tmp/unseeded.yaml"
expect 0 "run with a fresh seed" -- "$recap" run "$tmp/unseeded.yaml" --device host --iters 1 \
  --warmup 0 --json -
cp "$tmp/out" "$tmp/seed_fresh.json"
fresh=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["seed"])' "$tmp/seed_fresh.json")
expect 0 "run --seed with the printed seed" -- "$recap" run "$tmp/unseeded.yaml" --device host \
  --iters 1 --warmup 0 --json - --seed "$fresh"
cp "$tmp/out" "$tmp/seed_again.json"
expect 0 "bench --seed 2^64-1" -- "$recap" bench "$specs/elementwise_chain.yaml" --device host \
  --iters 1 --warmup 0 --seed 18446744073709551615 --json "$tmp/seed_bench.json"
expect 0 "serve-bench --seed 2^64-1" -- "$recap" serve-bench "$specs/fork_join.yaml" --device host \
  --threads 1 --requests 2 --seed 18446744073709551615 --json "$tmp/seed_serve.json"
python3 - "$tmp" <<'EOF' || fail "seeds: not one range, or not exact in JSON"
import json, sys
d = lambda name: json.load(open(f"{sys.argv[1]}/{name}.json"))
for name in ("seed_max", "seed_bench", "seed_serve"):
    assert d(name)["seed"] == "18446744073709551615", (name, d(name)["seed"])
assert d("seed_max")["seed_from"] == "--seed", d("seed_max")
fresh, again = d("seed_fresh"), d("seed_again")
assert isinstance(fresh["seed"], str) and fresh["seed_from"] == "random", fresh["seed"]
assert again["seed"] == fresh["seed"], (again["seed"], fresh["seed"])
assert [o["sum"] for o in again["outputs"]] == [o["sum"] for o in fresh["outputs"]]
EOF
# --version: the version, the commit, then the CUDA libraries (or that the build has none).
expect 0 "--version" -- "$recap" --version
head -1 "$tmp/out" | grep -qE '^recap [0-9]+\.[0-9]+\.[0-9]+ \(commit [^ )]+\)$' ||
  fail "--version does not say 'recap X.Y.Z (commit C)': $(head -1 "$tmp/out")"
grep -qE '^CUDA' "$tmp/out" || fail "--version has no CUDA line"
version=$(head -1 "$tmp/out" | cut -d' ' -f2)
# Every command takes --json FILE, and - for stdout (the JSON alone, the text report on stderr);
# every JSON result records where it ran.
expect 0 "bench --json -" -- "$recap" bench "$specs/fork_join.yaml" --device host --iters 1 \
  --warmup 0 --json -
cp "$tmp/out" "$tmp/bench_stdout.json"
grep -q "fork-join" "$tmp/err" || fail "bench --json -: the text report is not on stderr"
expect 0 "run --json FILE" -- "$recap" run "$specs/fork_join.yaml" --device host --iters 1 \
  --warmup 0 --json "$tmp/run_file.json"
grep -q "^outputs:" "$tmp/out" || fail "run --json FILE: no text report on stdout"
grep -q "^wrote $tmp/run_file.json" "$tmp/out" || fail "run --json FILE: no 'wrote FILE' line"
python3 - "$tmp" "$version" <<'EOF' || fail "JSON results lack their environment"
import json, sys
tmp, version = sys.argv[1:]
for name in ("bench_stdout", "run_file", "seed_max", "seed_bench", "seed_serve"):
    env = json.load(open(f"{tmp}/{name}.json"))["environment"]
    keys = {"recap", "commit", "device", "gpu", "driver", "cuda_runtime", "cublas", "cublaslt"}
    assert set(env) == keys, (name, sorted(env))
    assert env["recap"] == version and env["commit"], (name, env)
    assert env["device"] == "host" and env["gpu"] == "none (host backend)", (name, env)
    assert all(isinstance(env[k], str) and env[k] for k in keys), (name, env)
EOF
# A spec's seed: (fork_join's is 11) also seeds the CLI's inputs, so a run without flags is
# reproducible; --seed overrides it.
for k in 1 2 flag11 flag8; do
  flags=()
  case $k in flag11) flags=(--seed 11) ;; flag8) flags=(--seed 8) ;; esac
  expect 0 "run a seeded spec ($k)" -- "$recap" run "$specs/fork_join.yaml" --device host --iters 1 \
    --warmup 0 --json - "${flags[@]}"
  cp "$tmp/out" "$tmp/seeded_$k.json"
done
python3 - "$tmp" <<'EOF' || fail "a spec's seed: does not seed the CLI's inputs"
import json, sys
d = lambda k: json.load(open(f"{sys.argv[1]}/seeded_{k}.json"))
sums = lambda k: [o["sum"] for o in d(k)["outputs"]]
assert d(1)["seed"] == d(2)["seed"] == "11" and d(1)["seed_from"] == "spec", d(1)
assert sums(1) == sums(2) == sums("flag11"), (sums(1), sums(2), sums("flag11"))
assert d("flag8")["seed"] == "8" and sums("flag8") != sums(1)
EOF
expect 0 "run a seeded spec (text)" -- "$recap" run "$specs/fork_join.yaml" --device host \
  --iters 1 --warmup 0
grep -q "from seed 11 (the spec's seed:" "$tmp/out" || fail "run does not say the seed is the spec's"

# A pipeline far too large for the CPU is announced before anything is allocated: run and bench
# of mlp_large (4 linear layers of 2 B H^2 FLOPs) warn with the work per run. A 600 MiB device
# cap, enough for the load's size checks (576 MiB of inputs and params) but not for the outputs
# too, then makes the pipeline fail after the params, past the warning. The params start as
# zeros here (a copy of the spec), so binding them costs a memset, not 268M normal draws.
# Small specs get no warning.
sed 's/init: normal, std: 0.02/init: zeros/' "$specs/mlp_large.yaml" >"$tmp/mlp_large.yaml"
for cmd in run bench; do
  expect 1 "$cmd of a very large spec on the host" -- env RECAP_HOST_MEMORY_BYTES=629145600 \
    "$recap" "$cmd" "$tmp/mlp_large.yaml" --device host
  python3 - "$tmp/mlp_large.yaml" "$tmp/err" <<'EOF' || fail "$cmd: no work estimate for mlp_large"
import re, sys
spec, err = open(sys.argv[1]).read(), open(sys.argv[2]).read()
b, h = (int(re.search(rf"^  {d}: (\d+)$", spec, re.M).group(1)) for d in "BH")
flops = spec.count("op: linear") * 2 * b * h * h
m = re.search(r"warning: .*? ([0-9.]+) TFLOP per run", err)
assert m, err
assert abs(float(m.group(1)) * 1e12 - flops) < 0.03 * flops, (m.group(1), flops)
assert re.search(r"its [0-9]+ runs", err) and "--iters" in err and "--dim" in err, err
EOF
done
expect 0 "run of a small spec" -- "$recap" run "$specs/fork_join.yaml" --device host --iters 1
grep -q "warning" "$tmp/err" && fail "a small spec gets a size warning"

# --warmup 0 means no warmup runs, also none before the capture: the replays are the timed
# ones alone, and warmup time is far below one run's (about 1%; a loaded 2-core machine once
# took a quarter of a run), where --warmup 1 replays once more and spends about one run per
# bucket (fork_join has one).
for w in 0 1; do
  expect 0 "run --warmup $w" -- "$recap" run "$specs/fork_join.yaml" --device host --iters 2 \
    --warmup $w --json -
  cp "$tmp/out" "$tmp/warmup_$w.json"
done
python3 - "$tmp/warmup_0.json" "$tmp/warmup_1.json" <<'EOF' || fail "--warmup 0 still warms up"
import json, sys
zero, one = (json.load(open(p)) for p in sys.argv[1:3])
assert zero["warmup"] == 0 and zero["stats"]["replays"] == 2, zero
assert zero["setup"]["warmup_ms"] < 0.5 * zero["timing"]["min_ms"], zero
assert one["stats"]["replays"] == 3 and one["setup"]["warmup_ms"] > 0.5 * one["timing"]["min_ms"], one
EOF

# --save-tensors and --memory-snapshot into a missing folder: a usage error before any run.
expect 2 "run --save-tensors into a missing folder" -- "$recap" run "$specs/elementwise_chain.yaml" \
  --device host --iters 1 --save-tensors "$tmp/missing/x.safetensors"
grep -q "missing/x.safetensors" "$tmp/err" || fail "--save-tensors: the path is not named"
expect 2 "run --memory-snapshot into a missing folder" -- "$recap" run \
  "$specs/elementwise_chain.yaml" --device host --iters 1 --memory-snapshot "$tmp/missing/s.json"
# --save-tensors: a valid .safetensors file whose data reproduces the output.
expect 0 "run --save-tensors" -- "$recap" run "$specs/elementwise_chain.yaml" --device host \
  --iters 1 --warmup 0 --seed 9 --save-tensors "$tmp/chain.safetensors"
python3 - "$tmp/chain.safetensors" <<'EOF' || fail "--save-tensors: bad file or wrong data"
import math, os
import sys
sys.path.insert(0, "tests")
from safetensors_tensors import load
header, tensor = load(sys.argv[1])
entries = sorted((v["data_offsets"], k) for k, v in header.items() if k != "__metadata__")
pos = 0
for (begin, end), name in entries:
    assert begin == pos, f"{name} starts at {begin}, expected {pos}"
    pos = end
data_bytes = os.path.getsize(sys.argv[1]) - 8 - int.from_bytes(open(sys.argv[1], "rb").read(8), "little")
assert pos == data_bytes, f"data_offsets cover {pos} bytes of {data_bytes}"
for k in ("x", "bias", "gain", "y"):
    assert header[k]["dtype"] == "F32" and header[k]["shape"] == [4096], header[k]
x, bias, gain, y = (tensor(k)[1] for k in ("x", "bias", "gain", "y"))
assert any(v != 0 for v in x), "inputs are all zero"
h = list(x)
for step in range(25):  # the spec: (add bias, mul gain, tanh, scale 1.5) x 25
    h = [1.5 * math.tanh((v + b) * g) for v, b, g in zip(h, bias, gain)]
worst = max(abs(a - b) for a, b in zip(h, y))
assert worst < 1e-4, f"y differs from the recomputation by {worst}"
EOF

# A bucketed param loads from a raw file that holds the largest bucket's rows; a smaller batch
# runs on its first rows.
mkdir -p "$tmp/bucketed_file"
python3 -c 'import struct, sys
open(sys.argv[1], "wb").write(struct.pack("<12f", *[0.5 * i + 1 for i in range(12)]))' \
  "$tmp/bucketed_file/w.bin"
cat >"$tmp/bucketed_file/spec.yaml" <<'EOF'
name: bucketed-file
device: host
dims: {B: [1, 2, 4]}
tensors:
  x: {shape: [B, 3], role: input}
  w: {shape: [B, 3], role: param, path: w.bin}
ops:
  - {op: add, in: [x, w], out: y}
outputs: [y]
EOF
for batch in 2 4; do
  expect 0 "run a bucketed param from a file, B=$batch" -- "$recap" run \
    "$tmp/bucketed_file/spec.yaml" --iters 1 --warmup 0 --dim B=$batch \
    --save-tensors "$tmp/bucketed_file/$batch.safetensors"
  python3 - "$tmp/bucketed_file/$batch.safetensors" "$tmp/bucketed_file/w.bin" $batch <<'EOF' ||
import struct
import sys
sys.path.insert(0, "tests")
from safetensors_tensors import load
header, tensor = load(sys.argv[1])
rows = int(sys.argv[3])
w_file = list(struct.unpack("<12f", open(sys.argv[2], "rb").read()))
shape, w = tensor("w")
assert shape == [rows, 3] and w == w_file[:3 * rows], (shape, w)
_, x = tensor("x")
_, y = tensor("y")
assert all(abs(a - (b + c)) < 1e-6 for a, b, c in zip(y, x, w)), (y, x, w)
EOF
    fail "a bucketed param from a file, B=$batch: wrong rows or result"
done

# Inputs get what their init says: value, zeros and file as the library binds them (a file of a
# bucketed input holds the largest bucket; a smaller batch takes its first rows), uniform and
# normal drawn from the input seed with their bounds, and an integer input without init zeros.
# The data is checked against the spec's numbers and the outputs recomputed from it.
mkdir -p "$tmp/inits"
python3 -c 'import struct, sys
open(sys.argv[1], "wb").write(struct.pack("<32f", *[0.25 * i - 3 for i in range(32)]))' \
  "$tmp/inits/f.bin"
cat >"$tmp/inits/inits.yaml" <<'EOF'
name: input-inits
device: host
dims: {B: [2, 4]}
tensors:
  table: {shape: [16, 8], role: param, init: uniform}
  ids:   {shape: [B], role: input, dtype: i32}
  tok:   {shape: [B], role: input, dtype: i32, init: value, value: 3}
  c:     {shape: [B, 8], role: input, value: 2.5}
  z:     {shape: [B, 8], role: input, init: zeros}
  f:     {shape: [B, 8], role: input, path: f.bin}
  u:     {shape: [B, 8], role: input, init: uniform, low: 5, high: 6}
  n:     {shape: [B, 8], role: input, init: normal, mean: 100, std: 0.5}
ops:
  - {op: embedding, in: [table, ids], out: e0}
  - {op: embedding, in: [table, tok], out: e3}
  - {op: add, in: [c, z], out: cz}
  - {op: add, in: [f, u], out: fu}
  - {op: add, in: [cz, n], out: czn}
outputs: [e0, e3, fu, czn]
EOF
expect 0 "run honours input inits" -- "$recap" run "$tmp/inits/inits.yaml" --iters 1 --warmup 0 \
  --dim B=3 --seed 4 --save-tensors "$tmp/inits.safetensors"
grep -q "u .*uniform \[5, 6)" "$tmp/out" || fail "run does not say how it filled input u"
python3 - "$tmp/inits.safetensors" "$tmp/inits/f.bin" <<'EOF' || fail "run: inputs ignore their init"
import struct
import sys
sys.path.insert(0, "tests")
from safetensors_tensors import load
header, tensor = load(sys.argv[1])
f_file = list(struct.unpack("<32f", open(sys.argv[2], "rb").read()))
shape, ids = tensor("ids"); assert shape == [3] and ids == [0, 0, 0], ids
_, tok = tensor("tok"); assert tok == [3, 3, 3], tok
_, c = tensor("c"); assert c == [2.5] * 24, c
_, z = tensor("z"); assert z == [0.0] * 24, z
shape, f = tensor("f"); assert shape == [3, 8] and f == f_file[:24], f
_, u = tensor("u"); assert all(5 <= v < 6 for v in u) and len(set(u)) > 20, u
_, nn = tensor("n"); assert all(97.5 < v < 102.5 for v in nn) and len(set(nn)) > 20, nn
assert abs(sum(nn) / 24 - 100) < 0.5, sum(nn) / 24
_, table = tensor("table")
_, e0 = tensor("e0"); assert e0 == table[0:8] * 3, e0
_, e3 = tensor("e3"); assert e3 == table[24:32] * 3, e3
_, fu = tensor("fu"); assert all(abs(a - (x + y)) < 1e-5 for a, x, y in zip(fu, f, u)), fu
_, czn = tensor("czn"); assert all(abs(a - (2.5 + x)) < 1e-4 for a, x in zip(czn, nn)), czn
EOF
expect 0 "bench with input inits" -- "$recap" bench "$tmp/inits/inits.yaml" --iters 2 --warmup 1 \
  --dim B=3
expect 0 "serve-bench with input inits" -- "$recap" serve-bench "$tmp/inits/inits.yaml" \
  --threads 2 --requests 20 --seed 2

# --save-tensors of a spec with state and scalars (a KV cache, a position) holds them as the
# last run read them, so the file alone reproduces the outputs: here y = 2 * (the cache with
# row pos replaced by x).
cat >"$tmp/save_state.yaml" <<'EOF'
name: save-state
device: host
dims: {B: [1, 2]}
tensors:
  x:     {shape: [B, 1, 1, 4], role: input}
  pos:   {role: scalar, value: 2}
  cache: {shape: [B, 4, 1, 4], role: state, init: uniform}
ops:
  - {op: kv_append, in: [cache, x, pos], out: all}
  - {op: scale, in: [all], out: y, scale: 2}
outputs: [y]
EOF
expect 0 "run --save-tensors with state" -- "$recap" run "$tmp/save_state.yaml" --iters 1 \
  --warmup 0 --dim B=1 --save-tensors "$tmp/save_state.safetensors"
python3 - "$tmp/save_state.safetensors" <<'EOF' || fail "--save-tensors: states or scalars missing or wrong"
import sys
sys.path.insert(0, "tests")
from safetensors_tensors import load
header, tensor = load(sys.argv[1])
shape, pos = tensor("pos")
assert shape == [1] and pos == [2], (shape, pos)
shape, cache = tensor("cache")
assert shape == [1, 4, 1, 4] and len(set(cache)) == 16, (shape, cache)
_, x = tensor("x")
_, y = tensor("y")
# The cache as the run read it: before its append (no warmup, one run).
assert cache[8:12] != x, "the cache was saved after the run wrote it"
want = cache[:8] + x + cache[12:]
assert all(abs(a - 2 * b) < 1e-6 for a, b in zip(y, want)), (y, want)
assert "before the last run" in header["__metadata__"]["states"], header["__metadata__"]
EOF

# bench with JSON and SVG.
expect 0 "bench" -- "$recap" bench "$specs/elementwise_chain.yaml" --device host --iters 3 \
  --warmup 1 --json "$tmp/bench.json" --svg "$tmp/bench.svg"
check_json "$tmp/bench.json"
python3 - "$tmp/bench.json" <<'EOF' || fail "bench JSON lacks fields"
import json, sys
d = json.load(open(sys.argv[1]))
for mode in ("eager", "graph"):
    for key in ("median_ms", "p10_ms", "p90_ms", "launches_per_iter"):
        assert key in d[mode], (mode, key)
    assert len(d[mode]["samples_ms"]) == 3
# Fusion (on by default) makes the 100 ops one kernel.
assert d["fused_ops"] == 100 and d["eager"]["launches_per_iter"] == 1, d["eager"]
assert d["graph"]["launches_per_iter"] == 1
for key in ("speedup", "setup", "memory"):
    assert key in d, key
EOF
head -c 4 "$tmp/bench.svg" | grep -q "<svg" || fail "the SVG does not start with <svg"
grep -q "graph replay" "$tmp/bench.svg" || fail "the SVG has no labels"
expect 0 "bench --no-fusion" -- "$recap" bench "$specs/elementwise_chain.yaml" --device host \
  --iters 2 --warmup 1 --no-fusion --json "$tmp/bench_unfused.json"
python3 - "$tmp/bench_unfused.json" <<'EOF' || fail "bench --no-fusion still fuses"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["fused_ops"] == 0 and d["eager"]["launches_per_iter"] == 100, d["eager"]
EOF

# bench --rotate: K instances with their own params; auto follows bench/peer/peer_torch.py's rule
# (fork_join holds 32 MiB of params + inputs: 200 MB needs 6 copies).
expect 0 "bench --rotate auto" -- "$recap" bench "$specs/fork_join.yaml" --device host --iters 4 \
  --warmup 1 --rotate auto --json "$tmp/bench_rot.json"
grep -q "rotation: 6 instances" "$tmp/out" || fail "bench --rotate auto does not say it rotates"
python3 - "$tmp/bench_rot.json" <<'EOF' || fail "bench --rotate: wrong rotation or memory fields"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["rotate"] == 6, d["rotate"]
assert -(-200e6 // d["rotate_set_bytes"]) == 6, d["rotate_set_bytes"]
m = d["memory"]
assert m["graph_bytes"] == m["pool_reserved_bytes"] >= m["arena_bytes"] > 0, m
assert d["graph_vs_eager"]["mismatches"] == 0
EOF
expect 0 "bench --rotate 2" -- "$recap" bench "$specs/elementwise_chain.yaml" --device host \
  --iters 2 --warmup 0 --rotate 2 --json "$tmp/bench_rot2.json"
python3 -c 'import json, sys; assert json.load(open(sys.argv[1]))["rotate"] == 2' \
  "$tmp/bench_rot2.json" || fail "bench --rotate 2 did not rotate over 2 instances"
expect 2 "bench --rotate 0" -- "$recap" bench "$specs/fork_join.yaml" --rotate 0
expect 2 "bench --rotate x" -- "$recap" bench "$specs/fork_join.yaml" --rotate x

# bench-ops and bench-capture: the host backend runs their CI-sized smoke modes.
expect 0 "bench-ops" -- "$recap" bench-ops --device host --iters 2 --json "$tmp/ops.json"
grep -q "smoke run" "$tmp/out" || fail "bench-ops does not say that the host run is a smoke run"
python3 - "$tmp/ops.json" <<'EOF' || fail "bench-ops JSON lacks ops or fields"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["smoke"] is True and d["device"] == "host" and d["iters"] == 2, d
ops = {(r["op"], r["dtype"]): r for r in d["ops"]}
for dt in ("f32", "bf16"):
    for op in ("memcpy_d2d", "copy", "relu", "gelu", "silu", "add", "mul", "softmax",
               "layernorm", "rmsnorm"):
        r = ops[(op, dt)]
        assert r["median_us"] > 0 and r["gbps"] > 0 and r["bytes"] > 0, r
        assert r["ceiling_gbps"] == d["copy_gbps"][dt] > 0, r
    assert ops[("relu", dt)]["kind"] == "bandwidth" and ops[("relu", dt)]["target_met"] is None
gemms = {(g["dtype"], g["m"]) for g in d["gemm"]}
assert gemms == {("bf16", 64), ("f16", 64), ("bf16", 128), ("f16", 128)}, gemms
assert all(g["tflops"] > 0 and g["flops"] == 2 * g["m"] ** 3 for g in d["gemm"])
assert d["summary"]["bandwidth_targets"] == 16
EOF
expect 0 "bench-ops --elements --gemm" -- "$recap" bench-ops --device host --elements 8192 \
  --iters 1 --gemm 32
expect 2 "bench-ops --elements not a multiple of 4096" -- "$recap" bench-ops --elements 5000
expect 2 "bench-ops --gemm malformed" -- "$recap" bench-ops --gemm 32,,64
expect 2 "bench-ops positional" -- "$recap" bench-ops "$specs/fork_join.yaml"
expect 0 "bench-capture" -- "$recap" bench-capture --device host --ops 40 --repeats 2 \
  --bucket-spec "$specs/transformer_block.yaml" --json "$tmp/capture.json"
python3 - "$tmp/capture.json" <<'EOF' || fail "bench-capture JSON lacks fields or updates"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["smoke"] is True and d["device"] == "host"
c, u, b, cpu = d["capture"], d["update"], d["buckets"], d["cpu"]
assert c["ops"] == 40 and c["graph_nodes"] == 40 and c["capture_ms"] > 0, c
assert c["target"]["target_ms"] == 50 and isinstance(c["target"]["met"], bool), c
# Every rebind was applied to the executable in place.
assert u["rebinds"] == 4 and u["in_place_updates"] == 4 and u["reinstantiations"] == 0, u
assert u["target"]["target_ms"] == 5, u
assert b["buckets"] == 2 and b["captures"] == 2 and b["target"]["target_ms"] == 1000, b
assert cpu["op_launch_us"] > 0 and cpu["eager_pipeline_per_op_us"] > 0, cpu
assert cpu["replay_call_us"] > 0 and cpu["replay_graph_nodes"] == 40, cpu
EOF
# Its default bucket spec is built in: it runs from any folder.
recap_abs=$(cd "$(dirname "$recap")" && pwd)/$(basename "$recap")
expect 0 "bench-capture from another folder" -- env -C "$tmp" "$recap_abs" bench-capture \
  --device host --ops 4 --repeats 1 --json "$tmp/capture_default.json"
python3 - "$tmp/capture_default.json" <<'EOF' || fail "bench-capture's default bucket spec"
import json, sys
b = json.load(open(sys.argv[1]))["buckets"]
assert b["spec"] == "specs/transformer_block.yaml (built in)" and b["buckets"] == 2, b
EOF
expect 2 "bench-capture --ops 1" -- "$recap" bench-capture --ops 1
# Buckets: the engine's one limit (RECAP_MAX_BUCKETS, 256), refused as a usage error up front.
expect 2 "bench-capture --buckets 257" -- "$recap" bench-capture --device host --buckets 257
grep -q -- "--buckets" "$tmp/err" && grep -q "256" "$tmp/err" ||
  fail "bench-capture --buckets 257: the flag and the limit are not named ($(cat "$tmp/err"))"
expect 1 "bench-capture of a missing bucket spec" -- "$recap" bench-capture --device host \
  --ops 4 --repeats 1 --bucket-spec "$tmp/no_such.yaml"

# serve-bench: 4 workers, every result checked.
expect 0 "serve-bench" -- "$recap" serve-bench "$specs/mlp_decode.yaml" --device host \
  --threads 4 --requests 200 --dim H=256 --seed 3 --json "$tmp/serve.json"
grep -q "0 mismatches" "$tmp/out" || fail "serve-bench did not check every result"
check_json "$tmp/serve.json"
python3 - "$tmp/serve.json" <<'EOF' || fail "serve-bench JSON lacks fields or checks"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["threads"] == 4 and d["requests"] == 200 and d["served"] == 200, d
assert d["checked"] == 200 and d["mismatches"] == 0 and d["ok"] is True, d
assert d["requests_per_s"] > 0 and d["latency"]["p99_ms"] >= d["latency"]["p50_ms"] > 0, d
EOF
grep -q "requests/s" "$tmp/out" || fail "serve-bench prints no throughput"
grep -q "p99" "$tmp/out" || fail "serve-bench prints no p99"
expect 2 "serve-bench batch too large" -- "$recap" serve-bench "$specs/mlp_decode.yaml" \
  --batch-max 9

# --base-dir: a spec's files must lie under the folder; one that reaches out with .. is refused
# by every subcommand that loads specs, and the same spec without the flag still loads.
mkdir -p "$tmp/base/specs" "$tmp/outside"
head -c 64 /dev/zero >"$tmp/base/specs/w.bin"
cp "$tmp/base/specs/w.bin" "$tmp/outside/w.bin"
for where in inside outside; do
  wpath=w.bin
  [ "$where" = outside ] && wpath=../../outside/w.bin
  cat >"$tmp/base/specs/$where.yaml" <<EOF
name: base-dir-$where
device: host
dtype: f32
tensors:
  x: {shape: [4, 4], role: input}
  w: {shape: [4, 4], role: param, path: $wpath}
ops:
  - {op: add, in: [x, w], out: y}
outputs: [y]
EOF
done
expect 0 "validate under --base-dir" -- "$recap" validate "$tmp/base/specs/inside.yaml" \
  --base-dir "$tmp/base"
expect 0 "run under --base-dir" -- "$recap" run "$tmp/base/specs/inside.yaml" --iters 1 \
  --warmup 0 --base-dir "$tmp/base"
expect 0 "a spec reaching out without --base-dir" -- "$recap" validate \
  "$tmp/base/specs/outside.yaml"
for cmd in validate plan run bench dot; do
  expect 1 "$cmd of a spec reaching out of --base-dir" -- "$recap" "$cmd" \
    "$tmp/base/specs/outside.yaml" --base-dir "$tmp/base"
  grep -q "outside.yaml:6:41: error: .*escapes the base directory" "$tmp/err" ||
    fail "$cmd: the escape is not reported at the path (got: $(head -1 "$tmp/err"))"
done
expect 1 "serve-bench of a spec reaching out of --base-dir" -- "$recap" serve-bench \
  "$tmp/base/specs/outside.yaml" --base-dir "$tmp/base" --requests 1
expect 2 "--base-dir without a value" -- "$recap" validate "$tmp/base/specs/inside.yaml" \
  --base-dir

# memviz: a real snapshot (run --memory-snapshot) drawn as an SVG with segments and a legend;
# malformed snapshots exit 1 naming the problem.
expect 0 "memviz --help" -- "$recap" memviz --help
grep -q "usage: recap memviz" "$tmp/out" || fail "memviz --help prints no usage line"
expect 0 "run --memory-snapshot" -- "$recap" run "$specs/fork_join.yaml" --iters 1 --warmup 0 \
  --seed 1 --memory-snapshot "$tmp/snap.json"
check_json "$tmp/snap.json"
expect 0 "memviz --svg" -- "$recap" memviz "$tmp/snap.json" --svg "$tmp/snap.svg"
grep -q "private pool" "$tmp/out" || fail "memviz prints no private pool (graph mode)"
python3 - "$tmp/snap.svg" <<'PY' 2>>"$tmp/err" || fail "memviz SVG: $(tail -1 "$tmp/err")"
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
ns = "{http://www.w3.org/2000/svg}"
segments = [g for g in root.iter(ns + "g") if g.get("class") == "segment"]
assert len(segments) >= 2, f"{len(segments)} segments drawn"
assert all(len(g.findall(ns + "rect")) >= 3 for g in segments), "a segment without blocks"
legend = [g for g in root.iter(ns + "g") if g.get("id") == "legend"]
text = "".join(legend[0].itertext()) if legend else ""
for word in ("allocated", "free (cached)", "stream"):
    assert word in text, f"legend lacks {word!r}"
PY
printf '{"device": {"backend": "cuda", "index": 0}, "segments": [' >"$tmp/trunc.json"
expect 1 "memviz of truncated JSON" -- "$recap" memviz "$tmp/trunc.json" --svg "$tmp/x.svg"
grep -q "trunc.json:1:.*not valid JSON" "$tmp/err" || fail "truncated JSON: $(head -1 "$tmp/err")"
[ ! -e "$tmp/x.svg" ] || fail "memviz wrote an SVG for a malformed snapshot"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d["segments"][0]["blocks"][0]["size"]=-1
json.dump(d, open(sys.argv[2], "w"))' "$tmp/snap.json" "$tmp/negative.json"
expect 1 "memviz of a negative block size" -- "$recap" memviz "$tmp/negative.json"
grep -q "segments\[0\].blocks\[0\].size: -1 is out of range" "$tmp/err" ||
  fail "negative size: $(head -1 "$tmp/err")"
echo '{"device": {"backend": "cuda", "index": 0}}' >"$tmp/nosegs.json"
expect 1 "memviz without segments" -- "$recap" memviz "$tmp/nosegs.json"
grep -q "segments: missing" "$tmp/err" || fail "no segments: $(head -1 "$tmp/err")"
expect 1 "memviz of a missing file" -- "$recap" memviz "$tmp/no_such.json"
expect 2 "memviz without a file" -- "$recap" memviz

# launch: one rank on the host backend runs the spec and reports its exit; a world of 2 asked
# for on the host is a usage error before any rank starts, and one on a machine without two
# GPUs a failure before any rank starts; launch's own flags.
expect 0 "launch --help" -- "$recap" launch --help
grep -q "the timeout + 5" "$tmp/out" || fail "launch --help does not give --grace's default"
expect 0 "launch 1 host rank" -- "$recap" launch --gpus 1 -- run "$specs/tp_mlp.yaml" \
  --device host --iters 2 --warmup 1
grep -q "rank 0: exit 0" "$tmp/out" || fail "launch did not report rank 0's exit"
grep -q "rank 0 of 1" "$tmp/out" || fail "the rank printed no summary"
for device in "--device host" "--device=host"; do
  expect 2 "launch 2 ranks with $device" -- "$recap" launch --gpus 2 --timeout 20 -- run \
    "$specs/tp_mlp.yaml" $device --iters 2
  grep -q "rank" "$tmp/out" && fail "launch with $device started ranks"
  grep -q "host backend is a world of 1" "$tmp/err" || fail "launch with $device: no reason given"
done
# Without two GPUs the ranks would fall back to the host backend (a world of 1) and each fail
# at the communicator: launch refuses before starting any.
if ! "$recap" info | grep -q "^  cuda:1"; then
  expect 1 "launch 2 ranks without 2 GPUs" -- "$recap" launch --gpus 2 --timeout 20 \
    -- run "$specs/tp_mlp.yaml" --iters 2
  grep -q "rank" "$tmp/out" && fail "launch without 2 GPUs started ranks"
  grep -q "^recap launch: --gpus 2 needs 2 CUDA devices, but .*; no rank started$" "$tmp/err" ||
    fail "launch without 2 GPUs does not say why: $(head -1 "$tmp/err")"
fi
# run --world honours --no-fusion (the fusion pass folds elementwise_chain's ops otherwise).
for flag in "" --no-fusion; do
  # shellcheck disable=SC2086
  expect 0 "run --world 1 $flag" -- "$recap" run "$specs/elementwise_chain.yaml" --world 1 \
    --rank 0 --device host --iters 1 --json - $flag
  fused=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["fused_ops"])' \
    "$tmp/out" 2>/dev/null)
  if [ -z "$flag" ]; then [ "${fused:-0}" -gt 0 ] || fail "run --world fused nothing"; fi
  if [ -n "$flag" ]; then [ "${fused:-1}" = 0 ] || fail "run --world --no-fusion still fused ($fused)"; fi
done
# --init env:// under a fake torchrun environment: the world and rank come from RANK and
# WORLD_SIZE; every missing or malformed variable is a usage error naming it; under torchrun's
# agent (TORCHELASTIC_USE_AGENT_STORE) the port is RECAP_MASTER_PORT, since MASTER_PORT is
# torchrun's own store. The host backend runs a world of 1, so a world of 2 gets past the
# environment and stops at the communicator (the rendezvous itself: comm_test's env:// suite).
torch_env() { env -u TORCHELASTIC_USE_AGENT_STORE -u RECAP_MASTER_PORT LOCAL_RANK=0 \
  MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 "$@"; }
envrun=(run "$specs/tp_mlp.yaml" --init env:// --device host --iters 2 --warmup 1 --timeout 5)
expect 0 "env:// world of 1" -- torch_env RANK=0 WORLD_SIZE=1 "$recap" "${envrun[@]}"
grep -q "rank 0 of 1" "$tmp/out" || fail "env:// world of 1 printed no summary"
expect 0 "env:// with the same --world and --rank" -- torch_env RANK=0 WORLD_SIZE=1 "$recap" \
  "${envrun[@]}" --world 1 --rank 0
expect 2 "env:// with another --world" -- torch_env RANK=0 WORLD_SIZE=1 "$recap" \
  "${envrun[@]}" --world 2
grep -q -- "--world 2 disagrees with WORLD_SIZE 1" "$tmp/err" || fail "env:// --world: $(cat "$tmp/err")"
expect 2 "env:// without WORLD_SIZE" -- torch_env RANK=0 env -u WORLD_SIZE "$recap" "${envrun[@]}"
grep -q "needs WORLD_SIZE (unset" "$tmp/err" || fail "env:// without WORLD_SIZE: $(cat "$tmp/err")"
expect 2 "env:// RANK >= WORLD_SIZE" -- torch_env RANK=2 WORLD_SIZE=2 "$recap" "${envrun[@]}"
grep -q "RANK 2 is not below WORLD_SIZE 2" "$tmp/err" || fail "env:// RANK: $(cat "$tmp/err")"
for r in 0 1; do
  expect 2 "env:// under torchrun without RECAP_MASTER_PORT (rank $r)" -- torch_env RANK=$r \
    WORLD_SIZE=2 TORCHELASTIC_USE_AGENT_STORE=True "$recap" "${envrun[@]}"
  grep -q "needs RECAP_MASTER_PORT (unset)" "$tmp/err" ||
    fail "env:// under torchrun: no clear error: $(cat "$tmp/err")"
  expect 1 "env:// under torchrun with RECAP_MASTER_PORT (rank $r)" -- torch_env RANK=$r \
    WORLD_SIZE=2 TORCHELASTIC_USE_AGENT_STORE=True RECAP_MASTER_PORT=29501 "$recap" "${envrun[@]}"
  grep -q "host backend runs a world of 1" "$tmp/err" ||
    fail "env:// under torchrun with RECAP_MASTER_PORT: $(cat "$tmp/err")"
done
# recap launch --env-init hands its ranks torchrun's variables (a torchrun around it is not
# theirs: its agent flag and RECAP_MASTER_PORT are dropped) and --init env://.
expect 0 "launch --env-init 1 host rank" -- env TORCHELASTIC_USE_AGENT_STORE=True \
  RECAP_MASTER_PORT=1 "$recap" launch --gpus 1 --env-init -- run "$specs/tp_mlp.yaml" \
  --device host --iters 2 --warmup 1
grep -q "rank 0: exit 0" "$tmp/out" || fail "launch --env-init: rank 0 failed"
grep -q "rank 0 of 1" "$tmp/out" || fail "launch --env-init: the rank printed no summary"
expect 2 "launch without run" -- "$recap" launch --gpus 1
expect 2 "launch setting --rank" -- "$recap" launch --gpus 1 -- run "$specs/tp_mlp.yaml" --rank 0

# import-hf: a fixture checkpoint as a spec (docs/MODELS.md), validated and run. The copy is a
# real folder: a checkpoint's files must lie inside it, and the runfiles are links.
mkdir -p "$tmp/qwen2" && cp -L tests/data/models/qwen2/config.json \
  tests/data/models/qwen2/model.safetensors "$tmp/qwen2/"
expect 0 "import-hf" -- "$recap" import-hf "$tmp/qwen2" -o "$tmp/qwen2.yaml" --prefill 12 \
  --batch 1,2
grep -q "KV cache: 64.0 KiB per sequence" "$tmp/out" || fail "import-hf prints no KV bytes"
grep -q '^checkpoint: "qwen2"$' "$tmp/qwen2.yaml" ||
  fail "import-hf does not name the checkpoint relative to the spec"
expect 0 "validate an imported spec" -- "$recap" validate "$tmp/qwen2.yaml"
grep -q "entry 'decode': ok" "$tmp/out" || fail "the imported spec's decode entry is not checked"
# Its tensors all read one checkpoint file: counted as tensors in 1 file, not as files.
grep -qE "not checked: the data of [0-9]+ tensors in 1 file " "$tmp/out" ||
  fail "validate miscounts the imported spec's checkpoint files: $(grep "data of" "$tmp/out")"
expect 0 "run an imported spec" -- "$recap" run "$tmp/qwen2.yaml" --entry prefill --device host \
  --iters 1
grep -q "logits *f32 \[2, 12, 256\]" "$tmp/out" || fail "the imported spec's logits are missing"
# Its inputs are zeros: no seed is spoken of; its one capture is "1 capture", not "1 captures".
grep -q "^inputs, none of them random:" "$tmp/out" && ! grep -q "seed" "$tmp/out" ||
  fail "run speaks of a seed for inputs that are all zeros"
expect 0 "run a spec of one bucket" -- "$recap" run "$specs/elementwise_chain.yaml" --device host \
  --iters 1
grep -q "^stats: .* (1 launch each), 1 capture; " "$tmp/out" ||
  fail "run's stats: $(grep "^stats" "$tmp/out")"
# run's outputs never replace what the run reads: its spec or its checkpoint's files.
cksum "$tmp/qwen2/model.safetensors" >"$tmp/before"
expect 2 "run --save-tensors over the checkpoint" -- "$recap" run "$tmp/qwen2.yaml" \
  --entry decode --device host --iters 1 --save-tensors "$tmp/qwen2/model.safetensors"
grep -q "would replace .*model.safetensors, which this run reads" "$tmp/err" ||
  fail "run --save-tensors over the checkpoint: $(head -1 "$tmp/err")"
cksum "$tmp/qwen2/model.safetensors" | cmp -s - "$tmp/before" ||
  fail "run --save-tensors changed the checkpoint"
expect 2 "run --json over the spec" -- "$recap" run "$tmp/qwen2.yaml" --entry decode \
  --device host --iters 1 --json "$tmp/qwen2.yaml"
grep -q "^checkpoint:" "$tmp/qwen2.yaml" || fail "run --json replaced the spec"
# A raw weight file does not make its folder a checkpoint: a .safetensors written beside it,
# by the same command run twice, is not something the run reads.
mkdir -p "$tmp/raw" && head -c 16 /dev/zero >"$tmp/raw/x.bin"
printf 'name: t\ndevice: host\ntensors:\n  x: {shape: [4], role: input, path: x.bin}\nops:\n  - {op: relu, in: [x], out: y}\n' >"$tmp/raw/t.yaml"
for round in 1 2; do
  expect 0 "run --save-tensors beside a raw weight file ($round)" -- "$recap" run \
    "$tmp/raw/t.yaml" --save-tensors "$tmp/raw/out.safetensors"
done
expect 0 "import-hf to stdout" -- "$recap" import-hf "$tmp/qwen2" -o - --dtype bf16
grep -q "^dtype: bf16" "$tmp/out" && grep -q "cast: true" "$tmp/out" ||
  fail "import-hf --dtype bf16 does not cast the f32 checkpoint"
# generate: transformers' own greedy tokens for the fixture's prompt (expected.json).
greedy=$(python3 -c 'import json, sys; e = json.load(open(sys.argv[1]))
p = e["prompt_length"]; print(",".join(map(str, e["tokens"][:p])), " ".join(map(str, e["tokens"][p:])))' \
  tests/data/models/qwen2/expected.json)
expect 0 "generate" -- "$recap" generate "$tmp/qwen2.yaml" --prompt-ids "${greedy%% *}" \
  --max-new 16 --device host
grep -q "^generated: ${greedy#* }$" "$tmp/out" ||
  fail "generate does not reproduce transformers' greedy tokens: $(head -1 "$tmp/out")"
expect 2 "generate without a prompt" -- "$recap" generate "$tmp/qwen2.yaml"
# The same prompt from a file (--prompt-ids @FILE: prompts past what one argument holds), one
# id per line with spaces and tabs mixed in.
tr ',' '\n' <<<"${greedy%% *}" | sed 's/^/ \t/' >"$tmp/prompt.txt"
expect 0 "generate --prompt-ids @FILE" -- "$recap" generate "$tmp/qwen2.yaml" \
  --prompt-ids "@$tmp/prompt.txt" --max-new 16 --device host
grep -q "^generated: ${greedy#* }$" "$tmp/out" ||
  fail "generate --prompt-ids @FILE: $(head -1 "$tmp/out")"
expect 2 "generate --prompt-ids @ a missing file" -- "$recap" generate "$tmp/qwen2.yaml" \
  --prompt-ids "@$tmp/none.txt"
grep -q "cannot read it: No such file" "$tmp/err" || fail "--prompt-ids @missing: $(head -1 "$tmp/err")"
# One batch value above 1 is a bucket, which generate's one sequence runs padded to.
expect 0 "import-hf --batch 3" -- "$recap" import-hf "$tmp/qwen2" -o "$tmp/qwen2_b3.yaml" --batch 3
expect 0 "generate over --batch 3" -- "$recap" generate "$tmp/qwen2_b3.yaml" \
  --prompt-ids "${greedy%% *}" --max-new 16 --device host
grep -q "^generated: ${greedy#* }$" "$tmp/out" ||
  fail "generate over a spec of --batch 3 does not reproduce transformers' tokens: $(head -1 "$tmp/out")"
# Tensor parallelism (docs/MULTI_GPU.md): one spec per rank, each validated; the split rules'
# refusals; distributed generation in a world of 1 (the host backend has no larger world)
# reproduces transformers' tokens through recap_pipeline_run_dist, both layouts; recap launch
# replaces {rank} and runs generate.
expect 0 "import-hf --tp 2" -- "$recap" import-hf "$tmp/qwen2" -o "$tmp/qwen2.tp.r{rank}.yaml" \
  --tp 2 --prefill 12
grep -q "tensor parallel: 2 ranks" "$tmp/out" || fail "import-hf --tp 2 does not say it split"
for r in 0 1; do
  expect 0 "validate TP rank $r" -- "$recap" validate "$tmp/qwen2.tp.r$r.yaml"
done
grep -q "op: all_gather, in: logits_rank" "$tmp/qwen2.tp.r1.yaml" ||
  fail "import-hf --tp 2 does not gather the logits"
# q, k and v in one linear per layer as at TP 1, each key its own rows: rank 1's heads of q
# (rows Q..2Q of q_proj) and of k and v (KV..2KV), biases the same way.
q_rows=$(sed -n 's/^  Q: *\([0-9]*\).*/\1/p' "$tmp/qwen2.tp.r1.yaml")
kv_rows=$(sed -n 's/^  KV: *\([0-9]*\).*/\1/p' "$tmp/qwen2.tp.r1.yaml")
ranges="rows: \[\[$q_rows, $((2 * q_rows))\], \[$kv_rows, $((2 * kv_rows))\], \[$kv_rows, $((2 * kv_rows))\]\]"
grep -q "wqkv: {shape: \[QKV, D\], .*q_proj.weight\", .*k_proj.weight\", .*v_proj.weight\"\], $ranges}" \
  "$tmp/qwen2.tp.r1.yaml" || fail "import-hf --tp 2: no wqkv of rank 1's q, k and v rows"
grep -q "bqkv: {shape: \[QKV\], .*$ranges}" "$tmp/qwen2.tp.r1.yaml" ||
  fail "import-hf --tp 2: no bqkv of rank 1's q, k and v rows"
[ "$(grep -c "op: linear, in: \[xn, wqkv, bqkv\], out: qkv, name: qkv}" "$tmp/qwen2.tp.r1.yaml")" = 1 ] &&
  ! grep -qE "name: (q|kv|k|v)}" "$tmp/qwen2.tp.r1.yaml" ||
  fail "import-hf --tp 2: not one qkv linear per layer"
expect 2 "import-hf --tp without {rank}" -- "$recap" import-hf "$tmp/qwen2" -o "$tmp/x.yaml" --tp 2
grep -q "{rank}" "$tmp/err" || fail "import-hf --tp without {rank}: the message does not say why"
expect 1 "import-hf --tp 4 (2 KV heads)" -- "$recap" import-hf "$tmp/qwen2" -o "$tmp/x{rank}.yaml" \
  --tp 4
grep -q "num_key_value_heads 2 is not divisible by 4" "$tmp/err" ||
  fail "import-hf --tp 4 does not name the KV heads"
expect 0 "import-hf --random-weights" -- "$recap" import-hf "$tmp/qwen2" --random-weights --tp 2 \
  -o "$tmp/random.r{rank}.yaml"
grep -q "checkpoint:" "$tmp/random.r0.yaml" && fail "--random-weights still names the checkpoint"
grep -q "wqkv: {shape: \[QKV, D\], role: param, init: normal, std: 0.02}" "$tmp/random.r0.yaml" ||
  fail "--random-weights does not draw the weights"
expect 0 "generate --world 1" -- "$recap" generate "$tmp/qwen2.yaml" --prompt-ids "${greedy%% *}" \
  --max-new 16 --device host --world 1 --rank 0
grep -q "^rank 0 of 1: generated: ${greedy#* }$" "$tmp/out" ||
  fail "generate --world 1 does not reproduce transformers' greedy tokens: $(head -1 "$tmp/out")"
expect 0 "launch -- generate" -- "$recap" launch --gpus 1 -- generate "$tmp/qwen2.yaml" \
  --prompt-ids "${greedy%% *}" --max-new 4 --device host --logits-out "$tmp/logits.r{rank}"
[ -s "$tmp/logits.r0" ] || fail "launch did not replace {rank} in the generate arguments"
expect 2 "generate --world with sampling" -- "$recap" generate "$tmp/qwen2.yaml" --prompt-ids 1 \
  --world 1 --rank 0 --temperature 1
expect 2 "import-hf without -o" -- "$recap" import-hf "$tmp/qwen2"
expect 2 "import-hf bad dtype" -- "$recap" import-hf "$tmp/qwen2" -o - --dtype i32
expect 0 "import-hf --dtype in PyTorch's spelling" -- "$recap" import-hf "$tmp/qwen2" -o - \
  --dtype bfloat16
grep -q "^dtype: bf16" "$tmp/out" || fail "import-hf --dtype bfloat16 is not bf16"
# RECAP_ALLOC_CONF's PyTorch spellings: backend:native is the caching allocator (expandable
# segments allowed), noted once per process with the new name of the old no-caching mode.
RECAP_ALLOC_CONF=backend:native,expandable_segments:True expect 0 "backend:native" -- \
  "$recap" run "$specs/fork_join.yaml" --device host --iters 2
[ "$(grep -c "recap: note: RECAP_ALLOC_CONF backend:native" "$tmp/err")" -eq 1 ] ||
  fail "backend:native does not print its note exactly once"
grep -q "backend:cudaMalloc" "$tmp/err" || fail "the backend:native note does not name cudaMalloc"
RECAP_ALLOC_CONF=backend:cudaMalloc expect 0 "backend:cudaMalloc" -- \
  "$recap" run "$specs/fork_join.yaml" --device host --iters 2
grep -q "recap: note:" "$tmp/err" && fail "backend:cudaMalloc prints a note"
expect 1 "import-hf of a folder without a model" -- "$recap" import-hf "$tmp" -o -
grep -q "config.json" "$tmp/err" || fail "import-hf does not name the missing config.json"
# A size of 8 digits or more still leaves a space before its comment (else the dim is read
# as a string and the spec does not load).
expect 0 "import-hf --max-seq 10000000" -- "$recap" import-hf "$tmp/qwen2" -o "$tmp/long.yaml" \
  --random-weights --max-seq 10000000 --prefill 16
expect 0 "validate a spec of 10000000 positions" -- "$recap" validate "$tmp/long.yaml"
# -o naming one of the files the import reads is refused before anything is written.
for own in model.safetensors config.json; do
  cksum "$tmp/qwen2/$own" >"$tmp/before"
  expect 2 "import-hf -o the checkpoint's $own" -- "$recap" import-hf "$tmp/qwen2" \
    -o "$tmp/qwen2/$own"
  grep -q "is the checkpoint's own $own" "$tmp/err" ||
    fail "import-hf -o $own: the message does not say why: $(head -1 "$tmp/err")"
  cksum "$tmp/qwen2/$own" | cmp -s - "$tmp/before" || fail "import-hf -o $own changed the file"
done
# Config values transformers would read otherwise, or that no f32 holds, are refused by name.
hf_config() { # DIR ARCH JSON: a 2-layer config with JSON's keys over the defaults
  mkdir -p "$1"
  python3 -c 'import json, sys
c = {"architectures": [sys.argv[2]], "hidden_size": 64, "num_hidden_layers": 2,
     "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
     "vocab_size": 100, "max_position_embeddings": 16384, "rms_norm_eps": 1e-5,
     "hidden_act": "silu"}
c.update(json.loads(sys.argv[3])); json.dump(c, open(sys.argv[1] + "/config.json", "w"))' "$@"
}
# Sizes past a GiB print in GiB (Llama 3 8B's shape: 15.0 GiB of bf16 weights).
hf_config "$tmp/llama8b" LlamaForCausalLM '{"hidden_size": 4096, "num_hidden_layers": 32,
  "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
  "vocab_size": 128256, "torch_dtype": "bfloat16"}'
expect 0 "import-hf of an 8B shape" -- "$recap" import-hf "$tmp/llama8b" -o - --random-weights \
  --max-seq 4096
grep -q "^weights: 15.0 GiB; KV cache: 512.0 MiB per sequence" "$tmp/err" ||
  fail "import-hf's sizes: $(grep "^weights" "$tmp/err")"
hf_config "$tmp/mistral_nokey" MistralForCausalLM '{}'
expect 1 "import-hf Mistral without sliding_window past 4096" -- "$recap" import-hf \
  "$tmp/mistral_nokey" -o - --random-weights --max-seq 8192
grep -q "window of 4096 tokens" "$tmp/err" ||
  fail "a Mistral config without sliding_window does not get transformers' 4096: $(head -1 "$tmp/err")"
expect 0 "import-hf Mistral without sliding_window within 4096" -- "$recap" import-hf \
  "$tmp/mistral_nokey" -o - --random-weights --max-seq 4096
hf_config "$tmp/mistral_null" MistralForCausalLM '{"sliding_window": null}'
expect 0 "import-hf Mistral with sliding_window null" -- "$recap" import-hf "$tmp/mistral_null" \
  -o - --random-weights --max-seq 8192
for bad in 'rope_theta:{"rope_theta": 1e308}' 'rms_norm_eps:{"rms_norm_eps": 1e300}' \
  "layer_types:{\"layer_types\": [\"full_attention\"]}" \
  'rope_scaling:{"rope_parameters": {"rope_type": "default"}, "rope_scaling": {"type": "linear", "factor": 2.0}}' \
  'factor:{"rope_scaling": {"factor": 2.0}}' \
  'rope_type:{"rope_parameters": {"rope_type": "llama3", "type": "default"}}' \
  'theta:{"rope_parameters": {"rope_theta": 10000.0}, "rope_scaling": {"rope_theta": 1e6}}'; do
  hf_config "$tmp/bad_${bad%%:*}" LlamaForCausalLM "${bad#*:}"
  expect 1 "import-hf with a bad ${bad%%:*}" -- "$recap" import-hf "$tmp/bad_${bad%%:*}" -o - \
    --random-weights
  grep -q "${bad%%:*}" "$tmp/err" || fail "import-hf does not name ${bad%%:*}: $(head -1 "$tmp/err")"
done
# A config.json of fewer layers than the checkpoint holds imports (transformers also loads it),
# with a note naming the tensors nothing reads; the fixtures themselves give none.
mkdir -p "$tmp/fewer_layers" && cp -L tests/data/models/llama/model.safetensors "$tmp/fewer_layers/"
python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c["num_hidden_layers"] = 1
json.dump(c, open(sys.argv[2], "w"))' tests/data/models/llama/config.json \
  "$tmp/fewer_layers/config.json"
expect 0 "import-hf of fewer layers than the checkpoint" -- "$recap" import-hf \
  "$tmp/fewer_layers" -o "$tmp/fewer.yaml"
grep -q "note: the checkpoint holds 9 tensors the model does not read ('model.layers.1\." \
  "$tmp/err" || fail "import-hf of fewer layers: no note of the unread tensors: $(cat "$tmp/err")"
grep -q ", 1 layer, " "$tmp/out" || fail "import-hf's summary of one layer: $(head -1 "$tmp/out")"
for m in llama qwen2; do
  mkdir -p "$tmp/whole_$m" && cp -L tests/data/models/$m/config.json \
    tests/data/models/$m/model.safetensors "$tmp/whole_$m/"
  expect 0 "import-hf of the $m fixture" -- "$recap" import-hf "$tmp/whole_$m" -o "$tmp/f.yaml"
  ! grep -q "does not read" "$tmp/err" || fail "import-hf of $m notes unread tensors: $(cat "$tmp/err")"
done
# Sizes a spec cannot hold are refused by the importer, not wrapped into a wrong summary.
hf_config "$tmp/huge_sizes" LlamaForCausalLM '{"hidden_size": 1073741824, "num_attention_heads": 1,
  "num_key_value_heads": 1, "intermediate_size": 1073741824, "vocab_size": 1073741824}'
expect 1 "import-hf of 2^60 weights" -- "$recap" import-hf "$tmp/huge_sizes" -o - --random-weights
grep -q "more than 2^56 bytes of weights" "$tmp/err" ||
  fail "import-hf does not refuse weights past 2^56 bytes: $(head -1 "$tmp/err")"
hf_config "$tmp/huge_layers" LlamaForCausalLM '{"num_hidden_layers": 2147483647}'
expect 1 "import-hf of 2^31 - 1 layers" -- "$recap" import-hf "$tmp/huge_layers" -o - \
  --random-weights
grep -q "2147483647 layers: a spec repeats a block at most 4096 times" "$tmp/err" ||
  fail "import-hf does not refuse more layers than a spec repeats: $(head -1 "$tmp/err")"
# import-hf --paged: the serving layout, validated (both entries), and its decode step timed on
# the host backend (a smoke run of bench-decode: every column printed, JSON written).
expect 0 "import-hf --paged" -- "$recap" import-hf "$tmp/qwen2" -o "$tmp/qwen2_paged.yaml" \
  --paged --batch 1,2,4 --prefill 16,32 --max-seq 64 --block-size 8 --kv-blocks 32
grep -q "KV pool: 32 blocks of 8 rows per layer = 256 tokens" "$tmp/out" ||
  fail "import-hf --paged does not print the KV pool"
expect 0 "validate a paged spec" -- "$recap" validate "$tmp/qwen2_paged.yaml"
grep -q "entry 'prefill': ok" "$tmp/out" && grep -q "entry 'decode': ok" "$tmp/out" ||
  fail "the paged spec's entries are not both checked"
expect 0 "generate --world 1 (paged)" -- "$recap" generate "$tmp/qwen2_paged.yaml" \
  --prompt-ids "${greedy%% *}" --max-new 16 --device host --world 1 --rank 0
grep -q "^rank 0 of 1: generated: ${greedy#* }$" "$tmp/out" ||
  fail "generate --world 1 (paged) does not reproduce transformers' tokens: $(head -1 "$tmp/out")"
expect 0 "bench-decode" -- "$recap" bench-decode "$tmp/qwen2_paged.yaml" --device host \
  --batch 1,4 --context 8 --tokens 4 --repeats 2 --json "$tmp/decode.json"
grep -qE "^ +4 .*x +[0-9]+ +[0-9]+%$" "$tmp/out" || fail "bench-decode prints no row for batch 4"
check_json "$tmp/decode.json"
# --collectives times a tensor-parallel rank's all_reduces: without --world it is a usage error.
expect 2 "bench-decode --collectives without --world" -- "$recap" bench-decode \
  "$tmp/qwen2_paged.yaml" --device host --collectives 1 --tokens 4 --repeats 1
grep -q "goes with --world" "$tmp/err" || fail "bench-decode --collectives: $(head -1 "$tmp/err")"
# With no sizes given, a spec of 64 positions still runs: the steps shrink with the context.
expect 0 "bench-decode defaults on a short spec" -- "$recap" bench-decode "$tmp/qwen2_paged.yaml" \
  --device host --repeats 1
grep -q "steps do not fit this spec" "$tmp/err" || fail "bench-decode does not say the steps shrank"
# Too long a context for the spec: the easy way out (a smaller --context) is named first.
expect 1 "bench-decode past the spec's sequences" -- "$recap" bench-decode \
  "$tmp/qwen2_paged.yaml" --device host --batch 1 --context 100 --tokens 4
grep -q "does not fit the spec: .*a smaller --context or --tokens, or import with a larger" \
  "$tmp/err" || fail "bench-decode does not suggest a smaller --context: $(head -1 "$tmp/err")"
# bench-loop on the host backend (emulated WHILE nodes): every mode's row and the loop's line.
expect 0 "bench-loop" -- "$recap" bench-loop "$tmp/qwen2_paged.yaml" --device host \
  --batch 1,4 --context 8 --tokens 8 --steps 4 --repeats 1 --json "$tmp/loop.json"
for mode in step-sync step-block step-ahead loop loop-poll; do
  grep -qE "^ +4 $mode " "$tmp/out" || fail "bench-loop prints no $mode row for batch 4"
done
grep -q "gap between steps median" "$tmp/out" || fail "bench-loop prints no GPU gap"
grep -qE "CPU us/token +sleeps/token" "$tmp/out" || fail "bench-loop prints no sleeps per token"
check_json "$tmp/loop.json"
grep -q '"sleeps_per_token"' "$tmp/loop.json" || fail "bench-loop's JSON has no sleeps per token"
# bench-decode --profile on the Llama fixture (llama3 RoPE), whose paged layers run RoPE, both
# KV writes and the attention as one paged_rope_attention: each batch's profiled step by op
# kind, in the table and in the JSON.
mkdir -p "$tmp/llama" && cp -L tests/data/models/llama/config.json \
  tests/data/models/llama/model.safetensors "$tmp/llama/"
expect 0 "import-hf --paged (llama)" -- "$recap" import-hf "$tmp/llama" \
  -o "$tmp/llama_paged.yaml" --paged --batch 1,2 --prefill 8 --max-seq 32 --block-size 8 \
  --kv-blocks 8
grep -q "op: paged_rope_attention, in: \[q_heads, k_heads, v_rows, k_cache, v_cache, seqs\]" \
  "$tmp/llama_paged.yaml" || fail "import-hf --paged does not emit paged_rope_attention"
# A 256-key table makes the decode attention split its keys on CUDA, so the pipelines bind
# paged attention's call state (its split arrival counts), which the host reference checks is
# zero at every launch: generate through it still gives transformers' greedy tokens
# (expected.json).
expect 0 "import-hf --paged --max-seq 256 (llama)" -- "$recap" import-hf "$tmp/llama" \
  -o "$tmp/llama_256.yaml" --paged --batch 1,2 --prefill 8 --max-seq 256
llama_greedy=$(python3 -c 'import json, sys; e = json.load(open(sys.argv[1]))
p = e["prompt_length"]; print(",".join(map(str, e["tokens"][:p])), " ".join(map(str, e["tokens"][p:])))' \
  tests/data/models/llama/expected.json)
expect 0 "generate over a 256-key table" -- "$recap" generate "$tmp/llama_256.yaml" \
  --prompt-ids "${llama_greedy%% *}" --max-tokens "$(echo "${llama_greedy#* }" | wc -w)" \
  --device host
grep -q "^generated: ${llama_greedy#* }$" "$tmp/out" ||
  fail "generate over a 256-key table does not reproduce transformers' greedy tokens: $(grep "^generated" "$tmp/out")"
! grep -qE "op: (rope|paged_kv_write|paged_rope_kv_write|paged_attention|seq_positions)," \
  "$tmp/llama_paged.yaml" ||
  fail "import-hf --paged still emits rope, paged_kv_write, paged_rope_kv_write, paged_attention or seq_positions for Llama"
expect 0 "bench-decode --profile" -- "$recap" bench-decode "$tmp/llama_paged.yaml" \
  --device host --batch 1,2 --context 4 --tokens 2 --repeats 1 --profile \
  --json "$tmp/profile.json"
grep -q "^batch 2: profiled eager step .* us on the device, by op:$" "$tmp/out" ||
  fail "bench-decode --profile prints no profile for batch 2"
grep -qE "^  paged_rope_attention +2 +[0-9.]+ +[0-9.]+%$" "$tmp/out" ||
  fail "bench-decode --profile does not count one paged_rope_attention per layer"
python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))["results"]
for row in r:
    kinds = {k["op"]: k for k in row["profile"]}
    assert kinds["paged_rope_attention"]["launches"] == 2, kinds
    assert abs(sum(k["share"] for k in row["profile"]) - 1) < 1e-6, row["profile"]
    assert abs(sum(k["ms"] for k in row["profile"]) - row["profiled_ms"]) < 1e-9
' "$tmp/profile.json" 2>>"$tmp/err" || fail "bench-decode --profile JSON: $(tail -1 "$tmp/err")"
# bench-decode across ranks (issue 27): with --world every line starts with the rank, and each
# batch adds the distributed step's pieces: a chain of all_reduces of the step's message (rows
# x the config's hidden size, f32) and run_dist's cost over the graph step. The host backend is
# a world of 1 (no NCCL, one device), so a world of 2 and a TP 2 rank's spec are refused there
# with the cause named; the GPU script scripts/gpu/gpu_tp.sh runs both ranks.
hidden=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["hidden_size"])' \
  "$tmp/llama/config.json")
expect 0 "bench-decode --world 1" -- "$recap" bench-decode "$tmp/llama_paged.yaml" --device host \
  --batch 1,2 --context 4 --tokens 2 --repeats 1 --profile --collectives 4 \
  --world 1 --rank 0 --json "$tmp/dist.json"
grep -v "^wrote " "$tmp/out" | grep -qv "^rank 0: " && fail "bench-decode --world: a line without its rank"
grep -qE "^rank 0: +2 .*x +[0-9]+ +[0-9]+%$" "$tmp/out" || fail "bench-decode --world: no row for batch 2"
grep -qE "^rank 0: batch 2: 4 all_reduces of $((2 * hidden)) f32 \($((8 * hidden)) bytes\) in one graph: " \
  "$tmp/out" || fail "bench-decode --world: no all_reduce chain of [2, $hidden] f32"
grep -qE "^rank 0: batch 1: run_dist step [0-9.]+ ms = graph step [0-9.]+ ms \+ -?[0-9.]+ ms " \
  "$tmp/out" || fail "bench-decode --world: no run_dist line"
grep -qE "^rank 0:   linear +[0-9]+ " "$tmp/out" || fail "bench-decode --world --profile: no profile"
python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))
assert (r["rank"], r["world"]) == (0, 1), r
for row in r["results"]:
    c = row["all_reduce_chain"]
    assert c["collectives"] == 4 and c["elements"] == row["batch"] * int(sys.argv[2]), c
    assert abs(c["us_each"] * 4 - c["ms"] * 1e3) < 1e-9, c
    assert abs(row["run_dist_ms_per_step"] - row["graph_ms_per_step"] - row["run_dist_overhead_ms"]) < 1e-12
' "$tmp/dist.json" "$hidden" 2>>"$tmp/err" || fail "bench-decode --world JSON: $(tail -1 "$tmp/err")"
expect 1 "bench-decode --world 2 on the host" -- "$recap" bench-decode "$tmp/llama_paged.yaml" \
  --device host --world 2 --rank 0 --init "file://$tmp/decode_rv"
grep -q "^recap bench-decode (rank 0): joining the communicator failed" "$tmp/err" &&
  grep -q "runs a world of 1 only" "$tmp/err" || fail "bench-decode --world 2 on the host: no cause"
expect 0 "import-hf --paged --tp 2 (llama)" -- "$recap" import-hf "$tmp/llama" \
  -o "$tmp/llama_tp.r{rank}.yaml" --paged --batch 1,2 --prefill 8 --max-seq 32 --block-size 8 \
  --kv-blocks 8 --tp 2
# One rank's spec run alone: refused at warmup, before anything runs, naming the world it was
# planned for and how to start every rank (and the device stays usable: no failed teardown).
expect 1 "a TP 2 rank's spec run alone" -- "$recap" generate "$tmp/llama_tp.r0.yaml" \
  --prompt-ids 1,2,3 --device host
grep -q "planned for a world of 2 ranks and host:0 is in a world of 1" "$tmp/err" &&
  grep -q "recap launch --gpus 2" "$tmp/err" || fail "a TP rank's spec run alone: no cause"
grep -q "destroying the pipeline failed" "$tmp/err" &&
  fail "a TP rank's spec run alone leaves the device failing its teardown"
# The residual folded by default under --tp: rank 0 adds it into its partial sums (the fusion
# pass folds that add into the projection), so on no rank does an add follow an all_reduce;
# --no-tp-fold-residual adds it after each all_reduce.
expect 0 "plan of a folded rank 0" -- "$recap" plan "$tmp/llama_tp.r0.yaml" --entry decode
grep -q "'fused\[layers.1.down,add\]'" "$tmp/out" && grep -q "'fused\[layers.1.out_proj,add\]'" "$tmp/out" ||
  fail "--tp 2: rank 0's residual adds are not folded into its projections by default"
for r in 0 1; do
  grep -A1 "op: all_reduce" "$tmp/llama_tp.r$r.yaml" | grep -q "op: add" &&
    fail "--tp 2: an add follows an all_reduce on rank $r"
done
expect 0 "import-hf --tp 2 --tp-fold-residual" -- "$recap" import-hf "$tmp/llama" \
  -o "$tmp/llama_fold.r{rank}.yaml" --paged --batch 1,2 --prefill 8 --max-seq 32 \
  --block-size 8 --kv-blocks 8 --tp 2 --tp-fold-residual
cmp -s "$tmp/llama_fold.r0.yaml" "$tmp/llama_tp.r0.yaml" ||
  fail "--tp-fold-residual is not the default of --tp 2"
expect 0 "import-hf --tp 2 --no-tp-fold-residual" -- "$recap" import-hf "$tmp/llama" \
  -o "$tmp/llama_unfolded.r{rank}.yaml" --paged --batch 1,2 --prefill 8 --max-seq 32 \
  --block-size 8 --kv-blocks 8 --tp 2 --no-tp-fold-residual
for r in 0 1; do
  grep -A1 "op: all_reduce" "$tmp/llama_unfolded.r$r.yaml" | grep -q "op: add" ||
    fail "--no-tp-fold-residual: no add follows an all_reduce on rank $r"
done
for flag in --tp-fold-residual --no-tp-fold-residual; do
  expect 2 "$flag without --tp" -- "$recap" import-hf "$tmp/llama" -o "$tmp/x.yaml" $flag
  grep -q -- "$flag goes with --tp" "$tmp/err" || fail "$flag alone: no cause"
done
expect 1 "bench-decode of a TP 2 rank at --world 1" -- "$recap" bench-decode \
  "$tmp/llama_tp.r0.yaml" --device host --batch 1 --context 4 --tokens 2 --repeats 1 \
  --world 1 --rank 0
grep -q "^recap bench-decode (rank 0): the decode steps failed" "$tmp/err" &&
  grep -q "planned for a world of 2" "$tmp/err" || fail "bench-decode of a TP 2 rank: no cause"
expect 2 "bench-decode --rank without --world" -- "$recap" bench-decode "$tmp/llama_paged.yaml" \
  --device host --rank 0
grep -q "go with --world" "$tmp/err" || fail "bench-decode --rank alone: no cause"
# recap launch starts bench-decode too (here a world of 1: each rank's flags come from launch).
expect 0 "launch -- bench-decode" -- "$recap" launch --gpus 1 --timeout 30 -- bench-decode \
  "$tmp/llama_paged.yaml" --device host --batch 1 --context 4 --tokens 2 --repeats 1
grep -qE "^rank 0: +1 .*x +[0-9]+ +[0-9]+%$" "$tmp/out" || fail "launch -- bench-decode: no rank 0 row"
# gpu_tp.sh's report sets each rank's profile against TP 1's (here the world of 1 against the
# same spec's plain run: the by-op table's rows and totals).
python3 bench/report/tp_decode_report.py "$tmp/profile.json" "$tmp/dist.json" >"$tmp/out" \
  2>"$tmp/err" || fail "tp_decode_report.py: $(tail -1 "$tmp/err")"
grep -q "^== batch 2: graph step TP 1 [0-9.]* ms; TP 1 [0-9.]* ms: " "$tmp/out" &&
  grep -qE "^    (fused\[(rmsnorm,)?)?layers\.\*\.gate_up(,split,expr)?\]? +[0-9.]+ \[2\] +[0-9.]+ \[2\] " "$tmp/out" ||
  fail "tp_decode_report.py prints no comparison by op name"
# A spec imported with one decode bucket has no bucketed dim; bench-decode and bench-loop
# still run their batch of 1 on it.
expect 0 "import-hf --paged --batch 1" -- "$recap" import-hf "$tmp/llama" \
  -o "$tmp/llama_one.yaml" --paged --batch 1 --prefill 8 --max-seq 32 --block-size 8 --kv-blocks 8
expect 0 "bench-decode on one bucket" -- "$recap" bench-decode "$tmp/llama_one.yaml" \
  --device host --batch 1 --context 4 --tokens 2 --repeats 1
grep -qE "^ +1 .*x +[0-9]+ +[0-9]+%$" "$tmp/out" || fail "bench-decode prints no row on one bucket"
expect 0 "bench-loop on one bucket" -- "$recap" bench-loop "$tmp/llama_one.yaml" \
  --device host --batch 1 --context 4 --tokens 4 --repeats 1
expect 1 "bench-decode past the pool" -- "$recap" bench-decode "$tmp/qwen2_paged.yaml" \
  --device host --batch 4 --context 61 --tokens 4
grep -q "does not fit the spec" "$tmp/err" || fail "bench-decode does not say the batch does not fit"
expect 1 "bench-decode of a contiguous spec" -- "$recap" bench-decode "$tmp/qwen2.yaml" --device host
grep -q "not a paged serving spec" "$tmp/err" || fail "bench-decode accepts a contiguous spec"
# generate through the generation API on the paged spec: transformers' greedy tokens again,
# then a seeded sampled request twice (the same tokens), and sampling refused on the
# contiguous layout.
expect 0 "generate (paged)" -- "$recap" generate "$tmp/qwen2_paged.yaml" \
  --prompt-ids "${greedy%% *}" --max-tokens 16 --device host --json "$tmp/gen.json"
grep -q "^generated: ${greedy#* }$" "$tmp/out" ||
  fail "generate on a paged spec does not reproduce transformers' greedy tokens: $(head -1 "$tmp/out")"
check_json "$tmp/gen.json"
expect 0 "generate sampled" -- "$recap" generate "$tmp/qwen2_paged.yaml" --prompt-ids 1,2,3 \
  --max-tokens 8 --temperature 0.8 --top-k 20 --top-p 0.9 --min-p 0.02 --seed 7 --device host
first=$(head -1 "$tmp/out")
expect 0 "generate sampled again" -- "$recap" generate "$tmp/qwen2_paged.yaml" --prompt-ids 1,2,3 \
  --max-tokens 8 --temperature 0.8 --top-k 20 --top-p 0.9 --min-p 0.02 --seed 7 --device host
[ "$(head -1 "$tmp/out")" = "$first" ] || fail "generate with one seed gives different tokens"
expect 1 "generate: sampling on a contiguous spec" -- "$recap" generate "$tmp/qwen2.yaml" \
  --prompt-ids 1,2 --temperature 0.5 --device host
grep -q "import-hf --paged" "$tmp/err" || fail "generate does not say sampling needs --paged"
# --temperature 0 is the default greedy decoding, which the contiguous layout does too.
expect 0 "generate --temperature 0 on a contiguous spec" -- "$recap" generate "$tmp/qwen2.yaml" \
  --prompt-ids 1,2 --max-tokens 2 --temperature 0 --device host
expect 2 "generate --logits-out into a missing folder" -- "$recap" generate "$tmp/qwen2.yaml" \
  --prompt-ids 1,2 --logits-out "$tmp/nosuch/x.bin" --device host
expect 2 "generate --mode without --world" -- "$recap" generate "$tmp/qwen2.yaml" \
  --prompt-ids 1,2 --mode eager --device host
grep -q "goes with --world" "$tmp/err" || fail "generate --mode: $(head -1 "$tmp/err")"
expect 2 "generate: bad top-p" -- "$recap" generate "$tmp/qwen2_paged.yaml" --prompt-ids 1 \
  --top-p 1.5 --device host
expect 2 "generate: an id outside the vocabulary" -- "$recap" generate "$tmp/qwen2_paged.yaml" \
  --prompt-ids 1,99999 --device host
grep -q "99999" "$tmp/err" || fail "generate does not name the id outside the vocabulary"
# Both layouts refuse what the model cannot run before running it, with the generator's words
# and the usage status (the fixture: 256 ids; the contiguous spec's caches hold 128 rows, the
# paged spec's block table 64 tokens). The maximum sequence counts the prompt and every new
# token, so a prompt of max - 1 and one token is the longest accepted.
ids() { python3 -c 'import sys; print(",".join(str(i * 7 % 256) for i in range(int(sys.argv[1]))))' "$1"; }
P=1,17,42,99,3,200,7,64,128,5,250,31
for layout in qwen2:128 qwen2_paged:64; do
  spec=$tmp/${layout%:*}.yaml max=${layout#*:}
  refused() { # WHAT EXPECTED-STDERR-LINE ARGS...
    local what=$1 line=$2
    shift 2
    expect 2 "generate ${layout%:*}: $what" -- "$recap" generate "$spec" --device host "$@"
    grep -qxF "recap generate: $line" "$tmp/err" ||
      fail "generate ${layout%:*}: $what: not '$line': $(grep -v '^recap generator:' "$tmp/err" | head -2)"
    grep -qE "CUDA context|host function|generated:" "$tmp/err" "$tmp/out" &&
      fail "generate ${layout%:*}: $what: ran, or spoke of kernels: $(head -2 "$tmp/err")"
  }
  refused "id 256" "request.prompt[2] = 256: outside the vocabulary [0, 256)" --prompt-ids 1,2,256
  refused "past the maximum" "request.max_new_tokens = 1000: with request.prompt_len = 12 it is \
past the model's maximum sequence of $max tokens" --prompt-ids $P --max-tokens 1000
  refused "a prompt of the maximum" "request.prompt_len = $max: leaves no room for a token in the \
model's maximum sequence of $max tokens" --prompt-ids "$(ids "$max")" --max-tokens 1
  refused "a prompt past the maximum" "request.prompt_len = $((max + 2)): the prompt is longer \
than the model's maximum sequence of $max tokens" --prompt-ids "$(ids $((max + 2)))"
  refused "--top-k without --temperature" "--top-k filters the tokens a sample is drawn from: \
give --temperature T > 0 with it (at temperature 0, the default, decoding is greedy and it would \
change nothing)" --prompt-ids $P --top-k 3
  # The longest accepted: one token, and no per-step or per-token time without a step.
  expect 0 "generate ${layout%:*}: prompt of max - 1, one token" -- "$recap" generate "$spec" \
    --device host --prompt-ids "$(ids $((max - 1)))" --max-tokens 1
  [ "$(grep -c '^generated: [0-9]*$' "$tmp/out")" = 1 ] ||
    fail "generate ${layout%:*}: not one token for a prompt of max - 1: $(head -1 "$tmp/out")"
  grep -qE "0 steps|0\.000 ms (each|per token)" "$tmp/out" &&
    fail "generate ${layout%:*} --max-tokens 1 prints times of steps that did not run: $(tail -1 "$tmp/out")"
  grep -qE "decode: no steps|no token after it" "$tmp/out" ||
    fail "generate ${layout%:*} --max-tokens 1 does not say no step ran: $(tail -1 "$tmp/out")"
  # The host-backend note, once (no --device: on a machine without a GPU it is printed).
  expect 0 "generate ${layout%:*} without --device" -- "$recap" generate "$spec" --prompt-ids $P \
    --max-tokens 2
  [ "$(grep -c 'running on the host backend' "$tmp/err")" -le 1 ] ||
    fail "generate ${layout%:*} prints the host-backend note more than once"
done
expect 0 "generate: two tokens" -- "$recap" generate "$tmp/qwen2.yaml" --device host --prompt-ids $P \
  --max-tokens 2
grep -qE "^prefill: 12 tokens in [0-9.]+ ms \(includes capture\); decode: 1 step, [0-9.]+ ms \(includes capture\)$" \
  "$tmp/out" || fail "generate --max-tokens 2 does not print one decode step: $(tail -1 "$tmp/out")"
expect 0 "generate: one token, JSON" -- "$recap" generate "$tmp/qwen2_paged.yaml" --device host \
  --prompt-ids $P --max-tokens 1 --json "$tmp/one.json"
python3 -c 'import json, sys; j = json.load(open(sys.argv[1])); assert len(j["tokens"]) == 1 and j["tpot_ms"] is None, j' \
  "$tmp/one.json" 2>>"$tmp/err" || fail "generate --json with one token does not give tpot_ms null"
# The JSON says what it answers: the request as given, and serve-bench's run parameters.
expect 0 "generate: sampled, JSON" -- "$recap" generate "$tmp/qwen2_paged.yaml" --device host \
  --prompt-ids 5,6,7 --max-tokens 2 --temperature 0.5 --top-k 4 --stop-ids 9 --json "$tmp/req.json"
python3 -c 'import json, sys; r = json.load(open(sys.argv[1]))["request"]; assert (r["prompt"], r["max_tokens"], r["temperature"], r["top_k"], r["stop_ids"]) == ([5, 6, 7], 2, 0.5, 4, [9]), r' \
  "$tmp/req.json" 2>>"$tmp/err" || fail "generate --json does not record the request"
expect 0 "serve-bench --generate, JSON" -- "$recap" serve-bench "$tmp/qwen2_paged.yaml" --generate \
  --device host --requests 2 --prompt-len 2,3 --output-len 2,2 --seed 11 --json "$tmp/sbp.json"
python3 -c 'import json, sys; p = json.load(open(sys.argv[1]))["parameters"]; assert (p["requests"], p["prompt_len"], p["output_len"], p["seed"]) == (2, [2, 3], [2, 2], "11"), p' \
  "$tmp/sbp.json" 2>>"$tmp/err" || fail "serve-bench --json does not record its parameters"
expect 2 "generate: a stop id outside the vocabulary" -- "$recap" generate "$tmp/qwen2_paged.yaml" \
  --device host --prompt-ids $P --stop-ids 2,300
grep -qxF "recap generate: request.stop_ids[1] = 300: outside the vocabulary [0, 256)" "$tmp/err" ||
  fail "generate accepts a stop id outside the vocabulary: $(head -1 "$tmp/err")"
# Too many stop ids: the value echoed whole, or cut after a comma with "...".
expect 2 "generate: 17 stop ids" -- "$recap" generate "$tmp/qwen2_paged.yaml" --prompt-ids 1 \
  --stop-ids 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17
grep -qF "got '1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17' (too many values)" "$tmp/err" ||
  fail "generate does not echo --stop-ids whole: $(head -1 "$tmp/err")"
expect 2 "generate: 30 stop ids" -- "$recap" generate "$tmp/qwen2_paged.yaml" --prompt-ids 1 \
  --stop-ids "$(seq -s, 100 129)"
grep -qF "got '100,101,102,103,104,105,106,107,108,109,110,111,112,113,114,...' (too many values)" \
  "$tmp/err" || fail "generate cuts the echoed --stop-ids badly: $(head -1 "$tmp/err")"
# Without --seed a sampled run draws a fresh seed and prints it; --seed with it repeats the run.
sampled=(generate "$tmp/qwen2_paged.yaml" --device host --prompt-ids $P --max-tokens 8 --temperature 1)
expect 0 "generate sampled without --seed" -- "$recap" "${sampled[@]}"
seed1=$(sed -n 's/^seed \([0-9]*\),.*/\1/p' "$tmp/out") tokens1=$(head -1 "$tmp/out")
expect 0 "generate sampled without --seed again" -- "$recap" "${sampled[@]}"
seed2=$(sed -n 's/^seed \([0-9]*\),.*/\1/p' "$tmp/out")
[ -n "$seed1" ] && [ -n "$seed2" ] && [ "$seed1" != "$seed2" ] ||
  fail "generate without --seed prints no seed or the same one twice ('$seed1', '$seed2')"
expect 0 "generate with the printed seed" -- "$recap" "${sampled[@]}" --seed "$seed1"
[ "$(head -1 "$tmp/out")" = "$tokens1" ] && grep -q "^seed $seed1," "$tmp/out" ||
  fail "generate --seed $seed1 does not repeat the run that printed it: $(head -1 "$tmp/out") vs $tokens1"
# serve-bench --generate: synthetic requests through the generation API on the host backend.
expect 0 "serve-bench --generate" -- "$recap" serve-bench "$tmp/qwen2_paged.yaml" --generate \
  --requests 12 --prompt-len 4,20 --output-len 2,8 --device host --json "$tmp/serve.json" \
  --svg "$tmp/serve.svg" --save-requests "$tmp/requests.json"
grep -q "^output tokens/s" "$tmp/out" && grep -q "^TTFT ms" "$tmp/out" ||
  fail "serve-bench --generate prints no throughput or TTFT"
check_json "$tmp/serve.json"
grep -q "<svg" "$tmp/serve.svg" || fail "serve-bench --generate wrote no SVG"
# The saved request set is what the run served: 12 requests, lengths within the ranges, ids
# inside the fixture's vocabulary, and the output tokens the run reported add up to it.
python3 - "$tmp/requests.json" "$tmp/serve.json" <<'PY' 2>>"$tmp/err" ||
import json, sys
reqs = json.load(open(sys.argv[1]))["requests"]
served = json.load(open(sys.argv[2]))
assert len(reqs) == 12, len(reqs)
assert all(4 <= len(r["prompt"]) <= 20 and 2 <= r["max_new_tokens"] <= 8 for r in reqs)
assert all(0 <= t < 256 for r in reqs for t in r["prompt"])
assert sum(r["max_new_tokens"] for r in reqs) == served["output_tokens"]
PY
  fail "serve-bench --save-requests does not hold the request set the run served"
expect 2 "serve-bench --generate past the spec's length" -- "$recap" serve-bench \
  "$tmp/qwen2_paged.yaml" --generate --prompt-len 60,60 --output-len 8,8 --device host
expect 2 "serve-bench --generate with arrivals over a day" -- "$recap" serve-bench \
  "$tmp/qwen2_paged.yaml" --generate --rate 1e-9 --device host
grep -q -- "--rate 1e-09 spreads 64 requests over about .* more than a day" "$tmp/err" ||
  fail "serve-bench --rate: a day-long arrival span is not refused up front: $(head -1 "$tmp/err")"
# One-token outputs: no TPOT (null in the JSON), and the pool's peak still counts the prompts.
expect 0 "serve-bench --generate of one-token outputs" -- "$recap" serve-bench \
  "$tmp/qwen2_paged.yaml" --generate --requests 4 --prompt-len 8,8 --output-len 1,1 \
  --device host --json "$tmp/one.json"
python3 - "$tmp/one.json" <<'PY' || fail "serve-bench: one-token outputs give a TPOT or no KV peak"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["tpot_ms"] is None, d["tpot_ms"]
assert d["kv_blocks_peak"] >= 1, d["kv_blocks_peak"]
PY
# The engine-steps line adds up: a step runs at most one prefill and one decode, so the steps
# with both are prefill + decode - steps (the JSON's counts, and the text's).
python3 - "$tmp/serve.json" <<'EOF' || fail "serve-bench --generate: the JSON's steps do not add up"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["prefill_steps"] + d["decode_steps"] - d["steps_with_both"] == d["steps"], d
assert 0 < d["prefill_steps"] <= d["steps"] and 0 < d["decode_steps"] <= d["steps"], d
EOF
expect 0 "serve-bench --generate (text)" -- "$recap" serve-bench "$tmp/qwen2_paged.yaml" \
  --generate --requests 12 --prompt-len 4,20 --output-len 2,8 --device host
python3 - "$tmp/out" <<'EOF' || fail "serve-bench --generate: the engine steps line does not add up"
import re, sys
m = re.search(r"^engine steps +(\d+) \((\d+) with prefill, (\d+) with decode; (\d+) both\)",
              open(sys.argv[1]).read(), re.M)
steps, prefill, decode, both = map(int, m.groups())
assert prefill + decode - both == steps, m.group(0)
EOF
# Report files never land on what the run reads, and every path is checked before the work:
# '-' (standard output) only for --json, a folder refused, the spec and weights spared.
expect 2 "serve-bench --generate --svg -" -- "$recap" serve-bench "$tmp/qwen2_paged.yaml" \
  --generate --requests 2 --device host --svg -
grep -q "'-' is standard output only for --json" "$tmp/err" && [ ! -e ./- ] ||
  fail "serve-bench --svg -: $(head -1 "$tmp/err")"
expect 2 "serve-bench --generate --tokens-out a folder" -- "$recap" serve-bench \
  "$tmp/qwen2_paged.yaml" --generate --requests 2 --device host --tokens-out "$tmp"
grep -q "cannot write $tmp: Is a directory" "$tmp/err" ||
  fail "serve-bench --tokens-out FOLDER: $(head -1 "$tmp/err")"
cp "$tmp/qwen2_paged.yaml" "$tmp/spared.yaml"
expect 2 "generate --json over its spec" -- "$recap" generate "$tmp/spared.yaml" \
  --prompt-ids 1,2 --max-tokens 2 --device host --json "$tmp/spared.yaml"
grep -q "would replace the spec this command runs" "$tmp/err" &&
  cmp -s "$tmp/spared.yaml" "$tmp/qwen2_paged.yaml" ||
  fail "generate --json over its spec: $(head -1 "$tmp/err")"
expect 2 "serve-bench --json over weights" -- "$recap" serve-bench "$tmp/qwen2_paged.yaml" \
  --generate --requests 2 --device host --json "$tmp/qwen2/model.safetensors"
grep -q "would replace a checkpoint's weights" "$tmp/err" ||
  fail "serve-bench --json over weights: $(head -1 "$tmp/err")"
# A flag of the other mode is named as such (--help lists both modes on one page).
expect 2 "serve-bench --generate --threads" -- "$recap" serve-bench "$tmp/qwen2_paged.yaml" \
  --generate --threads 3
grep -qx "recap serve-bench: --threads applies without --generate" "$tmp/err" ||
  fail "serve-bench --generate --threads: $(head -1 "$tmp/err")"
expect 2 "serve-bench --generate --batch-max" -- "$recap" serve-bench "$tmp/qwen2_paged.yaml" \
  --generate --batch-max=2
grep -qx "recap serve-bench: --batch-max applies without --generate" "$tmp/err" ||
  fail "serve-bench --generate --batch-max: $(head -1 "$tmp/err")"
expect 2 "serve-bench --prompt-len without --generate" -- "$recap" serve-bench \
  "$specs/mlp_decode.yaml" --prompt-len 4,4
grep -qx "recap serve-bench: --prompt-len applies only with --generate" "$tmp/err" ||
  fail "serve-bench --prompt-len: $(head -1 "$tmp/err")"
# --max-running past the decode entry's largest bucket (4 here) is known from the spec.
expect 2 "serve-bench --generate --max-running past the bucket" -- "$recap" serve-bench \
  "$tmp/qwen2_paged.yaml" --generate --max-running 100 --prompt-len 4,20 --output-len 2,8 \
  --device host
grep -q "^recap serve-bench: --max-running 100 is more than the 4 sequences" "$tmp/err" ||
  fail "serve-bench --max-running 100: $(head -1 "$tmp/err")"
# Tensor-parallel serving's wiring at a world of 1 (the host's only world; two GPUs:
# scripts/gpu/gpu_tp.sh): rank 0 of 1, alone and under launch, serves the requests a run
# without a communicator serves, token for token (--tokens-out: one line per request).
serve_tp=(--generate --requests 6 --prompt-len 4,20 --output-len 2,8 --max-running 4 --device host)
expect 0 "serve-bench --generate --tokens-out" -- "$recap" serve-bench "$tmp/qwen2_paged.yaml" \
  "${serve_tp[@]}" --tokens-out "$tmp/serve_alone.tokens"
expect 0 "serve-bench --generate --world 1" -- "$recap" serve-bench "$tmp/qwen2_paged.yaml" \
  "${serve_tp[@]}" --world 1 --rank 0 --tokens-out "$tmp/serve_world1.tokens"
grep -q "^output tokens/s" "$tmp/out" || fail "serve-bench --world 1: rank 0 prints no results"
expect 0 "launch -- serve-bench --generate" -- "$recap" launch --gpus 1 -- serve-bench \
  "$tmp/qwen2_paged.yaml" "${serve_tp[@]}" --tokens-out "$tmp/serve_launch{rank}.tokens"
[ "$(grep -c '^[0-9]*: [0-9]' "$tmp/serve_alone.tokens")" = 6 ] &&
  cmp -s "$tmp/serve_alone.tokens" "$tmp/serve_world1.tokens" &&
  cmp -s "$tmp/serve_alone.tokens" "$tmp/serve_launch0.tokens" ||
  fail "serve-bench --generate at a world of 1 does not serve the tokens of a run without one"
expect 2 "serve-bench --generate --world 2 without --init" -- "$recap" serve-bench \
  "$tmp/qwen2_paged.yaml" "${serve_tp[@]}" --world 2 --rank 1
grep -q "needs --init" "$tmp/err" || fail "serve-bench --world 2 does not ask for --init"
expect 2 "import-hf --paged with too many prefill sequences" -- "$recap" import-hf "$tmp/qwen2" \
  -o - --paged --prefill 16 --prefill-seqs 17
grep -q "prefill-seqs 17" "$tmp/err" || fail "import-hf does not refuse --prefill-seqs 17"
# import-hf's usage errors (exit 2): a KV pool below one sequence of --max-seq, which no
# generator could serve (the minimum named, ceil(32 / 8) = 4 and ceil(128 / 16) = 8 at the
# fixture's defaults; the minimum itself imports and generates); the --paged-only flags without
# --paged; bucket lists out of order; --prefill past --max-seq, given or the default.
expect 2 "import-hf --kv-blocks below one sequence" -- "$recap" import-hf "$tmp/llama" -o - \
  --paged --max-seq 32 --block-size 8 --kv-blocks 3
grep -q "kv-blocks 3 cannot hold one sequence of --max-seq 32: the minimum is 4 blocks of 8 rows" \
  "$tmp/err" || fail "import-hf --kv-blocks 3: the minimum is not named"
expect 2 "import-hf --kv-blocks 1 at the default --max-seq" -- "$recap" import-hf "$tmp/llama" \
  -o - --paged --kv-blocks 1
grep -q "the minimum is 8 blocks of 16 rows" "$tmp/err" ||
  fail "import-hf --kv-blocks 1: the minimum at max-seq 128 is not named"
expect 0 "import-hf --kv-blocks at the minimum" -- "$recap" import-hf "$tmp/llama" \
  -o "$tmp/llama_kv4.yaml" --paged --max-seq 32 --prefill 8 --block-size 8 --kv-blocks 4
grep -q "KV pool: 4 blocks of 8 rows per layer = 32 tokens" "$tmp/out" ||
  fail "import-hf --kv-blocks 4 does not print a pool of 32 tokens"
expect 0 "generate on a pool of one sequence" -- "$recap" generate "$tmp/llama_kv4.yaml" \
  --prompt-ids 1,2,3,4,5,6,7,8,9,10 --max-tokens 22 --device host
[ "$(sed -n 's/^generated: //p' "$tmp/out" | wc -w)" = 22 ] ||
  fail "generate on a pool of exactly one sequence does not reach --max-seq"
for flag in "--block-size 8" "--kv-blocks 8" "--prefill-seqs 2"; do
  expect 2 "import-hf ${flag% *} without --paged" -- "$recap" import-hf "$tmp/llama" -o - $flag
  grep -q -- "${flag% *} goes with --paged" "$tmp/err" || fail "import-hf ${flag% *} alone: no cause"
done
expect 2 "import-hf --batch descending" -- "$recap" import-hf "$tmp/llama" -o - --batch 8,4,1
grep -q "ascending" "$tmp/err" || fail "import-hf --batch 8,4,1: no cause"
expect 2 "import-hf --prefill descending" -- "$recap" import-hf "$tmp/llama" -o - --paged \
  --prefill 32,16
expect 2 "import-hf several --prefill sizes without --paged" -- "$recap" import-hf "$tmp/llama" \
  -o - --prefill 16,32
grep -q "prefill sizes go with --paged" "$tmp/err" || fail "import-hf --prefill 16,32 alone: no cause"
expect 2 "import-hf --prefill past --max-seq" -- "$recap" import-hf "$tmp/llama" -o - \
  --prefill 500 --max-seq 64
grep -q -- "--prefill 500 must be from 1 to --max-seq (64)" "$tmp/err" ||
  fail "import-hf --prefill 500 --max-seq 64: no cause"
expect 2 "import-hf --prefill past the default --max-seq" -- "$recap" import-hf "$tmp/llama" \
  -o - --prefill 500
# -o where nothing can be written: the reason, and for a missing folder which one.
expect 1 "import-hf -o into a missing folder" -- "$recap" import-hf "$tmp/llama" \
  -o "$tmp/missing/x.yaml"
grep -q "cannot write $tmp/missing/x.yaml: the folder $tmp/missing does not exist" "$tmp/err" ||
  fail "import-hf -o into a missing folder: the folder is not named"
expect 2 "import-hf -o ''" -- "$recap" import-hf "$tmp/llama" -o ""
expect 2 "import-hf --paged with --max-seq under the default block" -- "$recap" import-hf \
  "$tmp/llama" -o - --paged --max-seq 8
grep -q -- "--block-size 16 (the default) must be from 1 to --max-seq (8)" "$tmp/err" ||
  fail "import-hf does not say the block size was the default: $(head -1 "$tmp/err")"
expect 1 "import-hf -o a folder" -- "$recap" import-hf "$tmp/llama" -o "$tmp/llama"
grep -q "cannot write $tmp/llama: Is a directory" "$tmp/err" ||
  fail "import-hf -o a folder: no reason"
# Every command's writers say the same (cli_report_write_failure): run's --json, dot's -o.
# --json's path is checked as the flag is read, a usage error before any work is done.
expect 2 "run --json into a missing folder" -- "$recap" run "$specs/decode_step.yaml" \
  --device host --iters 1 --warmup 0 --json "$tmp/missing/run.json"
grep -q "cannot write $tmp/missing/run.json: the folder $tmp/missing does not exist" "$tmp/err" ||
  fail "run --json into a missing folder: the folder is not named"
grep -q "timing" "$tmp/out" && fail "run --json into a missing folder ran the spec first"
expect 2 "generate --json into a missing folder" -- "$recap" generate "$tmp/llama_kv4.yaml" \
  --prompt-ids 1,2,3 --device host --json "$tmp/missing/gen.json"
grep -q "the folder $tmp/missing does not exist" "$tmp/err" ||
  fail "generate --json into a missing folder: the folder is not named"
grep -q "generated" "$tmp/out" && fail "generate --json into a missing folder generated first"
# The decode benches fit their default batches and context to a small spec, with a note, and
# leave sizes the user gave to be refused.
expect 0 "bench-decode's defaults on a small pool" -- "$recap" bench-decode "$tmp/llama_kv4.yaml" \
  --tokens 4 --repeats 1 --device host
grep -q "note: a context of 512 keys does not fit this spec with 4 steps after it (at most 32 positions a sequence): 28 keys" \
  "$tmp/err" || fail "bench-decode does not fit its default context to the spec"
grep -qE "^ +1 " "$tmp/out" || fail "bench-decode on a small pool prints no row for batch 1"
expect 1 "bench-decode --context past the spec" -- "$recap" bench-decode "$tmp/llama_kv4.yaml" \
  --tokens 4 --repeats 1 --device host --context 512
grep -q "does not fit the spec" "$tmp/err" || fail "bench-decode --context 512 on a small pool: no cause"
expect 0 "bench-loop's defaults on a small pool" -- "$recap" bench-loop "$tmp/llama_kv4.yaml" \
  --tokens 4 --repeats 1 --device host
grep -q "note: a context of 128 keys does not fit" "$tmp/err" ||
  fail "bench-loop does not fit its default context to the spec"
# --device's value is a usage error on every command that takes it.
for cmd in generate serve-bench; do
  extra=(--prompt-ids 1,2)
  [ "$cmd" = serve-bench ] && extra=(--generate --requests 1)
  expect 2 "$cmd --device tpu" -- "$recap" "$cmd" "$tmp/llama_kv4.yaml" "${extra[@]}" --device tpu
  grep -q "expects cuda or host, got 'tpu'" "$tmp/err" || fail "$cmd --device tpu: no cause"
done
# validate runs every entry before it says ok: an entry whose dims break a shape fails the
# file, and its errors are announced with the entry's name.
expect 0 "import-hf a contiguous spec" -- "$recap" import-hf "$tmp/llama" \
  -o "$tmp/llama_contig.yaml" --max-seq 32 --prefill 8
sed 's/prefill: {dims: {S: 8}}/prefill: {dims: {S: 33}}/' "$tmp/llama_contig.yaml" >"$tmp/bad_entry.yaml"
grep -q "S: 33" "$tmp/bad_entry.yaml" || fail "the contiguous spec has no prefill entry of S: 8"
expect 1 "validate with a failing entry" -- "$recap" validate "$tmp/bad_entry.yaml"
grep -q "entry 'prefill' (its dims) fails" "$tmp/err" || fail "validate does not name the failing entry"
grep -q ": ok (" "$tmp/out" && fail "validate says ok for a spec whose entry fails"
grep -q "1 of 2 entries fails" "$tmp/out" || fail "validate does not count the failing entries"
# import-hf's summary names every prefill bucket and, with --tp, the files it wrote.
expect 0 "import-hf summary" -- "$recap" import-hf "$tmp/llama" -o "$tmp/sum.r{rank}.yaml" \
  --paged --prefill 8,16 --max-seq 32 --tp 2
grep -q "sum.r0.yaml .. .*sum.r1.yaml: LlamaForCausalLM, .*prefill buckets 8,16" "$tmp/out" ||
  fail "import-hf's summary does not name the rank files and the prefill buckets"
expect 1 "dot -o a folder" -- "$recap" dot "$specs/decode_step.yaml" -o "$tmp/llama"
grep -q "cannot write $tmp/llama: Is a directory" "$tmp/err" || fail "dot -o a folder: no reason"

# Outputs come in the order `outputs:` lists them, in the text report and in the JSON.
printf 'name: order\ndevice: host\ntensors:\n  x: {shape: [4], role: input, init: ones}\nops:\n  - {op: relu, in: [x], out: h}\n  - {op: scale, in: [h], out: y, scale: 2.0}\noutputs: [y, h]\n' >"$tmp/order.yaml"
expect 0 "run with outputs [y, h]" -- "$recap" run "$tmp/order.yaml" --json "$tmp/order.json"
[ "$(grep -oE '^  (y|h) ' "$tmp/out" | tr -d ' ' | tr '\n' ,)" = "y,h," ] ||
  fail "run prints the outputs out of the spec's order: $(grep -E '^  (y|h) ' "$tmp/out" | tr '\n' '|')"
python3 -c 'import json, sys; n = [o["name"] for o in json.load(open(sys.argv[1]))["outputs"]]; sys.exit(n != ["y", "h"])' \
  "$tmp/order.json" || fail "the JSON lists the outputs out of the spec's order"

# A size error names the bucket's value only for a tensor whose shape uses the bucketed dim.
printf 'name: t\ndevice: host\ndims: {B: [1, 2, 4], D: 4}\ntensors:\n  x: {shape: [1048576, 1048576], role: input}\n  z: {shape: [B, 1048576, 1048576], role: input}\nops:\n  - {op: relu, in: [x], out: y}\n  - {op: relu, in: [z], out: w}\n' >"$tmp/huge_b.yaml"
expect 1 "validate two huge tensors" -- "$recap" validate "$tmp/huge_b.yaml"
grep -q "tensor 'x' .*device memory ([0-9]* bytes)$" "$tmp/err" || fail "x's size error names a bucket it does not use"
grep -q "tensor 'z' .*(with B = 1)$" "$tmp/err" || fail "z's size error does not name the bucket"

# A flag given twice is a usage error (not "the last one wins"); only --dim repeats.
expect 2 "generate --prompt-ids twice" -- "$recap" generate "$tmp/llama_kv4.yaml" --prompt-ids 1 \
  --prompt-ids=2
grep -q -- "--prompt-ids is given twice" "$tmp/err" || fail "a repeated --prompt-ids is not named"
expect 2 "import-hf --batch twice" -- "$recap" import-hf "$tmp/llama" -o "$tmp/twice.yaml" --paged \
  --batch 1 --batch 4
[ -e "$tmp/twice.yaml" ] && fail "import-hf wrote a spec despite a repeated flag"
expect 0 "run with two --dim" -- "$recap" run "$specs/fork_join.yaml" --dim B=1 --dim D=8

# A model's config.json given as a spec: one error that says what it is and what to run.
expect 1 "run a config.json" -- "$recap" run "$tmp/llama/config.json"
grep -q "config.json:1:1: error: this is a Hugging Face model config, not a recap spec: \`recap import-hf" "$tmp/err" ||
  fail "a config.json given as a spec is not recognized"
[ "$(wc -l <"$tmp/err")" -le 2 ] || fail "a config.json given as a spec gives one error per key"

# A KV pool larger than this machine's memory is written, with a note saying it will not load
# here (the spec may be meant for another machine); a pool that fits gets no note.
expect 0 "import-hf --kv-blocks 10^9" -- "$recap" import-hf "$tmp/llama" -o "$tmp/huge_kv.yaml" \
  --paged --kv-blocks 1000000000
grep -q "^note: the weights and KV cache need 7.5 TiB, more than .*: the spec will not load on this machine" \
  "$tmp/out" || fail "import-hf: a pool beyond the machine's memory gets no note"
expect 0 "import-hf, a pool that fits" -- "$recap" import-hf "$tmp/llama" -o "$tmp/fits_kv.yaml" --paged
grep -q "^note: the weights and KV cache" "$tmp/out" && fail "import-hf notes a pool that fits"

# Output that cannot be written fails the command, as `recap completion bash > FILE` on a full
# disk must not report success.
if [ -w /dev/full ]; then
  for args in "ops" "completion bash" "validate $specs/fork_join.yaml"; do
    # shellcheck disable=SC2086
    "$recap" $args >/dev/full 2>"$tmp/err"
    code=$?
    [ "$code" = 1 ] && grep -q "writing the standard output failed" "$tmp/err" ||
      fail "recap $args > /dev/full: exit $code, $(head -1 "$tmp/err")"
  done
fi

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all CLI checks passed"
