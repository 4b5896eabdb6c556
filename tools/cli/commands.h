/* commands.h — the subcommands of the phi4mm binary. Each lives in its own cmd_*.c file. */
#ifndef PM_COMMANDS_H
#define PM_COMMANDS_H

/* Each returns the process exit status (0 success). argv[0] is the subcommand name. */
int pm_cmd_generate(int argc, char **argv);
int pm_cmd_transcribe(int argc, char **argv);
int pm_cmd_chat(int argc, char **argv);
int pm_cmd_info(int argc, char **argv);
int pm_cmd_tokenize(int argc, char **argv);
int pm_cmd_synth(int argc, char **argv);
int pm_cmd_parity(int argc, char **argv);
int pm_cmd_tokcheck(int argc, char **argv);
int pm_cmd_serve(int argc, char **argv);
int pm_cmd_run_batch(int argc, char **argv);
int pm_cmd_bench(int argc, char **argv);
int pm_cmd_mkmedia(int argc, char **argv);
int pm_cmd_q8check(int argc, char **argv);
int pm_cmd_perplexity(int argc, char **argv);

#endif
