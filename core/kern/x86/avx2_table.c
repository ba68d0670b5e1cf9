/* The avx2 level's table: which kernels of this ISA exist (core/kern/table.h). */
#include "core/kern/table.h"

void kern_fill_avx2(kern_table_t *t)
{
    (void)t;
}
