/*
 * svg.h: a bar chart with whiskers as a standalone SVG file (the CLI's bench --svg).
 *
 *   cli_bar bars[] = {{"eager", 1.22, 1.20, 1.25, "#d9534f"}, {"graph", 0.12, 0.11, 0.13, "#5cb85c"}};
 *   cli_chart c = {.title = "mlp-decode", .subtitle = "B=8, H100", .bars = bars, .count = 2,
 *                  .footer = "bars: median; whiskers: p10-p90 of 100 iterations"};
 *   if (!cli_svg_write_bars("bench.svg", &c)) ... message on stderr ...
 *
 * Values are milliseconds; the axis switches to microseconds when every value is below 1 ms.
 */
#ifndef RECAP_CLI_SVG_H
#define RECAP_CLI_SVG_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
  const char *label;
  double median_ms, p10_ms, p90_ms;
  const char *color; /* an SVG colour, e.g. "#5cb85c" */
} cli_bar;

typedef struct {
  const char *title, *subtitle, *footer; /* subtitle and footer may be NULL */
  const cli_bar *bars;
  size_t count; /* 1..8 */
} cli_chart;

/* Writes the chart (replacing the file). False with a message on stderr. */
bool cli_svg_write_bars(const char *path, const cli_chart *chart);

#endif
