/* bench/harness/experts-vm-2026-11-30-s12-harness.c — provenance of experts-vm-2026-11-30-s12-spread.md: the
 * throw-away harness (not built by make) that times one packed kernel alone, one core, one token: from DRAM
 * (884 KB matrices, 2048 x 768 as Qwen3-30B-A3B's gate/up, at random places in 2 GB, against the xor read loop
 * over the same kind of matrices before and after: "frac") or in L2 (argument 3 "l2": the same matrix again).
 * Build against a build directory's library:
 *   gcc -O2 -std=gnu11 -I. -Ibuild bench/harness/experts-vm-2026-11-30-s12-harness.c build/core/libguild-core.a \
 *       -lpthread -lnuma -lm -o kh
 *   ./kh q4_K|iq4_xs|q5_K|q6_K [rows per call (768)] [l2] [tokens (1)]
 * Variants were built by -D overrides of the kernel's constants in a worktree (see the .md). */
#define _GNU_SOURCE
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include "core/kern/kern.h"
#include "core/kern/pack.h"
#include "core/quant/blocks.h"
#include "core/quant/types.h"
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
__attribute__((target("avx512f"),noinline)) static uint64_t k_xor(const char *c, size_t n){ __m512i a=_mm512_setzero_si512(),b=a,d=a,e=a;
 for(size_t i=0;i+256<=n;i+=256){a=_mm512_xor_si512(a,_mm512_load_si512(c+i));b=_mm512_xor_si512(b,_mm512_load_si512(c+i+64));d=_mm512_xor_si512(d,_mm512_load_si512(c+i+128));e=_mm512_xor_si512(e,_mm512_load_si512(c+i+192));}
 a=_mm512_xor_si512(_mm512_xor_si512(a,b),_mm512_xor_si512(d,e)); return _mm512_reduce_add_epi64(a);}
int main(int argc, char **argv){
 guild_type_t ty = !strcmp(argv[1],"iq4_xs") ? GUILD_TYPE_IQ4_XS : !strcmp(argv[1],"q5_K") ? GUILD_TYPE_Q5_K : !strcmp(argv[1],"q6_K") ? GUILD_TYPE_Q6_K : GUILD_TYPE_Q4_K;
 const int64_t K=2048, R=768; const size_t bb = quant_type_info(ty)->block_bytes; const size_t rb=bb*K/256, seg=rb*R;
 char *plain=malloc(seg), *packed=aligned_alloc(64,seg);
 for(size_t i=0;i<seg;i++) plain[i]=rand();
 for(int64_t r=0;r<R;r++) for(int b=0;b<K/256;b++){ char *blk=plain+r*rb+b*bb; uint16_t h=0x2000+(rand()&0xff); if(ty==GUILD_TYPE_Q6_K) memcpy(blk+bb-2,&h,2); else { memcpy(blk,&h,2); if(ty!=GUILD_TYPE_IQ4_XS) memcpy(blk+2,&h,2);} }
 guild_err_t err; if(kern_pack(ty,K,R,plain,rb,packed,&err)){printf("pack fail\n");return 1;}
 size_t total=(size_t)2<<30; size_t nseg=total/seg; char *mem=mmap(NULL,total,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0); madvise(mem,total,MADV_HUGEPAGE);
 for(size_t s=0;s<nseg;s++) memcpy(mem+s*seg,packed,seg);
 float x[2048]; for(int i=0;i<2048;i++) x[i]=(rand()%2000-1000)/500.0f;
 static char act[16][2048/256*sizeof(quant_block_q8_K)]; for(int t=0;t<16;t++) kern_quantize(GUILD_TYPE_Q8_K,x,act[t],K);
 static float out[16*768]; uint64_t s=0;
 int grp = argc>2 ? atoi(argv[2]) : 768; /* rows per call */
 int l2 = argc>3 && !strcmp(argv[3],"l2"); int ntok = argc>4 ? atoi(argv[4]) : 1; if (l2) nseg = 1;
 for(int r=0;r<5;r++){ double t0=now(),B=0; for(int it=0;it<500;it++){ size_t o=((size_t)rand()%nseg)*seg; s+=k_xor(mem+o,seg); B+=seg;} double px=B/(now()-t0)/1e9;
  t0=now();B=0; for(int it=0;it<500;it++){ size_t o=((size_t)rand()%nseg)*seg; for(int r0=0;r0<R;r0+=grp) kern_matmul_packed(ty,K,grp,ntok,mem+o+(size_t)r0*rb,rb,act,sizeof act[0],out+r0,R); B+=seg*(l2?1:1); s+=out[5]!=0;} double pk=B/(now()-t0)/1e9;
  t0=now();B=0; for(int it=0;it<500;it++){ size_t o=((size_t)rand()%nseg)*seg; s+=k_xor(mem+o,seg); B+=seg;} double px2=B/(now()-t0)/1e9;
  printf("xor %.2f kern %.2f xor %.2f  frac %.3f\n",px,pk,px2,2*pk/(px+px2)); }
 printf("%llu\n",(unsigned long long)s%7); return 0; }
