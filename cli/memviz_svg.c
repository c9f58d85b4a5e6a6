/*
 * memviz_svg.c: draws a cli_memviz_model as an SVG picture a person can read (the idea of
 * PyTorch's memory visualizer's segment view): segments grouped by pool, one row each, blocks
 * coloured by state, the stream as a coloured tag; hovering shows each block's numbers.
 *
 * Every row spans the picture's width whatever the segment's size (its size is in the label):
 * a 2 MiB segment next to a 2 GiB one would otherwise be invisible. Huge snapshots are drawn
 * in part (MAX_ROWS segments, MAX_DRAWN_BLOCKS blocks) with a line saying what was left out,
 * so the file stays small enough for a browser.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli/memviz_model.h"
#include "runtime/error.h"

enum {
  WIDTH = 1200,
  MARGIN = 16,
  LABEL_W = 330, /* the label column left of the bars */
  ROW_H = 20,
  ROW_GAP = 6,
  MAX_ROWS = 2000,
  MAX_DRAWN_BLOCKS = 200000,
  MAX_LEGEND_STREAMS = 12,
};

static const char *const state_colors[CLI_MEMVIZ_STATE_COUNT] = {"#4e79a7", "#f28e2b", "#e8e8e8"};
static const char *const state_names[CLI_MEMVIZ_STATE_COUNT] = {
    "allocated", "freed, waiting for other streams", "free (cached)"};
static const char *const stream_colors[] = {"#59a14f", "#e15759", "#76b7b2", "#edc948",
                                            "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
enum { STREAM_COLORS = sizeof stream_colors / sizeof stream_colors[0] };

static const char *fmt_bytes(uint64_t bytes, char *buf, size_t size) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024.0 && u < 4) v /= 1024.0, u++;
  if (u == 0)
    snprintf(buf, size, "%" PRIu64 " B", bytes);
  else
    snprintf(buf, size, "%.2f %s", v, units[u]);
  return buf;
}

static void put_escaped(FILE *out, const char *s) {
  for (; *s; s++) {
    switch (*s) {
      case '<':
        fputs("&lt;", out);
        break;
      case '>':
        fputs("&gt;", out);
        break;
      case '&':
        fputs("&amp;", out);
        break;
      case '"':
        fputs("&quot;", out);
        break;
      default:
        /* Control characters are not allowed in XML 1.0 text. */
        if ((unsigned char)*s >= 0x20 || *s == '\t') fputc(*s, out);
    }
  }
}

/* Segments by (pool, address): each pool's segments together, under one heading. */
typedef struct {
  uint64_t pool, address;
  size_t index;
} row_key;

static int by_pool_then_address(const void *x, const void *y) {
  const row_key *a = x, *b = y;
  if (a->pool != b->pool) return a->pool < b->pool ? -1 : 1;
  return a->address < b->address ? -1 : a->address > b->address;
}

/* Distinct streams in order of first appearance; a stream's colour is its index here. */
static size_t stream_index(const uint64_t *streams, size_t count, uint64_t s) {
  for (size_t i = 0; i < count; i++)
    if (streams[i] == s) return i;
  return count;
}

static const cli_memviz_pool *find_pool(const cli_memviz_model *m, uint64_t id) {
  for (size_t i = 0; i < m->num_pools; i++)
    if (m->pools[i].id == id) return &m->pools[i];
  return NULL;
}

recap_status cli_memviz_write_svg(const cli_memviz_model *m, const char *title, FILE *out) {
  RECAP_CHECK_ARG(m && title && out);
  size_t n = m->num_segments;
  row_key *keys = malloc((n ? n : 1) * sizeof *keys);
  size_t *order = malloc((n ? n : 1) * sizeof *order);
  uint64_t *streams = malloc((n ? n : 1) * sizeof *streams);
  if (!keys || !order || !streams) {
    free(keys);
    free(order);
    free(streams);
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory to draw %zu segments", n);
  }
  size_t num_streams = 0;
  for (size_t i = 0; i < n; i++) {
    keys[i] = (row_key){m->segments[i].pool_id, m->segments[i].address, i};
    if (stream_index(streams, num_streams, m->segments[i].stream) == num_streams)
      streams[num_streams++] = m->segments[i].stream;
  }
  qsort(keys, n, sizeof *keys, by_pool_then_address);
  for (size_t i = 0; i < n; i++) order[i] = keys[i].index;
  free(keys);

  size_t rows = n < MAX_ROWS ? n : MAX_ROWS;
  size_t headings = 0;
  for (size_t r = 0; r < rows; r++)
    headings += r == 0 || m->segments[order[r]].pool_id != m->segments[order[r - 1]].pool_id;
  size_t legend_streams = num_streams < MAX_LEGEND_STREAMS ? num_streams : MAX_LEGEND_STREAMS;
  int top = 150 + (int)((legend_streams + 3) / 4) * 18;
  int height = top + (int)(rows + headings) * (ROW_H + ROW_GAP) + 60;
  char b1[32], b2[32], b3[32], b4[32];

  fprintf(out,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
          "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n"
          "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
          WIDTH, height, WIDTH, height);
  fprintf(out, "<text x=\"%d\" y=\"28\" font-size=\"18\" font-weight=\"bold\">memory: ", MARGIN);
  put_escaped(out, title);
  fprintf(out, "</text>\n");
  fprintf(out,
          "<text x=\"%d\" y=\"50\">%s:%d, %zu segment%s, %zu block%s, %zu private pool%s</text>\n",
          MARGIN, m->backend, m->device_index, n, n == 1 ? "" : "s", m->num_blocks,
          m->num_blocks == 1 ? "" : "s", m->num_pools, m->num_pools == 1 ? "" : "s");
  fprintf(out, "<text x=\"%d\" y=\"68\">reserved %s", MARGIN,
          fmt_bytes(m->reserved, b1, sizeof b1));
  if (m->has_peaks) fprintf(out, " (peak %s)", fmt_bytes(m->peak_reserved, b2, sizeof b2));
  fprintf(out, ", allocated %s", fmt_bytes(m->allocated, b3, sizeof b3));
  if (m->has_peaks) fprintf(out, " (peak %s)", fmt_bytes(m->peak_allocated, b4, sizeof b4));
  fprintf(out, ", waiting %s, free in cache %s</text>\n",
          fmt_bytes(m->active - m->allocated, b1, sizeof b1),
          fmt_bytes(m->reserved - m->active, b2, sizeof b2));

  /* Legend: block states, then streams. */
  fprintf(out, "<g id=\"legend\">\n<text x=\"%d\" y=\"96\" font-weight=\"bold\">blocks</text>\n",
          MARGIN);
  for (int s = 0; s < CLI_MEMVIZ_STATE_COUNT; s++) {
    int x = MARGIN + 60 + s * 260;
    fprintf(out,
            "<rect x=\"%d\" y=\"85\" width=\"14\" height=\"14\" fill=\"%s\" stroke=\"#888\"/>"
            "<text x=\"%d\" y=\"96\">%s</text>\n",
            x, state_colors[s], x + 20, state_names[s]);
  }
  fprintf(out, "<text x=\"%d\" y=\"120\" font-weight=\"bold\">streams</text>\n", MARGIN);
  for (size_t i = 0; i < legend_streams; i++) {
    int x = MARGIN + 60 + (int)(i % 4) * 260, y = 109 + (int)(i / 4) * 18;
    fprintf(out,
            "<rect x=\"%d\" y=\"%d\" width=\"8\" height=\"14\" fill=\"%s\"/>"
            "<text x=\"%d\" y=\"%d\">stream %#" PRIx64 "</text>\n",
            x, y, stream_colors[i % STREAM_COLORS], x + 14, y + 11, streams[i]);
  }
  if (num_streams > legend_streams)
    fprintf(out, "<text x=\"%d\" y=\"%d\">and %zu more streams</text>\n", MARGIN + 60,
            109 + (int)((legend_streams + 3) / 4) * 18 + 11, num_streams - legend_streams);
  fprintf(out,
          "<text x=\"%d\" y=\"%d\" fill=\"#555\">one row per segment, as wide as the "
          "picture whatever its size; hover a block for its numbers</text>\n</g>\n",
          MARGIN, top - 12);

  int y = top;
  size_t drawn_blocks = 0, skipped_blocks = 0;
  double bar_x = MARGIN + LABEL_W, bar_w = WIDTH - MARGIN - bar_x;
  for (size_t r = 0; r < rows; r++) {
    const cli_memviz_segment *seg = &m->segments[order[r]];
    if (r == 0 || seg->pool_id != m->segments[order[r - 1]].pool_id) {
      uint64_t pool_bytes = 0;
      size_t pool_segments = 0;
      for (size_t k = r; k < n && m->segments[order[k]].pool_id == seg->pool_id; k++)
        pool_bytes += m->segments[order[k]].total_size, pool_segments++;
      fprintf(out, "<text x=\"%d\" y=\"%d\" font-weight=\"bold\">", MARGIN, y + 14);
      if (seg->pool_id == 0) {
        fprintf(out, "default pool");
      } else {
        const cli_memviz_pool *p = find_pool(m, seg->pool_id);
        fprintf(out, "private pool %" PRIu64, seg->pool_id);
        if (p)
          fprintf(out, " (%" PRId64 " reference%s)", p->use_count, p->use_count == 1 ? "" : "s");
      }
      fprintf(out, ": %zu segment%s, %s</text>\n", pool_segments, pool_segments == 1 ? "" : "s",
              fmt_bytes(pool_bytes, b1, sizeof b1));
      y += ROW_H + ROW_GAP;
    }
    const char *tag =
        stream_colors[stream_index(streams, num_streams, seg->stream) % STREAM_COLORS];
    fprintf(out,
            "<g class=\"segment\"><title>segment %#" PRIx64 ": %s, %s%s, stream %#" PRIx64
            ", pool %" PRIu64 "; allocated %s, requested %s",
            seg->address, fmt_bytes(seg->total_size, b1, sizeof b1), seg->small ? "small" : "large",
            seg->expandable ? ", expandable" : "", seg->stream, seg->pool_id,
            fmt_bytes(seg->allocated, b2, sizeof b2), fmt_bytes(seg->requested, b3, sizeof b3));
    if (seg->expandable)
      fprintf(out, ", %s of address space", fmt_bytes(seg->reserved_address_space, b4, sizeof b4));
    fprintf(out,
            "</title>\n<rect x=\"%d\" y=\"%d\" width=\"8\" height=\"%d\" fill=\"%s\"/>"
            "<text x=\"%d\" y=\"%d\">%s %s%s, %zu block%s, %.0f%% used</text>\n",
            MARGIN, y, ROW_H, tag, MARGIN + 14, y + 14, fmt_bytes(seg->total_size, b1, sizeof b1),
            seg->small ? "small" : "large", seg->expandable ? " expandable" : "", seg->block_count,
            seg->block_count == 1 ? "" : "s",
            100.0 * (double)seg->allocated / (double)seg->total_size);
    fprintf(out, "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\"/>\n", bar_x, y,
            bar_w, ROW_H, state_colors[CLI_MEMVIZ_INACTIVE]);
    for (size_t k = 0; k < seg->block_count; k++) {
      const cli_memviz_block *b = &m->blocks[seg->first_block + k];
      if (drawn_blocks >= MAX_DRAWN_BLOCKS) {
        skipped_blocks++;
        continue;
      }
      drawn_blocks++;
      double x = bar_x + bar_w * (double)(b->address - seg->address) / (double)seg->total_size;
      double w = bar_w * (double)b->size / (double)seg->total_size;
      if (w < 0.5) w = 0.5;
      fprintf(out,
              "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\" "
              "stroke=\"white\" stroke-width=\"0.5\"><title>%#" PRIx64
              ": %s %s, requested %s"
              "</title></rect>\n",
              x, y, w, ROW_H, state_colors[b->state], b->address, fmt_bytes(b->size, b1, sizeof b1),
              state_names[b->state], fmt_bytes(b->requested, b2, sizeof b2));
    }
    fprintf(out, "</g>\n");
    y += ROW_H + ROW_GAP;
  }
  if (rows < n || skipped_blocks)
    fprintf(out,
            "<text x=\"%d\" y=\"%d\" fill=\"#b00\">not drawn: %zu segments and %zu blocks "
            "(the picture stops at %d segments and %d blocks)</text>\n",
            MARGIN, y + 14, n - rows, skipped_blocks, MAX_ROWS, MAX_DRAWN_BLOCKS);
  fprintf(out, "</svg>\n");
  free(order);
  free(streams);
  if (fflush(out) != 0 || ferror(out))
    return RECAP_FAIL(RECAP_STATUS_IO_ERROR, "writing the SVG failed");
  return RECAP_OK;
}
