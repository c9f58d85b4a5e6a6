/*
 * nvtx.c: recap's NVTX marks and ranges (recap_nvtx_* in include/recap.h).
 *
 * Everything goes to one NVTX domain, "recap", so Nsight Systems shows recap's ranges on their
 * own row and a user can filter them. NVTX3 is header-only: with no tool attached, the first
 * call finds NVTX_INJECTION64_PATH unset and every later call is a load and a NULL check. The
 * tool, when there is one, is loaded on that first call, so NVTX_INJECTION64_PATH must be set
 * before it (profilers set it before the program starts).
 *
 * Compiling with -DRECAP_NO_NVTX (bazel build --copt=-DRECAP_NO_NVTX) makes the three
 * functions empty and drops NVTX from the binary; RECAP_NVTX_SCOPE then costs two empty calls.
 * The functions stay defined so that callers and librecap.so's exports do not change.
 */
#include "include/recap.h"

#ifndef RECAP_NO_NVTX

#include <nvtx3/nvToolsExt.h>
#include <pthread.h>

static pthread_once_t domain_once = PTHREAD_ONCE_INIT;
/* NULL when no tool is attached, which the domain calls accept. Written once under
 * domain_once and only read afterwards. */
static nvtxDomainHandle_t domain;

static void domain_create(void) {
  domain = nvtxDomainCreateA("recap");
}

static nvtxDomainHandle_t recap_domain(void) {
  pthread_once(&domain_once, domain_create);
  return domain;
}

/* A NULL message would reach the tool as a NULL string, which tools dereference. */
static nvtxEventAttributes_t message_attributes(const char *message) {
  nvtxEventAttributes_t attributes = {0};
  attributes.version = NVTX_VERSION;
  attributes.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  attributes.messageType = NVTX_MESSAGE_TYPE_ASCII;
  attributes.message.ascii = message ? message : "";
  return attributes;
}

void recap_nvtx_mark(const char *message) {
  nvtxDomainHandle_t d = recap_domain();
  nvtxEventAttributes_t attributes = message_attributes(message);
  nvtxDomainMarkEx(d, &attributes);
}

void recap_nvtx_range_push(const char *message) {
  nvtxDomainHandle_t d = recap_domain();
  nvtxEventAttributes_t attributes = message_attributes(message);
  nvtxDomainRangePushEx(d, &attributes);
}

void recap_nvtx_range_pop(void) {
  nvtxDomainRangePop(recap_domain());
}

#else /* RECAP_NO_NVTX */

void recap_nvtx_mark(const char *message) {
  (void)message;
}

void recap_nvtx_range_push(const char *message) {
  (void)message;
}

void recap_nvtx_range_pop(void) {}

#endif /* RECAP_NO_NVTX */
