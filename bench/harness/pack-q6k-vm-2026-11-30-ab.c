/* A/B of the plain and packed kernels of one type (q4_K, q6_K, iq4_xs, q5_K), after /tmp/mb/ab.c (the lead's):
 * random 768 x 2048 matrices (n = 2048) picked at random from a bank of GB gigabytes (from DRAM) or one matrix
 * (GB = 0: in L2), NTH threads, NTOK tokens, STEPS x 12 calls per thread per mode; modes alternate within a
 * round: plain, packed, and an xor read of the same bytes (the memory probe). GB/s of weights.
 * usage: ab TYPE GB NTH [NTOK [STEPS [ROUNDS]]], NTOK <= 8 (the activations and outputs are sized for 8) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>
#include <sys/mman.h>
#include <immintrin.h>
#include "core/kern/kern.h"
#include "core/kern/pack.h"
#include "core/quant/blocks.h"
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static unsigned long rdx(const unsigned char*c,size_t n){ __m512i a=_mm512_setzero_si512(),b=a,d=a,e=a; for(size_t i=0;i+256<=n;i+=256){a=_mm512_xor_si512(a,_mm512_loadu_si512(c+i));b=_mm512_xor_si512(b,_mm512_loadu_si512(c+i+64));d=_mm512_xor_si512(d,_mm512_loadu_si512(c+i+128));e=_mm512_xor_si512(e,_mm512_loadu_si512(c+i+192));} return _mm512_reduce_add_epi64(_mm512_xor_si512(_mm512_xor_si512(a,b),_mm512_xor_si512(d,e))); }
static unsigned char *bank, *pbank; static size_t nmat, matb, rb; static const void *act; static int MODE, NTOK; static long STEPS; static int64_t N, ROWS; static guild_type_t TY;
static void *chunks(void *x){ long t=(long)x; unsigned r=777+t*13; unsigned long s=0; float *out=malloc(8*4096*4);
  for(long k=0;k<STEPS;k++) for(int j=0;j<12;j++){ r=r*1103515245+12345; size_t c=nmat==1?0:(r>>8)%nmat;
    if(MODE==0) kern_matmul(TY,N,ROWS,NTOK,bank+c*matb,rb,act,N/256*292,out,ROWS);
    else if(MODE==1) kern_matmul_packed(TY,N,ROWS,NTOK,pbank+c*matb,rb,act,N/256*292,out,ROWS);
    else s+=rdx(bank+c*matb,matb); }
  free(out); return (void*)s; }
int main(int argc,char**argv){
  if(argc<4){ fprintf(stderr,"usage: ab TYPE GB NTH [NTOK [STEPS [ROUNDS]]]\n"); return 2; }
  TY = !strcmp(argv[1],"iq4_xs") ? GUILD_TYPE_IQ4_XS : !strcmp(argv[1],"q6_K") ? GUILD_TYPE_Q6_K : !strcmp(argv[1],"q5_K") ? GUILD_TYPE_Q5_K : GUILD_TYPE_Q4_K;
  size_t BUF=(size_t)(atof(argv[2])*(1<<30)); int nth=atoi(argv[3]); NTOK=argc>4?atoi(argv[4]):1; STEPS=argc>5?atol(argv[5]):60; int rounds=argc>6?atoi(argv[6]):4;
  const size_t bb=quant_type_info(TY)->block_bytes;
  N=2048; ROWS=768; rb=N/256*bb; matb=ROWS*rb; nmat=BUF/matb; if(!nmat) nmat=1; BUF=nmat*matb;
  bank=mmap(0,BUF,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0); madvise(bank,BUF,MADV_HUGEPAGE);
  pbank=mmap(0,BUF,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0); madvise(pbank,BUF,MADV_HUGEPAGE);
  for(size_t i=0;i+4<=BUF;i+=4) *(unsigned*)(bank+i)=rand();
  size_t doff = TY==GUILD_TYPE_Q6_K ? offsetof(quant_block_q6_K,d) : 0;
  for(size_t i=0;i<BUF/bb;i++){ unsigned short*h=(unsigned short*)(bank+i*bb+doff); h[0]=0x2c00; if(TY==GUILD_TYPE_Q4_K||TY==GUILD_TYPE_Q5_K) h[1]=0x2400; }
  guild_err_t err; for(size_t m=0;m<nmat;m++) if(kern_pack(TY,N,ROWS,bank+m*matb,rb,pbank+m*matb,&err)) { printf("%s\n",err.msg); return 1; }
  float*x=malloc(N*4*8); for(int i=0;i<N*8;i++) x[i]=(rand()%2000-1000)/1000.0f;
  quant_block_q8_K*a=aligned_alloc(64,8*8*sizeof*a); for(int t=0;t<8;t++) kern_quantize(GUILD_TYPE_Q8_K,x+t*N,a+t*8,N); act=a;
  float *o1=malloc(8*ROWS*4), *o2=malloc(8*ROWS*4); kern_matmul(TY,N,ROWS,NTOK,bank,rb,a,N/256*292,o1,ROWS); kern_matmul_packed(TY,N,ROWS,NTOK,pbank,rb,a,N/256*292,o2,ROWS);
  printf("%s ntok=%d bank=%.3f GB (%zu matrices of %zu B) threads=%d level=%s native=%d bits %s\n", argv[1], NTOK, BUF/1e9, nmat, matb, nth, kern_level_name(kern_level()), kern_pack_native(TY), memcmp(o1,o2,NTOK*ROWS*4)?"DIFFER":"same");
  for(int round=0;round<rounds;round++){ double g[3]; for(MODE=0;MODE<3;MODE++){ pthread_t th[64]; double t0=now(); for(long i=0;i<nth;i++) pthread_create(&th[i],0,chunks,(void*)i); for(int i=0;i<nth;i++) pthread_join(th[i],0); g[MODE]=(double)nth*STEPS*12*matb/(now()-t0)/1e9; }
    printf("plain %.2f  packed %.2f  xorprobe %.2f GB/s | plain/probe %.3f packed/probe %.3f packed/plain %.2f\n", g[0], g[1], g[2], g[0]/g[2], g[1]/g[2], g[1]/g[0]); fflush(stdout); }
  return 0;
}
