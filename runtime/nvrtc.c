/*
 * nvrtc.c: NVRTC through dlopen, and the disk cache of compiled cubins (runtime/nvrtc.h).
 *
 * The few NVRTC entry points used are declared here by their documented C signatures
 * (nvrtcResult is an int-sized enum, nvrtcProgram an opaque pointer), so this file needs no
 * CUDA header and builds in host-only configurations too.
 */
#include "runtime/nvrtc.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/error.h"
#include "runtime/file.h"

typedef int nvrtc_result; /* NVRTC_SUCCESS == 0 */
typedef void *nvrtc_program;

typedef struct {
  void *handle;
  int major, minor;
  char identity[PATH_MAX + 64]; /* the loaded file's identity (library_identity) */
  nvrtc_result (*version)(int *, int *);
  nvrtc_result (*create)(nvrtc_program *, const char *, const char *, int, const char *const *,
                         const char *const *);
  nvrtc_result (*compile)(nvrtc_program, int, const char *const *);
  nvrtc_result (*log_size)(nvrtc_program, size_t *);
  nvrtc_result (*log)(nvrtc_program, char *);
  nvrtc_result (*cubin_size)(nvrtc_program, size_t *);
  nvrtc_result (*cubin)(nvrtc_program, char *);
  nvrtc_result (*destroy)(nvrtc_program *);
  const char *(*error_string)(nvrtc_result);
} nvrtc_api;

static pthread_mutex_t api_lock = PTHREAD_MUTEX_INITIALIZER;
static nvrtc_api api;
static atomic_bool api_loaded;

static atomic_uint_fast64_t stat_hits, stat_compiles, stat_corrupt, stat_write_fails, stat_loads;

/* ---- finding and loading libnvrtc ------------------------------------------------------ */

/* Opening libnvrtc costs 45-60 ms (measured on the build machine, warm page cache), far more
 * than loading a cached cubin, so a cache hit must not need it. The cache key therefore names
 * the library FILE instead of asking it for its version: its resolved path, size and
 * modification time, which pin the exact build (the version is in the real file name,
 * libnvrtc.so.13.0.NN). The file is found by the search below, and a compile then opens that
 * same file, so the key always describes the compiler that produced the entry. */

/* "<realpath> <size> <mtime>" of `path`, or false when it is not a readable regular file. */
static bool library_identity(const char *path, char *out, size_t size) {
  char real[PATH_MAX];
  struct stat sb;
  if (!realpath(path, real) || stat(real, &sb) != 0 || !S_ISREG(sb.st_mode)) return false;
  int w = snprintf(out, size, "%s %lld %lld.%09ld", real, (long long)sb.st_size,
                   (long long)sb.st_mtim.tv_sec, (long)sb.st_mtim.tv_nsec);
  return w > 0 && (size_t)w < size;
}

/* Appends `what` to the list of places tried (for the error message). */
static void note_tried(char *tried, size_t size, const char *what) {
  size_t used = strlen(tried);
  snprintf(tried + used, size - used, "%s%s", used ? ", " : "", what);
}

/* Finds libnvrtc: RECAP_NVRTC_LIBRARY when set (that file only), else libnvrtc.so.13 (then
 * libnvrtc.so) in each folder of LD_LIBRARY_PATH, $CUDA_PATH/lib64, /usr/local/cuda/lib64 and
 * the system's library folders. Writes the file's path and identity; on failure, the places
 * tried. */
static bool locate(char *path, size_t path_size, char *identity, size_t id_size, char *tried,
                   size_t tried_size) {
  tried[0] = '\0';
  const char *override = getenv("RECAP_NVRTC_LIBRARY");
  if (override && *override) {
    snprintf(path, path_size, "%s", override);
    if (library_identity(path, identity, id_size)) return true;
    note_tried(tried, tried_size, override);
    return false;
  }
  const char *ld = getenv("LD_LIBRARY_PATH"), *cuda = getenv("CUDA_PATH");
  char list[4096];
  snprintf(list, sizeof list, "%s:%s%s:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu:/usr/lib64",
           ld ? ld : "", cuda && *cuda ? cuda : "", cuda && *cuda ? "/lib64" : "");
  enum { MAX_DIRS = 64 };
  const char *dirs[MAX_DIRS];
  int num_dirs = 0;
  char *save = NULL;
  for (char *dir = strtok_r(list, ":", &save); dir && num_dirs < MAX_DIRS;
       dir = strtok_r(NULL, ":", &save))
    dirs[num_dirs++] = dir;
  static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so"};
  for (int k = 0; k < 2; ++k)
    for (int d = 0; d < num_dirs; ++d) {
      int w = snprintf(path, path_size, "%s/%s", dirs[d], names[k]);
      if (w > 0 && (size_t)w < path_size && library_identity(path, identity, id_size)) return true;
    }
  note_tried(tried, tried_size, "libnvrtc.so.13 and libnvrtc.so in LD_LIBRARY_PATH");
  note_tried(tried, tried_size, "$CUDA_PATH/lib64, /usr/local/cuda/lib64");
  note_tried(tried, tried_size, "/usr/lib/x86_64-linux-gnu, /usr/lib64");
  return false;
}

static recap_status not_found(const char *tried) {
  return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                    "NVRTC (libnvrtc) is not available: tried %s (set RECAP_NVRTC_LIBRARY to its "
                    "path, or put the CUDA toolkit's lib64 on LD_LIBRARY_PATH)",
                    tried);
}

/* The identity a compile now would use: the loaded library's, else the one a load would
 * open. */
static recap_status current_identity(char *identity, size_t size) {
  if (atomic_load(&api_loaded)) {
    snprintf(identity, size, "%s", api.identity);
    return RECAP_OK;
  }
  char path[PATH_MAX], tried[1024];
  if (!locate(path, sizeof path, identity, size, tried, sizeof tried)) return not_found(tried);
  return RECAP_OK;
}

/* Opens libnvrtc and resolves every symbol, or fails naming what was tried. Holds api_lock. */
static recap_status load_locked(void) {
  char path[PATH_MAX], tried[1024];
  nvrtc_api a;
  memset(&a, 0, sizeof a);
  if (!locate(path, sizeof path, a.identity, sizeof a.identity, tried, sizeof tried))
    return not_found(tried);
  void *handle = dlopen(path, RTLD_LAZY | RTLD_LOCAL);
  if (!handle)
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "NVRTC (libnvrtc) cannot be loaded from %s: %s",
                      path, dlerror());
  a.handle = handle;
#define RESOLVE(field, symbol)                                                               \
  do {                                                                                       \
    *(void **)&a.field = dlsym(handle, symbol);                                              \
    if (!a.field) {                                                                          \
      dlclose(handle);                                                                       \
      return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "%s lacks %s (too old?)", path, symbol); \
    }                                                                                        \
  } while (0)
  RESOLVE(version, "nvrtcVersion");
  RESOLVE(create, "nvrtcCreateProgram");
  RESOLVE(compile, "nvrtcCompileProgram");
  RESOLVE(log_size, "nvrtcGetProgramLogSize");
  RESOLVE(log, "nvrtcGetProgramLog");
  RESOLVE(cubin_size, "nvrtcGetCUBINSize");
  RESOLVE(cubin, "nvrtcGetCUBIN");
  RESOLVE(destroy, "nvrtcDestroyProgram");
  RESOLVE(error_string, "nvrtcGetErrorString");
#undef RESOLVE
  if (a.version(&a.major, &a.minor) != 0) {
    dlclose(handle);
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "%s: nvrtcVersion failed", path);
  }
  api = a;
  atomic_fetch_add(&stat_loads, 1);
  atomic_store(&api_loaded, true);
  return RECAP_OK;
}

static recap_status load(void) {
  if (atomic_load(&api_loaded)) return RECAP_OK;
  pthread_mutex_lock(&api_lock);
  recap_status st = atomic_load(&api_loaded) ? RECAP_OK : load_locked();
  pthread_mutex_unlock(&api_lock);
  return st;
}

recap_status recap__nvrtc_version(int *major, int *minor) {
  RECAP_TRY(load());
  if (major) *major = api.major;
  if (minor) *minor = api.minor;
  return RECAP_OK;
}

void recap__nvrtc_options(int arch, char *buf, size_t size) {
  snprintf(buf, size, "--gpu-architecture=sm_%d --device-as-default-execution-space --fmad=false",
           arch);
}

recap_status recap__nvrtc_compile(const char *source, const char *name, int arch, char **cubin,
                                  size_t *size) {
  RECAP_CHECK_ARG(source && cubin && size && arch > 0 && arch < 1000);
  RECAP_TRY(load());
  char arch_option[64];
  snprintf(arch_option, sizeof arch_option, "--gpu-architecture=sm_%d", arch);
  const char *const options[] = {arch_option, "--device-as-default-execution-space",
                                 "--fmad=false"};
  nvrtc_program program = NULL;
  recap_status st = RECAP_OK;
  char *log = NULL, *out = NULL;
  nvrtc_result r = api.create(&program, source, name ? name : "recap.cu", 0, NULL, NULL);
  if (r != 0) {
    program = NULL;
    st = RECAP_FAIL(r == 1 ? RECAP_STATUS_OUT_OF_MEMORY : RECAP_STATUS_LIBRARY_ERROR,
                    "nvrtcCreateProgram: %s", api.error_string(r));
    goto done;
  }
  atomic_fetch_add(&stat_compiles, 1);
  r = api.compile(program, (int)(sizeof options / sizeof options[0]), options);
  if (r != 0) {
    size_t log_size = 0;
    if (api.log_size(program, &log_size) == 0 && log_size > 0 && (log = malloc(log_size + 1))) {
      if (api.log(program, log) != 0) log[0] = '\0';
      log[log_size] = '\0';
    }
    /* NVRTC_ERROR_INVALID_OPTION (5): an architecture this NVRTC does not know, which is the
     * toolkit's limit, not a bug in the source. */
    st = RECAP_FAIL(r == 5 ? RECAP_STATUS_NOT_SUPPORTED : RECAP_STATUS_LIBRARY_ERROR,
                    "NVRTC %d.%d could not compile %s for sm_%d (%s): %.1200s", api.major,
                    api.minor, name ? name : "generated code", arch, api.error_string(r),
                    log ? log : "(no log)");
    goto done;
  }
  size_t n = 0;
  r = api.cubin_size(program, &n);
  if (r != 0 || n == 0) {
    st = RECAP_FAIL(RECAP_STATUS_LIBRARY_ERROR, "nvrtcGetCUBINSize: %s",
                    r ? api.error_string(r) : "empty cubin");
    goto done;
  }
  out = malloc(n);
  if (!out) {
    st = RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for a %zu-byte cubin", n);
    goto done;
  }
  r = api.cubin(program, out);
  if (r != 0) {
    st = RECAP_FAIL(RECAP_STATUS_LIBRARY_ERROR, "nvrtcGetCUBIN: %s", api.error_string(r));
    goto done;
  }
  *cubin = out;
  *size = n;
  out = NULL;
done:
  free(out);
  free(log);
  if (program) api.destroy(&program);
  return st;
}

/* ---- the disk cache -------------------------------------------------------------------- */

/* FNV-1a, 64-bit, continued from `h`. Two differently seeded runs name a file (128 bits); the
 * checksum guards against torn or flipped bytes, not against an adversary (the key itself is
 * compared on every read). */
static uint64_t fnv1a(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = data;
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_OFFSET2 0x84222325cbf29ce4ull

static const char MAGIC[8] = {'R', 'E', 'C', 'A', 'P', 'C', 'B', '1'};

typedef struct {
  char magic[8];
  uint64_t key_len, cubin_len, checksum;
} file_header;

bool recap__nvrtc_cache_dir(char *buf, size_t size) {
  const char *dir = getenv("RECAP_CACHE_DIR");
  int w = -1;
  if (dir && *dir) {
    w = snprintf(buf, size, "%s", dir);
  } else if ((dir = getenv("XDG_CACHE_HOME")) && *dir) {
    w = snprintf(buf, size, "%s/recap", dir);
  } else if ((dir = getenv("HOME")) && *dir) {
    w = snprintf(buf, size, "%s/.cache/recap", dir);
  }
  return w > 0 && (size_t)w < size;
}

/* "recap-nvrtc-cache 2\nnvrtc <library identity>\n<options>\n" + source: everything a cubin
 * depends on. malloc'd; NULL when NVRTC cannot be found (the error is recorded) or on OOM. */
static char *make_key(const char *source, int arch, size_t *len, recap_status *st) {
  char identity[PATH_MAX + 64], options[160], head[PATH_MAX + 300];
  *st = current_identity(identity, sizeof identity);
  if (*st != RECAP_OK) return NULL;
  recap__nvrtc_options(arch, options, sizeof options);
  int w = snprintf(head, sizeof head, "recap-nvrtc-cache 2\nnvrtc %s\n%s\n", identity, options);
  size_t hl = (size_t)w, sl = strlen(source);
  char *key = malloc(hl + sl);
  if (!key) {
    *st = RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for an NVRTC cache key");
    return NULL;
  }
  memcpy(key, head, hl);
  memcpy(key + hl, source, sl);
  *len = hl + sl;
  return key;
}

static bool path_for_key(const char *key, size_t key_len, char *buf, size_t size) {
  char dir[900];
  if (!recap__nvrtc_cache_dir(dir, sizeof dir)) return false;
  unsigned long long h1 = fnv1a(FNV_OFFSET, key, key_len), h2 = fnv1a(FNV_OFFSET2, key, key_len);
  int w = snprintf(buf, size, "%s/%016llx%016llx.cubin", dir, h1, h2);
  return w > 0 && (size_t)w < size;
}

bool recap__nvrtc_cache_path(const char *source, int arch, char *buf, size_t size) {
  if (!source) return false;
  size_t key_len = 0;
  recap_status st;
  char *key = make_key(source, arch, &key_len, &st);
  bool ok = key && path_for_key(key, key_len, buf, size);
  free(key);
  return ok;
}

/* Reads exactly n bytes. */
static bool read_all(int fd, void *buf, size_t n) {
  char *p = buf;
  while (n > 0) {
    ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= (size_t)r;
  }
  return true;
}

static bool write_all(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= (size_t)w;
  }
  return true;
}

typedef enum { READ_MISS, READ_HIT, READ_CORRUPT } read_result;

/* Looks the key up. A file that exists but cannot be used says why in *why. */
static read_result cache_read(const char *path, const char *key, size_t key_len, char **cubin,
                              size_t *size, const char **why) {
  int fd;
  uint64_t file_bytes;
  if (recap__file_open_regular_fd(path, "kernel cache file", &fd, &file_bytes) != RECAP_OK) {
    /* A file that cannot be opened is a miss, as before; one that is not a regular file (a
     * FIFO left in the cache folder) is unusable. */
    bool irregular = errno == EINVAL;
    recap_clear_error();
    *why = "not a regular file";
    return irregular ? READ_CORRUPT : READ_MISS;
  }
  read_result result = READ_CORRUPT;
  char *stored_key = NULL, *data = NULL;
  file_header h;
  *why = "truncated";
  if (!read_all(fd, &h, sizeof h)) goto done;
  *why = "not a recap cubin cache file";
  if (memcmp(h.magic, MAGIC, sizeof MAGIC) != 0) goto done;
  *why = "truncated";
  if (h.key_len > file_bytes || h.cubin_len > file_bytes ||
      sizeof h + h.key_len + h.cubin_len != file_bytes)
    goto done;
  *why = "for another key";
  if (h.key_len != key_len || h.cubin_len == 0) goto done;
  stored_key = malloc(key_len);
  data = malloc(h.cubin_len);
  *why = "unreadable (out of memory)";
  if (!stored_key || !data) goto done;
  *why = "truncated";
  if (!read_all(fd, stored_key, key_len) || !read_all(fd, data, h.cubin_len)) goto done;
  *why = "checksum mismatch";
  uint64_t sum = fnv1a(fnv1a(FNV_OFFSET, stored_key, key_len), data, h.cubin_len);
  if (sum != h.checksum) goto done;
  *why = "for another key";
  if (memcmp(stored_key, key, key_len) != 0) goto done;
  *cubin = data;
  *size = h.cubin_len;
  data = NULL;
  result = READ_HIT;
done:
  close(fd);
  free(stored_key);
  free(data);
  return result;
}

/* mkdir -p with mode 0700 for the folders it creates. */
static bool make_dirs(const char *path) {
  char buf[1024];
  int w = snprintf(buf, sizeof buf, "%s", path);
  if (w <= 0 || (size_t)w >= sizeof buf) return false;
  for (char *p = buf + 1; *p; ++p) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(buf, 0700) != 0 && errno != EEXIST) return false;
    *p = '/';
  }
  return mkdir(buf, 0700) == 0 || errno == EEXIST;
}

/* Writes the entry to a temporary file in the same folder and renames it over the final
 * name, so readers see the whole file or none (and concurrent writers of one key agree). */
static bool cache_write(const char *path, const char *key, size_t key_len, const char *cubin,
                        size_t size) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (!slash) return false;
  *slash = '\0';
  if (!make_dirs(dir)) return false;
  static atomic_uint counter;
  char tmp[1100];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%u", path, (long)getpid(), atomic_fetch_add(&counter, 1));
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  file_header h;
  memcpy(h.magic, MAGIC, sizeof MAGIC);
  h.key_len = key_len;
  h.cubin_len = size;
  h.checksum = fnv1a(fnv1a(FNV_OFFSET, key, key_len), cubin, size);
  bool ok = write_all(fd, &h, sizeof h) && write_all(fd, key, key_len) &&
            write_all(fd, cubin, size) && fsync(fd) == 0;
  ok = close(fd) == 0 && ok;
  if (ok) ok = rename(tmp, path) == 0;
  if (!ok) unlink(tmp);
  return ok;
}

recap_status recap__nvrtc_compile_cached(const char *source, const char *name, int arch,
                                         char **cubin, size_t *size, bool *hit) {
  RECAP_CHECK_ARG(source && cubin && size && arch > 0 && arch < 1000);
  if (hit) *hit = false;
  /* A hit needs only the key, which names NVRTC's file without loading it. */
  size_t key_len = 0;
  recap_status st;
  char *key = make_key(source, arch, &key_len, &st);
  if (!key) return st;
  char path[1024];
  bool cached = path_for_key(key, key_len, path, sizeof path);
  if (cached) {
    const char *why = NULL;
    switch (cache_read(path, key, key_len, cubin, size, &why)) {
      case READ_HIT:
        atomic_fetch_add(&stat_hits, 1);
        free(key);
        if (hit) *hit = true;
        return RECAP_OK;
      case READ_CORRUPT:
        atomic_fetch_add(&stat_corrupt, 1);
        fprintf(stderr, "recap: warning: ignoring NVRTC cache file %s (%s); recompiling\n", path,
                why);
        break;
      case READ_MISS:
        break;
    }
  }
  st = recap__nvrtc_compile(source, name, arch, cubin, size);
  if (st == RECAP_OK && cached && !cache_write(path, key, key_len, *cubin, *size))
    atomic_fetch_add(&stat_write_fails, 1);
  free(key);
  return st;
}

void recap__nvrtc_stats_get(recap__nvrtc_stats *out) {
  if (!out) return;
  out->hits = atomic_load(&stat_hits);
  out->compiles = atomic_load(&stat_compiles);
  out->corrupt = atomic_load(&stat_corrupt);
  out->write_fails = atomic_load(&stat_write_fails);
  out->loads = atomic_load(&stat_loads);
}
