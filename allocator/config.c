/*
 * config.c: RECAP_ALLOC_CONF parsing and the allocator's size rounding.
 *
 * The syntax is PyTorch's PYTORCH_CUDA_ALLOC_CONF ("key:value,key:value", lists in brackets),
 * so settings people already tune carry over. Anything not understood is an error naming the
 * key: a silently ignored typo ("max_split_size:512") would leave a user believing a limit is
 * in force.
 */
#include <ctype.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "allocator/allocator.h"
#include "runtime/error.h"

enum { MIB = 1 << 20, MAX_SETTING = 256 };

void recap__alloc_config_default(recap__alloc_config *out) {
  memset(out, 0, sizeof *out);
  out->uncached = false;
  out->max_split_size = SIZE_MAX;
  out->gc_threshold = 0.0;
}

/* A trimmed copy of text[0..len) in buf (capacity MAX_SETTING); false when too long. */
static bool trimmed(const char *text, size_t len, char *buf) {
  while (len > 0 && isspace((unsigned char)*text)) text++, len--;
  while (len > 0 && isspace((unsigned char)text[len - 1])) len--;
  if (len >= MAX_SETTING) return false;
  memcpy(buf, text, len);
  buf[len] = '\0';
  return true;
}

/* A decimal integer that is the whole string (no sign, no suffix). */
static bool parse_uint(const char *s, unsigned long long *out) {
  if (!isdigit((unsigned char)s[0])) return false;
  errno = 0;
  char *end = NULL;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

static bool is_pow2(unsigned long long v) {
  return v != 0 && (v & (v - 1)) == 0;
}

/* By halving steps (6 of them), not bit by bit: every malloc rounds its size through here. */
static unsigned log2_floor(unsigned long long v) {
  unsigned r = 0;
  for (unsigned shift = 32; shift > 0; shift /= 2) {
    if (v >> shift) {
      v >>= shift;
      r += shift;
    }
  }
  return r;
}

static recap_status bad(const char *key, const char *value, const char *why) {
  return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "RECAP_ALLOC_CONF: %s:%s: %s", key, value, why);
}

static recap_status parse_divisions(const char *value, recap__alloc_config *cfg) {
  const char *key = "roundup_power2_divisions";
  unsigned long long v;
  size_t len = strlen(value);
  if (value[0] != '[') {
    if (!parse_uint(value, &v) || (v != 0 && !is_pow2(v)) || v > 1024)
      return bad(key, value,
                 "expected a power of two up to 1024 (or 0), or a list "
                 "[interval_mb:divisions,...,>:divisions]");
    for (int i = 0; i < RECAP__ALLOC_ROUNDUP_INTERVALS; i++)
      cfg->roundup_divisions[i] = (unsigned)v;
    return RECAP_OK;
  }
  if (len < 2 || value[len - 1] != ']') return bad(key, value, "a list must end with ']'");
  int last = -1; /* the highest interval set so far */
  const char *p = value + 1, *end = value + len - 1;
  while (p < end) {
    const char *comma = memchr(p, ',', (size_t)(end - p));
    const char *item_end = comma ? comma : end;
    char item[MAX_SETTING], k[MAX_SETTING], d[MAX_SETTING];
    if (!trimmed(p, (size_t)(item_end - p), item) || item[0] == '\0')
      return bad(key, value, "empty or overlong list entry");
    char *colon = strchr(item, ':');
    if (!colon) return bad(key, value, "list entries are interval_mb:divisions");
    trimmed(item, (size_t)(colon - item), k);
    trimmed(colon + 1, strlen(colon + 1), d);
    unsigned long long divisions;
    if (!parse_uint(d, &divisions) || (divisions != 0 && !is_pow2(divisions)) || divisions > 1024)
      return bad(key, value, "divisions must be a power of two up to 1024, or 0");
    int upto;
    if (strcmp(k, ">") == 0) {
      if (comma) return bad(key, value, "'>' must be the last entry");
      upto = RECAP__ALLOC_ROUNDUP_INTERVALS - 1;
    } else {
      unsigned long long mb;
      if (!parse_uint(k, &mb) || !is_pow2(mb))
        return bad(key, value, "interval starts are powers of two in MiB, or '>'");
      upto = (int)log2_floor(mb);
      if (upto > RECAP__ALLOC_ROUNDUP_INTERVALS - 1) upto = RECAP__ALLOC_ROUNDUP_INTERVALS - 1;
      if (upto <= last) return bad(key, value, "intervals must increase");
    }
    /* Each entry covers the intervals after the previous entry up to its own; the first
     * entry also covers every smaller size. */
    for (int i = last + 1; i <= upto; i++) cfg->roundup_divisions[i] = (unsigned)divisions;
    last = upto;
    p = comma ? comma + 1 : end;
  }
  if (last < 0) return bad(key, value, "empty list");
  return RECAP_OK;
}

/* recap's backend:native used to mean no caching at all, while in PyTorch it names the caching
 * allocator; a configuration written for the old meaning now gets the caching allocator, so
 * the first backend:native of the process says so and names the new spelling of the old
 * behaviour. Once per process (not per device or per parse): it is the same news every time. */
static void note_native_meaning(void) {
  static atomic_flag noted = ATOMIC_FLAG_INIT;
  if (!atomic_flag_test_and_set(&noted))
    fprintf(stderr,
            "recap: note: RECAP_ALLOC_CONF backend:native is the caching allocator, as "
            "in PyTorch (recap's default); it no longer means no caching, which is now "
            "spelled backend:cudaMalloc\n");
}

static recap_status parse_setting(const char *key, const char *value, recap__alloc_config *cfg) {
  unsigned long long v;
  if (strcmp(key, "backend") == 0) {
    /* PyTorch's two spellings mean what they mean there; caching is recap's own name for
     * native, and cudaMalloc (PyTorch's PYTORCH_NO_CUDA_MEMORY_CACHING=1) caches nothing. */
    cfg->uncached = cfg->async = false;
    if (strcmp(value, "native") == 0)
      note_native_meaning();
    else if (strcmp(value, "cudaMalloc") == 0)
      cfg->uncached = true;
    else if (strcmp(value, "cudaMallocAsync") == 0)
      cfg->async = true;
    else if (strcmp(value, "caching") != 0)
      return bad(key, value, "expected native (or caching), cudaMalloc or cudaMallocAsync");
  } else if (strcmp(key, "max_split_size_mb") == 0) {
    /* Below the large segment size, every large segment would be unsplittable. */
    if (!parse_uint(value, &v) || v <= RECAP__ALLOC_LARGE_BUFFER / MIB || v > SIZE_MAX / MIB)
      return bad(key, value, "expected an integer number of MiB greater than 20");
    cfg->max_split_size = (size_t)v * MIB;
  } else if (strcmp(key, "garbage_collection_threshold") == 0) {
    errno = 0;
    char *end = NULL;
    double t = strtod(value, &end);
    if (value[0] == '\0' || *end != '\0' || errno != 0 || !(t > 0.0 && t < 1.0))
      return bad(key, value, "expected a number strictly between 0 and 1");
    cfg->gc_threshold = t;
  } else if (strcmp(key, "roundup_power2_divisions") == 0) {
    RECAP_TRY(parse_divisions(value, cfg));
  } else if (strcmp(key, "expandable_segments") == 0) {
    /* PyTorch spells it True/False; the lower-case forms are accepted too. */
    if (strcmp(value, "True") == 0 || strcmp(value, "true") == 0)
      cfg->expandable = true;
    else if (strcmp(value, "False") == 0 || strcmp(value, "false") == 0)
      cfg->expandable = false;
    else
      return bad(key, value, "expected True or False");
  } else {
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "RECAP_ALLOC_CONF: unknown setting '%s' (known: backend, "
                      "max_split_size_mb, garbage_collection_threshold, "
                      "roundup_power2_divisions, expandable_segments)",
                      key);
  }
  return RECAP_OK;
}

recap_status recap__alloc_config_parse(const char *text, recap__alloc_config *out) {
  RECAP_CHECK_ARG(out);
  recap__alloc_config cfg;
  recap__alloc_config_default(&cfg);
  const char *p = text ? text : "";
  while (isspace((unsigned char)*p)) p++;
  while (*p) {
    /* A setting ends at a comma outside brackets. */
    const char *q = p;
    int depth = 0;
    while (*q && (depth > 0 || *q != ',')) {
      if (*q == '[') depth++;
      if (*q == ']' && depth > 0) depth--;
      q++;
    }
    char setting[MAX_SETTING], key[MAX_SETTING], value[MAX_SETTING];
    if (!trimmed(p, (size_t)(q - p), setting))
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "RECAP_ALLOC_CONF: a setting is too long");
    if (setting[0] == '\0')
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                        "RECAP_ALLOC_CONF: empty setting (stray comma) in '%s'", text);
    char *colon = strchr(setting, ':');
    if (!colon)
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                        "RECAP_ALLOC_CONF: setting '%s' has no value (expected key:value)",
                        setting);
    trimmed(setting, (size_t)(colon - setting), key);
    trimmed(colon + 1, strlen(colon + 1), value);
    if (key[0] == '\0')
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "RECAP_ALLOC_CONF: setting '%s' has no key",
                        setting);
    if (value[0] == '\0') return bad(key, value, "empty value");
    RECAP_TRY(parse_setting(key, value, &cfg));
    p = *q ? q + 1 : q;
    if (*q == ',') {
      while (isspace((unsigned char)*p)) p++;
      if (*p == '\0')
        return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                          "RECAP_ALLOC_CONF: empty setting (trailing comma) in '%s'", text);
    }
  }
  /* Expandable segments are a way of caching: the other backends cache nothing of their own
   * (cudaMalloc) or leave caching to the driver's pool (cudaMallocAsync). */
  if (cfg.expandable && (cfg.uncached || cfg.async))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "RECAP_ALLOC_CONF: expandable_segments:True needs the caching allocator "
                      "(backend:native, the default; it is how that allocator gets its "
                      "segments), not backend:%s",
                      cfg.uncached ? "cudaMalloc" : "cudaMallocAsync");
  *out = cfg;
  return RECAP_OK;
}

recap_status recap_alloc_conf_check(const char *conf) {
  recap__alloc_config cfg;
  return recap__alloc_config_parse(conf, &cfg);
}

/* The next multiple of (the power of two below size) / divisions at or above size: with 4
 * divisions, sizes between 64 and 128 MiB round up to 80, 96, 112 or 128 MiB. */
static size_t roundup_power2_division(size_t size, unsigned divisions) {
  if (is_pow2(size)) return size;
  size_t floor_pow2 = (size_t)1 << log2_floor(size);
  size_t step = floor_pow2 / divisions;
  if (step == 0) return floor_pow2 << 1;
  size_t below = size & ~(step - 1);
  return below == size ? size : below + step;
}

size_t recap__alloc_round_size(const recap__alloc_config *config, size_t size) {
  if (size < RECAP__ALLOC_MIN_BLOCK) return RECAP__ALLOC_MIN_BLOCK;
  unsigned log_size = log2_floor(size), start = log2_floor(MIB);
  unsigned index = log_size > start ? log_size - start : 0;
  if (index > RECAP__ALLOC_ROUNDUP_INTERVALS - 1) index = RECAP__ALLOC_ROUNDUP_INTERVALS - 1;
  unsigned divisions = config->roundup_divisions[index];
  if (divisions > 1 && size > (size_t)RECAP__ALLOC_MIN_BLOCK * divisions)
    return roundup_power2_division(size, divisions);
  return (size + RECAP__ALLOC_MIN_BLOCK - 1) / RECAP__ALLOC_MIN_BLOCK * RECAP__ALLOC_MIN_BLOCK;
}

size_t recap__alloc_segment_size(size_t rounded, bool private_pool) {
  if (rounded <= RECAP__ALLOC_SMALL_SIZE) return RECAP__ALLOC_SMALL_BUFFER;
  if (rounded < RECAP__ALLOC_MIN_LARGE_ALLOC && !private_pool) return RECAP__ALLOC_LARGE_BUFFER;
  return (rounded + RECAP__ALLOC_ROUND_LARGE - 1) / RECAP__ALLOC_ROUND_LARGE *
         RECAP__ALLOC_ROUND_LARGE;
}
