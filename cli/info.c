/* info.c: `recap info`: what this machine offers recap. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "include/recap.h"

static void print_bytes_line(const char *label, double bytes) {
  printf("    %-22s %.2f GiB\n", label, bytes / (1024.0 * 1024.0 * 1024.0));
}

/* MemAvailable of /proc/meminfo (what the kernel could give without swapping); false where
 * there is none. */
static bool system_available(size_t *bytes) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return false;
  char line[256];
  unsigned long long kib = 0;
  bool found = false;
  while (!found && fgets(line, sizeof line, f))
    found = sscanf(line, "MemAvailable: %llu kB", &kib) == 1;
  fclose(f);
  *bytes = (size_t)kib * 1024;
  return found;
}

/* The host backend's "device memory" is the process's heap under a capacity: physical memory,
 * or RECAP_HOST_MEMORY_BYTES. Its free is that capacity minus recap's own allocations, which
 * says nothing about the machine, so the system's available memory is shown as well. */
static void print_host_memory(size_t free_bytes, size_t total_bytes) {
  const char *cap = getenv("RECAP_HOST_MEMORY_BYTES");
  bool capped = cap && cap[0];
  printf("    %-22s %.2f GiB (%s)\n", "memory capacity", (double)total_bytes / (1 << 30),
         capped ? "RECAP_HOST_MEMORY_BYTES" : "physical memory; RECAP_HOST_MEMORY_BYTES caps it");
  printf("    %-22s %.2f GiB (this process's host-backend allocations)\n", "allocated by recap",
         (double)(total_bytes - free_bytes) / (1 << 30));
  size_t available;
  if (system_available(&available))
    printf("    %-22s %.2f GiB (the system's MemAvailable, within the capacity)\n",
           "memory available",
           (double)(available < free_bytes ? available : free_bytes) / (1 << 30));
}

static void print_device(recap_device device) {
  recap_device_properties p;
  if (recap_device_properties_get(device, &p) != RECAP_OK) {
    printf("  %s:%d  (properties unavailable: %s)\n", recap_backend_name(device.backend),
           device.index, recap_last_error());
    return;
  }
  printf("  %s:%d  %s\n", recap_backend_name(device.backend), device.index, p.name);
  if (device.backend == RECAP_BACKEND_CUDA) {
    printf("    %-22s %d.%d\n", "compute capability", p.major, p.minor);
    printf("    %-22s %d\n", "multiprocessors", p.multiprocessor_count);
    printf("    %-22s %zu MiB\n", "L2 cache", p.l2_cache_bytes >> 20);
    printf("    %-22s %d MHz (memory %d MHz, %d-bit bus)\n", "SM clock", p.clock_khz / 1000,
           p.memory_clock_khz / 1000, p.memory_bus_width_bits);
    printf("    %-22s %zu KiB (opt-in %zu KiB)\n", "shared memory/block",
           p.max_shared_memory_per_block >> 10, p.max_shared_memory_per_block_optin >> 10);
  } else {
    printf("    %-22s %d\n", "logical CPUs", p.multiprocessor_count);
  }
  size_t free_bytes = 0, total_bytes = 0;
  if (recap_device_mem_get_info(device, &free_bytes, &total_bytes) != RECAP_OK) {
    printf("    %-22s not available (%s)\n", "memory", recap_last_error());
  } else if (device.backend == RECAP_BACKEND_HOST) {
    print_host_memory(free_bytes, total_bytes);
  } else {
    print_bytes_line("memory total", (double)total_bytes);
    print_bytes_line("memory free", (double)free_bytes);
  }
  recap_telemetry t;
  recap_status st = recap_device_telemetry(device, &t);
  if (st == RECAP_OK) {
    printf("    %-22s %d%% GPU, %d%% memory, %d C, %.1f W, SM %d MHz\n", "telemetry",
           t.gpu_utilization_percent, t.memory_utilization_percent, t.temperature_c,
           t.power_watts, t.sm_clock_mhz);
  } else {
    printf("    %-22s not available (%s)\n", "telemetry", recap_status_string(st));
  }
}

const cli_help cli_info_help = {
    .synopsis = "recap info",
    .description =
        "Prints the devices recap can use (CUDA GPUs and the host backend) with their\n"
        "properties, memory and telemetry, the CUDA library versions and the GPU architectures\n"
        "this build carries code for.",
};

int cli_info_main(int argc, char **argv) {
  if (cli_wants_help(argc, argv)) {
    cli_help_print(stdout, &cli_info_help);
    return CLI_EXIT_OK;
  }
  if (argc > 0) {
    fprintf(stderr, "recap info: unexpected argument '%s'\n", argv[0]);
    return CLI_EXIT_USAGE;
  }
  cli_print_version(stdout);
  if (recap_backend_compiled(RECAP_BACKEND_CUDA))
    printf("compiled GPU architectures: %s\n", recap_device_compiled_archs(RECAP_BACKEND_CUDA));
  int cuda_count = 0;
  recap_device_count(RECAP_BACKEND_CUDA, &cuda_count);
  printf("\ndevices:\n");
  if (cuda_count == 0) {
    printf("  no CUDA GPU on this machine (%s); recap runs on the host backend\n",
           recap_last_error()[0] ? recap_last_error() : "none found");
  }
  for (int i = 0; i < cuda_count; i++) print_device((recap_device){RECAP_BACKEND_CUDA, i});
  print_device((recap_device){RECAP_BACKEND_HOST, 0});
  return CLI_EXIT_OK;
}
