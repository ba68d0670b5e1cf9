#include "core/kern/cpu.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

/* XCR0 state components (Intel SDM vol. 1, 13.1). */
#define XCR0_SSE (1u << 1)
#define XCR0_AVX (1u << 2)
#define XCR0_OPMASK (1u << 5)
#define XCR0_ZMM_HI256 (1u << 6)
#define XCR0_HI16_ZMM (1u << 7)
#define XCR0_TILECFG (1u << 17)
#define XCR0_TILEDATA (1u << 18)

/* Linux asm/prctl.h; spelled out so the build does not depend on kernel headers new enough to have them. */
#define KERN_ARCH_GET_XCOMP_PERM 0x1022
#define KERN_ARCH_REQ_XCOMP_PERM 0x1023
#define KERN_XFEATURE_XTILEDATA 18

static uint64_t read_xcr0(void)
{
    uint32_t lo, hi;
    /* xgetbv with ecx = 0, written as bytes so that no -mxsave is needed to assemble it */
    __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

/* Asks Linux for the right to use AMX tile data in this process (needed once, before the first tile load;
 * without it the first AMX instruction kills the process with SIGILL). */
static bool request_amx_permission(void)
{
#if defined(__linux__)
    unsigned long bitmask = 0;
    if (syscall(SYS_arch_prctl, KERN_ARCH_REQ_XCOMP_PERM, KERN_XFEATURE_XTILEDATA) != 0)
        return false;
    if (syscall(SYS_arch_prctl, KERN_ARCH_GET_XCOMP_PERM, &bitmask) != 0)
        return false;
    return (bitmask & (1ul << KERN_XFEATURE_XTILEDATA)) != 0;
#else
    return false;
#endif
}

static void detect(kern_cpu_t *c)
{
    unsigned a, b, cx, d;
    unsigned max_leaf = __get_cpuid_max(0, NULL);
    unsigned max_ext = __get_cpuid_max(0x80000000u, NULL);

    if (max_ext >= 0x80000004u) {
        uint32_t words[12];
        for (unsigned i = 0; i < 3; i++)
            __cpuid(0x80000002u + i, words[4 * i], words[4 * i + 1], words[4 * i + 2], words[4 * i + 3]);
        memcpy(c->model, words, 48);
        c->model[48] = '\0';
        /* brand strings are right-aligned with leading blanks on some parts */
        char *p = c->model;
        while (*p == ' ')
            p++;
        memmove(c->model, p, strlen(p) + 1);
    }
    if (max_leaf < 1)
        return;
    __cpuid(1, a, b, cx, d);
    bool osxsave = (cx >> 27) & 1, avx = (cx >> 28) & 1;
    bool fma = (cx >> 12) & 1, f16c = (cx >> 29) & 1;
    if (!osxsave || !avx)
        return;
    uint64_t xcr0 = read_xcr0();
    bool os_avx = (xcr0 & (XCR0_SSE | XCR0_AVX)) == (XCR0_SSE | XCR0_AVX);
    bool os_avx512 = os_avx && (xcr0 & (XCR0_OPMASK | XCR0_ZMM_HI256 | XCR0_HI16_ZMM)) ==
                                   (XCR0_OPMASK | XCR0_ZMM_HI256 | XCR0_HI16_ZMM);
    bool os_amx = (xcr0 & (XCR0_TILECFG | XCR0_TILEDATA)) == (XCR0_TILECFG | XCR0_TILEDATA);
    if (!os_avx || max_leaf < 7)
        return;
    __cpuid_count(7, 0, a, b, cx, d);
    unsigned sub7_max = a;
    c->avx2 = (b >> 5) & 1;
    c->bmi2 = (b >> 8) & 1;
    c->fma = fma;
    c->f16c = f16c;
    if (os_avx512) {
        c->avx512f = (b >> 16) & 1;
        c->avx512dq = (b >> 17) & 1;
        c->avx512bw = (b >> 30) & 1;
        c->avx512vl = (b >> 31) & 1;
        c->avx512vnni = (cx >> 11) & 1;
    }
    bool amx_bf16 = (d >> 22) & 1, amx_tile = (d >> 24) & 1, amx_int8 = (d >> 25) & 1;
    if (sub7_max >= 1) {
        __cpuid_count(7, 1, a, b, cx, d);
        c->avx_vnni = (a >> 4) & 1;
        c->avx512bf16 = os_avx512 && ((a >> 5) & 1);
    }
    if (amx_tile && os_amx && request_amx_permission()) {
        c->amx_tile = true;
        c->amx_int8 = amx_int8;
        c->amx_bf16 = amx_bf16;
    }
}
#else
static void detect(kern_cpu_t *c)
{
    (void)c;
}
#endif

static kern_cpu_t detected;
static pthread_once_t detected_once = PTHREAD_ONCE_INIT;

static void detect_once(void)
{
    memset(&detected, 0, sizeof detected);
    snprintf(detected.model, sizeof detected.model, "unknown");
    detect(&detected);
}

const kern_cpu_t *kern_cpu(void)
{
    pthread_once(&detected_once, detect_once);
    return &detected;
}

void kern_cpu_describe(const kern_cpu_t *cpu, char *buf, int size)
{
    static const struct {
        const char *name;
        size_t offset;
    } flags[] = {
        {"avx2", offsetof(kern_cpu_t, avx2)},           {"fma", offsetof(kern_cpu_t, fma)},
        {"f16c", offsetof(kern_cpu_t, f16c)},           {"bmi2", offsetof(kern_cpu_t, bmi2)},
        {"avx512f", offsetof(kern_cpu_t, avx512f)},
        {"avx512bw", offsetof(kern_cpu_t, avx512bw)},   {"avx512vl", offsetof(kern_cpu_t, avx512vl)},
        {"avx512dq", offsetof(kern_cpu_t, avx512dq)},   {"avx512vnni", offsetof(kern_cpu_t, avx512vnni)},
        {"avx512bf16", offsetof(kern_cpu_t, avx512bf16)}, {"avx-vnni", offsetof(kern_cpu_t, avx_vnni)},
        {"amx-tile", offsetof(kern_cpu_t, amx_tile)},   {"amx-int8", offsetof(kern_cpu_t, amx_int8)},
        {"amx-bf16", offsetof(kern_cpu_t, amx_bf16)},
    };
    int used = 0;
    if (size <= 0)
        return;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        if (!*(const bool *)((const char *)cpu + flags[i].offset))
            continue;
        int n = snprintf(buf + used, (size_t)(size - used), "%s%s", used ? " " : "", flags[i].name);
        if (n < 0 || n >= size - used)
            break;
        used += n;
    }
    if (!used)
        snprintf(buf, (size_t)size, "(no SIMD features)");
}
