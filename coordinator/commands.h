/* coordinator/commands.h — the subcommands of `guild`. Each lives in its own cmd_<name>.c and is listed in
 * main.c's table. A command returns the process exit status (0 success, 1 runtime failure, 2 usage error);
 * it prints its own errors as "guild <cmd>: <message>". */
#ifndef GUILD_COORDINATOR_COMMANDS_H
#define GUILD_COORDINATOR_COMMANDS_H

typedef int (*guild_cmd_fn)(int argc, char **argv);

typedef struct guild_cmd {
    const char *name;
    guild_cmd_fn fn;
    const char *summary; /* one line for `guild --help` */
} guild_cmd_t;

/* Subcommands; argv[0] is the subcommand name. */
int cmd_inspect(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_optimize(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_keygen(int argc, char **argv);

#endif
