/* tools/mkmodel/cli.h — guild-mkmodel's command line. */
#ifndef GUILD_MKMODEL_CLI_H
#define GUILD_MKMODEL_CLI_H

#include <stdbool.h>
#include <stdio.h>

#include "core/util/err.h"
#include "tools/mkmodel/config.h"

/* Fills cfg from argv: the --shape preset first (default "demo"), then every other flag in order, whatever its
 * position, then derived defaults (mixtral/olmoe: --ff = --expert-ff; qwen2moe: --shared-ff = --ff). Does not
 * validate the result (mkmodel_config_validate does). Returns 0 to run, 1 when --help was given, -1 with a
 * message naming the flag on a syntax error (unknown flag, missing or malformed value). *quiet is set by -q. */
int mkmodel_cli_parse(int argc, char **argv, mkmodel_config_t *cfg, bool *quiet, guild_err_t *err);

/* The --help text. */
void mkmodel_cli_help(FILE *out);

#endif
