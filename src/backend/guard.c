/* The guard device (--device guard): placeholder until its buffers land;
 * td_backend_use refuses it meanwhile. */
#include "trident/backend.h"

const td_backend *td_backend_guard(void) {
    td_fail("--device guard: not built yet");
}
