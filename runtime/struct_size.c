/* struct_size.c: reading callers' size-prefixed structs (struct_size.h). */
#include "runtime/struct_size.h"

#include <string.h>

#include "runtime/error.h"

/* No options struct comes near this; a larger struct_size is an uninitialized field. */
enum { MAX_STRUCT_SIZE = 4096 };

recap_status recap__struct_read(const void *src, size_t size, void *dst, const char *init) {
  RECAP_CHECK_ARG(src && dst && size >= sizeof(size_t));
  size_t given;
  memcpy(&given, src, sizeof given);
  if (given < sizeof given || given > MAX_STRUCT_SIZE)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "struct_size is %zu (this recap's struct has %zu bytes): start the struct "
                      "from %s, which sets it",
                      given, size, init);
  /* A newer caller's fields that this library lacks are honoured only at their defaults. */
  const unsigned char *bytes = src;
  for (size_t i = size; i < given; i++)
    if (bytes[i] != 0)
      return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                        "the struct of %s sets fields that recap %s does not know (byte %zu of "
                        "%zu; this version's struct has %zu bytes)",
                        init, recap_version(), i, given, size);
  memset(dst, 0, size);
  memcpy(dst, src, given < size ? given : size);
  memcpy(dst, &size, sizeof size);
  return RECAP_OK;
}
