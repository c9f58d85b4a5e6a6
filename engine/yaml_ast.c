/*
 * yaml_ast.c: libyaml events -> the positioned tree of yaml_ast.h, with the limits enforced
 * as each event arrives (see the header).
 */
#include "engine/yaml_ast.h"

#include <stdalign.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "runtime/error.h"

enum {
  DEFAULT_MAX_FILE_BYTES = 16 << 20,
  DEFAULT_MAX_DEPTH = 64,
  DEFAULT_MAX_ALIASES = 100,
  DEFAULT_MAX_ALIAS_EXPANSION = 10000,
  DEFAULT_MAX_SCALAR_BYTES = 64 << 10,
  DEFAULT_MAX_NODES = 2000000,
  MAX_MERGED_PAIRS = 4096, /* a mapping with merge keys (merge_keys) */
  /* Anchors are looked up by a linear scan per alias; bounding them keeps that scan cheap. */
  MAX_ANCHORS = 10000,
  CHUNK_BYTES = 64 << 10,
};

void recap__yaml_limits_resolve(recap__yaml_limits *l) {
  if (!l->max_file_bytes) l->max_file_bytes = DEFAULT_MAX_FILE_BYTES;
  if (!l->max_depth) l->max_depth = DEFAULT_MAX_DEPTH;
  if (!l->max_aliases) l->max_aliases = DEFAULT_MAX_ALIASES;
  if (!l->max_alias_expansion) l->max_alias_expansion = DEFAULT_MAX_ALIAS_EXPANSION;
  if (!l->max_scalar_bytes) l->max_scalar_bytes = DEFAULT_MAX_SCALAR_BYTES;
  if (!l->max_nodes) l->max_nodes = DEFAULT_MAX_NODES;
}

/* ---- arena: every node, string and array of one tree, released together ---- */

struct recap__yaml_chunk {
  struct recap__yaml_chunk *next;
  size_t used, capacity;
  alignas(max_align_t) unsigned char data[];
};

static void *arena_alloc(recap__yaml_ast *ast, size_t size) {
  const size_t align = alignof(max_align_t);
  size = (size + align - 1) / align * align;
  struct recap__yaml_chunk *c = ast->chunks;
  if (!c || c->capacity - c->used < size) {
    /* Big requests get a chunk of their own, so the current chunk keeps its free space. */
    size_t capacity = size > CHUNK_BYTES / 4 ? size : CHUNK_BYTES;
    struct recap__yaml_chunk *fresh = malloc(sizeof *fresh + capacity);
    if (!fresh) return NULL;
    fresh->used = 0;
    fresh->capacity = capacity;
    if (c && capacity != CHUNK_BYTES) { /* keep the current chunk on top */
      fresh->next = c->next;
      c->next = fresh;
      fresh->used = size;
      return fresh->data;
    }
    fresh->next = c;
    ast->chunks = c = fresh;
  }
  void *p = c->data + c->used;
  c->used += size;
  return p;
}

static char *arena_strndup(recap__yaml_ast *ast, const char *s, size_t len) {
  char *copy = arena_alloc(ast, len + 1);
  if (!copy) return NULL;
  memcpy(copy, s, len);
  copy[len] = '\0';
  return copy;
}

void *recap__yaml_ast_alloc(recap__yaml_ast *ast, size_t size) {
  return arena_alloc(ast, size ? size : 1);
}

void recap__yaml_ast_destroy(recap__yaml_ast *ast) {
  if (!ast) return;
  struct recap__yaml_chunk *c = ast->chunks;
  while (c) {
    struct recap__yaml_chunk *next = c->next;
    free(c);
    c = next;
  }
  free(ast);
}

/* ---- the builder ---- */

typedef struct {
  recap__yaml_node *node;
  recap__yaml_node **items; /* mappings: key, value, key, value... */
  size_t count, capacity;
  char *anchor;    /* registered when the collection closes (malloc'd) */
  size_t expanded; /* nodes in this subtree with aliases expanded (saturating) */
} frame;

typedef struct {
  char *name;
  recap__yaml_node *node;
  size_t expanded;
} anchor_entry;

typedef struct {
  recap__yaml_ast *ast;
  const recap__yaml_limits *limits;
  recap__diag *diag;
  const char *text;
  size_t len;
  frame *frames;
  size_t depth, frames_capacity;
  anchor_entry *anchors;
  size_t num_anchors, anchors_capacity;
  size_t aliases, alias_expansion, nodes, documents;
  bool failed, oom;
} builder;

static size_t add_sat(size_t a, size_t b) {
  return a > SIZE_MAX - b ? SIZE_MAX : a + b;
}

static recap__src_pos mark_pos(const builder *b, yaml_mark_t mark) {
  return (recap__src_pos){
      .file = b->ast->file, .line = (int)mark.line + 1, .col = (int)mark.column + 1};
}

/* libyaml reports reader errors (bad UTF-8, control characters) as a byte offset: count
 * lines and characters (UTF-8 lead bytes) up to it, as libyaml's marks do. */
static recap__src_pos offset_pos(const builder *b, size_t offset) {
  int line = 1, col = 1;
  for (size_t i = 0; i < offset && i < b->len; ++i) {
    unsigned char c = (unsigned char)b->text[i];
    if (c == '\n') {
      ++line;
      col = 1;
    } else if ((c & 0xC0) != 0x80) {
      ++col;
    }
  }
  return (recap__src_pos){.file = b->ast->file, .line = line, .col = col};
}

#define FAIL_AT(b, pos, ...)                          \
  do {                                                \
    recap__diag_error((b)->diag, (pos), __VA_ARGS__); \
    (b)->failed = true;                               \
  } while (0)

/* Whether the indentation of mark's line holds a tab. */
static bool tab_indented(const builder *b, yaml_mark_t mark) {
  size_t i = 0;
  for (size_t line = 0; line < mark.line && i < b->len; ++i)
    if (b->text[i] == '\n') ++line;
  for (; i < b->len && (b->text[i] == ' ' || b->text[i] == '\t'); ++i)
    if (b->text[i] == '\t') return true;
  return false;
}

static void report_parser_error(builder *b, const yaml_parser_t *p) {
  if (p->error == YAML_MEMORY_ERROR) {
    b->oom = true;
    return;
  }
  const char *problem = p->problem ? p->problem : "unreadable YAML";
  if (p->error == YAML_READER_ERROR) {
    if (p->problem_value != -1)
      FAIL_AT(b, offset_pos(b, p->problem_offset),
              "%s (byte 0x%02x): the spec must be UTF-8 "
              "text",
              problem, (unsigned)p->problem_value & 0xFFu);
    else
      FAIL_AT(b, offset_pos(b, p->problem_offset), "%s", problem);
    return;
  }
  recap__src_pos pos = mark_pos(b, p->problem_mark);
  /* libyaml's message for a tab in the indentation ("found character that cannot start any
   * token") does not name the tab. */
  const char *hint = tab_indented(b, p->problem_mark)
                         ? " (a tab indents this line: YAML indents with spaces)"
                         : "";
  if (p->context)
    FAIL_AT(b, pos, "YAML syntax error: %s %s (started at line %d, column %d)%s", problem,
            p->context, (int)p->context_mark.line + 1, (int)p->context_mark.column + 1, hint);
  else
    FAIL_AT(b, pos, "YAML syntax error: %s%s", problem, hint);
}

static recap__yaml_node *new_node(builder *b, recap__yaml_kind kind, yaml_mark_t mark) {
  if (++b->nodes > b->limits->max_nodes) {
    FAIL_AT(b, mark_pos(b, mark), "the spec has more than %zu YAML nodes (the limit)",
            b->limits->max_nodes);
    return NULL;
  }
  recap__yaml_node *n = arena_alloc(b->ast, sizeof *n);
  if (!n) {
    b->oom = true;
    return NULL;
  }
  memset(n, 0, sizeof *n);
  n->kind = kind;
  n->pos = mark_pos(b, mark);
  return n;
}

/* Adds a finished node (with its expanded size) to the enclosing collection, or makes it
 * the root. */
static void attach(builder *b, recap__yaml_node *node, size_t expanded) {
  if (b->depth == 0) {
    b->ast->root = node;
    return;
  }
  frame *f = &b->frames[b->depth - 1];
  if (f->node->kind == RECAP_YAML_MAPPING && f->count % 2 == 0 && node->kind != RECAP_YAML_SCALAR) {
    FAIL_AT(b, node->pos, "mapping keys must be plain names, not %s", recap__yaml_describe(node));
    return;
  }
  if (f->count == f->capacity) {
    size_t capacity = f->capacity ? f->capacity * 2 : 8;
    recap__yaml_node **items = realloc(f->items, capacity * sizeof *items);
    if (!items) {
      b->oom = true;
      return;
    }
    f->items = items;
    f->capacity = capacity;
  }
  f->items[f->count++] = node;
  f->expanded = add_sat(f->expanded, expanded);
}

static bool check_tag(builder *b, const yaml_char_t *tag, yaml_mark_t mark) {
  if (!tag) return true;
  FAIL_AT(b, mark_pos(b, mark), "YAML tags ('%s') are not supported in specs", (const char *)tag);
  return false;
}

static void register_anchor(builder *b, const char *name, recap__yaml_node *node, size_t expanded) {
  if (b->num_anchors == MAX_ANCHORS) {
    FAIL_AT(b, node->pos, "the spec defines more than %d YAML anchors (the limit)", MAX_ANCHORS);
    return;
  }
  if (b->num_anchors == b->anchors_capacity) {
    size_t capacity = b->anchors_capacity ? b->anchors_capacity * 2 : 8;
    anchor_entry *anchors = realloc(b->anchors, capacity * sizeof *anchors);
    if (!anchors) {
      b->oom = true;
      return;
    }
    b->anchors = anchors;
    b->anchors_capacity = capacity;
  }
  char *copy = strdup(name);
  if (!copy) {
    b->oom = true;
    return;
  }
  b->anchors[b->num_anchors++] = (anchor_entry){copy, node, expanded};
}

/* The first control character of a decoded scalar (C0 other than NUL, tab and newline; DEL;
 * C1, U+0080..U+009F) as a code point, or 0. libyaml refuses them in the text itself, but
 * escapes ("\e[31m", "\x07", "\u009b", "\r") decode to them; since any string of a spec
 * may be printed (names, paths, the values an error quotes), one of them would reach the
 * terminal raw. NUL is left to the callers, which refuse it where a string must be a name. */
static unsigned control_character(const char *text, size_t len) {
  for (size_t i = 0; i < len; ++i) {
    unsigned char c = (unsigned char)text[i];
    if ((c >= 0x01 && c < 0x20 && c != '\t' && c != '\n') || c == 0x7F) return c;
    if (c == 0xC2 && i + 1 < len && (unsigned char)text[i + 1] >= 0x80 &&
        (unsigned char)text[i + 1] <= 0x9F)
      return (unsigned char)text[i + 1];
  }
  return 0;
}

static void on_scalar(builder *b, const yaml_event_t *ev) {
  if (!check_tag(b, ev->data.scalar.tag, ev->start_mark)) return;
  if (ev->data.scalar.length > b->limits->max_scalar_bytes) {
    FAIL_AT(b, mark_pos(b, ev->start_mark), "a scalar of %zu bytes exceeds the limit of %zu bytes",
            (size_t)ev->data.scalar.length, b->limits->max_scalar_bytes);
    return;
  }
  recap__yaml_node *n = new_node(b, RECAP_YAML_SCALAR, ev->start_mark);
  if (!n) return;
  n->len = ev->data.scalar.length;
  n->text = arena_strndup(b->ast, (const char *)ev->data.scalar.value, n->len);
  if (!n->text) {
    b->oom = true;
    return;
  }
  n->plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
  unsigned control = control_character(n->text, n->len);
  if (control) {
    FAIL_AT(b, n->pos,
            "a string holds control character U+%04X (from an escape); strings may hold "
            "printable text, tabs and newlines only",
            control);
    return;
  }
  if (ev->data.scalar.anchor) register_anchor(b, (const char *)ev->data.scalar.anchor, n, 1);
  if (!b->failed && !b->oom) attach(b, n, 1);
}

static void on_alias(builder *b, const yaml_event_t *ev) {
  const char *name = (const char *)ev->data.alias.anchor;
  recap__src_pos pos = mark_pos(b, ev->start_mark);
  if (++b->aliases > b->limits->max_aliases) {
    FAIL_AT(b, pos, "the spec uses more than %zu YAML aliases (the limit)", b->limits->max_aliases);
    return;
  }
  /* The latest definition wins, as YAML says an anchor may be redefined. */
  for (size_t i = b->num_anchors; i-- > 0;) {
    if (strcmp(b->anchors[i].name, name) != 0) continue;
    b->alias_expansion = add_sat(b->alias_expansion, b->anchors[i].expanded);
    if (b->alias_expansion > b->limits->max_alias_expansion) {
      FAIL_AT(b, pos, "YAML aliases expand to more than %zu nodes (the limit; an alias bomb?)",
              b->limits->max_alias_expansion);
      return;
    }
    attach(b, b->anchors[i].node, b->anchors[i].expanded);
    return;
  }
  FAIL_AT(b, pos, "YAML alias '*%s' refers to no anchor defined before it", name);
}

static void on_collection_start(builder *b, const yaml_event_t *ev, recap__yaml_kind kind) {
  const yaml_char_t *tag =
      kind == RECAP_YAML_MAPPING ? ev->data.mapping_start.tag : ev->data.sequence_start.tag;
  const yaml_char_t *anchor =
      kind == RECAP_YAML_MAPPING ? ev->data.mapping_start.anchor : ev->data.sequence_start.anchor;
  if (!check_tag(b, tag, ev->start_mark)) return;
  if (b->depth >= b->limits->max_depth) {
    FAIL_AT(b, mark_pos(b, ev->start_mark), "the spec nests deeper than %zu levels (the limit)",
            b->limits->max_depth);
    return;
  }
  recap__yaml_node *n = new_node(b, kind, ev->start_mark);
  if (!n) return;
  if (b->depth == b->frames_capacity) {
    size_t capacity = b->frames_capacity ? b->frames_capacity * 2 : 8;
    frame *frames = realloc(b->frames, capacity * sizeof *frames);
    if (!frames) {
      b->oom = true;
      return;
    }
    b->frames = frames;
    b->frames_capacity = capacity;
  }
  frame *f = &b->frames[b->depth++];
  *f = (frame){.node = n, .expanded = 1};
  if (anchor) {
    f->anchor = strdup((const char *)anchor);
    if (!f->anchor) b->oom = true;
  }
}

/* Whether mapping keys[0..count) has a key with `key`'s text. */
static bool has_key(recap__yaml_node *const *keys, size_t count, const recap__yaml_node *key) {
  for (size_t i = 0; i < count; ++i)
    if (keys[i]->len == key->len && memcmp(keys[i]->text, key->text, key->len) == 0) return true;
  return false;
}

static bool is_merge_key(const recap__yaml_node *key) {
  return key->kind == RECAP_YAML_SCALAR && key->plain && strcmp(key->text, "<<") == 0;
}

/* YAML's merge key (`<<: *base`, or `<<: [*a, *b]`), which libyaml leaves to the application:
 * the mapping n takes every pair of the merged mappings whose key it lacks, its own pairs
 * first, then the merged ones in order (an earlier one wins). */
static void merge_keys(builder *b, recap__yaml_node *n) {
  size_t merges = 0, extra = 0;
  for (size_t i = 0; i < n->count; ++i) {
    if (!is_merge_key(n->keys[i])) continue;
    merges++;
    const recap__yaml_node *v = n->items[i];
    const size_t sources = v->kind == RECAP_YAML_SEQUENCE ? v->count : 1;
    for (size_t j = 0; j < sources; ++j) {
      const recap__yaml_node *m = v->kind == RECAP_YAML_SEQUENCE ? v->items[j] : v;
      if (m->kind != RECAP_YAML_MAPPING) {
        FAIL_AT(b, m->pos,
                "YAML merge key '<<' takes a mapping or a list of mappings (an alias such as "
                "*base), got %s",
                recap__yaml_describe(m));
        return;
      }
      extra += m->count;
    }
  }
  if (!merges) return;
  /* Each merged pair is looked for among the pairs before it: bounded, so a hostile spec
   * cannot make that quadratic search long. */
  if (n->count + extra > MAX_MERGED_PAIRS) {
    FAIL_AT(b, n->pos, "YAML merge keys give this mapping more than %d pairs (the limit)",
            MAX_MERGED_PAIRS);
    return;
  }
  size_t cap = n->count - merges + extra;
  recap__yaml_node **keys = arena_alloc(b->ast, (cap ? cap : 1) * sizeof *keys);
  recap__yaml_node **items = arena_alloc(b->ast, (cap ? cap : 1) * sizeof *items);
  if (!keys || !items) {
    b->oom = true;
    return;
  }
  size_t count = 0;
  for (size_t i = 0; i < n->count; ++i) {
    if (is_merge_key(n->keys[i])) continue;
    keys[count] = n->keys[i];
    items[count++] = n->items[i];
  }
  for (size_t i = 0; i < n->count; ++i) {
    if (!is_merge_key(n->keys[i])) continue;
    recap__yaml_node *v = n->items[i];
    const size_t sources = v->kind == RECAP_YAML_SEQUENCE ? v->count : 1;
    for (size_t j = 0; j < sources; ++j) {
      recap__yaml_node *m = v->kind == RECAP_YAML_SEQUENCE ? v->items[j] : v;
      for (size_t k = 0; k < m->count; ++k) {
        if (has_key(keys, count, m->keys[k])) continue;
        keys[count] = m->keys[k];
        items[count++] = m->items[k];
      }
    }
  }
  n->keys = keys;
  n->items = items;
  n->count = count;
}

static void on_collection_end(builder *b) {
  frame f = b->frames[--b->depth];
  recap__yaml_node *n = f.node;
  bool mapping = n->kind == RECAP_YAML_MAPPING;
  n->count = mapping ? f.count / 2 : f.count;
  if (n->count) {
    n->items = arena_alloc(b->ast, n->count * sizeof *n->items);
    if (mapping) n->keys = arena_alloc(b->ast, n->count * sizeof *n->keys);
    if (!n->items || (mapping && !n->keys)) {
      b->oom = true;
    } else if (mapping) {
      for (size_t i = 0; i < n->count; ++i) {
        n->keys[i] = f.items[2 * i];
        n->items[i] = f.items[2 * i + 1];
      }
    } else {
      memcpy(n->items, f.items, n->count * sizeof *n->items);
    }
  }
  free(f.items);
  if (mapping && !b->oom && !b->failed) merge_keys(b, n);
  if (!b->oom && f.anchor) register_anchor(b, f.anchor, n, f.expanded);
  free(f.anchor);
  if (!b->failed && !b->oom) attach(b, n, f.expanded);
}

static void builder_release(builder *b) {
  for (size_t i = 0; i < b->depth; ++i) {
    free(b->frames[i].items);
    free(b->frames[i].anchor);
  }
  free(b->frames);
  for (size_t i = 0; i < b->num_anchors; ++i) free(b->anchors[i].name);
  free(b->anchors);
}

recap_status recap__yaml_parse(const char *text, size_t len, const char *file,
                               const recap__yaml_limits *limits_in, recap__yaml_ast **out,
                               recap__diag *diag) {
  RECAP_CHECK_ARG((text || len == 0) && file && out && diag);
  recap__yaml_limits limits = limits_in ? *limits_in : (recap__yaml_limits){0};
  recap__yaml_limits_resolve(&limits);

  recap__yaml_ast *ast = calloc(1, sizeof *ast);
  if (!ast) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "out of memory parsing %s", file);
  builder b = {.ast = ast, .limits = &limits, .diag = diag, .text = text, .len = len};
  ast->file = arena_strndup(ast, file, strlen(file));
  if (!ast->file) {
    recap__yaml_ast_destroy(ast);
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "out of memory parsing %s", file);
  }
  if (len > limits.max_file_bytes) {
    recap__diag_error(diag, (recap__src_pos){.file = ast->file, .line = 1, .col = 1},
                      "the spec is %zu bytes, larger than the limit of %zu bytes", len,
                      limits.max_file_bytes);
    recap__yaml_ast_destroy(ast);
    return RECAP_STATUS_SPEC_ERROR;
  }

  yaml_parser_t parser;
  if (!yaml_parser_initialize(&parser)) {
    recap__yaml_ast_destroy(ast);
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "out of memory starting the YAML parser");
  }
  yaml_parser_set_input_string(&parser, (const unsigned char *)(text ? text : ""), len);
  bool done = false;
  while (!done && !b.failed && !b.oom) {
    yaml_event_t ev;
    if (!yaml_parser_parse(&parser, &ev)) {
      report_parser_error(&b, &parser);
      break;
    }
    switch (ev.type) {
      case YAML_DOCUMENT_START_EVENT:
        if (++b.documents > 1)
          FAIL_AT(&b, mark_pos(&b, ev.start_mark),
                  "a spec holds one YAML document; a second one starts here");
        break;
      case YAML_SCALAR_EVENT:
        on_scalar(&b, &ev);
        break;
      case YAML_ALIAS_EVENT:
        on_alias(&b, &ev);
        break;
      case YAML_SEQUENCE_START_EVENT:
        on_collection_start(&b, &ev, RECAP_YAML_SEQUENCE);
        break;
      case YAML_MAPPING_START_EVENT:
        on_collection_start(&b, &ev, RECAP_YAML_MAPPING);
        break;
      case YAML_SEQUENCE_END_EVENT:
      case YAML_MAPPING_END_EVENT:
        on_collection_end(&b);
        break;
      case YAML_STREAM_END_EVENT:
        done = true;
        break;
      default:
        break;
    }
    yaml_event_delete(&ev);
  }
  yaml_parser_delete(&parser);
  builder_release(&b);
  if (b.oom) {
    recap__yaml_ast_destroy(ast);
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "out of memory parsing %s", file);
  }
  if (b.failed) {
    recap__yaml_ast_destroy(ast);
    return RECAP_STATUS_SPEC_ERROR;
  }
  *out = ast;
  return RECAP_OK;
}

bool recap__yaml_is_null(const recap__yaml_node *n) {
  if (!n || n->kind != RECAP_YAML_SCALAR) return false;
  if (!n->plain) return false;
  return n->len == 0 || strcmp(n->text, "~") == 0 || strcmp(n->text, "null") == 0 ||
         strcmp(n->text, "Null") == 0 || strcmp(n->text, "NULL") == 0;
}

const char *recap__yaml_describe(const recap__yaml_node *n) {
  if (!n) return "nothing";
  switch (n->kind) {
    case RECAP_YAML_MAPPING:
      return "a mapping";
    case RECAP_YAML_SEQUENCE:
      return "a sequence";
    case RECAP_YAML_SCALAR:
      break;
  }
  if (recap__yaml_is_null(n)) return "null";
  if (!n->plain) return "a quoted string";
  char *end = NULL;
  strtod(n->text, &end);
  if (end && end != n->text && *end == '\0') return "a number";
  return "a string";
}
