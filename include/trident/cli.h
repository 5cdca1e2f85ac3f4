/* cli: the mains of the one-process subcommands that live in src/cli/ (each
 * parses its flags and calls its library module). Errors are one line and
 * exit 2. */
#ifndef TRIDENT_CLI_H
#define TRIDENT_CLI_H

/* `trident export` and `trident import` (ckpt_interop.h) */
int td_export_main(int argc, char **argv);
int td_import_main(int argc, char **argv);
/* `trident ckpt check DIR` (ckpt.h td_ckpt_check) */
int td_ckpt_main(int argc, char **argv);
/* `trident plan` (planner.h; its output in plan_out.c) */
int td_plan_main(int argc, char **argv);
/* `trident schedule` (schedule.h) */
int td_schedule_main(int argc, char **argv);

#endif
