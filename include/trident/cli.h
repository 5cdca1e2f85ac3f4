/* cli: the mains of the subcommands that live in src/cli/ (each parses
 * its flags and calls its library module; all but `bench comm` run on one
 * process). Errors are one line and exit 2. */
#ifndef TRIDENT_CLI_H
#define TRIDENT_CLI_H

#ifdef __cplusplus
extern "C" {
#endif

/* `trident export` and `trident import` (ckpt_interop.h) */
int td_export_main(int argc, char **argv);
int td_import_main(int argc, char **argv);
/* `trident ckpt check DIR` (ckpt.h td_ckpt_check) */
int td_ckpt_main(int argc, char **argv);
/* `trident plan` (planner.h; its output in plan_out.c) */
int td_plan_main(int argc, char **argv);
/* `trident schedule` (schedule.h) */
int td_schedule_main(int argc, char **argv);
/* `trident tokenize --tokenizer gpt2 IN... --out DIR`: llm.c token shards
 * and their data.json */
int td_tokenize_main(int argc, char **argv);
/* `trident sample --ckpt DIR`: text from a checkpoint */
int td_sample_main(int argc, char **argv);
/* `trident bench comm` under mpirun (comm.h td_comm_bench_run); it
 * initializes MPI when the caller has not */
int td_comm_bench_main(int argc, char **argv);

#ifdef __cplusplus
}
#endif

#endif
