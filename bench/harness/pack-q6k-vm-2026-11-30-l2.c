/* In-L2 A/B, one thread: one 768 x 2048 matrix per type (plain and packed copies), rounds of K calls of each
 * variant (plain, packed, packed, plain, each after an untimed warm-up call), timed by the thread's CPU time (a preempted thread does not count); medians over the
 * rounds of GB/s of weights and of the per-round ratio packed/plain. usage: l2 NTOK ROUNDS TYPE... */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "core/kern/kern.h"
#include "core/kern/pack.h"
#include "core/quant/blocks.h"
static double cpu(void){struct timespec t;clock_gettime(CLOCK_THREAD_CPUTIME_ID,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static int cmpd(const void*a,const void*b){double x=*(const double*)a,y=*(const double*)b;return x<y?-1:x>y;}
static double med(double*v,int n){qsort(v,n,sizeof*v,cmpd);return v[n/2];}
int main(int argc,char**argv){
  int ntok=atoi(argv[1]), R=atoi(argv[2]); const int K=6; const int64_t N=2048, ROWS=768;
  float*x=malloc(N*4*16); for(int i=0;i<N*16;i++) x[i]=(rand()%2000-1000)/1000.0f;
  quant_block_q8_K*a=aligned_alloc(64,16*8*sizeof*a); for(int t=0;t<16;t++) kern_quantize(GUILD_TYPE_Q8_K,x+t*N,a+t*8,N);
  float*out=malloc(16*ROWS*4); /* up to 16 tokens */
  for(int ai=3;ai<argc;ai++){
    guild_type_t TY=!strcmp(argv[ai],"iq4_xs")?GUILD_TYPE_IQ4_XS:!strcmp(argv[ai],"q6_K")?GUILD_TYPE_Q6_K:!strcmp(argv[ai],"q5_K")?GUILD_TYPE_Q5_K:GUILD_TYPE_Q4_K;
    size_t bb=quant_type_info(TY)->block_bytes, rb=N/256*bb, matb=ROWS*rb;
    unsigned char*w=aligned_alloc(64,matb),*p=aligned_alloc(64,matb); for(size_t i=0;i<matb;i++) w[i]=rand();
    size_t doff=TY==GUILD_TYPE_Q6_K?offsetof(quant_block_q6_K,d):0;
    for(size_t i=0;i<matb/bb;i++){unsigned short*h=(unsigned short*)(w+i*bb+doff);h[0]=0x2c00;if(TY==GUILD_TYPE_Q4_K||TY==GUILD_TYPE_Q5_K)h[1]=0x2400;}
    guild_err_t err; if(kern_pack(TY,N,ROWS,w,rb,p,&err)){printf("%s\n",err.msg);return 1;}
    double gp[R],gk[R],rt[R];
    for(int r=0;r<R;r++){ double sp=0,sk=0,t=0;
      /* plain, packed, packed, plain; each phase first makes one untimed call, which brings its matrix back
       * into L2 (the plain and packed copies together exceed it) */
      for(int ph=0;ph<4;ph++){ int pk=ph==1||ph==2;
        for(int k=-1;k<K;k++){ if(k==0) t=cpu(); if(pk) kern_matmul_packed(TY,N,ROWS,ntok,p,rb,a,N/256*292,out,ROWS); else kern_matmul(TY,N,ROWS,ntok,w,rb,a,N/256*292,out,ROWS); }
        t=cpu()-t; if(pk) sk+=t; else sp+=t; }
      gp[r]=2*K*matb/sp/1e9; gk[r]=2*K*matb/sk/1e9; rt[r]=gk[r]/gp[r]; }
    printf("%-6s ntok=%d native=%d  plain %.1f  packed %.1f GB/s (medians of %d rounds)  packed/plain %.2f\n",argv[ai],ntok,kern_pack_native(TY),med(gp,R),med(gk,R),R,med(rt,R));
    free(w);free(p); }
  return 0; }
