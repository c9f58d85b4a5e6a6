/* hf_config.c: a Hugging Face config.json read into cli_hf_config, refusing what recap cannot
 * run as written (docs/MODELS.md lists both). Both spellings of transformers are read: version
 * 5's rope_parameters and dtype, and the older rope_theta + rope_scaling and torch_dtype. */
#include <ctype.h>
#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/hf_model.h"
#include "runtime/file.h"

static const cli_hf_arch ARCHITECTURES[] = {
    {.architecture = "LlamaForCausalLM"},
    /* transformers' MistralConfig defaults sliding_window to 4096. */
    {.architecture = "MistralForCausalLM",
     .sliding_window_key = true,
     .sliding_window_default = 4096},
    {.architecture = "Qwen2ForCausalLM", .qkv_bias = true},
    /* transformers' Qwen3Config defaults head_dim to 128, not hidden / heads. */
    {.architecture = "Qwen3ForCausalLM", .qk_norm = true, .head_dim_default = 128},
    {.architecture = "GPT2LMHeadModel", .gpt2 = true, .tied_default = true},
};

/* Sizes above this are refused: no real model comes near, and products of them stay far
 * below 2^63. */
static const int64_t MAX_SIZE = INT32_MAX;

typedef struct {
  char path[4096]; /* config.json's path, for messages */
  char *err;
  size_t err_size;
} reader;

static bool fail(const reader *r, const char *fmt, ...) RECAP__PRINTF(2, 3);
static bool fail(const reader *r, const char *fmt, ...) {
  int n = snprintf(r->err, r->err_size, "%s: ", r->path);
  va_list ap;
  va_start(ap, fmt);
  if (n >= 0 && (size_t)n < r->err_size) vsnprintf(r->err + n, r->err_size - (size_t)n, fmt, ap);
  va_end(ap);
  return false;
}

/* The value of `key`, NULL when absent or null. */
static json_t *get(json_t *obj, const char *key) {
  json_t *v = json_object_get(obj, key);
  return json_is_null(v) ? NULL : v;
}

/* A positive integer in [1, MAX_SIZE]; absent (or null) gives `fallback`, or fails when
 * fallback is 0 (required). */
static bool get_size(const reader *r, json_t *obj, const char *key, int64_t fallback,
                     int64_t *out) {
  json_t *v = get(obj, key);
  if (!v) {
    if (fallback > 0) {
      *out = fallback;
      return true;
    }
    return fail(r, "'%s' is missing (a positive integer is required)", key);
  }
  if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > MAX_SIZE)
    return fail(r, "'%s' must be an integer from 1 to %lld", key, (long long)MAX_SIZE);
  *out = json_integer_value(v);
  return true;
}

/* A finite number (integer or real); absent gives `fallback` (NAN: required). */
static bool get_number(const reader *r, json_t *obj, const char *where, const char *key,
                       double fallback, double *out) {
  json_t *v = get(obj, key);
  if (!v) {
    if (!isnan(fallback)) {
      *out = fallback;
      return true;
    }
    return fail(r, "'%s%s' is missing (a number is required)", where, key);
  }
  if (!json_is_number(v) || !isfinite(json_number_value(v)))
    return fail(r, "'%s%s' must be a number", where, key);
  *out = json_number_value(v);
  return true;
}

/* A norm's epsilon: a number at least 0 (what the norm ops accept); absent gives `fallback`. */
static bool get_eps(const reader *r, json_t *obj, const char *key, double fallback, double *out) {
  if (!get_number(r, obj, "", key, fallback, out)) return false;
  if (!(*out >= 0 && *out <= FLT_MAX))
    return fail(r, "'%s' must be a number at least 0 and a finite f32, not %g", key, *out);
  return true;
}

static bool get_bool(const reader *r, json_t *obj, const char *key, bool fallback, bool *out) {
  json_t *v = get(obj, key);
  if (!v) {
    *out = fallback;
    return true;
  }
  if (!json_is_boolean(v)) return fail(r, "'%s' must be true or false", key);
  *out = json_is_true(v);
  return true;
}

/* A string or absent (NULL). */
static bool get_string(const reader *r, json_t *obj, const char *key, const char **out) {
  json_t *v = get(obj, key);
  if (v && !json_is_string(v)) return fail(r, "'%s' must be a string", key);
  *out = v ? json_string_value(v) : NULL;
  return true;
}

static bool read_architecture(const reader *r, json_t *root, cli_hf_config *c) {
  json_t *list = get(root, "architectures");
  if (!json_is_array(list) || json_array_size(list) == 0 ||
      !json_is_string(json_array_get(list, 0)))
    return fail(r,
                "'architectures' must be a list naming the model class (one of "
                "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
                "GPT2LMHeadModel)");
  const char *name = json_string_value(json_array_get(list, 0));
  for (size_t i = 0; i < sizeof ARCHITECTURES / sizeof ARCHITECTURES[0]; i++)
    if (strcmp(name, ARCHITECTURES[i].architecture) == 0) c->arch = &ARCHITECTURES[i];
  if (!c->arch)
    return fail(r,
                "architecture '%.100s' is not supported (LlamaForCausalLM, "
                "MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, GPT2LMHeadModel)",
                name);
  const char *type = NULL;
  if (!get_string(r, root, "model_type", &type)) return false;
  size_t n = 0;
  for (const char *p = type ? type : "model"; *p && n + 1 < sizeof c->name; p++)
    if (isalnum((unsigned char)*p) || *p == '_' || *p == '-' || *p == '.') c->name[n++] = *p;
  c->name[n] = '\0';
  if (n == 0) snprintf(c->name, sizeof c->name, "model");
  return true;
}

static bool read_dtype(const reader *r, json_t *root, cli_hf_config *c) {
  static const struct {
    const char *hf;
    recap_dtype dtype;
  } names[] = {
      {"float32", RECAP_DTYPE_F32}, {"float16", RECAP_DTYPE_F16}, {"bfloat16", RECAP_DTYPE_BF16}};
  const char *key = json_object_get(root, "dtype") ? "dtype" : "torch_dtype";
  const char *name = NULL;
  if (!get_string(r, root, key, &name)) return false;
  for (size_t i = 0; name && i < sizeof names / sizeof names[0]; i++)
    if (strcmp(name, names[i].hf) == 0) {
      c->dtype_given = true;
      c->dtype = names[i].dtype;
    }
  /* Another dtype (float64, an fp8 quantization) leaves the choice to --dtype and the
   * checkpoint's own dtypes, which the weights check reads; the importer says so. */
  if (name && !c->dtype_given) snprintf(c->dtype_unused, sizeof c->dtype_unused, "%s", name);
  return true;
}

/* RoPE's type and parameters live in rope_parameters (transformers 5) or in rope_theta +
 * rope_scaling (older); either names the type as rope_type or, older still, type. */
static bool read_rope(const reader *r, json_t *root, cli_hf_config *c) {
  json_t *params = get(root, "rope_parameters");
  const bool newer = params != NULL;
  const char *where = "rope_parameters.";
  if (params) {
    if (!json_is_object(params)) return fail(r, "'rope_parameters' must be an object");
    const char *k;
    json_t *v;
    json_object_foreach(params, k, v) {
      if (json_is_object(v))
        return fail(r,
                    "'rope_parameters' is given per layer type ('%.60s'): recap builds one "
                    "RoPE for every layer",
                    k);
    }
  } else {
    params = get(root, "rope_scaling");
    where = "rope_scaling.";
    if (params && !json_is_object(params))
      return fail(r, "'rope_scaling' must be an object or null");
  }
  double fallback_theta = 10000.0;
  if (!get_number(r, root, "", "rope_theta", 10000.0, &fallback_theta)) return false;
  if (params) {
    if (!get_number(r, params, where, "rope_theta", fallback_theta, &c->rope_theta)) return false;
  } else {
    c->rope_theta = fallback_theta;
  }
  if (!(c->rope_theta > 1.0 && c->rope_theta <= FLT_MAX))
    return fail(r, "rope_theta must be above 1 and a finite f32, not %g", c->rope_theta);
  const char *type = NULL, *old_spelling = NULL;
  if (params && !get_string(r, params, "rope_type", &type)) return false;
  if (params && !get_string(r, params, "type", &old_spelling)) return false;
  if (type && old_spelling && strcmp(type, old_spelling) != 0)
    return fail(r, "'%srope_type' ('%.30s') and '%stype' ('%.30s') disagree: give one", where, type,
                where, old_spelling);
  if (!type) type = old_spelling;
  /* A scaling factor with no type: transformers cannot build RoPE from it either, and reading
   * it as the default RoPE would drop the factor without a word. */
  double untyped_factor = 1.0;
  if (params && !type && !get_number(r, params, where, "factor", 1.0, &untyped_factor))
    return false;
  if (untyped_factor != 1.0)
    return fail(r,
                "'%sfactor' %g is given with no rope_type: name the scaling (llama3 is supported)",
                where, untyped_factor);
  /* An older rope_scaling beside rope_parameters: the newer key is read, so an older scaling of
   * another type would be dropped without a word. */
  json_t *older = newer ? get(root, "rope_scaling") : NULL;
  if (older && json_is_object(older)) {
    const char *older_type = NULL;
    if (!get_string(r, older, "rope_type", &older_type)) return false;
    if (!older_type && !get_string(r, older, "type", &older_type)) return false;
    if (strcmp(older_type ? older_type : "default", type ? type : "default") != 0)
      return fail(r,
                  "'rope_scaling' (type '%.30s') and 'rope_parameters' (type '%.30s') disagree: "
                  "give one",
                  older_type ? older_type : "default", type ? type : "default");
    double older_theta = c->rope_theta;
    if (!get_number(r, older, "rope_scaling.", "rope_theta", c->rope_theta, &older_theta))
      return false;
    if (older_theta != c->rope_theta)
      return fail(r,
                  "'rope_scaling' (rope_theta %g) and 'rope_parameters' (rope_theta %g) disagree: "
                  "give one",
                  older_theta, c->rope_theta);
  }
  if (type && strcmp(type, "llama3") == 0) {
    c->llama3 = true;
    double original = 0;
    if (!get_number(r, params, where, "factor", NAN, &c->llama3_factor) ||
        !get_number(r, params, where, "low_freq_factor", NAN, &c->llama3_low_freq_factor) ||
        !get_number(r, params, where, "high_freq_factor", NAN, &c->llama3_high_freq_factor) ||
        !get_number(r, params, where, "original_max_position_embeddings", NAN, &original))
      return false;
    if (!(c->llama3_factor > 0) || !(c->llama3_low_freq_factor > 0) ||
        !(c->llama3_high_freq_factor > c->llama3_low_freq_factor) || original < 1 ||
        original > (double)MAX_SIZE || original != floor(original))
      return fail(r,
                  "llama3 RoPE parameters out of range (factor > 0, low_freq_factor > 0, "
                  "high_freq_factor > low_freq_factor, original_max_position_embeddings a "
                  "positive integer)");
    c->llama3_original_max_positions = (int64_t)original;
  } else if (type && strcmp(type, "default") != 0) {
    return fail(r, "RoPE type '%.60s' is not supported (default, llama3)", type);
  }
  double partial = 1.0;
  if (!get_number(r, root, "", "partial_rotary_factor", 1.0, &partial) ||
      (params && !get_number(r, params, where, "partial_rotary_factor", partial, &partial)))
    return false;
  if (partial != 1.0)
    return fail(r, "partial_rotary_factor %g is not supported (RoPE over the whole head)", partial);
  return true;
}

/* Which config keys turn sliding-window attention on; the window is checked against the
 * spec's length later (cli_hf_check_window). */
static bool read_sliding_window(const reader *r, json_t *root, cli_hf_config *c) {
  json_t *types = get(root, "layer_types");
  if (types && !json_is_array(types)) return fail(r, "'layer_types' must be a list");
  if (types && (int64_t)json_array_size(types) != c->layers)
    return fail(r, "'layer_types' has %zu entries for %lld layers (num_hidden_layers)",
                json_array_size(types), (long long)c->layers);
  size_t i;
  json_t *t;
  json_array_foreach(types, i, t) {
    const char *name = json_string_value(t);
    if (name && strcmp(name, "sliding_attention") == 0) {
      if (!c->sliding_used) c->sliding_reason = "layer_types has \"sliding_attention\"";
      c->sliding_used = true;
    } else if (!name || strcmp(name, "full_attention") != 0) {
      return fail(r, "layer_types[%zu] is not \"full_attention\" or \"sliding_attention\"", i);
    }
  }
  bool use_sliding = false;
  if (!get_bool(r, root, "use_sliding_window", false, &use_sliding)) return false;
  if (use_sliding && !c->sliding_used) {
    c->sliding_used = true;
    c->sliding_reason = "use_sliding_window is true";
  }
  json_t *given = json_object_get(root, "sliding_window");
  json_t *window = get(root, "sliding_window");
  c->sliding_window = -1;
  /* Absent, not null: an explicit null turns the window off in transformers too. */
  if (!given && c->arch->sliding_window_default) {
    c->sliding_window = c->arch->sliding_window_default;
    if (!c->sliding_used) {
      c->sliding_used = true;
      c->sliding_reason = "no sliding_window key: transformers' default window";
    }
  } else if (window) {
    if (!json_is_integer(window) || json_integer_value(window) < 1)
      return fail(r, "'sliding_window' must be a positive integer or null");
    c->sliding_window = json_integer_value(window);
    if (c->arch->sliding_window_key && !c->sliding_used) {
      c->sliding_used = true;
      c->sliding_reason = "sliding_window is not null";
    }
  }
  return true;
}

static bool read_llama_style(const reader *r, json_t *root, cli_hf_config *c) {
  if (!get_size(r, root, "hidden_size", 0, &c->hidden) ||
      !get_size(r, root, "num_hidden_layers", 0, &c->layers) ||
      !get_size(r, root, "num_attention_heads", 0, &c->heads) ||
      !get_size(r, root, "num_key_value_heads", c->heads, &c->kv_heads) ||
      !get_size(r, root, "intermediate_size", 0, &c->intermediate) ||
      !get_size(r, root, "vocab_size", 0, &c->vocab) ||
      !get_size(r, root, "max_position_embeddings", 0, &c->max_positions) ||
      !get_eps(r, root, "rms_norm_eps", 1e-6, &c->norm_eps) ||
      !get_bool(r, root, "attention_bias", false, &c->attention_bias) ||
      !get_bool(r, root, "mlp_bias", false, &c->mlp_bias))
    return false;
  if (c->heads % c->kv_heads != 0)
    return fail(r, "num_attention_heads (%lld) is not a multiple of num_key_value_heads (%lld)",
                (long long)c->heads, (long long)c->kv_heads);
  /* head_dim is read when given (Qwen3's is not hidden / heads), derived only when not. */
  int64_t derived = c->arch->head_dim_default;
  if (!derived) {
    if (c->hidden % c->heads != 0 && !get(root, "head_dim"))
      return fail(r,
                  "no head_dim, and hidden_size (%lld) is not a multiple of "
                  "num_attention_heads (%lld)",
                  (long long)c->hidden, (long long)c->heads);
    derived = c->hidden / c->heads;
  }
  if (!get_size(r, root, "head_dim", derived, &c->head_dim)) return false;
  if (c->head_dim % 2 != 0)
    return fail(r, "head_dim %lld is odd (RoPE rotates pairs)", (long long)c->head_dim);
  const char *act = NULL;
  if (!get_string(r, root, "hidden_act", &act)) return false;
  if (act && strcmp(act, "silu") != 0)
    return fail(r, "hidden_act '%.60s' is not supported (silu)", act);
  c->act = "silu";
  return read_rope(r, root, c) && read_sliding_window(r, root, c);
}

static bool read_gpt2(const reader *r, json_t *root, cli_hf_config *c) {
  if (!get_size(r, root, "n_embd", 0, &c->hidden) || !get_size(r, root, "n_layer", 0, &c->layers) ||
      !get_size(r, root, "n_head", 0, &c->heads) ||
      !get_size(r, root, "vocab_size", 0, &c->vocab) ||
      !get_size(r, root, "n_positions", 0, &c->max_positions) ||
      !get_eps(r, root, "layer_norm_epsilon", 1e-5, &c->norm_eps))
    return false;
  if (c->hidden % c->heads != 0)
    return fail(r, "n_embd (%lld) is not a multiple of n_head (%lld)", (long long)c->hidden,
                (long long)c->heads);
  c->kv_heads = c->heads;
  c->head_dim = c->hidden / c->heads;
  /* n_inner null means 4 x n_embd. */
  if (!get_size(r, root, "n_inner", 4 * c->hidden, &c->intermediate)) return false;
  c->attention_bias = c->mlp_bias = true;
  static const char *const refused[] = {"scale_attn_by_inverse_layer_idx",
                                        "reorder_and_upcast_attn"};
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    bool on = false;
    if (!get_bool(r, root, refused[i], false, &on)) return false;
    if (on) return fail(r, "'%s' true is not supported", refused[i]);
  }
  bool scaled = true;
  if (!get_bool(r, root, "scale_attn_weights", true, &scaled)) return false;
  c->attention_scale = scaled ? 0.0 : 1.0;
  static const struct {
    const char *hf, *recap;
  } acts[] = {{"gelu_new", "gelu_tanh"},
              {"gelu_pytorch_tanh", "gelu_tanh"},
              {"gelu", "gelu"},
              {"relu", "relu"}};
  const char *act = NULL;
  if (!get_string(r, root, "activation_function", &act)) return false;
  c->act = act ? NULL : "gelu_tanh"; /* transformers' default is gelu_new */
  for (size_t i = 0; act && i < sizeof acts / sizeof acts[0]; i++)
    if (strcmp(act, acts[i].hf) == 0) c->act = acts[i].recap;
  if (!c->act)
    return fail(r,
                "activation_function '%.60s' is not supported (gelu_new, "
                "gelu_pytorch_tanh, gelu, relu)",
                act);
  return true;
}

bool cli_hf_config_parse(const char *text, size_t len, const char *path, cli_hf_config *out,
                         char *err, size_t err_size) {
  reader r = {.err = err, .err_size = err_size};
  snprintf(r.path, sizeof r.path, "%s", path);
  *out = (cli_hf_config){0};
  snprintf(out->path, sizeof out->path, "%s", r.path);
  json_error_t jerr;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
  if (!root)
    return fail(&r, "line %d, column %d: not valid JSON: %s", jerr.line, jerr.column, jerr.text);
  bool ok = json_is_object(root) || fail(&r, "not a JSON object");
  ok = ok && read_architecture(&r, root, out) && read_dtype(&r, root, out) &&
       get_bool(&r, root, "tie_word_embeddings", out->arch->tied_default, &out->tied) &&
       (out->arch->gpt2 ? read_gpt2(&r, root, out) : read_llama_style(&r, root, out));
  /* The spec repeats its layer block once per layer, which a spec allows 4096 times
   * (engine/spec_blocks.c): refused here rather than by the spec the import would write. */
  if (ok && out->layers > CLI_HF_MAX_LAYERS)
    ok = fail(&r, "%lld layers: a spec repeats a block at most %d times", (long long)out->layers,
              CLI_HF_MAX_LAYERS);
  json_decref(root);
  return ok;
}

bool cli_hf_config_read(const char *dir, cli_hf_config *out, char *err, size_t err_size) {
  char path[sizeof out->path];
  snprintf(path, sizeof path, "%s/config.json", dir);
  FILE *f;
  uint64_t size;
  if (recap__file_open_regular(path, "config", &f, &size) != RECAP_OK) {
    snprintf(err, err_size, "%s: cannot read: %s", path, recap_last_error());
    return false;
  }
  if (size > CLI_HF_MAX_CONFIG_BYTES) {
    fclose(f);
    snprintf(err, err_size, "%s: %llu bytes, more than a config's %d", path,
             (unsigned long long)size, CLI_HF_MAX_CONFIG_BYTES);
    return false;
  }
  char *text = malloc(size ? (size_t)size : 1);
  bool ok = text && fread(text, 1, (size_t)size, f) == size;
  fclose(f);
  if (!ok) {
    free(text);
    snprintf(err, err_size, "%s: cannot read", path);
    return false;
  }
  ok = cli_hf_config_parse(text, (size_t)size, path, out, err, err_size);
  free(text);
  return ok;
}

bool cli_hf_check_window(const cli_hf_config *c, int64_t max_seq, char *err, size_t err_size) {
  if (!c->sliding_used || c->sliding_window >= max_seq) return true;
  if (c->sliding_window < 0)
    snprintf(err, err_size,
             "%s: sliding-window attention is on (%s) with no sliding_window: recap's "
             "attention has no window",
             c->path, c->sliding_reason);
  else
    snprintf(err, err_size,
             "%s: sliding-window attention is on (%s) with a window of %lld tokens, "
             "shorter than --max-seq %lld: recap's attention has no window (a --max-seq at most "
             "%lld is full attention)",
             c->path, c->sliding_reason, (long long)c->sliding_window, (long long)max_seq,
             (long long)c->sliding_window);
  return false;
}
