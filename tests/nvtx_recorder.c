/*
 * nvtx_recorder.c: a minimal NVTX injection library, so CI can check recap's NVTX calls
 * without Nsight Systems.
 *
 * A program that sets NVTX_INJECTION64_PATH to this library before its first NVTX call gets
 * it loaded by NVTX3, which calls InitializeInjectionNvtx2. The recorder then fills the core
 * and core2 (domain) callback slots it supports and appends one line per call to the file named
 * by RECAP_NVTX_RECORD_FILE:
 *
 *   domain <name>          nvtxDomainCreateA
 *   mark <msg>             nvtxMarkA / nvtxMarkEx
 *   push <msg>             nvtxRangePushA / nvtxRangePushEx
 *   pop                    nvtxRangePop
 *   <domain>: mark <msg>   nvtxDomainMarkEx (likewise push and pop)
 *
 * Each line is flushed at once, so the program can read the file while it runs. Without
 * RECAP_NVTX_RECORD_FILE (or if it cannot be opened) the initializer returns 0 and NVTX
 * turns every call into a no-op, as it does with no tool.
 */
#define NVTX_NO_IMPL /* a tool: the types and ids only, not NVTX's own implementation */
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* NVTX leaves the domain handle's type to the tool. */
struct nvtxDomainRegistration_st {
  char name[64];
};

static pthread_mutex_t record_lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *record;

static void record_line(const char *domain, const char *verb, const char *message) {
  pthread_mutex_lock(&record_lock);
  if (domain) fprintf(record, "%s: ", domain);
  fputs(verb, record);
  if (message) fprintf(record, " %s", message);
  fputc('\n', record);
  fflush(record);
  pthread_mutex_unlock(&record_lock);
}

/* The recorder writes only ASCII messages; anything else is recorded as such, so a test
 * that expected text sees the difference. */
static const char *attribute_message(const nvtxEventAttributes_t *attributes) {
  if (!attributes) return "<no attributes>";
  if (attributes->messageType != NVTX_MESSAGE_TYPE_ASCII) return "<non-ascii message>";
  return attributes->message.ascii ? attributes->message.ascii : "<null>";
}

static const char *domain_name(nvtxDomainHandle_t domain) {
  return domain ? domain->name : "<default>";
}

static void NVTX_API on_mark_a(const char *message) {
  record_line(NULL, "mark", message);
}

static void NVTX_API on_mark_ex(const nvtxEventAttributes_t *attributes) {
  record_line(NULL, "mark", attribute_message(attributes));
}

static int NVTX_API on_push_a(const char *message) {
  record_line(NULL, "push", message);
  return 0;
}

static int NVTX_API on_push_ex(const nvtxEventAttributes_t *attributes) {
  record_line(NULL, "push", attribute_message(attributes));
  return 0;
}

static int NVTX_API on_pop(void) {
  record_line(NULL, "pop", NULL);
  return 0;
}

static nvtxDomainHandle_t NVTX_API on_domain_create_a(const char *name) {
  nvtxDomainHandle_t domain = calloc(1, sizeof *domain);
  if (!domain) return NULL;
  snprintf(domain->name, sizeof domain->name, "%s", name ? name : "<null>");
  record_line(NULL, "domain", domain->name);
  return domain;
}

static void NVTX_API on_domain_destroy(nvtxDomainHandle_t domain) {
  free(domain);
}

static void NVTX_API on_domain_mark_ex(nvtxDomainHandle_t domain,
                                       const nvtxEventAttributes_t *attributes) {
  record_line(domain_name(domain), "mark", attribute_message(attributes));
}

static int NVTX_API on_domain_push_ex(nvtxDomainHandle_t domain,
                                      const nvtxEventAttributes_t *attributes) {
  record_line(domain_name(domain), "push", attribute_message(attributes));
  return 0;
}

static int NVTX_API on_domain_pop(nvtxDomainHandle_t domain) {
  record_line(domain_name(domain), "pop", NULL);
  return 0;
}

/* Stores fn in slot `id` of a module's table, if the NVTX in the program has that slot. */
static void attach(NvtxFunctionTable table, unsigned size, unsigned id, NvtxFunctionPointer fn) {
  if (id < size && table[id]) *table[id] = fn;
}

__attribute__((visibility("default"))) int NVTX_API
InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table) {
  const char *path = getenv("RECAP_NVTX_RECORD_FILE");
  if (!path || !get_export_table) return 0;
  const NvtxExportTableCallbacks *callbacks = get_export_table(NVTX_ETID_CALLBACKS);
  if (!callbacks || callbacks->struct_size < sizeof *callbacks) return 0;

  NvtxFunctionTable core = NULL, core2 = NULL;
  unsigned core_size = 0, core2_size = 0;
  if (!callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &core, &core_size) ||
      !callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &core2, &core2_size))
    return 0;

  record = fopen(path, "a");
  if (!record) return 0;

  attach(core, core_size, NVTX_CBID_CORE_MarkA, (NvtxFunctionPointer)on_mark_a);
  attach(core, core_size, NVTX_CBID_CORE_MarkEx, (NvtxFunctionPointer)on_mark_ex);
  attach(core, core_size, NVTX_CBID_CORE_RangePushA, (NvtxFunctionPointer)on_push_a);
  attach(core, core_size, NVTX_CBID_CORE_RangePushEx, (NvtxFunctionPointer)on_push_ex);
  attach(core, core_size, NVTX_CBID_CORE_RangePop, (NvtxFunctionPointer)on_pop);
  attach(core2, core2_size, NVTX_CBID_CORE2_DomainCreateA, (NvtxFunctionPointer)on_domain_create_a);
  attach(core2, core2_size, NVTX_CBID_CORE2_DomainDestroy, (NvtxFunctionPointer)on_domain_destroy);
  attach(core2, core2_size, NVTX_CBID_CORE2_DomainMarkEx, (NvtxFunctionPointer)on_domain_mark_ex);
  attach(core2, core2_size, NVTX_CBID_CORE2_DomainRangePushEx,
         (NvtxFunctionPointer)on_domain_push_ex);
  attach(core2, core2_size, NVTX_CBID_CORE2_DomainRangePop, (NvtxFunctionPointer)on_domain_pop);
  return 1;
}
