/* args.c: strict command-line parsing shared by the subcommands. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

int cli_wants_help(int argc, char **argv) {
  for (int i = 0; i < argc; i++)
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) return 1;
  return 0;
}

/* Whether argv[j] is flag `name`, alone or as name=VALUE. */
static bool is_flag(const char *arg, const char *name) {
  size_t n = strlen(name);
  return strncmp(arg, name, n) == 0 && (arg[n] == '\0' || arg[n] == '=');
}

static int match_flag(const char *cmd, int argc, char **argv, int *i, const char *name,
                      const char **value);

/* A flag given twice is a usage error, not "the last one wins": `--batch 1 --batch 4` or two
 * --prompt-ids are more likely a slip than an intent. Only --dim repeats (cli_dim_flag). */
int cli_flag(const char *cmd, int argc, char **argv, int *i, const char *name, const char **value) {
  int m = match_flag(cmd, argc, argv, i, name, value);
  if (m <= 0) return m;
  /* The flag's own position: *i moved on to its value when that was a separate argument. */
  const int at = is_flag(argv[*i], name) ? *i : *i - 1;
  for (int j = 0; j < at; j++) {
    if (!is_flag(argv[j], name)) continue;
    fprintf(stderr, "recap %s: %s is given twice; give it once\n", cmd, name);
    return -1;
  }
  return 1;
}

static int match_flag(const char *cmd, int argc, char **argv, int *i, const char *name,
                      const char **value) {
  const char *arg = argv[*i];
  size_t n = strlen(name);
  if (strncmp(arg, name, n) != 0) return 0;
  if (arg[n] == '\0') {
    if (!value) return 1;
    if (*i + 1 >= argc) {
      fprintf(stderr, "recap %s: %s needs a value\n", cmd, name);
      return -1;
    }
    *value = argv[++*i];
    return 1;
  }
  if (arg[n] != '=') return 0; /* "--iterations" is not "--iters" */
  if (!value) {
    fprintf(stderr, "recap %s: %s takes no value\n", cmd, name);
    return -1;
  }
  *value = arg + n + 1;
  return 1;
}

int cli_dim_flag(const char *cmd, int argc, char **argv, int *i, const char **dims, int *num_dims) {
  const char *v = NULL;
  int m = match_flag(cmd, argc, argv, i, "--dim", &v);
  if (m <= 0) return m;
  if (*num_dims == CLI_MAX_DIMS) {
    fprintf(stderr, "recap %s: at most %d --dim flags\n", cmd, CLI_MAX_DIMS);
    return -1;
  }
  dims[(*num_dims)++] = v;
  return 1;
}

bool cli_parse_int(const char *cmd, const char *flag, const char *text, long long lo, long long hi,
                   long long *out) {
  char *end = NULL;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  /* strtoll accepts leading blanks and a sign; a number here is digits only (with an
   * optional '-'), so "8x", " 8" and "" are rejected rather than half-read. */
  bool digits = text[0] != '\0' && (text[0] == '-' || (text[0] >= '0' && text[0] <= '9'));
  if (!digits || end == text || *end != '\0' || errno == ERANGE || v < lo || v > hi) {
    fprintf(stderr, "recap %s: %s expects an integer in [%lld, %lld], got '%s'\n", cmd, flag, lo,
            hi, text);
    return false;
  }
  *out = v;
  return true;
}

bool cli_parse_number(const char *cmd, const char *flag, const char *text, double lo, double hi,
                      double *out) {
  char *end = NULL;
  errno = 0;
  double v = strtod(text, &end);
  /* strtod also reads blanks, hex, "inf" and "nan": a number here starts with a digit, a
   * sign or a point, and is finite. */
  bool plain =
      text[0] == '-' || text[0] == '+' || text[0] == '.' || (text[0] >= '0' && text[0] <= '9');
  if (!plain || end == text || *end != '\0' || errno == ERANGE || !isfinite(v) || v < lo ||
      v > hi) {
    fprintf(stderr, "recap %s: %s expects a number in [%g, %g], got '%s'\n", cmd, flag, lo, hi,
            text);
    return false;
  }
  *out = v;
  return true;
}

bool cli_parse_u64(const char *cmd, const char *flag, const char *text, uint64_t *out) {
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 10);
  /* strtoull accepts blanks and a sign (and negates a '-'): digits only here. */
  if (text[0] < '0' || text[0] > '9' || *end != '\0' || errno == ERANGE) {
    fprintf(stderr, "recap %s: %s expects an integer in [0, %" PRIu64 "], got '%s'\n", cmd, flag,
            UINT64_MAX, text);
    return false;
  }
  *out = (uint64_t)v;
  return true;
}

bool cli_check_dim(const char *cmd, const char *text) {
  const char *eq = strchr(text, '=');
  if (!eq || eq == text) {
    fprintf(stderr, "recap %s: --dim expects NAME=VALUE (e.g. B=8 or Bs=T), got '%s'\n", cmd, text);
    return false;
  }
  /* Another dim's name: the loader checks that the spec declares it. */
  char c = eq[1];
  if (c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  /* The spec's own bound on a dim's value (engine/spec_values.c): below 2^62. */
  long long v;
  return cli_parse_int(cmd, "--dim", eq + 1, 1, ((long long)1 << 62) - 1, &v);
}

bool cli_positional(const char *cmd, const char *arg) {
  if (arg[0] == '-' && arg[1] != '\0') {
    fprintf(stderr, "recap %s: unknown flag '%s' (see 'recap %s --help')\n", cmd, arg, cmd);
    return false;
  }
  return true;
}

bool cli_take_one(const char *cmd, const char *what, const char *arg, const char **slot) {
  if (!cli_positional(cmd, arg)) return false;
  if (*slot) {
    fprintf(stderr, "recap %s: one %s at a time (got '%s' and '%s')\n", cmd, what, *slot, arg);
    return false;
  }
  *slot = arg;
  return true;
}

int cli_run_flag(const char *cmd, int argc, char **argv, int *i, cli_run_flags *f) {
  const char *v = NULL;
  int m;
  if ((m = cli_flag(cmd, argc, argv, i, "--iters", &v)) != 0) {
    if (m < 0 || !cli_parse_int(cmd, "--iters", v, 1, 10000000, &f->iters)) return -1;
    f->iters_set = true;
  } else if ((m = cli_flag(cmd, argc, argv, i, "--warmup", &v)) != 0) {
    if (m < 0 || !cli_parse_int(cmd, "--warmup", v, 0, 10000, &f->warmup)) return -1;
    f->warmup_set = true;
  } else if ((m = cli_dim_flag(cmd, argc, argv, i, f->dims, &f->num_dims)) != 0) {
    if (m < 0) return -1;
  } else if ((m = cli_flag(cmd, argc, argv, i, "--seed", &v)) != 0) {
    if (m < 0 || !cli_parse_u64(cmd, "--seed", v, &f->seed)) return -1;
    f->seed_set = true;
  } else if ((m = cli_flag(cmd, argc, argv, i, "--device", &f->device)) != 0 ||
             (m = cli_flag(cmd, argc, argv, i, "--base-dir", &f->base_dir)) != 0 ||
             (m = cli_flag(cmd, argc, argv, i, "--entry", &f->entry)) != 0) {
    if (m < 0) return -1;
  } else if ((m = cli_flag(cmd, argc, argv, i, "--no-fusion", NULL)) != 0) {
    if (m < 0) return -1;
    f->no_fusion = true;
  } else {
    return 0;
  }
  return 1;
}

bool cli_device_flag_ok(const char *cmd, const char *device) {
  if (device && strcmp(device, "cuda") != 0 && strcmp(device, "host") != 0) {
    fprintf(stderr, "recap %s: --device expects cuda or host, got '%s'\n", cmd, device);
    return false;
  }
  return true;
}

bool cli_run_flags_check(const char *cmd, const cli_run_flags *f) {
  return cli_device_flag_ok(cmd, f->device);
}

bool cli_parse_int_list(const char *cmd, const char *flag, const char *text, long long lo,
                        long long hi, long long *out, size_t max, size_t *count,
                        const char *example) {
  *count = 0;
  for (const char *p = text;;) {
    char item[24];
    size_t n = strcspn(p, ",");
    if (*count == max || n == 0 || n >= sizeof item) {
      /* The value whole, or its first values up to a comma and "...": never half a number. */
      enum { ECHO = 60 };
      int shown = (int)strlen(text);
      const char *more = "";
      if (shown > ECHO) {
        shown = ECHO;
        while (shown > 0 && text[shown] != ',') shown--;
        shown = shown > 0 ? shown + 1 : ECHO; /* keep the comma; one long item: no comma */
        more = "...";
      }
      fprintf(stderr, "recap %s: %s expects up to %zu values like %s, got '%.*s%s'%s\n", cmd, flag,
              max, example, shown, text, more, *count == max ? " (too many values)" : "");
      return false;
    }
    memcpy(item, p, n);
    item[n] = '\0';
    if (!cli_parse_int(cmd, flag, item, lo, hi, &out[(*count)++])) return false;
    if (p[n] == '\0') return true;
    p += n + 1;
  }
}
