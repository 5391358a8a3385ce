/* The persistence layer's copy threshold (crates/lynxfs/src/pmem/flush.rs, STREAM_MIN):
 * memcpy + clwb of every line + sfence against AVX non-temporal stores + sfence, per copy
 * size, into a 64 MiB file in /dev/shm (best of 7 passes). Build and run:
 *   gcc -O2 scripts/ntcopy.c -o target/ntcopy && target/ntcopy
 * (a file of its own in /dev/shm, mkstemp: never a name another user made first) */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <fcntl.h>
#include <unistd.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
__attribute__((target("clwb"))) static void cached(char*d,const char*s,size_t n){memcpy(d,s,n);for(size_t i=0;i<n;i+=64)_mm_clwb(d+i);_mm_sfence();}
__attribute__((target("avx"))) static void nt(char*d,const char*s,size_t n){for(size_t i=0;i<n;i+=32)_mm256_stream_si256((__m256i*)(d+i),_mm256_loadu_si256((const __m256i*)(s+i)));_mm_sfence();}
int main(){size_t F=64<<20;char path[]="/dev/shm/nt15-XXXXXX";int fd=mkstemp(path);if(fd<0){perror(path);return 1;}ftruncate(fd,F);char*p=mmap(0,F,PROT_READ|PROT_WRITE,MAP_SHARED,fd,0);memset(p,1,F);
char*src=aligned_alloc(64,1<<20);memset(src,7,1<<20);
size_t sz[]={64,256,1024,4096,65536,1<<20};
for(int k=0;k<6;k++){size_t n=sz[k];double best[2]={1e9,1e9};
 for(int r=0;r<7;r++)for(int m=0;m<2;m++){double t=now();for(size_t o=0;o+n<=F;o+=n){if(m)nt(p+o,src,n);else cached(p+o,src,n);}t=now()-t;if(t<best[m])best[m]=t;}
 printf("%7zu B: cached+clwb %6.0f MB/s  nt %6.0f MB/s\n",n,F/best[0]/1e6,F/best[1]/1e6);}
unlink(path);}
