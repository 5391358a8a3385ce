/* Threads opening and reading small files, or listing small directories, for a time
 * (docs/DESIGN-NOTES.md, "The preload's per-open and per-opendir cost"): 200
 * directories of 5 files of 16 KiB under DIR (`setup`); prints ops/s and the mean
 * time of each thread's first operation.
 *
 *   cc -O2 -pthread -o webls scripts/webls.c
 *   ./webls setup 1 DIR 0; lynxfs run -- ./webls web|ls THREADS DIR SECONDS */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <stdatomic.h>
static int mode, dirfd_, nthreads; static const char *root; static double secs;
static atomic_long total; static atomic_long firstns; static atomic_int stop;
#define NDIRS 200
#define PER 5
static void *run(void *arg) {
    unsigned long long r = (unsigned long)arg * 7919 + 1; char buf[16384]; char p[512]; long ops = 0;
    struct timespec a,b; clock_gettime(CLOCK_MONOTONIC,&a);
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        int d = (r >> 33) % NDIRS, f = (r >> 20) % PER;
        if (mode == 0) {
            snprintf(p, sizeof p, "d%d/f%d", d, f);
            int fd = openat(dirfd_, p, O_RDONLY | O_CLOEXEC);
            if (fd < 0) { perror(p); exit(1); }
            off_t off = 0; ssize_t n;
            while ((n = pread(fd, buf, sizeof buf, off)) > 0) off += n;
            close(fd);
        } else {
            snprintf(p, sizeof p, "%s/d%d", root, d);
            DIR *dp = opendir(p); if (!dp) { perror(p); exit(1); }
            int c = 0; while (readdir(dp)) c++;
            closedir(dp);
            if (c != PER + 2) { fprintf(stderr, "count %d\n", c); exit(1); }
        }
        if (ops==0){clock_gettime(CLOCK_MONOTONIC,&b); atomic_fetch_add(&firstns,(b.tv_sec-a.tv_sec)*1000000000L+b.tv_nsec-a.tv_nsec);}
        ops++;
    }
    atomic_fetch_add(&total, ops);
    return 0;
}
int main(int argc, char **argv) {
    if (argc < 5) { fprintf(stderr, "usage: webls web|ls|setup THREADS DIR SECS\n"); return 2; }
    root = argv[3]; nthreads = atoi(argv[2]); secs = atof(argv[4]);
    if (!strcmp(argv[1], "setup")) {
        char p[512], buf[4096]; memset(buf, 'x', sizeof buf);
        for (int d = 0; d < NDIRS; d++) {
            snprintf(p, sizeof p, "%s/d%d", root, d); mkdir(p, 0755);
            for (int f = 0; f < PER; f++) {
                snprintf(p, sizeof p, "%s/d%d/f%d", root, d, f);
                int fd = open(p, O_CREAT | O_WRONLY | O_TRUNC, 0644);
                for (int k = 0; k < 4; k++) write(fd, buf, sizeof buf);
                close(fd);
            }
        }
        return 0;
    }
    mode = !strcmp(argv[1], "ls");
    dirfd_ = open(root, O_RDONLY | O_DIRECTORY);
    pthread_t t[256];
    for (long i = 0; i < nthreads; i++) pthread_create(&t[i], 0, run, (void *)i);
    struct timespec ts = { (time_t)secs, (long)((secs - (time_t)secs) * 1e9) };
    nanosleep(&ts, 0); atomic_store(&stop, 1);
    for (int i = 0; i < nthreads; i++) pthread_join(t[i], 0);
    printf("%s %d threads: %.0f ops/s, first op %.1f us avg\n", argv[1], nthreads, total / secs, firstns/1e3/nthreads);
    return 0;
}
