/* What a 4 KiB copy out of a /dev/shm mapping costs on this machine (docs/DESIGN-NOTES.md,
 * "After the fourth session's merges"): 4 KiB blocks of a 64 MiB pool-like file copied into a
 * buffer, best of 3 passes, after three kinds of fill (the ways LynxFS writes data) and for
 * destinations at several page offsets. Build and run:
 *   gcc -O2 scripts/readcopy.c -o target/readcopy && target/readcopy
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
static void rd(const char*what,const char*s,size_t n,char*b){double best=0;
 for(int r=0;r<3;r++){double t=now();for(size_t o=0;o<n;o+=4096){memcpy(b,s+o,4096);__asm__ volatile(""::"r"(b):"memory");}
  double gb=n/(now()-t)/1e9;if(gb>best)best=gb;}
 printf("%-44s %5.1f GB/s\n",what,best);}
__attribute__((target("avx"))) static void ntfill(char*p,size_t n){__m256i v=_mm256_set1_epi8(0x5a);for(size_t o=0;o<n;o+=32)_mm256_stream_si256((__m256i*)(p+o),v);_mm_sfence();}
__attribute__((target("clwb"))) static void clwbfill(char*p,size_t n){for(size_t o=0;o<n;o+=64){memset(p+o,0x33,64);_mm_clwb(p+o);}_mm_sfence();}
int main(){size_t F=64<<20;char path[]="/dev/shm/readcopy-XXXXXX";int fd=mkstemp(path);if(fd<0){perror(path);return 1;}ftruncate(fd,F);
 char*p=mmap(0,F,PROT_READ|PROT_WRITE,MAP_SHARED,fd,0);char*buf=aligned_alloc(4096,1<<21);memset(buf,1,1<<21);
 char what[64];
 ntfill(p,F);rd("non-temporal fill, destination offset 16",p,F,buf+16);
 clwbfill(p,F);rd("cached stores + clwb fill, destination offset 16",p,F,buf+16);
 memset(p,0xa5,F);int offs[]={0,16,64,2048,4080};
 for(int i=0;i<5;i++){snprintf(what,sizeof what,"cached fill, destination offset %d",offs[i]);rd(what,p,F,buf+offs[i]);}
 unlink(path);}
