/* schema.c: `recap schema`: a JSON Schema of the spec format, generated from the op registry
 * (every op's inputs and attributes with their kinds) and from the format's own keys, so that
 * editors validate and complete specs. docs/recap-spec.schema.json is its output (checked by
 * tests/docs_test.sh) and scripts/check_schema.py validates every spec of the repository
 * against it. specs/README.md is the prose this mirrors; the loader stays the judge of what
 * a schema cannot say (names defined once, shapes, dims that exist). */
#include <stdarg.h>
#include <string.h>

#include "cli/cli.h"

static const char *const CMD = "schema";

/* json_object_set_new over a list of (key, value) pairs ending with NULL. */
static json_t *object(const char *key, ...) {
  json_t *o = json_object();
  va_list ap;
  va_start(ap, key);
  for (; key; key = va_arg(ap, const char *)) json_object_set_new(o, key, va_arg(ap, json_t *));
  va_end(ap);
  return o;
}

static json_t *ref(const char *definition) {
  char path[128];
  snprintf(path, sizeof path, "#/definitions/%s", definition);
  return object("$ref", json_string(path), NULL);
}

static json_t *described(json_t *schema, const char *text) {
  json_object_set_new(schema, "description", json_string(text));
  return schema;
}

static json_t *type(const char *name) {
  return object("type", json_string(name), NULL);
}

static json_t *strings(const char *const *words, size_t n) {
  json_t *a = json_array();
  for (size_t i = 0; i < n; i++) json_array_append_new(a, json_string(words[i]));
  return a;
}

static json_t *int_range(long long lo, long long hi) {
  return object("type", json_string("integer"), "minimum", json_integer(lo), "maximum",
                json_integer(hi), NULL);
}

/* Every dtype name recap_dtype_parse takes (short and PyTorch's), floats only or all. */
static json_t *dtype_enum(bool float_only) {
  json_t *names = json_array();
  for (int d = 0; d < RECAP_DTYPE_COUNT; d++) {
    if (float_only && !recap_dtype_is_float((recap_dtype)d)) continue;
    json_array_append_new(names, json_string(recap_dtype_name((recap_dtype)d)));
    json_array_append_new(names, json_string(recap_dtype_long_name((recap_dtype)d)));
  }
  return object("enum", names, NULL);
}

static json_t *activation_enum(void) {
  json_t *names = json_array();
  for (size_t i = 0; recap_op_activation_name(i); i++)
    json_array_append_new(names, json_string(recap_op_activation_name(i)));
  return object("enum", names, NULL);
}

/* ---- the format's own parts ------------------------------------------------------------ */

/* An integer from lo up to 2^62 - 1, or a dim's name (which stands for its value). */
static json_t *integer_or_dim(long long lo, const char *what) {
  json_t *any = json_array();
  json_array_append_new(any, described(int_range(lo, (1LL << 62) - 1), what));
  json_array_append_new(any, described(type("string"), "a dim's name"));
  return object("anyOf", any, NULL);
}

static json_t *dim_value(void) {
  json_t *list = object("type", json_string("array"), "items", int_range(1, (1LL << 62) - 1),
                        "minItems", json_integer(1), "maxItems", json_integer(256), NULL);
  json_t *any = json_array();
  json_array_append_new(any, described(int_range(1, (1LL << 62) - 1), "a size"));
  json_array_append_new(any, described(list, "buckets: one captured graph per value, ascending"));
  json_array_append_new(any, described(type("string"), "another dim's name: an alias of it"));
  return object("anyOf", any, NULL);
}

static json_t *tensor(void) {
  static const char *const roles[] = {"input", "param", "state", "scalar"};
  static const char *const inits[] = {"zeros", "ones", "normal", "uniform", "file", "value"};
  json_t *pair = object("type", json_string("array"), "items", ref("offset"), "minItems",
                        json_integer(2), "maxItems", json_integer(2), NULL);
  /* One [begin, end] for every key, or a list of them, one per key of the key list. */
  json_t *ranges = json_array();
  json_array_append_new(ranges, described(json_incref(pair), "[begin, end] of every key"));
  json_array_append_new(ranges, described(object("type", json_string("array"), "items", pair,
                                                 "minItems", json_integer(1), NULL),
                                          "one [begin, end] per key, in key order"));
  json_t *range = object("anyOf", ranges, NULL);
  json_t *keys = json_array();
  json_array_append_new(keys, type("string"));
  json_array_append_new(keys, object("type", json_string("array"), "items", type("string"),
                                     "minItems", json_integer(1), NULL));
  json_t *props = object(
      "shape", ref("shape"), "role", described(object("enum", strings(roles, 4), NULL), "required"),
      "dtype", ref("dtype"), "init", object("enum", strings(inits, 6), NULL), "mean",
      type("number"), "std", type("number"), "low", type("number"), "high", type("number"), "value",
      type("number"), "path", described(type("string"), "relative to the spec's folder"), "key",
      described(object("anyOf", keys, NULL), "a checkpoint tensor's name, or names to concatenate"),
      "transpose", type("boolean"), "cast", type("boolean"), "concat", type("integer"), "rows",
      json_incref(range), "cols", range, NULL);
  json_t *required = json_array();
  json_array_append_new(required, json_string("role"));
  return object("type", json_string("object"), "properties", props, "required", required,
                "additionalProperties", json_false(), NULL);
}

/* A block's use: an entry of ops: with a block: key. */
static json_t *block_use(void) {
  static const char *const required[] = {"block", "count", "in", "out"};
  json_t *count = json_array();
  json_array_append_new(count, int_range(1, 4096));
  json_array_append_new(count, described(type("string"), "a dim with one value"));
  json_t *props = object("block", type("string"), "count", object("anyOf", count, NULL), "in",
                         ref("names"), "out", ref("names"), "name", type("string"), NULL);
  return object("type", json_string("object"), "properties", props, "required",
                strings(required, 4), "additionalProperties", json_false(), NULL);
}

static json_t *block(void) {
  static const char *const required[] = {"input", "output", "ops"};
  json_t *ops =
      object("type", json_string("array"), "items", ref("op"), "minItems", json_integer(1), NULL);
  json_t *props =
      object("input", ref("names"), "output", ref("names"), "tensors",
             object("type", json_string("object"), "additionalProperties", ref("tensor"), NULL),
             "ops", ops, NULL);
  return object("type", json_string("object"), "properties", props, "required",
                strings(required, 3), "additionalProperties", json_false(), NULL);
}

/* ---- ops, from the registry --------------------------------------------------------------- */

static json_t *attr_schema(const recap_op_attr_info *a) {
  json_t *s = NULL;
  switch (a->kind) {
    case RECAP_OP_ATTR_FLOAT:
      s = type("number");
      break;
    case RECAP_OP_ATTR_INT:
      s = ref("int");
      break;
    case RECAP_OP_ATTR_BOOL:
      s = type("boolean");
      break;
    case RECAP_OP_ATTR_INT_LIST:
      s = object("type", json_string("array"), "items", ref("int"), "minItems", json_integer(1),
                 "maxItems", json_integer(RECAP_MAX_DIMS), NULL);
      break;
    case RECAP_OP_ATTR_ACTIVATION:
      s = activation_enum();
      break;
    case RECAP_OP_ATTR_DTYPE:
      s = ref("dtype");
      break;
    case RECAP_OP_ATTR_EXPR:
      s = type("string");
      break;
  }
  if (!s) s = json_object(); /* a kind this generator does not know yet: anything */
  char text[512];
  snprintf(text, sizeof text, "%s (default: %s)", a->doc ? a->doc : "", a->default_text);
  return described(s, text);
}

/* One op: the keys every op takes, then its attributes (which win: reshape's shape, cast's
 * dtype), nothing else. */
static json_t *op_schema(const recap_op_info *op) {
  /* The inputs by name, as `recap ops` shows them (a '?' marks an optional one). */
  char inputs[256] = "the input tensors, in this order:";
  for (const char *const *in = op->input_names; *in; in++)
    snprintf(inputs + strlen(inputs), sizeof inputs - strlen(inputs), "%s %s",
             in == op->input_names ? "" : ",", *in);
  if (!op->input_names[0]) snprintf(inputs, sizeof inputs, "none: the op has no inputs");
  json_t *props = object("op", object("const", json_string(op->name), NULL), "in",
                         described(ref("names"), inputs), "out", ref("names"), "name",
                         described(type("string"), "unique among ops"), "stream",
                         described(int_range(0, 63), "side stream N (0: the pipeline's)"), "shape",
                         described(ref("shape"), "the expected output shape, checked"), "dtype",
                         described(ref("dtype"), "the expected output dtype, checked"), NULL);
  json_t *required = json_array();
  json_array_append_new(required, json_string("op"));
  json_array_append_new(required, json_string("out"));
  for (size_t i = 0; i < op->num_attrs; i++) {
    recap_op_attr_info a;
    if (recap_op_attr_info_get(op->index, i, &a) != RECAP_OK) continue;
    json_object_set_new(props, a.name, attr_schema(&a));
    if (a.required) json_array_append_new(required, json_string(a.name));
  }
  return described(object("type", json_string("object"), "properties", props, "required", required,
                          "additionalProperties", json_false(), NULL),
                   op->summary);
}

/* The op entry: `op:` one of the registry's names, then that op's own keys (if/then per op,
 * so that an editor completes and checks the attributes of the op named). */
static json_t *op_dispatch(json_t *definitions) {
  json_t *names = json_array(), *cases = json_array();
  for (size_t i = 0; i < recap_op_count(); i++) {
    recap_op_info op;
    if (recap_op_info_get(i, &op) != RECAP_OK) continue;
    char def[96];
    snprintf(def, sizeof def, "op.%s", op.name);
    json_object_set_new(definitions, def, op_schema(&op));
    json_array_append_new(names, json_string(op.name));
    json_t *when =
        object("properties", object("op", object("const", json_string(op.name), NULL), NULL), NULL);
    json_array_append_new(cases, object("if", when, "then", ref(def), NULL));
  }
  json_t *required = json_array();
  json_array_append_new(required, json_string("op"));
  return object("type", json_string("object"), "required", required, "properties",
                object("op", described(object("enum", names, NULL), "the op (recap ops)"), NULL),
                "allOf", cases, NULL);
}

static json_t *schema(void) {
  json_t *defs = json_object();
  /* The loader's ranges (engine/spec_values.c, recap__spec_get_size): an extent is at least 1,
   * a range's bound at least 0, an integer attribute of either sign; all below 2^62. */
  json_object_set_new(defs, "size", integer_or_dim(1, "an extent: a positive integer below 2^62"));
  json_object_set_new(defs, "offset",
                      integer_or_dim(0, "a range's bound: a non-negative integer below 2^62"));
  json_object_set_new(defs, "int",
                      integer_or_dim(-((1LL << 62) - 1), "an integer of magnitude below 2^62"));
  json_object_set_new(defs, "shape",
                      object("type", json_string("array"), "items", ref("size"), "minItems",
                             json_integer(1), "maxItems", json_integer(RECAP_MAX_DIMS), NULL));
  json_t *names = json_array();
  json_array_append_new(names, type("string"));
  json_array_append_new(names, object("type", json_string("array"), "items", type("string"), NULL));
  json_object_set_new(defs, "names", object("anyOf", names, NULL));
  json_object_set_new(defs, "dtype", dtype_enum(false));
  json_object_set_new(defs, "float_dtype", dtype_enum(true));
  json_object_set_new(defs, "dim_value", dim_value());
  json_object_set_new(
      defs, "dims",
      object("type", json_string("object"), "additionalProperties", ref("dim_value"), NULL));
  json_object_set_new(defs, "tensor", tensor());
  json_object_set_new(defs, "block", block());
  json_object_set_new(defs, "block_use", block_use());
  json_object_set_new(defs, "op", op_dispatch(defs));
  json_t *required_block = json_array();
  json_array_append_new(required_block, json_string("block"));
  json_object_set_new(defs, "op_or_block_use",
                      object("if", object("required", required_block, NULL), "then",
                             ref("block_use"), "else", ref("op"), NULL));

  static const char *const devices[] = {"cuda", "host"};
  json_t *entry =
      object("type", json_string("object"), "properties", object("dims", ref("dims"), NULL),
             "additionalProperties", json_false(), NULL);
  json_t *run = object("type", json_string("object"), "properties",
                       object("warmup", int_range(0, 10000), "iters", int_range(1, 10000000), NULL),
                       "additionalProperties", json_false(), NULL);
  json_t *props = object(
      "version",
      described(object("const", json_integer(RECAP__SPEC_FORMAT_VERSION), NULL),
                "the spec format's version (default 1)"),
      "name", described(type("string"), "one line of at most 256 bytes; default: the file name"),
      "device", object("enum", strings(devices, 2), NULL), "dtype",
      described(ref("float_dtype"), "default element type (f32)"), "seed",
      described(object("type", json_string("integer"), "minimum", json_integer(0), NULL),
                "0 to 2^64 - 1"),
      "dims", described(ref("dims"), "symbolic sizes; a list makes one bucket per value"),
      "entries",
      described(object("type", json_string("object"), "additionalProperties", entry, NULL),
                "named dim sets, one pipeline each, sharing params and state"),
      "blocks",
      described(object("type", json_string("object"), "additionalProperties", ref("block"), NULL),
                "tensors and ops written once, instantiated by ops"),
      "checkpoint", described(type("string"), "a folder, an index .json or a .safetensors file"),
      "tensors",
      described(object("type", json_string("object"), "additionalProperties", ref("tensor"), NULL),
                "every tensor not produced by an op"),
      "ops",
      object("type", json_string("array"), "items", ref("op_or_block_use"), "minItems",
             json_integer(1), NULL),
      "outputs",
      object("type", json_string("array"), "items", type("string"), "minItems", json_integer(1),
             NULL),
      "run", run, NULL);
  json_t *required = json_array();
  json_array_append_new(required, json_string("ops"));
  return object("$schema", json_string("http://json-schema.org/draft-07/schema#"), "title",
                json_string("recap pipeline spec"), "description",
                json_string("Generated by `recap schema` from recap's op registry "
                            "(specs/README.md describes the format)."),
                "type", json_string("object"), "properties", props, "required", required,
                "additionalProperties", json_false(), "definitions", defs, NULL);
}

const cli_help cli_schema_help = {
    .synopsis = "recap schema",
    .description =
        "Prints a JSON Schema (draft-07) of the spec format, generated from the op registry:\n"
        "the top-level keys, tensors, blocks and every op with its inputs and attributes. An\n"
        "editor given it (docs/recap-spec.schema.json) validates and completes specs; `recap\n"
        "validate` remains the full check.",
};

int cli_schema_main(int argc, char **argv) {
  if (cli_wants_help(argc, argv)) {
    cli_help_print(stdout, &cli_schema_help);
    return CLI_EXIT_OK;
  }
  for (int i = 0; i < argc; i++) {
    if (cli_positional(CMD, argv[i]))
      fprintf(stderr, "recap %s: unexpected argument '%s'\n", CMD, argv[i]);
    return CLI_EXIT_USAGE;
  }
  json_t *root = schema();
  int rc = json_dumpf(root, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER) == 0 &&
                   fputc('\n', stdout) != EOF
               ? CLI_EXIT_OK
               : CLI_EXIT_FAILURE;
  if (rc != CLI_EXIT_OK) fprintf(stderr, "recap %s: cannot write the schema\n", CMD);
  json_decref(root);
  return rc;
}
