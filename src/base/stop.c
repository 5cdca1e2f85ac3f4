/* Stop signals as a record (include/trident/stop.h). */
#include <signal.h>
#include <string.h>

#include "trident/stop.h"

static volatile sig_atomic_t g_stop; /* the first stop signal's number, 0: none */
static const int k_signals[] = {SIGTERM, SIGINT, SIGUSR1, SIGUSR2};
#define N_SIGNALS (int)(sizeof k_signals / sizeof k_signals[0])

static void on_stop(int sig) {
    if (!g_stop) g_stop = sig;
}

void td_stop_signals_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* reads, writes and waits go on; the record is looked at later */
    for (int i = 0; i < N_SIGNALS; i++) sigaction(k_signals[i], &sa, NULL);
}

int td_stop_signal(void) { return g_stop; }

int td_stop_signals_default(void) {
    for (int i = 0; i < N_SIGNALS; i++) signal(k_signals[i], SIG_DFL);
    return g_stop;
}

void td_stop_signals_restore(void) {
    if (td_stop_signals_default()) raise(g_stop);
}
