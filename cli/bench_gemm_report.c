/* bench_gemm_report.c: `recap bench-gemm --recap ... --peer ...`: recap against PyTorch point
 * by point (bench_gemm.h): the table, the geomeans, the worst point, the losses, the run-to-run
 * noise and the heat map. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench_gemm.h"

static double number(json_t *v) {
  return json_is_number(v) ? json_number_value(v) : NAN;
}

bool bench_gemm_results_read(const char *path, bench_gemm_results *out) {
  memset(out, 0, sizeof *out);
  bench_gemm_grid grid;
  if (!bench_gemm_grid_read(path, &grid)) return false;
  json_t *root = json_load_file(path, 0, NULL);
  json_t *pts = json_object_get(root, "points");
  out->points = grid.points;
  out->count = grid.count;
  out->graph_us = malloc(grid.count * sizeof(double));
  out->eager_us = malloc(grid.count * sizeof(double));
  if (!root || !out->graph_us || !out->eager_us) {
    fprintf(stderr, "recap bench-gemm: out of memory reading %s\n", path);
    json_decref(root);
    bench_gemm_results_free(out);
    return false;
  }
  for (size_t i = 0; i < grid.count; i++) {
    json_t *o = json_array_get(pts, i);
    out->graph_us[i] = number(json_object_get(o, "graph_us"));
    out->eager_us[i] = number(json_object_get(o, "eager_us"));
  }
  const char *s;
  if ((s = json_string_value(json_object_get(root, "side"))))
    snprintf(out->side, sizeof out->side, "%s", s);
  if ((s = json_string_value(json_object_get(root, "device_name"))))
    snprintf(out->device, sizeof out->device, "%s", s);
  if ((s = json_string_value(json_object_get(root, "settings"))))
    snprintf(out->settings, sizeof out->settings, "%s", s);
  json_decref(root);
  return true;
}

void bench_gemm_results_free(bench_gemm_results *r) {
  free(r->points);
  free(r->graph_us);
  free(r->eager_us);
  memset(r, 0, sizeof *r);
}

static bool same_point(const bench_gemm_point *a, const bench_gemm_point *b) {
  return a->id == b->id && a->m == b->m && a->n == b->n && a->k == b->k &&
         strcmp(a->dtype, b->dtype) == 0 && a->tf32 == b->tf32 && strcmp(a->act, b->act) == 0 &&
         a->bias == b->bias && a->residual == b->residual;
}

static bool no_epilogue(const bench_gemm_point *p) {
  return strcmp(p->act, "none") == 0 && !p->bias && !p->residual;
}

static const char *dtype_text(const bench_gemm_point *p) {
  return p->tf32 ? "tf32" : p->dtype;
}

static void epilogue_text(const bench_gemm_point *p, char *buf, size_t size) {
  snprintf(buf, size, "%s%s%s", p->bias ? "bias+" : "", p->act, p->residual ? "+res" : "");
}

/* A geometric mean accumulated in logs; NaN ratios are left out (and counted). */
typedef struct {
  double log_sum;
  int n;
} geomean;

static void geo_add(geomean *g, double r) {
  if (isfinite(r) && r > 0) {
    g->log_sum += log(r);
    g->n++;
  }
}

static double geo_value(const geomean *g) {
  return g->n ? exp(g->log_sum / g->n) : NAN;
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* ---- the heat map ---------------------------------------------------------------------------- */

/* Green below 1 (recap faster), white at 1, red above; saturates at 0.8 and 1.25. */
static void ratio_colour(double r, char *buf, size_t size) {
  if (!isfinite(r)) {
    snprintf(buf, size, "#cccccc");
    return;
  }
  double t = log(r) / log(1.25);
  if (t > 1) t = 1;
  if (t < -1) t = -1;
  const int fade = (int)lround(255 * (1 - fabs(t)));
  if (t >= 0)
    snprintf(buf, size, "#ff%02x%02x", fade, fade);
  else
    snprintf(buf, size, "#%02xff%02x", fade, fade);
}

static void row_key(const bench_gemm_point *p, char *buf, size_t size) {
  char epi[64];
  epilogue_text(p, epi, sizeof epi);
  snprintf(buf, size, "%s %s %s %s", p->group, p->label, dtype_text(p), epi);
}

static bool write_svg(const char *path, const bench_gemm_results *r, const double *ratio,
                      const char *title) {
  /* Rows: one per distinct (group, pair, dtype, epilogue) in grid order; columns: the Ms. */
  int64_t ms[64];
  int nm = 0;
  for (size_t i = 0; i < r->count; i++) {
    bool seen = false;
    for (int j = 0; j < nm; j++) seen |= ms[j] == r->points[i].m;
    if (!seen && nm < 64) ms[nm++] = r->points[i].m;
  }
  for (int i = 1; i < nm; i++)
    for (int j = i; j > 0 && ms[j - 1] > ms[j]; j--) {
      int64_t t = ms[j];
      ms[j] = ms[j - 1];
      ms[j - 1] = t;
    }
  char(*keys)[192] = calloc(r->count ? r->count : 1, sizeof *keys);
  int *row_of = calloc(r->count ? r->count : 1, sizeof *row_of);
  if (!keys || !row_of) {
    free(keys);
    free(row_of);
    fprintf(stderr, "recap bench-gemm: out of memory drawing %s\n", path);
    return false;
  }
  size_t rows = 0;
  for (size_t i = 0; i < r->count; i++) {
    char k[192];
    row_key(&r->points[i], k, sizeof k);
    size_t j = 0;
    while (j < rows && strcmp(keys[j], k) != 0) j++;
    if (j == rows) snprintf(keys[rows++], sizeof keys[0], "%s", k);
    row_of[i] = (int)j;
  }
  const int label_w = 330, cell_w = 52, cell_h = 16, top = 64;
  const int width = label_w + nm * cell_w + 20, height = top + (int)rows * cell_h + 40;
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "recap bench-gemm: cannot write %s\n", path);
    free(keys);
    free(row_of);
    return false;
  }
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
          "font-family=\"sans-serif\" font-size=\"11\">\n"
          "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
          "<text x=\"8\" y=\"18\" font-size=\"14\">%s</text>\n"
          "<text x=\"8\" y=\"36\">recap / PyTorch graph time per launch (median); green: recap "
          "faster, red: slower (saturates at 0.80 and 1.25)</text>\n",
          width, height, title);
  for (int j = 0; j < nm; j++)
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">M=%" PRId64 "</text>\n",
            label_w + j * cell_w + cell_w / 2, top - 6, ms[j]);
  for (size_t i = 0; i < rows; i++)
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%s</text>\n", label_w - 6,
            top + (int)i * cell_h + cell_h - 4, keys[i]);
  for (size_t i = 0; i < r->count; i++) {
    int col = 0;
    while (ms[col] != r->points[i].m) col++;
    char colour[16];
    ratio_colour(ratio[i], colour, sizeof colour);
    const int x = label_w + col * cell_w, y = top + row_of[i] * cell_h;
    fprintf(f,
            "<rect class=\"cell\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\" "
            "stroke=\"white\"><title>id %d: %.3f</title></rect>\n",
            x, y, cell_w, cell_h, colour, r->points[i].id, ratio[i]);
    if (isfinite(ratio[i]))
      fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-size=\"10\">%.2f</text>\n",
              x + cell_w / 2, y + cell_h - 4, ratio[i]);
  }
  fprintf(f, "</svg>\n");
  const bool ok = fclose(f) == 0;
  if (!ok) fprintf(stderr, "recap bench-gemm: cannot write %s\n", path);
  free(keys);
  free(row_of);
  return ok;
}

/* ---- the comparison -------------------------------------------------------------------------- */

int bench_gemm_compare(const bench_gemm_compare_request *req, FILE *out) {
  bench_gemm_results rs[2 * 8] = {{0}};
  const int pairs = req->pairs;
  int rc = 1;
  double *ratio = NULL, *eager_ratio = NULL, *diffs = NULL;
  bool *loss = NULL;
  json_t *root = NULL;
  for (int i = 0; i < pairs; i++)
    if (!bench_gemm_results_read(req->recap_paths[i], &rs[2 * i]) ||
        !bench_gemm_results_read(req->peer_paths[i], &rs[2 * i + 1]))
      goto done;
  const size_t n = rs[0].count;
  for (int i = 1; i < 2 * pairs; i++) {
    bool same = rs[i].count == n;
    for (size_t j = 0; same && j < n; j++) same = same_point(&rs[0].points[j], &rs[i].points[j]);
    if (!same) {
      fprintf(stderr,
              "recap bench-gemm: %s and %s do not hold the same points (run both on one grid "
              "file)\n",
              req->recap_paths[0], i % 2 ? req->peer_paths[i / 2] : req->recap_paths[i / 2]);
      goto done;
    }
  }
  ratio = calloc(n ? n : 1, sizeof *ratio);
  eager_ratio = calloc(n ? n : 1, sizeof *eager_ratio);
  diffs = calloc(n ? n : 1, sizeof *diffs);
  loss = calloc(n ? n : 1, sizeof *loss);
  if (!ratio || !eager_ratio || !diffs || !loss) {
    fprintf(stderr, "recap bench-gemm: out of memory\n");
    goto done;
  }
  const bench_gemm_results *a = &rs[0], *b = &rs[1];
  fprintf(out, "%s (%s) vs %s (%s), %d run pair%s, device %s\n", a->side, a->settings,
          b->side[0] ? b->side : "peer", b->settings, pairs, pairs == 1 ? "" : "s", a->device);
  if (strcmp(a->device, b->device) != 0)
    fprintf(out, "warning: the two sides ran on different devices (%s, %s)\n", a->device,
            b->device);
  if (!req->quiet)
    fprintf(out, "%5s %-8s %-22s %-5s %5s %6s %6s %-20s %9s %9s %6s %9s %9s %6s\n", "id", "group",
            "pair", "dtype", "M", "N", "K", "epilogue", "recap", "torch", "ratio", "recap-e",
            "torch-e", "ratio");
  int losses = 0, ndiff = 0;
  for (size_t j = 0; j < n; j++) {
    const bench_gemm_point *p = &a->points[j];
    ratio[j] = a->graph_us[j] / b->graph_us[j];
    eager_ratio[j] = a->eager_us[j] / b->eager_us[j];
    loss[j] = true;
    for (int i = 0; i < pairs; i++) {
      const double r = rs[2 * i].graph_us[j] / rs[2 * i + 1].graph_us[j];
      loss[j] = loss[j] && isfinite(r) && r > req->threshold;
      if (i == 1 && isfinite(r) && isfinite(ratio[j])) diffs[ndiff++] = fabs(r / ratio[j] - 1);
    }
    losses += loss[j];
    if (!req->quiet) {
      char epi[64];
      epilogue_text(p, epi, sizeof epi);
      fprintf(out,
              "%5d %-8s %-22s %-5s %5" PRId64 " %6" PRId64 " %6" PRId64
              " %-20s %9.2f %9.2f %6.3f %9.2f %9.2f %6.3f%s\n",
              p->id, p->group, p->label, dtype_text(p), p->m, p->n, p->k, epi, a->graph_us[j],
              b->graph_us[j], ratio[j], a->eager_us[j], b->eager_us[j], eager_ratio[j],
              loss[j] ? "  LOSS" : "");
    }
  }

  /* Geomeans per dtype, overall and without epilogue; eager alongside. */
  static const char *const dts[] = {"bf16", "f16", "tf32", "f32"};
  root = json_object();
  json_t *sum = json_object();
  json_object_set_new(root, "summary", sum); /* sum stays borrowed from root */
  fprintf(out, "geomean of recap/PyTorch per launch (graph; eager), points:\n");
  for (int d = 0; d < 4; d++) {
    geomean all = {0}, plain = {0}, eall = {0}, eplain = {0};
    int count = 0;
    for (size_t j = 0; j < n; j++) {
      if (strcmp(dtype_text(&a->points[j]), dts[d]) != 0) continue;
      count++;
      geo_add(&all, ratio[j]);
      geo_add(&eall, eager_ratio[j]);
      if (no_epilogue(&a->points[j])) {
        geo_add(&plain, ratio[j]);
        geo_add(&eplain, eager_ratio[j]);
      }
    }
    if (!count) continue;
    fprintf(out, "  %-5s all %.3f; %.3f (%d)   no epilogue %.3f; %.3f (%d)\n", dts[d],
            geo_value(&all), geo_value(&eall), all.n, geo_value(&plain), geo_value(&eplain),
            plain.n);
    json_t *o = json_object();
    json_object_set_new(o, "graph_geomean", json_real(geo_value(&all)));
    json_object_set_new(o, "eager_geomean", json_real(geo_value(&eall)));
    json_object_set_new(o, "graph_geomean_no_epilogue", json_real(geo_value(&plain)));
    json_object_set_new(o, "eager_geomean_no_epilogue", json_real(geo_value(&eplain)));
    json_object_set_new(o, "points", json_integer(all.n));
    json_object_set_new(o, "points_no_epilogue", json_integer(plain.n));
    json_object_set_new(sum, dts[d], o);
  }
  size_t worst = n;
  for (size_t j = 0; j < n; j++)
    if (isfinite(ratio[j]) && (worst == n || ratio[j] > ratio[worst])) worst = j;
  if (worst < n) {
    const bench_gemm_point *p = &a->points[worst];
    char epi[64];
    epilogue_text(p, epi, sizeof epi);
    fprintf(out,
            "worst point: id %d %s %s M=%" PRId64 " N=%" PRId64 " K=%" PRId64
            " %s: %.2f us vs %.2f us, ratio %.3f\n",
            p->id, p->label, dtype_text(p), p->m, p->n, p->k, epi, a->graph_us[worst],
            b->graph_us[worst], ratio[worst]);
    json_object_set_new(sum, "worst_id", json_integer(p->id));
    json_object_set_new(sum, "worst_ratio", json_real(ratio[worst]));
  }
  fprintf(out, "losses (recap/PyTorch graph > %.3f in %s): %d\n", req->threshold,
          pairs == 1 ? "this run" : "every run pair", losses);
  json_object_set_new(sum, "losses", json_integer(losses));
  json_object_set_new(sum, "threshold", json_real(req->threshold));
  if (ndiff) {
    qsort(diffs, (size_t)ndiff, sizeof *diffs, cmp_double);
    const double med = diffs[ndiff / 2], p90 = diffs[(size_t)(0.9 * (ndiff - 1))];
    fprintf(out, "noise: |ratio of pair 2 / ratio of pair 1 - 1| median %.2f%%, p90 %.2f%%\n",
            100 * med, 100 * p90);
    json_object_set_new(sum, "noise_median", json_real(med));
    json_object_set_new(sum, "noise_p90", json_real(p90));
  }

  if (req->losses_path) {
    bench_gemm_grid lg = {.count = 0};
    snprintf(lg.name, sizeof lg.name, "losses");
    lg.points = malloc((n ? n : 1) * sizeof *lg.points);
    if (!lg.points) goto done;
    for (size_t j = 0; j < n; j++)
      if (loss[j]) lg.points[lg.count++] = a->points[j];
    json_t *lj = bench_gemm_grid_json(&lg);
    const bool ok = json_dump_file(lj, req->losses_path, JSON_INDENT(1)) == 0;
    json_decref(lj);
    free(lg.points);
    if (!ok) {
      fprintf(stderr, "recap bench-gemm: cannot write %s\n", req->losses_path);
      goto done;
    }
    fprintf(out, "wrote %s (%d points)\n", req->losses_path, losses);
  }
  if (req->svg_path) {
    char title[256];
    snprintf(title, sizeof title, "recap bench-gemm: recap / PyTorch on %s", a->device);
    if (!write_svg(req->svg_path, a, ratio, title)) goto done;
    fprintf(out, "wrote %s\n", req->svg_path);
  }
  if (req->json_path) {
    json_t *pts = json_array();
    for (size_t j = 0; j < n; j++) {
      json_t *o = bench_gemm_point_json(&a->points[j]);
      json_object_set_new(o, "recap_graph_us",
                          json_real(isfinite(a->graph_us[j]) ? a->graph_us[j] : -1));
      json_object_set_new(o, "peer_graph_us",
                          json_real(isfinite(b->graph_us[j]) ? b->graph_us[j] : -1));
      json_object_set_new(o, "graph_ratio", isfinite(ratio[j]) ? json_real(ratio[j]) : json_null());
      json_object_set_new(o, "eager_ratio",
                          isfinite(eager_ratio[j]) ? json_real(eager_ratio[j]) : json_null());
      json_object_set_new(o, "loss", json_boolean(loss[j]));
      json_array_append_new(pts, o);
    }
    json_object_set_new(root, "points", pts);
    if (json_dump_file(root, req->json_path, JSON_INDENT(1)) != 0) {
      fprintf(stderr, "recap bench-gemm: cannot write %s\n", req->json_path);
      goto done;
    }
    fprintf(out, "wrote %s\n", req->json_path);
  }
  rc = 0;
done:
  json_decref(root);
  for (int i = 0; i < 2 * pairs; i++) bench_gemm_results_free(&rs[i]);
  free(ratio);
  free(eager_ratio);
  free(diffs);
  free(loss);
  return rc;
}
