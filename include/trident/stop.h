/* Stop signals (src/base/stop.c): SIGTERM, SIGINT, SIGUSR1 and SIGUSR2 only
 * record that they came; a training run looks at the record where all its
 * ranks agree (start-up points and every step boundary) and ends there,
 * saving what it trained (docs/checkpoint-safety.md). `trident train`
 * installs the handlers in the first statement of main(), before MPI
 * starts, so no window is left where such a signal kills a rank. */
#ifndef TRIDENT_STOP_H
#define TRIDENT_STOP_H

#ifdef __cplusplus
extern "C" {
#endif

/* Installs the handlers (SA_RESTART: interrupted calls go on). */
void td_stop_signals_install(void);
/* The first stop signal received (its number), 0: none yet. */
int td_stop_signal(void);
/* Gives the four signals their default action back (parameter servers,
 * which never reach an agreed stop, and error exits, which MPI_Abort ends
 * with SIGTERM); returns td_stop_signal(). */
int td_stop_signals_default(void);
/* td_stop_signals_default, then a signal already received is raised
 * again (its default action: the process ends as it would have). */
void td_stop_signals_restore(void);

#ifdef __cplusplus
}
#endif

#endif
