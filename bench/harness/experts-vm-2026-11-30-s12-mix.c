/* bench/harness/experts-vm-2026-11-30-s12-mix.c — provenance of experts-vm-2026-11-30-s12-spread.md: a
 * synthetic read loop (not built by make) with a packed kernel's per-line work (2 ANDs, 2 vpdpbusd against
 * broadcasts per 64 bytes), without / with software prefetch (T1, T0) 4.5 KB ahead spread 4 lines per 256 bytes,
 * or touching loads: one core, 884 KB segments at random places in 2 GB. `gcc -O2 -std=gnu11 mix.c -o mix`. */
#define _GNU_SOURCE
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
#define T __attribute__((target("avx512f,avx512bw,avx512vnni"),noinline))
T static uint64_t k_xor(const char *c, size_t n){ __m512i a=_mm512_setzero_si512(),b=a,d=a,e=a;
 for(size_t i=0;i+256<=n;i+=256){a=_mm512_xor_si512(a,_mm512_load_si512(c+i));b=_mm512_xor_si512(b,_mm512_load_si512(c+i+64));d=_mm512_xor_si512(d,_mm512_load_si512(c+i+128));e=_mm512_xor_si512(e,_mm512_load_si512(c+i+192));}
 a=_mm512_xor_si512(_mm512_xor_si512(a,b),_mm512_xor_si512(d,e)); return _mm512_reduce_add_epi64(a);}
/* kernel-like: per 64B line: and, and, 2 dpbusd against broadcast */
#define BODY(PF) \
 const __m512i m4=_mm512_set1_epi8(15), mf=_mm512_set1_epi8(-16); __m512i l[4],h[4]; for(int k=0;k<4;k++) l[k]=h[k]=_mm512_setzero_si512(); \
 for(size_t i=0;i+256<=n;i+=256){ PF \
   for(int k=0;k<4;k++){ __m512i x=_mm512_load_si512(c+i+64*k); l[k]=_mm512_dpbusd_epi32(l[k],_mm512_and_si512(x,m4),_mm512_set1_epi32(act[(i/64+k)&31])); h[k]=_mm512_dpbusd_epi32(h[k],_mm512_and_si512(x,mf),_mm512_set1_epi32(act[(i/64+k+7)&31]));}} \
 __m512i s=_mm512_add_epi32(_mm512_add_epi32(l[0],l[1]),_mm512_add_epi32(l[2],l[3])); s=_mm512_add_epi32(s,_mm512_add_epi32(_mm512_add_epi32(h[0],h[1]),_mm512_add_epi32(h[2],h[3]))); return _mm512_reduce_add_epi32(s);
static int act[32];
#define DIST 4608
static volatile uint32_t tsink;
T static uint64_t k_dp(const char *c, size_t n){ BODY() }
T static uint64_t k_dp_pf(const char *c, size_t n){ BODY( if(i+DIST<n){_mm_prefetch(c+i+DIST,1);_mm_prefetch(c+i+DIST+64,1);_mm_prefetch(c+i+DIST+128,1);_mm_prefetch(c+i+DIST+192,1);} ) }
T static uint64_t k_dp_pf0(const char *c, size_t n){ BODY( if(i+DIST<n){_mm_prefetch(c+i+DIST,3);_mm_prefetch(c+i+DIST+64,3);_mm_prefetch(c+i+DIST+128,3);_mm_prefetch(c+i+DIST+192,3);} ) }
static volatile uint32_t vsink;
T static uint64_t k_dp_touch(const char *c, size_t n){ BODY( if(i+DIST<n){ const uint32_t *q=(const uint32_t*)(c+i+DIST); tsink=q[0]|q[16]|q[32]|q[48];} ) }

typedef uint64_t (*fn_t)(const char*,size_t);
int main(void){
 size_t total=(size_t)2<<30; char *mem=mmap(NULL,total,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0); madvise(mem,total,MADV_HUGEPAGE); memset(mem,1,total);
 for(int i=0;i<32;i++) act[i]=0x01010101*i;
 const char *names[]={"xor","dp","dp_pf1","dp_pf0","dp_touch"}; fn_t f[]={k_xor,k_dp,k_dp_pf,k_dp_pf0,k_dp_touch};
 size_t seg=884736; uint64_t s=0;
 for(int r=0;r<4;r++){ for(int v=0;v<5;v++){ double t0=now(); double B=0; for(int it=0;it<600;it++){ size_t off=((size_t)rand()%(total/seg-1))*seg; s+=f[v](mem+off,seg); B+=seg;} printf("%-9s %.2f  ",names[v],B/(now()-t0)/1e9);} printf("\n");}
 vsink=s; }
