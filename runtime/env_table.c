/* env_table.c: every RECAP_* environment variable recap reads (env.h). Keep it sorted by name;
 * scripts/check_env.py compares it with the code, and docs/ENVIRONMENT.md is printed from it. */
#include <string.h>

#include "runtime/env.h"

#define BOOL_VALUES "1/0, true/false, yes/no, on/off"

static const recap__env_var table[] = {
    {.name = "RECAP_ALLOC_CONF",
     .kind = RECAP__ENV_TEXT,
     .values = "key:value,...",
     .fallback = "backend:native",
     .summary = "the allocator's settings, in PyTorch's PYTORCH_CUDA_ALLOC_CONF syntax",
     .details = "The backend (`native` or `caching`: the caching allocator; `cudaMalloc`: no "
                "caching; `cudaMallocAsync`), "
                "`expandable_segments`, `max_split_size_mb`, `garbage_collection_threshold`, "
                "`roundup_power2_divisions`; docs/ALLOCATOR.md. Read when a device's allocator "
                "is created; a malformed value fails that with a message naming the setting, "
                "and the `recap` commands that allocate refuse it before they start."},
    {.name = "RECAP_ARENA",
     .kind = RECAP__ENV_BOOL,
     .values = BOOL_VALUES,
     .fallback = "1",
     .summary = "plan intermediates into one arena (0: one allocation per buffer)",
     .details = "0 is for memory checkers (compute-sanitizer), which then see each "
                "intermediate's bounds."},
    {.name = "RECAP_ATTENTION_SPLITS",
     .kind = RECAP__ENV_INT,
     .values = "1, 2, 4 or 8",
     .fallback = "8",
     .summary = "most blocks a decode attention row is split over (1: never split)",
     .details = "A tuning switch read at each launch (docs/perf/attention.md); other values "
                "are ignored."},
    {.name = "RECAP_ATTENTION_SPLIT_WARPS",
     .kind = RECAP__ENV_INT,
     .values = "4, 8 or 16",
     .fallback = "chosen per shape",
     .summary = "warps of a split decode attention block",
     .details = "A tuning switch read at each launch; other values are ignored."},
    {.name = "RECAP_ATTENTION_TILES_OUTER",
     .kind = RECAP__ENV_BOOL,
     .values = BOOL_VALUES,
     .fallback = "auto",
     .summary = "forces flash attention's grid order (query tiles outermost or not)",
     .details = "Unset, the order is chosen per launch from the grid's size."},
    {.name = "RECAP_BENCH_REPS",
     .kind = RECAP__ENV_INT,
     .values = "a count",
     .fallback = "20",
     .summary = "graph replays per timing of ops_cuda_registry_test's op benchmark",
     .details = NULL,
     .test_only = true},
    {.name = "RECAP_BENCH_SETS",
     .kind = RECAP__ENV_INT,
     .values = "a count",
     .fallback = "enough to overflow the L2",
     .summary = "input sets of ops_cuda_registry_test's op benchmark",
     .details = NULL,
     .test_only = true},
    {.name = "RECAP_CACHE_DIR",
     .kind = RECAP__ENV_PATH,
     .values = "a folder",
     .fallback = "$XDG_CACHE_HOME/recap, else ~/.cache/recap",
     .summary = "where NVRTC-compiled kernels (fused chains, expr ops) are cached",
     .details = NULL},
    {.name = "RECAP_DECODE_LOOP",
     .kind = RECAP__ENV_INT,
     .values = "a step count, 0 to 4096",
     .fallback = "32",
     .summary = "most decode steps per graph launch in the generator (0: one per step)",
     .details = "A WHILE conditional node replays the decode step on the device until every "
                "sequence has stopped, this many steps have run, or the engine asks for a "
                "return (docs/SERVING.md, \"The decode loop\"). Without conditional nodes "
                "(the backend or driver), the generator steps one launch at a time anyway."},
    {.name = "RECAP_DISABLE_GRAPHS",
     .kind = RECAP__ENV_BOOL,
     .values = BOOL_VALUES,
     .fallback = "0",
     .summary = "run pipelines eagerly, never as CUDA graphs",
     .details = NULL},
    {.name = "RECAP_DIST_CHILD",
     .kind = RECAP__ENV_TEXT,
     .values = "ROLE:RANK:DIR",
     .fallback = "unset (the parent)",
     .summary = "tells pipeline_dist_test's re-executed rank processes their role",
     .details = NULL,
     .test_only = true},
    {.name = "RECAP_ERROR_LOCATIONS",
     .kind = RECAP__ENV_BOOL,
     .values = BOOL_VALUES,
     .fallback = "0",
     .summary = "error messages start with the recap function and line that raised them",
     .details = "For developers: `recap__spec_load_file (spec_root.c:1422): ...`."},
    {.name = "RECAP_FUSION",
     .kind = RECAP__ENV_BOOL,
     .values = BOOL_VALUES,
     .fallback = "1",
     .summary = "fuse elementwise chains into generated kernels (as --no-fusion when 0)",
     .details = NULL},
    {.name = "RECAP_FUSION_GATED",
     .kind = RECAP__ENV_BOOL,
     .values = BOOL_VALUES,
     .fallback = "1",
     .summary = "folds act(gate) * up into the gate_up linear that computes both",
     .details = "The decode GEMM pairs each gate row with its up row in its epilogue, one launch "
                "fewer per layer; other shapes write the product to the op's workspace and pair "
                "it in a pass, as the ops apart (engine/fuse.h, \"Gated outputs\"). 0: off, for "
                "A/B timing. RECAP_FUSION=0 turns it off too."},
    {.name = "RECAP_FUSION_PROLOGUES",
     .kind = RECAP__ENV_BOOL,
     .values = BOOL_VALUES,
     .fallback = "0",
     .summary = "folds RMSNorms and act(gate) * up into the linears that read them",
     .details = "Off by default: measured slower on the H100 than the ops apart (docs/SERVING.md, "
                "\"Prologue folds\"). act(gate) * up folds on the host backend only: CUDA "
                "refuses a linear with `glu`. RECAP_FUSION=0 turns it off too."},
    {.name = "RECAP_GEMM_HOPPER",
     .kind = RECAP__ENV_BOOL,
     .values = BOOL_VALUES,
     .fallback = "1",
     .summary = "recap's wgmma GEMM on Hopper where cuBLASLt cannot fuse the activation",
     .details = "Read once per process, as every RECAP_GEMM_* and RECAP_TUNE* variable."},
    {.name = "RECAP_GEMM_SKINNY",
     .kind = RECAP__ENV_BOOL,
     .values = BOOL_VALUES,
     .fallback = "1",
     .summary = "recap's skinny GEMM kernel for decode shapes (m <= 16)",
     .details = NULL},
    {.name = "RECAP_GEMM_SKINNY_BALANCE",
     .kind = RECAP__ENV_BOOL,
     .values = BOOL_VALUES,
     .fallback = "1",
     .summary = "skinny GEMM bulk tiles sized to spread a weight over every SM",
     .details = "An A/B timing switch: 0 keeps 16 rows of W per tile (docs/perf/skinny_gemm.md)."},
    {.name = "RECAP_GEMM_SKINNY_PDL",
     .kind = RECAP__ENV_BOOL,
     .values = BOOL_VALUES,
     .fallback = "1",
     .summary = "the skinny GEMM kernel with programmatic dependent launch",
     .details = "An A/B timing switch (docs/perf/skinny_gemm.md)."},
    {.name = "RECAP_GEMM_SKINNY_PIPE",
     .kind = RECAP__ENV_BOOL,
     .values = BOOL_VALUES,
     .fallback = "1",
     .summary = "the skinny GEMM kernel with double-buffered loads",
     .details = "An A/B timing switch (docs/perf/skinny_gemm.md)."},
    {.name = "RECAP_GEMM_SKINNY_WARPS",
     .kind = RECAP__ENV_INT,
     .values = "1, 2, 4, 8 or 16",
     .fallback = "chosen per shape",
     .summary = "warps per block of the skinny GEMM kernel",
     .details = "An A/B timing switch; other values are ignored."},
    {.name = "RECAP_HOST_MEMORY_BYTES",
     .kind = RECAP__ENV_INT,
     .values = "a positive byte count",
     .fallback = "physical memory",
     .summary = "caps the host backend's device memory",
     .details = "Read at every allocation, so a program may change it while running; a "
                "malformed value fails the allocation with a message naming it."},
    {.name = "RECAP_LAUNCH_BLOCKING",
     .kind = RECAP__ENV_BOOL,
     .values = BOOL_VALUES,
     .fallback = "0",
     .summary = "synchronize after every eager launch and name the failing op",
     .details = "Never inside a capture."},
    {.name = "RECAP_LIBRARY",
     .kind = RECAP__ENV_PATH,
     .values = "a file",
     .fallback = "the installed prefix's lib, then the loader's search",
     .summary = "the librecap.so the Python package loads (that file only)",
     .details = "Read by python/recap when it first needs the library. Unset, it tries "
                "librecap.so.0 in the lib folder above the installed package, then under "
                "sys.prefix, then by soname (LD_LIBRARY_PATH, ld.so.cache); python/README.md."},
    {.name = "RECAP_MASTER_PORT",
     .kind = RECAP__ENV_INT,
     .values = "a port, 1 to 65535",
     .fallback = "MASTER_PORT",
     .summary = "the port of env://'s rendezvous (rank 0 listens on MASTER_ADDR there)",
     .details = "Required under torchrun (TORCHELASTIC_USE_AGENT_STORE=True), whose own store "
                "already listens on MASTER_PORT; the same free port on every rank. Read when "
                "`recap run --init env://` or recap_comm_init_rank(..., \"env://\", ...) "
                "starts; docs/MULTI_GPU.md."},
    {.name = "RECAP_MODEL_STEPS",
     .kind = RECAP__ENV_INT,
     .values = "a step count",
     .fallback = "3000",
     .summary = "the length of tests/allocator_model_test.c's random run",
     .details = NULL,
     .test_only = true},
    {.name = "RECAP_NVRTC_LIBRARY",
     .kind = RECAP__ENV_PATH,
     .values = "a file",
     .fallback = "libnvrtc.so.13, then libnvrtc.so, searched",
     .summary = "the NVRTC library to open (that file only)",
     .details = "Unset, each folder of LD_LIBRARY_PATH, $CUDA_PATH/lib64, "
                "/usr/local/cuda/lib64 and the system's library folders is tried."},
    {.name = "RECAP_NVTX_RECORD_FILE",
     .kind = RECAP__ENV_PATH,
     .values = "a file",
     .fallback = "unset (nothing recorded)",
     .summary = "where tests/nvtx_recorder.c writes the NVTX ranges it sees",
     .details = NULL,
     .test_only = true},
    {.name = "RECAP_ONESHOT_ALLREDUCE",
     .kind = RECAP__ENV_BOOL,
     .values = BOOL_VALUES,
     .fallback = "1",
     .summary = "small all_reduces run as one kernel over peer buffers, not NCCL",
     .details = "Read when a communicator of 2 to 8 GPUs is made: each rank maps the others' "
                "buffers (CUDA IPC, or peer access in one process; 8 MiB a GPU at 2 ranks, 32 "
                "at 8), and an all_reduce of at most 1 MiB a rank (64 rows of up to 8192 bf16 "
                "elements with the RMSNorm that follows it folded in) is one kernel "
                "(docs/MULTI_GPU.md, \"The one-shot all_reduce\"). 0: NCCL for every sum."},
    {.name = "RECAP_PDL",
     .kind = RECAP__ENV_BOOL,
     .values = BOOL_VALUES,
     .fallback = "1",
     .summary = "recap's kernels with programmatic dependent launch (sm_90 and later)",
     .details = "An A/B timing switch, read once per process (docs/perf/launch.md)."},
    {.name = "RECAP_PLAN_CASES",
     .kind = RECAP__ENV_INT,
     .values = "a count",
     .fallback = "600",
     .summary = "how many random DAGs tests/plan_optimum_test.c plans",
     .details = NULL,
     .test_only = true},
    {.name = "RECAP_SOAK_REPLAYS",
     .kind = RECAP__ENV_INT,
     .values = "a count",
     .fallback = "1000000 (CUDA), 20000 (host)",
     .summary = "replays of tests/soak_test.c",
     .details = NULL,
     .test_only = true},
    {.name = "RECAP_SYNC_DEBUG",
     .kind = RECAP__ENV_CHOICE,
     .values = "warn, error, off",
     .fallback = "off",
     .summary = "report synchronizing calls (warn), or refuse them (error)",
     .details = "Any other value is ignored with a warning naming it."},
    {.name = "RECAP_TEST_GENERATOR_REQUESTS",
     .kind = RECAP__ENV_INT,
     .values = "a count",
     .fallback = "1000 (100 under the sanitizers)",
     .summary = "the random workload's size in the generator tests",
     .details = NULL,
     .test_only = true},
    {.name = "RECAP_TEST_SEED",
     .kind = RECAP__ENV_INT,
     .values = "a seed",
     .fallback = "the clock (printed)",
     .summary = "replays a test's random data",
     .details = NULL,
     .test_only = true},
    {.name = "RECAP_TEST_SERVE_SPEC",
     .kind = RECAP__ENV_PATH,
     .values = "a file",
     .fallback = "unset (the generator tests are skipped)",
     .summary = "the paged serving spec python/tests/test_generator.py runs",
     .details = "tests/python_test.sh imports one from tests/data/models/llama and sets it.",
     .test_only = true},
    {.name = "RECAP_TEST_TIME_SCALE",
     .kind = RECAP__ENV_INT,
     .values = "a number >= 1",
     .fallback = "1 (4 under the sanitizers)",
     .summary = "stretches the timeouts tests give recap and their hang deadlines",
     .details = "scripts/gpu/gpu_sanitize.sh sets 8. Speed targets are never unit tests.",
     .test_only = true},
    {.name = "RECAP_TUNE",
     .kind = RECAP__ENV_CHOICE,
     .values = "0, 1, 2",
     .fallback = "0",
     .summary = "GEMM autotuning: 1 times algorithms, keeps the fastest; 2 reads only",
     .details = "docs/perf/tuning.md; other values mean 0."},
    {.name = "RECAP_TUNE_FILE",
     .kind = RECAP__ENV_PATH,
     .values = "a file",
     .fallback = "./recap_tune.txt",
     .summary = "the GEMM tuning cache file",
     .details = NULL},
};

const recap__env_var *recap__env_vars(size_t *count) {
  *count = sizeof table / sizeof table[0];
  return table;
}

const recap__env_var *recap__env_find(const char *name) {
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
    if (strcmp(table[i].name, name) == 0) return &table[i];
  return NULL;
}

const char *recap__env_kind_name(recap__env_kind kind) {
  switch (kind) {
    case RECAP__ENV_BOOL:
      return "bool";
    case RECAP__ENV_INT:
      return "integer";
    case RECAP__ENV_CHOICE:
      return "choice";
    case RECAP__ENV_PATH:
      return "path";
    case RECAP__ENV_TEXT:
      return "text";
  }
  return "?";
}
