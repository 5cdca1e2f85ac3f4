/* One job per --out directory (src/ckpt/out_lock.c).
 *
 * World rank 0 of a training job takes DIR/.trident-lock at start-up, before
 * anything is written into DIR, and holds it to the end of the run: an
 * open-file-description lock (fcntl F_OFD_SETLK, a write lock on the whole
 * file; NFS v4 and local file systems honour it), so the kernel drops it
 * when the holder dies however it dies. The file records the holder: its
 * host, pid and job id. A second live job is refused with one line naming
 * that holder; a record left by a dead job (the lock free, the record still
 * there) is taken over with a note. A run that ends, cleanly or by an error
 * exit, empties the record and keeps the file (removing it would let a
 * third job lock a new file while a second holds the old one); only a
 * refused job's directory that it made itself and wrote nothing into goes,
 * its lock file unlinked while still held (td_out_lock_abandon).
 *
 * The job id names this job's temporary save directories
 * (DIR/.step-NNNNNNNN.tmp.JOBID, DIR/.latest.tmp.JOBID), so that cleaning
 * up never touches another job's: SLURM_JOB_ID when set, else
 * HOST-PID-STARTTIME of this process (its start in clock ticks after boot).
 *
 * Not thread-safe; one lock per process at a time. Nothing here is
 * collective. */
#ifndef TRIDENT_OUT_LOCK_H
#define TRIDENT_OUT_LOCK_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TD_OUT_LOCK_NAME ".trident-lock"

/* This process's job id (file-name safe: [A-Za-z0-9._-], at most 63 bytes). */
const char *td_job_id(void);

/* Rank 0, before anything is written into the directory out (which must
 * exist): takes the lock and writes the record; 0, or -1 with one line in
 * why (another job holds it: its host, pid and job id; or what failed).
 * created: this job has just made out. Registers a fail cleanup,
 * td_out_lock_abandon, for an error exit. */
int td_out_lock_take(const char *out, int created, char *why, size_t cap);
/* Whether this process holds the lock of directory out (the same path). */
int td_out_lock_held(const char *out);
/* Empties the record and drops the lock (no-op when none is held). */
void td_out_lock_release(void);
/* An error exit's release: when this job made the directory and nothing
 * but the lock file is in it (no save began), the lock file is unlinked
 * while still held, then the directory removed, so a refused run leaves
 * nothing behind; otherwise td_out_lock_release. */
void td_out_lock_abandon(void);

/* Whether out holds checkpoints (step directories or latest); desc says
 * how many and where latest points. */
int td_out_existing(const char *out, char *desc, size_t cap);
/* --overwrite, after every start-up check passed and before the first
 * save: removes out's step directories and latest (rank 0, lock held).
 * Returns the number of step directories removed. */
int td_out_clear(const char *out);

#ifdef __cplusplus
}
#endif

#endif
