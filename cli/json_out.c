/* json_out.c: where every command's --json FILE goes: to FILE, or with "-" to standard output
 * while the command's text report goes to standard error. */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"

/* The original standard output, kept for the JSON once "--json -" moved the text away. */
static int json_stdout_fd = -1;

bool cli_output_writable(const char *cmd, const char *path) {
  if (strcmp(path, "-") == 0) {
    fprintf(stderr,
            "recap %s: '-' is standard output only for --json; give a file's path (./- for a "
            "file named -)\n",
            cmd);
    return false;
  }
  char dir[4096];
  const char *slash = strrchr(path, '/');
  if (!slash)
    snprintf(dir, sizeof dir, ".");
  else if (slash == path)
    snprintf(dir, sizeof dir, "/");
  else
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
  struct stat st;
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
    cli_report_write_failure(cmd, path, EISDIR);
    return false;
  }
  const char *what = access(path, F_OK) == 0 ? path : dir;
  if (access(what, W_OK) == 0) return true;
  cli_report_write_failure(cmd, path, errno);
  return false;
}

/* Whether `name` ends with `suffix`. */
static bool ends_with(const char *name, const char *suffix) {
  const size_t n = strlen(name), k = strlen(suffix);
  return n >= k && strcmp(name + n - k, suffix) == 0;
}

bool cli_output_spares(const char *cmd, const char *flag, const char *path, const char *spec) {
  struct stat o, s;
  if (!path || strcmp(path, "-") == 0 || stat(path, &o) != 0) return true;
  const bool is_spec = spec && stat(spec, &s) == 0 && s.st_dev == o.st_dev && s.st_ino == o.st_ino;
  const bool weights =
      ends_with(path, ".safetensors") || ends_with(path, ".safetensors.index.json");
  if (!is_spec && !weights) return true;
  fprintf(stderr, "recap %s: %s %s would replace %s\n", cmd, flag, path,
          is_spec ? "the spec this command runs" : "a checkpoint's weights");
  return false;
}

int cli_json_flag(const char *cmd, int argc, char **argv, int *i, const char **path) {
  int m = cli_flag(cmd, argc, argv, i, "--json", path);
  if (m > 0 && strcmp(*path, "-") != 0 && !cli_output_writable(cmd, *path)) return -1;
  if (m <= 0 || strcmp(*path, "-") != 0 || json_stdout_fd >= 0) return m;
  /* The commands print their text report with printf as they go; pointing file descriptor 1 at
   * standard error sends all of it there, so standard output carries the JSON alone. */
  fflush(stdout);
  int fd = dup(STDOUT_FILENO);
  if (fd < 0 || dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
    fprintf(stderr, "recap %s: cannot keep standard output for --json -: %s\n", cmd,
            strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  json_stdout_fd = fd;
  return 1;
}

bool cli_write_json(const char *cmd, json_t *root, recap_device device, const char *path) {
  json_t *environment = cli_environment_json(device);
  if (!environment || json_object_set_new(root, "environment", environment) != 0) {
    fprintf(stderr, "recap %s: out of memory writing JSON\n", cmd);
    return false;
  }
  if (strcmp(path, "-") != 0) {
    if (json_dump_file(root, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0) {
      cli_report_write_failure(cmd, path, errno);
      return false;
    }
    printf("wrote %s\n", path);
    return true;
  }
  /* One line on stdout: the ranks of `recap launch` share one stdout, and a reader takes
   * each rank's result as a line of its own. */
  fflush(stdout);
  FILE *out = json_stdout_fd >= 0 ? fdopen(json_stdout_fd, "w") : NULL;
  bool ok = out && json_dumpf(root, out, JSON_PRESERVE_ORDER) == 0 && fputc('\n', out) != EOF;
  if (out) ok = fclose(out) == 0 && ok;
  json_stdout_fd = -1;
  if (!ok) fprintf(stderr, "recap %s: cannot write JSON to standard output\n", cmd);
  return ok;
}
