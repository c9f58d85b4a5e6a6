/*
 * telemetry.c: recap_device_telemetry through NVML, loaded with dlopen.
 *
 * NVML ships with the driver (libnvidia-ml.so.1), not with the toolkit, and nvml.h is not
 * needed: the few functions used are declared below from NVML's stable C ABI (the versioned
 * entry points nvmlInit_v2, nvmlDeviceGetHandleByIndex_v2 and nvmlDeviceGetHandleByPciBusId_v2
 * and the unversioned queries, with the struct layouts nvmlUtilization_t and nvmlMemory_t
 * (version 1) and the enum values NVML_TEMPERATURE_GPU = 0 and NVML_CLOCK_SM = 1, as nvml.h
 * defines them). NVML is initialized once and never shut down: it stays valid for the process.
 */
#include <stddef.h>
#include <string.h>

#include "runtime/backend.h"
#include "runtime/error.h"

#if RECAP_WITH_CUDA
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

typedef int nvml_return;                    /* nvmlReturn_t; NVML_SUCCESS == 0 */
typedef struct nvml_device_st *nvml_device; /* nvmlDevice_t */
typedef struct {
  unsigned int gpu;    /* percent of time a kernel ran over the last sample period */
  unsigned int memory; /* percent of time device memory was read or written */
} nvml_utilization;    /* nvmlUtilization_t */
typedef struct {
  unsigned long long total, free, used; /* bytes */
} nvml_memory;                          /* nvmlMemory_t (v1) */

enum { NVML_SUCCESS_ = 0, NVML_TEMPERATURE_GPU_ = 0, NVML_CLOCK_SM_ = 1 };

typedef struct {
  nvml_return (*init)(void);
  nvml_return (*handle_by_index)(unsigned int index, nvml_device *device);
  nvml_return (*handle_by_pci_bus_id)(const char *bus_id, nvml_device *device);
  nvml_return (*utilization)(nvml_device device, nvml_utilization *out);
  nvml_return (*temperature)(nvml_device device, int sensor, unsigned int *celsius);
  nvml_return (*power_usage)(nvml_device device, unsigned int *milliwatts);
  nvml_return (*clock_info)(nvml_device device, int clock_type, unsigned int *mhz);
  nvml_return (*memory_info)(nvml_device device, nvml_memory *out);
  const char *(*error_string)(nvml_return result);
} nvml_api;

static pthread_once_t nvml_once = PTHREAD_ONCE_INIT;
static nvml_api nvml;
static int nvml_ready;
static char nvml_problem[256];

static void *nvml_symbol(void *lib, const char *name, int *missing) {
  void *fn = dlsym(lib, name);
  if (!fn && !*missing) {
    *missing = 1;
    snprintf(nvml_problem, sizeof nvml_problem, "libnvidia-ml.so.1 lacks %s", name);
  }
  return fn;
}

static void nvml_load(void) {
  void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *why = dlerror();
    snprintf(nvml_problem, sizeof nvml_problem, "cannot load NVML: %s",
             why ? why : "libnvidia-ml.so.1 not found");
    return;
  }
  int missing = 0;
  /* dlsym returns object pointers; POSIX guarantees they convert to function pointers. */
  *(void **)&nvml.init = nvml_symbol(lib, "nvmlInit_v2", &missing);
  *(void **)&nvml.handle_by_index = nvml_symbol(lib, "nvmlDeviceGetHandleByIndex_v2", &missing);
  *(void **)&nvml.handle_by_pci_bus_id =
      nvml_symbol(lib, "nvmlDeviceGetHandleByPciBusId_v2", &missing);
  *(void **)&nvml.utilization = nvml_symbol(lib, "nvmlDeviceGetUtilizationRates", &missing);
  *(void **)&nvml.temperature = nvml_symbol(lib, "nvmlDeviceGetTemperature", &missing);
  *(void **)&nvml.power_usage = nvml_symbol(lib, "nvmlDeviceGetPowerUsage", &missing);
  *(void **)&nvml.clock_info = nvml_symbol(lib, "nvmlDeviceGetClockInfo", &missing);
  *(void **)&nvml.memory_info = nvml_symbol(lib, "nvmlDeviceGetMemoryInfo", &missing);
  *(void **)&nvml.error_string = nvml_symbol(lib, "nvmlErrorString", &missing);
  if (missing) {
    dlclose(lib);
    return;
  }
  nvml_return r = nvml.init();
  if (r != NVML_SUCCESS_) {
    snprintf(nvml_problem, sizeof nvml_problem, "nvmlInit_v2 failed: %s (%d)", nvml.error_string(r),
             r);
    dlclose(lib);
    return;
  }
  nvml_ready = 1; /* the library stays loaded for the process */
}

/* NVML numbers devices its own way (PCI order, all GPUs); CUDA's order depends on
 * CUDA_DEVICE_ORDER and CUDA_VISIBLE_DEVICES. The PCI bus id names the same GPU in both. */
static recap_status nvml_handle(int cuda_device, nvml_device *out) {
  char bus_id[32];
  if (cudaDeviceGetPCIBusId(bus_id, (int)sizeof bus_id, cuda_device) == cudaSuccess &&
      nvml.handle_by_pci_bus_id(bus_id, out) == NVML_SUCCESS_)
    return RECAP_OK;
  (void)cudaGetLastError();
  nvml_return r = nvml.handle_by_index((unsigned)cuda_device, out);
  if (r != NVML_SUCCESS_)
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                      "NVML does not know CUDA device %d (by PCI bus id or index): %s", cuda_device,
                      nvml.error_string(r));
  return RECAP_OK;
}
#endif /* RECAP_WITH_CUDA */

recap_status recap_device_telemetry(recap_device device, recap_telemetry *out) {
  RECAP_CHECK_ARG(out);
  const recap__backend *backend;
  RECAP_TRY(recap__device_backend(device, &backend));
  if (backend->kind != RECAP_BACKEND_CUDA)
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "the %s backend has no telemetry", backend->name);
#if RECAP_WITH_CUDA
  pthread_once(&nvml_once, nvml_load);
  if (!nvml_ready) return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "%s", nvml_problem);
  nvml_device handle;
  RECAP_TRY(nvml_handle(device.index, &handle));

  /* Each sensor may be missing on some boards (power on some GeForce, utilization under MIG):
   * a missing one reads -1 and the rest are still reported. */
  recap_telemetry t = {-1, -1, -1, -1.0, -1, -1, -1};
  nvml_utilization util;
  if (nvml.utilization(handle, &util) == NVML_SUCCESS_) {
    t.gpu_utilization_percent = (int)util.gpu;
    t.memory_utilization_percent = (int)util.memory;
  }
  unsigned int value = 0;
  if (nvml.temperature(handle, NVML_TEMPERATURE_GPU_, &value) == NVML_SUCCESS_)
    t.temperature_c = (int)value;
  if (nvml.power_usage(handle, &value) == NVML_SUCCESS_) t.power_watts = value / 1000.0;
  if (nvml.clock_info(handle, NVML_CLOCK_SM_, &value) == NVML_SUCCESS_) t.sm_clock_mhz = (int)value;
  nvml_memory memory;
  if (nvml.memory_info(handle, &memory) == NVML_SUCCESS_) {
    t.memory_used_bytes = (long long)memory.used;
    t.memory_total_bytes = (long long)memory.total;
  }
  *out = t;
  return RECAP_OK;
#else
  return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "telemetry needs a CUDA build");
#endif
}
