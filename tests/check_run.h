/* tests/check_run.h — the end of every Check test program's main: run the suite and turn its failures into the
 * program's exit status (automake's test driver reads it). Check's own fork mode (its CK_FORK default) is kept. */
#ifndef GUILD_TESTS_CHECK_RUN_H
#define GUILD_TESTS_CHECK_RUN_H

#include <check.h>
#include <stdlib.h>

/* Runs s (and frees it with its runner): EXIT_SUCCESS when every case passed, else EXIT_FAILURE. */
static inline int check_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif
