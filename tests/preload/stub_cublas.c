/* stub_cublas.c: a stand-in for another cuBLAS that a host program loaded before recap (a
 * PyTorch wheel's libcublasLt.so.12, say). It exports the functions recap resolves, each
 * counting its calls, so the test can tell whether recap bound to it. Built by
 * tests/shared_library_load_test.sh as libcublasLt.so.12 (its soname). */
int stub_calls;

/* A version no real cuBLAS has: recap reporting it would mean it asked the stub. */
enum { STUB_VERSION = 120999 };

int cublasLtCreate(void **handle) {
  stub_calls++;
  *handle = 0;
  return 0;
}

unsigned long cublasLtGetVersion(void) {
  stub_calls++;
  return STUB_VERSION;
}

int cublasCreate_v2(void **handle) {
  stub_calls++;
  *handle = 0;
  return 0;
}

int cublasGetProperty(int type, int *value) {
  stub_calls++;
  *value = type == 0 ? STUB_VERSION / 10000 : 0;
  return 0;
}
