// Which calls from a second thread invalidate a capture under way on the first (same GPU)?
// The host backend's emulated capture follows what this prints (runtime/host_backend.c,
// docs/RELIABILITY.md "Capture rules"). On the GPU machine:
//   nvcc -O1 -arch=sm_90 -o capture_rules scripts/gpu/capture_rules_probe.cu -lpthread
//   ./capture_rules   # one line per (capture mode, other thread's mode, call)
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static __global__ void k(int *p) { if (p) p[0] += 1; }

static const char *mode_name(cudaStreamCaptureMode m) {
  return m == cudaStreamCaptureModeGlobal ? "global" : m == cudaStreamCaptureModeThreadLocal ? "thread_local" : "relaxed";
}

typedef struct { int call; cudaStreamCaptureMode mode; cudaError_t rc; } other_args;
static cudaStream_t other_stream; static cudaEvent_t outside_event; static int *dev_buf;
static const char *calls[] = {"stream_sync(own)", "stream_query(own)", "event_sync(outside)",
  "event_query(outside)", "device_sync", "malloc+free", "memcpy_sync_d2h", "host_alloc", "launch_on_own"};
enum { NCALLS = 9 };

static void *other(void *arg) {
  other_args *a = (other_args *)arg;
  cudaStreamCaptureMode m = a->mode;
  cudaThreadExchangeStreamCaptureMode(&m);
  int h = 0; void *p = NULL;
  switch (a->call) {
    case 0: a->rc = cudaStreamSynchronize(other_stream); break;
    case 1: a->rc = cudaStreamQuery(other_stream); break;
    case 2: a->rc = cudaEventSynchronize(outside_event); break;
    case 3: a->rc = cudaEventQuery(outside_event); break;
    case 4: a->rc = cudaDeviceSynchronize(); break;
    case 5: a->rc = cudaMalloc(&p, 1 << 20); if (a->rc == cudaSuccess) a->rc = cudaFree(p); break;
    case 6: a->rc = cudaMemcpy(&h, dev_buf, 4, cudaMemcpyDeviceToHost); break;
    case 7: a->rc = cudaMallocHost(&p, 4096); if (a->rc == cudaSuccess) a->rc = cudaFreeHost(p); break;
    case 8: k<<<1, 1, 0, other_stream>>>(dev_buf); a->rc = cudaGetLastError(); break;
  }
  cudaGetLastError();
  return NULL;
}

int main(void) {
  cudaSetDevice(0);
  cudaStream_t cap; cudaStreamCreateWithFlags(&cap, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&other_stream, cudaStreamNonBlocking);
  cudaEventCreate(&outside_event);
  cudaMalloc(&dev_buf, 64);
  cudaStreamCaptureMode modes[] = {cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal, cudaStreamCaptureModeRelaxed};
  printf("capture_mode other_thread_mode call -> call_rc capture_end_rc\n");
  for (int cm = 0; cm < 3; ++cm)
    for (int om = 0; om < 3; ++om)
      for (int c = 0; c < NCALLS; ++c) {
        k<<<1, 1, 0, other_stream>>>(dev_buf);
        cudaEventRecord(outside_event, other_stream);
        cudaStreamSynchronize(other_stream);
        cudaError_t b = cudaStreamBeginCapture(cap, modes[cm]);
        k<<<1, 1, 0, cap>>>(dev_buf);
        other_args a = {c, modes[om], cudaSuccess};
        pthread_t t; pthread_create(&t, NULL, other, &a); pthread_join(t, NULL);
        cudaStreamCaptureStatus st; cudaStreamIsCapturing(cap, &st);
        k<<<1, 1, 0, cap>>>(dev_buf);
        cudaGraph_t g = NULL;
        cudaError_t e = cudaStreamEndCapture(cap, &g);
        if (g) cudaGraphDestroy(g);
        cudaGetLastError();
        printf("%s %s %s -> %s %s%s\n", mode_name(modes[cm]), mode_name(modes[om]), calls[c],
               cudaGetErrorName(a.rc), cudaGetErrorName(e), b ? " (begin failed)" : "");
        cudaDeviceSynchronize(); cudaGetLastError();
      }
  return 0;
}
