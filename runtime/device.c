/* device.c: backend lookup, devices, the calling thread's current device. */
#include <string.h>

#include "runtime/backend.h"
#include "runtime/debug.h"
#include "runtime/error.h"

const recap__backend *recap__backend_get(recap_backend_kind kind) {
  switch (kind) {
    case RECAP_BACKEND_HOST:
      return &recap__host_backend;
    case RECAP_BACKEND_CUDA:
#if RECAP_WITH_CUDA
      return &recap__cuda_backend;
#else
      recap__fail_plain(RECAP_STATUS_NOT_SUPPORTED,
                        "this build of recap has no CUDA backend (built with --config=hostonly)");
      return NULL;
#endif
  }
  recap__fail_plain(RECAP_STATUS_INVALID_ARGUMENT, "unknown backend %d", (int)kind);
  return NULL;
}

const char *recap_backend_name(recap_backend_kind backend) {
  switch (backend) {
    case RECAP_BACKEND_HOST:
      return "host";
    case RECAP_BACKEND_CUDA:
      return "cuda";
  }
  return NULL;
}

recap_status recap_backend_parse(const char *name, recap_backend_kind *out) {
  RECAP_CHECK_ARG(name && out);
  if (strcmp(name, "host") == 0) {
    *out = RECAP_BACKEND_HOST;
  } else if (strcmp(name, "cuda") == 0) {
    *out = RECAP_BACKEND_CUDA;
  } else {
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "unknown backend '%s' (expected host or cuda)",
                      name);
  }
  return RECAP_OK;
}

int recap_backend_compiled(recap_backend_kind backend) {
  if (backend == RECAP_BACKEND_HOST) return 1;
#if RECAP_WITH_CUDA
  return backend == RECAP_BACKEND_CUDA;
#else
  return 0;
#endif
}

recap_status recap__device_backend(recap_device device, const recap__backend **out) {
  const recap__backend *backend = recap__backend_get(device.backend);
  /* recap__backend_get has set the message; formatting recap_last_error() into itself, as a
   * RECAP_FAIL would, reads the buffer it is overwriting and left the message empty. */
  if (!backend) return RECAP_STATUS_NOT_SUPPORTED;
  int count = 0;
  RECAP_TRY(backend->device_count(&count));
  if (device.index < 0 || device.index >= count) {
    if (count == 0)
      return RECAP_FAIL(RECAP_STATUS_NO_DEVICE, "no %s device is available",
                        recap_backend_name(device.backend));
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "%s device %d does not exist (%d present)",
                      recap_backend_name(device.backend), device.index, count);
  }
  *out = backend;
  return RECAP_OK;
}

int recap_device_is_available(recap_backend_kind backend) {
  int count = 0;
  return recap_device_count(backend, &count) == RECAP_OK && count > 0;
}

recap_status recap_device_count(recap_backend_kind backend, int *count) {
  RECAP_CHECK_ARG(count);
  const recap__backend *be = recap__backend_get(backend);
  if (!be) {
    *count = 0;
    return RECAP_OK;
  }
  return be->device_count(count);
}

static _Thread_local recap_device thread_device;
static _Thread_local int thread_device_set;

recap_status recap_device_current(recap_device *out) {
  RECAP_CHECK_ARG(out);
  if (!thread_device_set) {
    recap_device cuda0 = {RECAP_BACKEND_CUDA, 0};
    recap_device host0 = {RECAP_BACKEND_HOST, 0};
    thread_device = recap_device_is_available(RECAP_BACKEND_CUDA) ? cuda0 : host0;
    thread_device_set = 1;
  }
  *out = thread_device;
  return RECAP_OK;
}

recap_status recap_device_set(recap_device device) {
  const recap__backend *backend;
  RECAP_TRY(recap__device_backend(device, &backend));
  thread_device = device;
  thread_device_set = 1;
  return RECAP_OK;
}

recap_status recap_device_properties_get(recap_device device, recap_device_properties *out) {
  RECAP_CHECK_ARG(out);
  const recap__backend *backend;
  RECAP_TRY(recap__device_backend(device, &backend));
  return backend->device_properties(device.index, out);
}

const char *recap_device_compiled_archs(recap_backend_kind backend) {
  const recap__backend *be = recap__backend_get(backend);
  return be ? be->compiled_archs() : "";
}

recap_status recap_device_can_access_peer(recap_device device, recap_device peer, int *out) {
  RECAP_CHECK_ARG(out);
  const recap__backend *backend, *peer_backend;
  RECAP_TRY(recap__device_backend(device, &backend));
  RECAP_TRY(recap__device_backend(peer, &peer_backend));
  if (backend != peer_backend || device.index == peer.index) {
    *out = 0;
    return RECAP_OK;
  }
  return backend->can_access_peer(device.index, peer.index, out);
}

recap_status recap_device_mem_get_info(recap_device device, size_t *free_bytes,
                                       size_t *total_bytes) {
  RECAP_CHECK_ARG(free_bytes && total_bytes);
  const recap__backend *backend;
  RECAP_TRY(recap__device_backend(device, &backend));
  return backend->mem_get_info(device.index, free_bytes, total_bytes);
}

recap_status recap_device_synchronize(recap_device device) {
  RECAP_TRY(recap__sync_debug_check("recap_device_synchronize"));
  const recap__backend *backend;
  RECAP_TRY(recap__device_backend(device, &backend));
  return backend->device_synchronize(device.index);
}
