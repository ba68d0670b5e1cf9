/* core/kern/cpu.h — what this x86-64 CPU (and the OS) let the kernels use.
 *
 * Detected once per process (cpuid + xgetbv); a feature counts only when the OS saves its register state too
 * (XCR0), and for AMX only after Linux granted the permission to use tile data (arch_prctl
 * ARCH_REQ_XCOMP_PERM), which kern_cpu() requests on first use. On a CPU that is not x86-64 every flag is false.
 */
#ifndef GUILD_KERN_CPU_H
#define GUILD_KERN_CPU_H

#include <stdbool.h>

typedef struct kern_cpu {
    char model[49];     /* brand string ("Intel(R) Xeon(R) ..."), "unknown" when the CPU has none */
    bool avx2, fma, f16c, bmi2;
    bool avx512f, avx512bw, avx512vl, avx512dq, avx512vnni, avx512bf16;
    bool avx_vnni;      /* the VEX-encoded 256-bit VNNI of Alder Lake and later */
    bool amx_tile, amx_int8, amx_bf16; /* usable: CPU, OS state and the Linux permission all present */
} kern_cpu_t;

/* The features of the CPU this process runs on, detected on first call (thread-safe); never NULL. */
const kern_cpu_t *kern_cpu(void);

/* One line naming the usable features ("avx2 fma f16c avx512f ... amx-int8"), for logs and result files. */
void kern_cpu_describe(const kern_cpu_t *cpu, char *buf, int size);

#endif
