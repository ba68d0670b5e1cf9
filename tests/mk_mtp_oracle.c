/* tests/mk_mtp_oracle FILE [TOKEN]: FILE (guild-mkmodel --type F32 --nextn 1) made its MTP layer's oracle in place
 * (tests/mtp_oracle.h), wrong where the next token is TOKEN (default 0), for the shell tests of --spec mtp that need
 * accepted drafts. */
#include <stdio.h>
#include <stdlib.h>

#include "tests/mtp_oracle.h"

int main(int argc, char **argv)
{
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: mk_mtp_oracle FILE [TOKEN]\n");
        return 2;
    }
    guild_err_t err = {{0}};
    if (mtp_oracle_make(argv[1], argc == 3 ? atoi(argv[2]) : 0, &err) < 0) {
        fprintf(stderr, "mk_mtp_oracle: %s\n", err.msg);
        return 1;
    }
    return 0;
}
