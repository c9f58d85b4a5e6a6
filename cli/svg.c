/* svg.c: the bench chart: vertical bars (median) with p10-p90 whiskers, axis, labels. */
#include "cli/svg.h"

#include <math.h>
#include <stdio.h>

enum { WIDTH = 640, HEIGHT = 420, LEFT = 90, RIGHT = 30, TOP = 78, BOTTOM = 80 };

static void put_text(FILE *f, const char *s) {
  for (; s && *s; s++) {
    switch (*s) {
      case '&': fputs("&amp;", f); break;
      case '<': fputs("&lt;", f); break;
      case '>': fputs("&gt;", f); break;
      case '"': fputs("&quot;", f); break;
      default: fputc(*s, f);
    }
  }
}

/* A step of 1, 2 or 5 times a power of ten giving about five ticks up to `top`. */
static double nice_step(double top) {
  double raw = top / 5.0;
  double p = pow(10.0, floor(log10(raw)));
  double m = raw / p;
  return (m <= 1.0 ? 1.0 : m <= 2.0 ? 2.0 : m <= 5.0 ? 5.0 : 10.0) * p;
}

bool cli_svg_write_bars(const char *path, const cli_chart *c) {
  if (c->count == 0 || c->count > 8) {
    fprintf(stderr, "svg: %zu bars (1 to 8 fit a chart)\n", c->count);
    return false;
  }
  double top = 0;
  for (size_t i = 0; i < c->count; i++) {
    top = fmax(top, fmax(c->bars[i].median_ms, c->bars[i].p90_ms));
  }
  bool micro = top < 1.0;
  double scale = micro ? 1000.0 : 1.0; /* display units per ms */
  const char *unit = micro ? "\xc2\xb5s" : "ms";
  top *= scale;
  if (!(top > 0)) top = 1;
  double step = nice_step(top * 1.1);
  double axis_max = ceil(top * 1.1 / step) * step;

  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "svg: cannot write %s\n", path);
    return false;
  }
  double plot_w = WIDTH - LEFT - RIGHT, plot_h = HEIGHT - TOP - BOTTOM;
  double base_y = TOP + plot_h;
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
          "viewBox=\"0 0 %d %d\" font-family=\"Helvetica, Arial, sans-serif\">\n"
          "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
          WIDTH, HEIGHT, WIDTH, HEIGHT);
  fprintf(f, "<text x=\"%d\" y=\"30\" font-size=\"18\" font-weight=\"bold\" "
             "text-anchor=\"middle\">", WIDTH / 2);
  put_text(f, c->title);
  fprintf(f, "</text>\n");
  if (c->subtitle) {
    fprintf(f, "<text x=\"%d\" y=\"52\" font-size=\"13\" fill=\"#444\" text-anchor=\"middle\">",
            WIDTH / 2);
    put_text(f, c->subtitle);
    fprintf(f, "</text>\n");
  }
  /* Grid lines and tick labels. */
  for (double v = 0; v <= axis_max + step * 1e-9; v += step) {
    double y = base_y - v / axis_max * plot_h;
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\"/>\n", LEFT, y,
            LEFT + plot_w, y, v == 0 ? "#000" : "#e0e0e0");
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" font-size=\"12\" text-anchor=\"end\">%g</text>\n",
            LEFT - 8, y + 4, v);
  }
  fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%.1f\" stroke=\"#000\"/>\n", LEFT, TOP,
          LEFT, base_y);
  fprintf(f, "<text x=\"24\" y=\"%.1f\" font-size=\"13\" text-anchor=\"middle\" "
             "transform=\"rotate(-90 24 %.1f)\">time per iteration (%s)</text>\n",
          TOP + plot_h / 2, TOP + plot_h / 2, unit);
  double slot = plot_w / (double)c->count;
  double bar_w = fmin(120.0, slot * 0.5);
  for (size_t i = 0; i < c->count; i++) {
    const cli_bar *b = &c->bars[i];
    double cx = LEFT + slot * ((double)i + 0.5);
    double med = b->median_ms * scale, lo = b->p10_ms * scale, hi = b->p90_ms * scale;
    double y_med = base_y - med / axis_max * plot_h;
    double y_lo = base_y - lo / axis_max * plot_h, y_hi = base_y - hi / axis_max * plot_h;
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>\n",
            cx - bar_w / 2, y_med, bar_w, base_y - y_med, b->color);
    fprintf(f, "<g stroke=\"#222\" stroke-width=\"1.5\">"
               "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
               "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
               "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/></g>\n",
            cx, y_lo, cx, y_hi, cx - 10, y_lo, cx + 10, y_lo, cx - 10, y_hi, cx + 10, y_hi);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"13\" font-weight=\"bold\" "
               "text-anchor=\"middle\">%.4g %s</text>\n",
            cx, fmin(y_med, y_hi) - 8, med, unit);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"14\" text-anchor=\"middle\">", cx,
            base_y + 22);
    put_text(f, b->label);
    fprintf(f, "</text>\n");
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" fill=\"#555\" "
               "text-anchor=\"middle\">p10 %.4g / p90 %.4g</text>\n",
            cx, base_y + 40, lo, hi);
  }
  if (c->footer) {
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"#555\" text-anchor=\"middle\">",
            WIDTH / 2, HEIGHT - 12);
    put_text(f, c->footer);
    fprintf(f, "</text>\n");
  }
  fprintf(f, "</svg>\n");
  bool failed = ferror(f) != 0;
  if (fclose(f) != 0) failed = true;
  if (failed) {
    fprintf(stderr, "svg: writing %s failed\n", path);
    remove(path);
    return false;
  }
  return true;
}
