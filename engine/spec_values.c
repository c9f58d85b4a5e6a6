/* spec_values.c: typed reads of YAML values and mappings, each failure a positioned error
 * (spec_internal.h). */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/spec_internal.h"
#include "kernels/expr.h"
#include "kernels/infer.h"
#include "runtime/error.h"
#include "runtime/file.h"

/* ---- scalars --------------------------------------------------------------------------- */

bool recap__spec_is_scalar(const recap__yaml_node *n) {
  return n && n->kind == RECAP_YAML_SCALAR && !recap__yaml_is_null(n);
}

bool recap__spec_is_name(const recap__yaml_node *n) {
  if (!recap__spec_is_scalar(n) || n->len == 0 || n->len > MAX_NAME_BYTES ||
      strlen(n->text) != n->len)
    return false;
  const char *s = n->text;
  if (!(s[0] == '_' || (s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z'))) return false;
  for (; *s; ++s) {
    char c = *s;
    bool ok = c == '_' || c == '.' || c == '-' || c == '/' || c == ':' || (c >= 'a' && c <= 'z') ||
              (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

bool recap__spec_get_name(loader *L, const recap__yaml_node *n, const char *what,
                          const char **out) {
  if (!recap__spec_is_name(n)) {
    if (recap__spec_is_scalar(n)) {
      char length[48] = "";
      if (n->len > MAX_NAME_BYTES) snprintf(length, sizeof length, "; this one has %zu", n->len);
      ERR(L, n->pos,
          "%s '%.64s%s' is not a valid name (letters, digits, '_', '.', '-', '/', ':', "
          "starting with a letter or '_', at most %d bytes%s)%s",
          what, n->text, n->len > 64 ? "..." : "", MAX_NAME_BYTES, length,
          strstr(n->text, "{i}") ? "; a block's own tensors and ops need no {i}: their names "
                                   "are per instance already (layers.3.y)"
                                 : "");
    } else
      ERR(L, n->pos, "%s: expected a name, got %s", what, recap__yaml_describe(n));
    return false;
  }
  *out = n->text;
  return true;
}

bool recap__spec_get_string(loader *L, const recap__yaml_node *n, const char *what,
                            const char **out) {
  if (!recap__spec_is_scalar(n) || strlen(n->text) != n->len) {
    ERR(L, n->pos, "%s: expected a string, got %s", what,
        recap__spec_is_scalar(n) ? "a string holding a NUL byte" : recap__yaml_describe(n));
    return false;
  }
  *out = n->text;
  return true;
}

/* Decimal integers with an optional sign (YAML 1.1's other forms are refused as ambiguous). */

int_parse recap__spec_parse_int(const recap__yaml_node *n, int64_t *out) {
  if (!recap__spec_is_scalar(n) || !n->plain) return INT_NOT_INT;
  const char *s = n->text;
  bool neg = false;
  if (*s == '+' || *s == '-') neg = *s++ == '-';
  if (!*s) return INT_NOT_INT;
  uint64_t v = 0;
  bool overflow = false;
  for (; *s; ++s) {
    if (*s < '0' || *s > '9') return INT_NOT_INT;
    unsigned d = (unsigned)(*s - '0');
    if (v > (UINT64_MAX - d) / 10)
      overflow = true;
    else
      v = v * 10 + d;
  }
  if (overflow || v > (uint64_t)INT64_MAX + (neg ? 1u : 0u)) return INT_OVERFLOW;
  *out = neg ? (int64_t)(0 - v) : (int64_t)v;
  return INT_OK;
}

bool recap__spec_get_int(loader *L, const recap__yaml_node *n, const char *what, int64_t lo,
                         int64_t hi, int64_t *out) {
  int64_t v;
  switch (recap__spec_parse_int(n, &v)) {
    case INT_NOT_INT:
      ERR(L, n->pos, "%s: expected an integer, got %s%s%.64s%s", what, recap__yaml_describe(n),
          recap__spec_is_scalar(n) ? " '" : "", recap__spec_is_scalar(n) ? n->text : "",
          recap__spec_is_scalar(n) ? "'" : "");
      return false;
    case INT_OVERFLOW:
      ERR(L, n->pos, "%s: %.64s does not fit in 64 bits", what, n->text);
      return false;
    case INT_OK:
      break;
  }
  if (v < lo || v > hi) {
    ERR(L, n->pos, "%s must be between %lld and %lld, got %lld", what, (long long)lo, (long long)hi,
        (long long)v);
    return false;
  }
  *out = v;
  return true;
}

bool recap__spec_get_float(loader *L, const recap__yaml_node *n, const char *what, double *out) {
  if (recap__spec_is_scalar(n) && n->plain) {
    const char *s = n->text;
    if (!strcmp(s, ".inf") || !strcmp(s, ".Inf") || !strcmp(s, "+.inf"))
      return *out = INFINITY, true;
    if (!strcmp(s, "-.inf") || !strcmp(s, "-.Inf")) return *out = -INFINITY, true;
    if (!strcmp(s, ".nan") || !strcmp(s, ".NaN")) return *out = NAN, true;
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    bool digits = strpbrk(s, "0123456789") != NULL && !strpbrk(s, "xXnN");
    if (end != s && *end == '\0' && digits) {
      if (errno == ERANGE && isinf(v)) {
        ERR(L, n->pos, "%s: %.64s is out of the range of a double", what, s);
        return false;
      }
      *out = v;
      return true;
    }
  }
  ERR(L, n->pos, "%s: expected a number, got %s%s%.64s%s", what, recap__yaml_describe(n),
      recap__spec_is_scalar(n) ? " '" : "", recap__spec_is_scalar(n) ? n->text : "",
      recap__spec_is_scalar(n) ? "'" : "");
  return false;
}

bool recap__spec_get_bool(loader *L, const recap__yaml_node *n, const char *what, int *out) {
  if (recap__spec_is_scalar(n) && n->plain) {
    const char *s = n->text;
    if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "TRUE")) return *out = 1, true;
    if (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "FALSE")) return *out = 0, true;
  }
  ERR(L, n->pos, "%s: expected true or false, got %s", what, recap__yaml_describe(n));
  return false;
}

bool recap__spec_get_dtype(loader *L, const recap__yaml_node *n, const char *what, bool float_only,
                           recap_dtype *out) {
  recap_dtype d;
  if (!recap__spec_is_scalar(n) || recap_dtype_parse(n->text, &d) != RECAP_OK) {
    ERR(L, n->pos, "%s: expected a dtype (%s), got %s%s%.64s%s", what,
        float_only ? "f32, f16 or bf16, or float32, float16, bfloat16"
                   : "f32, f16, bf16, i32 or i64, or float32, float16, bfloat16, int32 or int64",
        recap__yaml_describe(n), recap__spec_is_scalar(n) ? " '" : "",
        recap__spec_is_scalar(n) ? n->text : "", recap__spec_is_scalar(n) ? "'" : "");
    return false;
  }
  if (float_only && !recap_dtype_is_float(d)) {
    ERR(L, n->pos,
        "%s: expected a float dtype (f32, f16 or bf16, or float32, float16, bfloat16), got %s",
        what, n->text);
    return false;
  }
  *out = d;
  return true;
}

/* A size: a literal integer (>= min) or a dim's name. */
bool recap__spec_get_size(loader *L, const recap__yaml_node *n, const char *what, int64_t min,
                          recap__spec_size *out) {
  out->pos = n->pos;
  out->dim = -1;
  int64_t v;
  int_parse p = recap__spec_parse_int(n, &v);
  if (p == INT_OK) {
    if (v < min || v >= MAX_SIZE) {
      if (min >= 1)
        ERR(L, n->pos, "%s: %lld is not a positive integer below 2^62", what, (long long)v);
      else
        ERR(L, n->pos, "%s: %lld is out of range (at least %lld, below 2^62)", what, (long long)v,
            (long long)min);
      return false;
    }
    out->value = v;
    return true;
  }
  if (p == INT_OVERFLOW) {
    ERR(L, n->pos, "%s: %.64s does not fit in 64 bits", what, n->text);
    return false;
  }
  if (recap__spec_is_name(n)) {
    int d = recap__names_get(&L->dims, n->text);
    if (d < 0) {
      ERR(L, n->pos, "%s: unknown dim '%s' (declare it under dims:)", what, n->text);
      return false;
    }
    out->dim = d;
    out->value = 0;
    return true;
  }
  ERR(L, n->pos, "%s: expected an integer or a dim name, got %s%s%.64s%s", what,
      recap__yaml_describe(n), recap__spec_is_scalar(n) ? " '" : "",
      recap__spec_is_scalar(n) ? n->text : "", recap__spec_is_scalar(n) ? "'" : "");
  return false;
}

/* Bytes of UTF-8 that code point c takes. */
static size_t utf8_length(unsigned long c) {
  return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
}

static int hex_value(char c) {
  return c >= '0' && c <= '9'   ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                : -1;
}

/* Walks the source from the scalar's start (see spec_internal.h). */
recap__src_pos recap__spec_scalar_offset_pos(const loader *L, const recap__yaml_node *v,
                                             size_t offset) {
  recap__src_pos pos = v->pos;
  if (!L->text) return pos;
  /* The source byte where the scalar starts. */
  size_t r = 0;
  int line = 1, col = 1;
  while (r < L->text_len && (line < pos.line || (line == pos.line && col < pos.col))) {
    char c = L->text[r++];
    if (c == '\n') {
      ++line;
      col = 1;
    } else if (((unsigned char)c & 0xc0) != 0x80) {
      ++col;
    }
  }
  if (line != pos.line || col != pos.col || r >= L->text_len) return pos;
  const char *t = L->text;
  const char quote = t[r] == '"' || t[r] == '\'' ? t[r] : 0;
  if (t[r] == '|' || t[r] == '>') return pos;
  const size_t start = r;
  if (quote) ++r;
  size_t decoded = 0;
  while (decoded < offset && r < L->text_len) {
    char c = t[r];
    if (c == '\n' || c == '\r') return pos;
    if (quote == '\'' && c == '\'' && r + 1 < L->text_len && t[r + 1] == '\'') {
      r += 2;
      decoded += 1;
    } else if (quote == '"' && c == '\\' && r + 1 < L->text_len) {
      char e = t[r + 1];
      size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
      if (digits) {
        unsigned long cp = 0;
        for (size_t k = 0; k < digits && r + 2 + k < L->text_len; ++k) {
          int h = hex_value(t[r + 2 + k]);
          cp = cp * 16 + (unsigned long)(h < 0 ? 0 : h);
        }
        decoded += e == 'x' ? 1 : utf8_length(cp);
        r += 2 + digits;
      } else {
        decoded += e == 'N' || e == '_' ? 2 : e == 'L' || e == 'P' ? 3 : 1;
        r += 2;
      }
    } else {
      r += 1;
      decoded += 1;
    }
  }
  for (size_t k = start; k < r && k < L->text_len; ++k)
    if (((unsigned char)t[k] & 0xc0) != 0x80) ++pos.col;
  return pos;
}

/* ---- mappings -------------------------------------------------------------------------- */

const recap__yaml_node *recap__spec_lookup(const recap__yaml_node *map, const char *key) {
  for (size_t i = 0; i < map->count; ++i)
    if (strcmp(map->keys[i]->text, key) == 0) return map->items[i];
  return NULL;
}

const recap__yaml_node *recap__spec_lookup_key(const recap__yaml_node *map, const char *key) {
  for (size_t i = 0; i < map->count; ++i)
    if (strcmp(map->keys[i]->text, key) == 0) return map->keys[i];
  return NULL;
}

/* "a, b, c" into buf. */
void recap__spec_join_names(const char *const *names, char *buf, size_t size) {
  size_t used = 0;
  buf[0] = '\0';
  for (size_t i = 0; names && names[i]; ++i) {
    int w = snprintf(buf + used, size - used, "%s%s", i ? ", " : "", names[i]);
    if (w < 0 || (size_t)w >= size - used) return;
    used += (size_t)w;
  }
}

/* Reports keys that are not in `allowed` (NULL-terminated) and keys given twice. */
void recap__spec_check_keys(loader *L, const recap__yaml_node *map, const char *const *allowed,
                            const char *context) {
  char list[512];
  recap__spec_join_names(allowed, list, sizeof list);
  recap__names seen = {0};
  for (size_t i = 0; i < map->count; ++i) {
    const recap__yaml_node *k = map->keys[i];
    int previous;
    if (!recap__names_put(&seen, k->text, (int)i, &previous)) {
      L->oom = true;
      break;
    }
    if (previous >= 0) {
      ERR(L, k->pos, "duplicate key '%.64s' in %s (first given at line %d)", k->text, context,
          map->keys[previous]->pos.line);
      continue;
    }
    if (!allowed) continue;
    bool ok = false;
    for (size_t a = 0; allowed[a] && !ok; ++a) ok = strcmp(allowed[a], k->text) == 0;
    if (!ok) ERR(L, k->pos, "unknown key '%.64s' in %s (accepted: %s)", k->text, context, list);
  }
  recap__names_free(&seen);
}

bool recap__spec_expect_kind(loader *L, const recap__yaml_node *n, recap__yaml_kind kind,
                             const char *what) {
  if (n && n->kind == kind) return true;
  ERR(L, n->pos, "%s: expected %s, got %s", what,
      kind == RECAP_YAML_MAPPING ? "a mapping" : "a sequence", recap__yaml_describe(n));
  return false;
}
