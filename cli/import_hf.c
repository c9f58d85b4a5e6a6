/* import_hf.c: `recap import-hf DIR -o SPEC`: a Hugging Face checkpoint folder as a spec
 * (cli/hf_import.h does the work; docs/MODELS.md). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/hf_import.h"

static const char *const CMD = "import-hf";

static const cli_option import_hf_options[] = {
    {.flag = "--output",
     .alias = "-o",
     .value = "SPEC",
     .kind = CLI_VALUE_FILE,
     .help = "the spec to write ('-': stdout); DIR is named relative to its folder"},
    {.flag = "--max-seq",
     .value = "N",
     .kind = CLI_VALUE_TEXT,
     .help = "KV cache rows per sequence (default: min(the config's, 4096))"},
    {.flag = "--prefill",
     .value = "N",
     .kind = CLI_VALUE_TEXT,
     .help = "tokens per prefill step (default: min(128, max-seq)); longer\n"
             "prompts run in several steps, the rest one token at a time"},
    {.flag = "--batch",
     .value = "LIST",
     .kind = CLI_VALUE_TEXT,
     .help = "batch buckets, ascending (default 1): the caches hold the largest"},
    {.flag = "--dtype",
     .value = "DTYPE",
     .kind = CLI_VALUE_WORDS,
     .words = "f32 f16 bf16 float32 float16 bfloat16",
     .help = "f32, f16 or bf16, or PyTorch's float32, float16, bfloat16\n"
             "(default: the config's dtype, else the checkpoint's); weights\n"
             "of another dtype are cast as they load"},
    {.flag = "--paged",
     .kind = CLI_VALUE_NONE,
     .help = "the serving layout: steps of T tokens packed from many sequences\n"
             "at their own positions (per-sequence metadata), a paged KV pool,\n"
             "sampling and the decode step's update in the graph. --batch then\n"
             "lists the decode token buckets and --prefill may list several\n"
             "prefill token buckets (64,256,1024)"},
    {.flag = "--block-size",
     .value = "N",
     .kind = CLI_VALUE_TEXT,
     .help = "with --paged: rows per KV block (default 16)"},
    {.flag = "--kv-blocks",
     .value = "N",
     .kind = CLI_VALUE_TEXT,
     .help = "with --paged: KV blocks per layer (default: the largest batch at\n"
             "--max-seq), at least one sequence's: max-seq / block-size rounded up"},
    {.flag = "--prefill-seqs",
     .value = "N",
     .kind = CLI_VALUE_TEXT,
     .help = "with --paged: sequences one prefill step packs (default: min(8,\n"
             "smallest prefill bucket))"},
    {.flag = "--random-weights",
     .kind = CLI_VALUE_NONE,
     .help = "read config.json only: the weights come from recap's random init\n"
             "(matrices normal(0, 0.02), norms ones, biases zeros); for timing\n"
             "a model's shape without its checkpoint"},
    {.flag = "--tp",
     .value = "N",
     .kind = CLI_VALUE_TEXT,
     .help = "tensor parallelism over N ranks: one spec per rank, SPEC with\n"
             "'{rank}' replaced by 0 .. N-1 (SPEC must hold it). Each reads its\n"
             "share of the heads, the MLP and the LM head's vocabulary; run\n"
             "them with recap launch --gpus N"},
    {.flag = "--tp-fold-residual",
     .kind = CLI_VALUE_NONE,
     .help = "with --tp (the default there): rank 0 adds the residual into its\n"
             "partial sum before each all_reduce, so no add kernel follows it\n"
             "(2 fewer per layer; 16-bit sums are rounded at the residual's\n"
             "scale twice)"},
    {.flag = "--no-tp-fold-residual",
     .kind = CLI_VALUE_NONE,
     .help = "with --tp: add the residual after each all_reduce instead (one\n"
             "rounding at the residual's scale, 2 more kernels per layer)"},
    {0}};
const cli_help cli_import_hf_help = {
    .synopsis =
        "recap import-hf DIR -o SPEC [--max-seq N] [--prefill N] [--batch 1,2,4,8]\n"
        "                [--dtype f32|f16|bf16] [--paged [--block-size N] [--kv-blocks N]\n"
        "                [--prefill-seqs N]] [--tp N [--no-tp-fold-residual]]\n"
        "                [--random-weights]",
    .description =
        "Writes a spec that runs the Hugging Face causal LM in DIR (config.json and\n"
        "model.safetensors or model.safetensors.index.json): LlamaForCausalLM,\n"
        "MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM or GPT2LMHeadModel. The spec\n"
        "reads the weights from DIR by key (nothing is copied) and has two entries over one set\n"
        "of per-layer KV caches: `prefill` (--prefill tokens per step) and `decode` (one token\n"
        "per step). Every tensor it reads is checked first; an unsupported architecture, RoPE\n"
        "type or sliding window, or a missing or misshaped tensor, is an error naming it.",
    .epilog = "Prints the weights' and the KV cache's sizes. docs/MODELS.md has the details.",
    .exit_status =
        "0 when the spec was written, 1 on an error, 2 on a usage error: a flag's value\n"
        "that is malformed or contradicts another flag or the default it leaves (--prefill\n"
        "above --max-seq, --kv-blocks below one sequence), or a flag without the one it\n"
        "goes with (--kv-blocks without --paged).",
    .operand = CLI_VALUE_DIR,
    .groups = {{.options = import_hf_options}},
};

/* "1,2,4,8" into batches. */
static bool parse_batches(const char *text, int64_t *batches, size_t *count) {
  long long values[CLI_HF_MAX_BATCHES];
  if (!cli_parse_int_list(CMD, "--batch", text, 1, 1 << 20, values, CLI_HF_MAX_BATCHES, count,
                          "1,2,4,8"))
    return false;
  for (size_t i = 0; i < *count; ++i) batches[i] = values[i];
  return true;
}

/* `pattern` with every "{rank}" replaced by rank. False when it does not fit. */
static bool rank_path(const char *pattern, int64_t rank, char *out, size_t size) {
  size_t used = 0;
  for (const char *p = pattern; *p;) {
    const char *at = strstr(p, "{rank}");
    size_t keep = at ? (size_t)(at - p) : strlen(p);
    int n = snprintf(out + used, size - used, "%.*s", (int)keep, p);
    if (n < 0 || (size_t)n >= size - used) return false;
    used += (size_t)n;
    if (!at) break;
    n = snprintf(out + used, size - used, "%" PRId64, rank);
    if (n < 0 || (size_t)n >= size - used) return false;
    used += (size_t)n;
    p = at + 6;
  }
  out[used] = '\0';
  return true;
}

/* False with the reason on stderr (cli_report_write_failure). */
static bool write_spec(const char *path, const char *text) {
  if (strcmp(path, "-") == 0) return fputs(text, stdout) >= 0;
  FILE *f = fopen(path, "w");
  bool ok = f && fputs(text, f) >= 0;
  if (f && fclose(f) != 0) ok = false;
  if (!ok) cli_report_write_failure(CMD, path, errno);
  return ok;
}
/* A note when the spec's weights and KV cache need more than the memory of the device it would
 * run on here (the GPU, or the host backend without one): the spec still gets written (it may
 * be meant for another machine), but `--kv-blocks 1000000000` should not pass in silence. */
static void note_memory(FILE *info, const cli_hf_import_result *r) {
  const double tokens = r->kv_blocks ? (double)r->kv_blocks * (double)r->block_size
                                     : (double)r->max_seq * (double)r->max_batch;
  const double need =
      (double)r->param_bytes + (double)r->kv_bytes_per_sequence / (double)r->max_seq * tokens;
  recap_device d = {
      recap_device_is_available(RECAP_BACKEND_CUDA) ? RECAP_BACKEND_CUDA : RECAP_BACKEND_HOST, 0};
  size_t free_bytes = 0, total = 0;
  if (recap_device_mem_get_info(d, &free_bytes, &total) != RECAP_OK || need <= (double)total)
    return;
  char have[32], needed[32];
  fprintf(info,
          "note: the weights and KV cache need %s, more than %s:0's %s: the spec will not load "
          "on this machine (a smaller --kv-blocks, --max-seq or --batch fits it)\n",
          need >= (double)SIZE_MAX ? "more than 2^64 bytes"
                                   : cli_format_bytes((size_t)need, needed, sizeof needed),
          recap_backend_name(d.backend), cli_format_bytes(total, have, sizeof have));
}

int cli_import_hf_main(int argc, char **argv) {
  if (cli_wants_help(argc, argv)) {
    cli_help_print(stdout, &cli_import_hf_help);
    return CLI_EXIT_OK;
  }
  const char *dir = NULL, *out = NULL, *v = NULL;
  int64_t batches[CLI_HF_MAX_BATCHES], prefill_tokens[CLI_HF_MAX_BATCHES];
  cli_hf_import_options o = {0};
  const char *fold = NULL; /* the last of --tp-fold-residual and --no-tp-fold-residual */
  for (int i = 0; i < argc; i++) {
    int m;
    long long n;
    if ((m = cli_flag(CMD, argc, argv, &i, "-o", &out)) != 0 ||
        (m = cli_flag(CMD, argc, argv, &i, "--output", &out)) != 0) {
      if (m < 0) return CLI_EXIT_USAGE;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--max-seq", &v)) != 0) {
      if (m < 0 || !cli_parse_int(CMD, "--max-seq", v, 1, 1 << 24, &n)) return CLI_EXIT_USAGE;
      o.max_seq = n;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--prefill", &v)) != 0) {
      long long values[CLI_HF_MAX_BATCHES];
      if (m < 0 || !cli_parse_int_list(CMD, "--prefill", v, 1, 1 << 24, values, CLI_HF_MAX_BATCHES,
                                       &o.num_prefill_tokens, "128"))
        return CLI_EXIT_USAGE;
      for (size_t k = 0; k < o.num_prefill_tokens; ++k) prefill_tokens[k] = values[k];
      o.prefill_tokens = prefill_tokens;
      o.prefill = prefill_tokens[0];
    } else if (strcmp(argv[i], "--paged") == 0) {
      o.paged = true;
    } else if (strcmp(argv[i], "--random-weights") == 0) {
      o.random_weights = true;
    } else if (strcmp(argv[i], "--tp-fold-residual") == 0 ||
               strcmp(argv[i], "--no-tp-fold-residual") == 0) {
      fold = argv[i][2] == 't' ? "--tp-fold-residual" : "--no-tp-fold-residual";
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--block-size", &v)) != 0) {
      if (m < 0 || !cli_parse_int(CMD, "--block-size", v, 1, 1 << 20, &n)) return CLI_EXIT_USAGE;
      o.block_size = n;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--kv-blocks", &v)) != 0) {
      if (m < 0 || !cli_parse_int(CMD, "--kv-blocks", v, 1, 1 << 30, &n)) return CLI_EXIT_USAGE;
      o.kv_blocks = n;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--prefill-seqs", &v)) != 0) {
      if (m < 0 || !cli_parse_int(CMD, "--prefill-seqs", v, 1, 1 << 20, &n)) return CLI_EXIT_USAGE;
      o.prefill_seqs = n;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--tp", &v)) != 0) {
      if (m < 0 || !cli_parse_int(CMD, "--tp", v, 1, 64, &n)) return CLI_EXIT_USAGE;
      o.tp = n;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--batch", &v)) != 0) {
      if (m < 0 || !parse_batches(v, batches, &o.num_batches)) return CLI_EXIT_USAGE;
      o.batches = batches;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--dtype", &v)) != 0) {
      if (m < 0) return CLI_EXIT_USAGE;
      if (recap_dtype_parse(v, &o.dtype) != RECAP_OK || !recap_dtype_is_float(o.dtype)) {
        fprintf(stderr,
                "recap %s: --dtype expects f32, f16 or bf16 (or float32, float16, bfloat16), "
                "got '%s'\n",
                CMD, v);
        return CLI_EXIT_USAGE;
      }
      o.dtype_given = true;
    } else if (!cli_take_one(CMD, "model folder", argv[i], &dir)) {
      return CLI_EXIT_USAGE;
    }
  }
  if (!dir || !out) {
    fprintf(stderr, "recap %s: usage: recap import-hf DIR -o SPEC (see --help)\n", CMD);
    return CLI_EXIT_USAGE;
  }
  if (!*out) {
    fprintf(stderr, "recap %s: -o needs a file name (or - for standard output)\n", CMD);
    return CLI_EXIT_USAGE;
  }
  /* DIR/ as DIR, so that the files it names read DIR/config.json, not DIR//config.json. */
  char dir_buf[4096];
  size_t dir_len = strlen(dir);
  while (dir_len > 1 && dir[dir_len - 1] == '/') --dir_len;
  if (dir_len < strlen(dir) && dir_len < sizeof dir_buf) {
    memcpy(dir_buf, dir, dir_len);
    dir_buf[dir_len] = '\0';
    dir = dir_buf;
  }
  bool split = o.tp > 1;
  if (split && !strstr(out, "{rank}")) {
    fprintf(stderr,
            "recap %s: --tp %" PRId64
            " writes one spec per rank: -o needs '{rank}' in it "
            "(-o model.rank{rank}.yaml)\n",
            CMD, o.tp);
    return CLI_EXIT_USAGE;
  }
  if (fold && !split) {
    fprintf(stderr, "recap %s: %s goes with --tp N (N > 1)\n", CMD, fold);
    return CLI_EXIT_USAGE;
  }
  /* The pool's shape and the prefill step's packing exist only in the serving layout. */
  const char *paged_only = o.block_size     ? "--block-size"
                           : o.kv_blocks    ? "--kv-blocks"
                           : o.prefill_seqs ? "--prefill-seqs"
                                            : NULL;
  if (paged_only && !o.paged) {
    fprintf(stderr,
            "recap %s: %s goes with --paged (the contiguous layout has no KV pool and no packed "
            "prefill)\n",
            CMD, paged_only);
    return CLI_EXIT_USAGE;
  }
  /* Folded unless turned off: its bf16 logits passed the 1.5x rule on two H200s
   * (docs/MULTI_GPU.md). The last of the two flags wins. */
  o.tp_fold_residual = split && (!fold || strcmp(fold, "--tp-fold-residual") == 0);
  o.model_dir = dir;
  cli_hf_import_result r = {0};
  char path[4096];
  /* Every rank's spec is checked and written; the summary is rank 0's (each rank's is alike). */
  for (int64_t rank = split ? o.tp - 1 : 0; rank >= 0; rank--) {
    if (!rank_path(out, rank, path, sizeof path)) {
      fprintf(stderr, "recap %s: -o %s: the path is too long\n", CMD, out);
      return CLI_EXIT_USAGE;
    }
    char which[4096];
    if (strcmp(path, "-") != 0 && cli_checkpoint_file_is(dir, path, which, sizeof which)) {
      const char *name = strrchr(which, '/');
      fprintf(stderr,
              "recap %s: -o %s is the checkpoint's own %s: the spec would replace a file it "
              "reads (write it elsewhere)\n",
              CMD, path, name ? name + 1 : which);
      return CLI_EXIT_USAGE;
    }
    o.tp_rank = rank;
    o.spec_path = strcmp(path, "-") == 0 ? NULL : path;
    if (!cli_hf_import(&o, &r)) {
      fprintf(stderr, "recap %s: %s\n", CMD, r.error);
      return r.bad_options ? CLI_EXIT_USAGE : CLI_EXIT_FAILURE;
    }
    if (rank == 0) fputs(r.notes, stderr);
    bool ok = write_spec(path, r.spec);
    cli_hf_import_result_free(&r);
    if (!ok) return CLI_EXIT_FAILURE;
  }
  /* The files written: the one, or the first and last rank's. */
  char written[2 * sizeof path + 8];
  if (split) {
    char last[sizeof path];
    (void)rank_path(out, 0, path, sizeof path);
    (void)rank_path(out, o.tp - 1, last, sizeof last);
    snprintf(written, sizeof written, "%s .. %s", path, last);
  } else {
    snprintf(written, sizeof written, "%s", strcmp(out, "-") == 0 ? "spec" : out);
  }
  /* Every prefill bucket when --prefill listed several. */
  char prefill[CLI_HF_MAX_BATCHES * 12 + 16] = "";
  if (o.num_prefill_tokens > 1) {
    size_t n = (size_t)snprintf(prefill, sizeof prefill, "prefill buckets ");
    for (size_t k = 0; k < o.num_prefill_tokens && n < sizeof prefill; ++k)
      n += (size_t)snprintf(prefill + n, sizeof prefill - n, "%s%" PRId64, k ? "," : "",
                            o.prefill_tokens[k]);
  } else {
    snprintf(prefill, sizeof prefill, "prefill %" PRId64, r.prefill);
  }
  char params[32], kv[32], kv_all[32];
  /* The summary goes to stderr when the spec itself is on stdout. */
  FILE *info = strcmp(out, "-") == 0 ? stderr : stdout;
  fprintf(info, "%s: %s, %" PRId64 " %s, %s, max-seq %" PRId64 ", %s\n", written, r.architecture,
          r.layers, cli_plural(r.layers, "layer", "layers"), recap_dtype_name(r.dtype), r.max_seq,
          prefill);
  if (split)
    fprintf(info,
            "tensor parallel: %" PRId64
            " ranks, one spec each; the sizes below are one "
            "rank's\n",
            r.tp);
  if (r.kv_blocks) {
    fprintf(
        info,
        "KV pool: %" PRId64 " blocks of %" PRId64 " rows per layer = %" PRId64
        " tokens, %s (%s per token); %" PRId64 " sequences per prefill step\n",
        r.kv_blocks, r.block_size, r.kv_blocks * r.block_size,
        cli_format_bytes((size_t)(r.kv_bytes_per_sequence / (uint64_t)r.max_seq *
                                  (uint64_t)(r.kv_blocks * r.block_size)),
                         kv_all, sizeof kv_all),
        cli_format_bytes((size_t)(r.kv_bytes_per_sequence / (uint64_t)r.max_seq), kv, sizeof kv),
        r.prefill_seqs);
  }
  /* A pool is what the paged layout allocates; the contiguous one has a cache per batch row. */
  if (r.kv_blocks)
    fprintf(info, "weights: %s; KV cache: %s per sequence of max-seq tokens (from the pool)\n",
            cli_format_bytes((size_t)r.param_bytes, params, sizeof params),
            cli_format_bytes((size_t)r.kv_bytes_per_sequence, kv, sizeof kv));
  else
    fprintf(info, "weights: %s; KV cache: %s per sequence, %s for batch %" PRId64 "\n",
            cli_format_bytes((size_t)r.param_bytes, params, sizeof params),
            cli_format_bytes((size_t)r.kv_bytes_per_sequence, kv, sizeof kv),
            cli_format_bytes((size_t)(r.kv_bytes_per_sequence * (uint64_t)r.max_batch), kv_all,
                             sizeof kv_all),
            r.max_batch);
  note_memory(info, &r);
  return CLI_EXIT_OK;
}
