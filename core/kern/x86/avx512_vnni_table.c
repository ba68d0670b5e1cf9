/* The avx512_vnni level's table: which kernels of this ISA exist (core/kern/table.h). */
#include "core/kern/table.h"

void kern_fill_avx512_vnni(kern_table_t *t)
{
    (void)t;
}
