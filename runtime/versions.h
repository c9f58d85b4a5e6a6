/*
 * versions.h: where recap_library_versions_get learns the cuBLAS versions (internal).
 *
 * The runtime does not link cuBLAS; the kernels layer does, and registers a query when it
 * loads its handles:
 *
 *   static void blas_versions(int *cublas, int *cublaslt) { ... cublasGetVersion ... }
 *   recap__set_blas_version_query(blas_versions);
 *
 * Until a query is registered, both versions read 0 ("not loaded").
 */
#ifndef RECAP_RUNTIME_VERSIONS_H
#define RECAP_RUNTIME_VERSIONS_H

#ifdef __cplusplus
extern "C" {
#endif

/* Registers (or, with NULL, removes) the query; thread-safe. The query must not fail: it
 * writes 0 for a library it cannot ask. */
void recap__set_blas_version_query(void (*query)(int *cublas, int *cublaslt));

#ifdef __cplusplus
}
#endif

#endif
