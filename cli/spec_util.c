/* spec_util.c: loading specs, choosing buckets and devices, and the output helpers of the
 * subcommands. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/tensors.h"
#include "runtime/file.h"

void cli_print_diag(const char *path, const recap__diag *diag) {
  for (size_t i = 0; i < diag->count; i++) fprintf(stderr, "%s\n", diag->messages[i]);
  if (diag->dropped > 0) fprintf(stderr, "%s: %zu more errors not shown\n", path, diag->dropped);
}

size_t cli_format_dim_aliases(const recap__spec *spec, const int64_t *values, char *buf,
                              size_t size) {
  size_t count = 0, used = 0;
  buf[0] = '\0';
  for (size_t d = 0; d < spec->num_dims; d++) {
    const recap__spec_dim *dim = &spec->dims[d];
    if (dim->alias < 0) continue;
    char value[32] = "";
    if (values)
      snprintf(value, sizeof value, " (%lld)", (long long)values[d]);
    else if (!dim->bucketed && dim->count == 1)
      snprintf(value, sizeof value, " (%lld)", (long long)dim->values[0]);
    if (used < size) {
      int w = snprintf(buf + used, size - used, "%s%s = %s%s", count ? ", " : "", dim->name,
                       spec->dims[dim->alias].name, value);
      used = w < 0 ? size : used + (size_t)w;
    }
    count++;
  }
  return count;
}

const char *cli_cuda_missing_why(void) {
  return recap_backend_compiled(RECAP_BACKEND_CUDA) ? "no CUDA GPU on this machine"
                                                    : "this build has no CUDA backend";
}

/* The note when a spec's CUDA device falls back to the host backend; on stderr, so that --json
 * output on stdout stays pure JSON. Once per process: a command may load a spec more than once
 * (generate reads its shape, then runs it), and the fallback is one fact about the machine. */
static void note_host_fallback(void) {
  static bool noted = false;
  if (noted) return;
  noted = true;
  fprintf(stderr, "note: %s: running on the host backend (CPU)\n", cli_cuda_missing_why());
}

cli_load_request cli_run_load_request(const char *path, const cli_run_flags *f) {
  return (cli_load_request){.path = path,
                            .base_dir = f->base_dir,
                            .dims = f->dims,
                            .num_dims = f->num_dims,
                            .entry = f->entry,
                            .device = f->device,
                            .capacity = RECAP__CAPACITY_REQUIRED,
                            .no_fusion = f->no_fusion};
}

int cli_load(const char *cmd, const cli_load_request *r, recap__model **out, size_t *bucket,
             int64_t *batch) {
  *out = NULL;
  const char *dims[CLI_MAX_DIMS + 1];
  for (int i = 0; i < r->num_dims; i++) {
    if (!cli_check_dim(cmd, r->dims[i])) return CLI_EXIT_USAGE;
    dims[i] = r->dims[i];
  }
  dims[r->num_dims] = NULL;
  recap__load_options o = {
      .spec = {.base_dir = r->base_dir,
               .dims = dims,
               .select_batch = true,
               .grow_batch = r->grow_batch,
               .entry = r->entry},
      .host_if_unavailable = true,
      .device_ordinal = r->device_ordinal,
      .capacity = r->capacity,
      .no_fusion = r->no_fusion,
  };
  if (r->device) {
    /* A device asked for must be here: no fallback. */
    if (!cli_pick_device(cmd, r->device, RECAP_BACKEND_HOST, &o.device)) return CLI_EXIT_FAILURE;
    int count = 0;
    if (r->device_ordinal > 0 && recap_device_count(o.device.backend, &count) == RECAP_OK &&
        count > 0)
      o.device.index = r->device_ordinal % count;
    o.device_given = true;
  }
  recap__diag diag = {0};
  recap_status st = recap__load_file(r->path, &o, out, &diag);
  if (st == RECAP_STATUS_SPEC_ERROR && diag.count > 0)
    cli_print_diag(r->path, &diag);
  else if (st == RECAP_STATUS_INVALID_ARGUMENT) /* a --dim or --entry the spec cannot take; */
    fprintf(stderr, "recap %s: %s\n", cmd, recap_last_error()); /* the message says which */
  else if (st != RECAP_OK)
    fprintf(stderr, "%s: error: %s\n", r->path, recap_last_error());
  recap__diag_free(&diag);
  if (st != RECAP_OK)
    return st == RECAP_STATUS_INVALID_ARGUMENT ? CLI_EXIT_USAGE : CLI_EXIT_FAILURE;
  const recap__spec *spec = (*out)->spec;
  if (!r->device && (*out)->device.backend != spec->device) note_host_fallback();
  const char *name = spec->run_batch ? spec->dims[spec->bucket_dim].name : NULL;
  if (cli_select_bucket(cmd, spec, name, spec->run_batch, false, bucket, batch)) return CLI_EXIT_OK;
  recap__model_release(*out);
  *out = NULL;
  return CLI_EXIT_USAGE;
}

bool cli_select_bucket(const char *cmd, const recap__spec *spec, const char *name, int64_t value,
                       bool exact, size_t *bucket, int64_t *batch) {
  size_t n = recap__spec_num_buckets(spec);
  if (!name) {
    *bucket = n - 1;
    *batch = recap__spec_bucket_value(spec, n - 1);
    return true;
  }
  if (spec->bucket_dim < 0) {
    fprintf(stderr,
            "recap %s: --dim %s: this spec has no bucketed dim (only a dim given as a list "
            "of values can be chosen)\n",
            cmd, name);
    return false;
  }
  const recap__spec_dim *dim = &spec->dims[spec->bucket_dim];
  if (strcmp(dim->name, name) != 0) {
    fprintf(stderr, "recap %s: --dim %s: the bucketed dim is '%s'\n", cmd, name, dim->name);
    return false;
  }
  for (size_t b = 0; b < n; b++) {
    int64_t v = recap__spec_bucket_value(spec, b);
    if (v == value || (!exact && v > value)) {
      *bucket = b;
      *batch = value;
      return true;
    }
  }
  char list[256] = "";
  size_t used = 0;
  for (size_t b = 0; b < n && used < sizeof list - 24; b++)
    used += (size_t)snprintf(list + used, sizeof list - used, "%s%lld", b ? ", " : "",
                             (long long)recap__spec_bucket_value(spec, b));
  fprintf(stderr, "recap %s: --dim %s=%lld: %s %s\n", cmd, name, (long long)value,
          exact ? "not a bucket; buckets are" : "above the largest bucket; buckets are", list);
  return false;
}

int cli_read_serving_shape(const char *cmd, const char *path, const char *base_dir,
                           const char *device, cli_serving_shape *out) {
  *out = (cli_serving_shape){0};
  cli_load_request load = {.path = path, .base_dir = base_dir, .entry = "decode", .device = device};
  recap__model *m = NULL;
  size_t bucket;
  int64_t batch;
  int rc = cli_load(cmd, &load, &m, &bucket, &batch);
  if (rc != CLI_EXIT_OK) return rc;
  const recap__ir *ir = m->irs[m->num_buckets - 1];
  int logits = recap__ir_find_tensor(ir, "logits"), seqs = recap__ir_find_tensor(ir, "seqs");
  int64_t block = 0;
  for (size_t t = 0; t < ir->num_tensors; t++)
    if (ir->tensors[t].role == RECAP_ROLE_STATE && ir->tensors[t].ndim == 4)
      block = ir->tensors[t].shape[1];
  if (seqs >= 0 && logits >= 0 && block > 0 && ir->tensors[seqs].role == RECAP_ROLE_INPUT &&
      ir->tensors[seqs].ndim == 2 && ir->tensors[logits].ndim == 2) {
    out->paged = true;
    out->vocab = ir->tensors[logits].shape[1];
    out->max_seq = (ir->tensors[seqs].shape[1] - RECAP_SEQ_BLOCKS) * block;
    out->max_rows = ir->tensors[seqs].shape[0];
  } else if (logits >= 0 && block > 0 && ir->tensors[logits].ndim == 3) {
    /* The contiguous layout: logits [B, S, V] and caches [B, Smax, Hkv, Dh]; `block` is then
     * a cache's rows, every layer's alike. */
    out->vocab = ir->tensors[logits].shape[2];
    out->max_seq = block;
  }
  recap__model_release(m);
  return CLI_EXIT_OK;
}

bool cli_pick_device(const char *cmd, const char *requested, recap_backend_kind fallback,
                     recap_device *out) {
  recap_backend_kind kind = fallback;
  if (requested && recap_backend_parse(requested, &kind) != RECAP_OK) {
    fprintf(stderr, "recap %s: --device expects cuda or host, got '%s'\n", cmd, requested);
    return false;
  }
  if (kind == RECAP_BACKEND_CUDA && !recap_device_is_available(RECAP_BACKEND_CUDA)) {
    if (requested) {
      fprintf(stderr, "recap %s: --device cuda: %s\n", cmd, cli_cuda_missing_why());
      return false;
    }
    note_host_fallback();
    kind = RECAP_BACKEND_HOST;
  }
  *out = (recap_device){kind, 0};
  return true;
}

int cli_run_setup_resolve(const cli_run_flags *f, const recap__model *m, size_t bucket,
                          int64_t batch, recap_pipeline_options *opts, cli_run_setup *out) {
  const recap__spec *spec = m->spec;
  out->bucket = bucket;
  out->batch = batch;
  opts->override_device = 1;
  opts->device = m->device;
  bool host = opts->device.backend == RECAP_BACKEND_HOST;
  out->iters = f->iters_set ? (int)f->iters : spec->iters;
  out->warmup = f->warmup_set ? (int)f->warmup : spec->warmup;
  out->iters_capped = host && !f->iters_set && out->iters > CLI_HOST_ITERS_CAP;
  if (out->iters_capped) out->iters = CLI_HOST_ITERS_CAP;
  if (host && !f->warmup_set && out->warmup > CLI_HOST_WARMUP_CAP)
    out->warmup = CLI_HOST_WARMUP_CAP;
  out->seed = cli_input_seed(f->seed_set, f->seed, spec, &out->seed_from);
  /* --warmup also sets the engine's eager runs before each capture, 0 included. */
  opts->warmup = out->warmup;
  opts->warmup_set = 1;
  return CLI_EXIT_OK;
}

uint64_t cli_input_seed(bool flag_set, uint64_t flag, const recap__spec *spec, const char **from) {
  if (flag_set) {
    *from = "--seed";
    return flag;
  }
  if (spec->seed_given) {
    *from = "spec";
    return spec->seed;
  }
  *from = "random";
  return cli_random_seed();
}

json_t *cli_json_number(double v) {
  if (isnan(v)) return json_string("nan");
  if (isinf(v)) return json_string(v > 0 ? "inf" : "-inf");
  return json_real(v);
}

json_t *cli_seed_json(uint64_t seed) {
  char text[32];
  snprintf(text, sizeof text, "%" PRIu64, seed);
  return json_string(text);
}

void cli_report_failure(const char *cmd, const char *what, recap_status status) {
  const char *detail = recap_last_error();
  fprintf(stderr, "recap %s: %s failed: %s%s%s\n", cmd, what, recap_status_string(status),
          detail[0] ? "\n" : "", detail);
}

void cli_report_write_failure(const char *cmd, const char *path, int error) {
  char folder[4096];
  snprintf(folder, sizeof folder, "%s", path);
  char *slash = strrchr(folder, '/');
  struct stat st;
  if (error == ENOENT && slash && slash != folder) {
    *slash = '\0';
    if (stat(folder, &st) != 0) {
      fprintf(stderr, "recap %s: cannot write %s: the folder %s does not exist\n", cmd, path,
              folder);
      return;
    }
  }
  fprintf(stderr, "recap %s: cannot write %s: %s\n", cmd, path, strerror(error));
}

const char *cli_plural(long long n, const char *one, const char *many) {
  return n == 1 ? one : many;
}

const char *cli_format_bytes(size_t bytes, char *buf, size_t size) {
  if (bytes >= ((size_t)1 << 40))
    snprintf(buf, size, "%.1f TiB", (double)bytes / (double)((size_t)1 << 40));
  else if (bytes >= ((size_t)1 << 30))
    snprintf(buf, size, "%.1f GiB", (double)bytes / (double)(1u << 30));
  else if (bytes >= (1u << 20))
    snprintf(buf, size, "%.1f MiB", (double)bytes / (1 << 20));
  else if (bytes >= (1u << 10))
    snprintf(buf, size, "%.1f KiB", (double)bytes / (1 << 10));
  else
    snprintf(buf, size, "%zu B", bytes);
  return buf;
}

double cli_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void cli_print_gemm_tune_stats(FILE *out) {
  recap_gemm_tune_stats s;
  if (!out || recap_gemm_tune_stats_get(&s) != RECAP_STATUS_OK || s.mode == 0) return;
  fprintf(out,
          "gemm tuning (RECAP_TUNE=%d, %s): %llu problems timed (%llu candidates, %llu "
          "rejected), %llu cache hits, %llu left on the default, %llu stale entries, %llu file "
          "warnings\n",
          s.mode, s.tune_file, (unsigned long long)s.tunings,
          (unsigned long long)s.candidates_timed, (unsigned long long)s.rejected,
          (unsigned long long)s.cache_hits, (unsigned long long)s.untimed_defaults,
          (unsigned long long)s.stale, (unsigned long long)s.file_warnings);
}

static bool same_file(const struct stat *a, const char *path) {
  struct stat b;
  return stat(path, &b) == 0 && a->st_dev == b.st_dev && a->st_ino == b.st_ino;
}

/* In `folder`: a .safetensors file, an index (a .json naming safetensors) or, with
 * `with_config`, config.json that is `out`; its path goes to `which`. */
static bool in_checkpoint_folder(const struct stat *out, const char *folder, bool with_config,
                                 char *which, size_t size) {
  DIR *d = opendir(folder);
  if (!d) return false;
  bool found = false;
  const struct dirent *e;
  while (!found && (e = readdir(d)) != NULL) {
    const size_t len = strlen(e->d_name);
    const bool read = (with_config && strcmp(e->d_name, "config.json") == 0) ||
                      (len > 12 && strcmp(e->d_name + len - 12, ".safetensors") == 0) ||
                      (len > 5 && strcmp(e->d_name + len - 5, ".json") == 0 &&
                       strstr(e->d_name, "safetensors") != NULL);
    char file[4096];
    if (read && snprintf(file, sizeof file, "%s/%s", folder, e->d_name) < (int)sizeof file &&
        same_file(out, file)) {
      snprintf(which, size, "%s", file);
      found = true;
    }
  }
  closedir(d);
  return found;
}

bool cli_checkpoint_file_is(const char *folder, const char *out, char *which, size_t size) {
  struct stat o;
  return stat(out, &o) == 0 && in_checkpoint_folder(&o, folder, true, which, size);
}

bool cli_output_replaces_input(recap_pipeline *p, const char *spec_path, const char *out,
                               char *which, size_t size) {
  struct stat o;
  if (strcmp(out, "-") == 0 || stat(out, &o) != 0) return false;
  if (spec_path && same_file(&o, spec_path)) {
    snprintf(which, size, "%s", spec_path);
    return true;
  }
  recap_pipeline_info pi;
  if (recap_pipeline_info_get(p, &pi) != RECAP_OK) {
    recap_clear_error();
    return false;
  }
  const char *last = NULL;
  for (size_t i = 0; i < pi.num_tensors; i++) {
    recap_tensor_info t;
    if (recap_pipeline_tensor_info_get(p, i, &t) != RECAP_OK) {
      recap_clear_error();
      continue;
    }
    if (t.init.kind != RECAP_INIT_FILE || !t.init.path) continue;
    /* The tensors of one checkpoint name one path, one after another: look at it once. */
    if (last && strcmp(last, t.init.path) == 0) continue;
    last = t.init.path;
    struct stat st;
    if (stat(t.init.path, &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      if (in_checkpoint_folder(&o, t.init.path, false, which, size)) return true;
      continue;
    }
    if (st.st_dev == o.st_dev && st.st_ino == o.st_ino) {
      snprintf(which, size, "%s", t.init.path);
      return true;
    }
    /* An index's shards lie beside it; a .safetensors file or a raw file is itself alone (a
     * raw weight file does not make its folder a checkpoint). */
    const size_t len = strlen(t.init.path);
    if (len < 5 || strcmp(t.init.path + len - 5, ".json") != 0) continue;
    char *folder = recap__path_folder(t.init.path);
    const bool beside = folder && in_checkpoint_folder(&o, folder, false, which, size);
    free(folder);
    if (beside) return true;
  }
  return false;
}
