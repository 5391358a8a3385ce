/* Many threads on one file or one directory (issue 29, waits with more threads than CPUs).
 *
 *   cc -O2 -pthread -o contend scripts/contend.c
 *   ./contend MODE THREADS DIR OPS [PASSES]
 *   lynxfs run --pool POOL --at AT -- ./contend MODE THREADS AT OPS [PASSES]
 *
 * MODE: append (each thread writes OPS times 1 B..16 KiB to DIR/log through an O_APPEND
 * descriptor of its own), create (each creates and closes OPS files in DIR), read (each
 * opens, reads whole and closes one of 20 files of 4-14 KiB in DIR, OPS times), web (each
 * does OPS times: 10 such reads, then one append to DIR/log), list (each lists one of 20
 * directories of 100 files, OPS times). The threads start together; PASSES (default 1)
 * runs it again in the same process (the later passes find the pool's pages mapped).
 * Prints per pass: operations per second, mean and longest latency, and per operation
 * the process's CPU time and voluntary and involuntary context switches (a crowd of
 * waiters woken for nothing shows as context switches and CPU time). Checks the result:
 * the log's size is the sum of the appends, every created name is there. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 1024

static const char *mode, *dir;
static int nth, ops;
static pthread_barrier_t start;
static char src[16384];
static long long bytes[MAX_THREADS];
static double longest[MAX_THREADS], total[MAX_THREADS];

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int is(const char *m) { return !strcmp(mode, m); }

static void fail(const char *what) {
    perror(what);
    exit(1);
}

static unsigned next(unsigned *r) {
    *r = *r * 1103515245 + 12345;
    return *r >> 8;
}

static void read_whole(const char *p) {
    char buf[65536];
    int fd = open(p, O_RDONLY);
    if (fd < 0) fail(p);
    while (read(fd, buf, sizeof buf) > 0) {
    }
    close(fd);
}

static void *work(void *arg) {
    long k = (long)arg;
    char p[4096];
    unsigned r = k * 7919 + 1;
    int log = -1;
    if (is("append") || is("web")) {
        snprintf(p, sizeof p, "%s/log", dir);
        if ((log = open(p, O_WRONLY | O_APPEND)) < 0) fail(p);
    }
    pthread_barrier_wait(&start);
    for (int i = 0; i < ops; i++) {
        double t0 = now();
        if (is("web"))
            for (int j = 0; j < 10; j++) {
                snprintf(p, sizeof p, "%s/s%u", dir, next(&r) % 20);
                read_whole(p);
            }
        if (log >= 0) {
            int n = 1 + next(&r) % sizeof src;
            if (write(log, src, n) != n) fail("write");
            bytes[k] += n;
        } else if (is("create")) {
            snprintf(p, sizeof p, "%s/t%ld-%d", dir, k, i);
            int fd = open(p, O_CREAT | O_EXCL | O_WRONLY, 0644);
            if (fd < 0) fail(p);
            close(fd);
        } else if (is("list")) {
            snprintf(p, sizeof p, "%s/l%u", dir, next(&r) % 20);
            DIR *d = opendir(p);
            if (!d) fail(p);
            while (readdir(d)) {
            }
            closedir(d);
        } else {
            snprintf(p, sizeof p, "%s/s%u", dir, next(&r) % 20);
            read_whole(p);
        }
        double l = now() - t0;
        total[k] += l;
        if (l > longest[k]) longest[k] = l;
    }
    if (log >= 0) close(log);
    return 0;
}

static void make_file(const char *p, int size) {
    int fd = open(p, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    if (fd < 0 || write(fd, src, size) != size) fail(p);
    close(fd);
}

static double cpu(const struct rusage *u) {
    return u->ru_utime.tv_sec + u->ru_stime.tv_sec +
           (u->ru_utime.tv_usec + u->ru_stime.tv_usec) * 1e-6;
}

int main(int argc, char **argv) {
    if (argc < 5 || (nth = atoi(argv[2])) < 1 || nth > MAX_THREADS) {
        fprintf(stderr, "usage: contend append|create|read|web|list THREADS DIR OPS [PASSES]\n");
        return 2;
    }
    mode = argv[1];
    dir = argv[3];
    ops = atoi(argv[4]);
    int passes = argc > 5 ? atoi(argv[5]) : 1;
    char p[4096];
    memset(src, 'x', sizeof src);
    if (is("read") || is("web"))
        for (int i = 0; i < 20; i++) {
            snprintf(p, sizeof p, "%s/s%d", dir, i);
            make_file(p, 4096 + i * 500);
        }
    if (is("list"))
        for (int i = 0; i < 20; i++) {
            snprintf(p, sizeof p, "%s/l%d", dir, i);
            if (mkdir(p, 0755)) fail(p);
            for (int j = 0; j < 100; j++) {
                snprintf(p, sizeof p, "%s/l%d/f%d", dir, i, j);
                make_file(p, 0);
            }
        }
    for (int pass = 1; pass <= passes; pass++) {
        memset(bytes, 0, sizeof bytes);
        memset(longest, 0, sizeof longest);
        memset(total, 0, sizeof total);
        if (is("append") || is("web")) {
            snprintf(p, sizeof p, "%s/log", dir);
            make_file(p, 0);
        }
        struct rusage u0, u1;
        getrusage(RUSAGE_SELF, &u0);
        pthread_barrier_init(&start, 0, nth);
        pthread_t th[MAX_THREADS];
        double t0 = now();
        for (long k = 0; k < nth; k++) pthread_create(&th[k], 0, work, (void *)k);
        for (int k = 0; k < nth; k++) pthread_join(th[k], 0);
        double elapsed = now() - t0;
        getrusage(RUSAGE_SELF, &u1);
        pthread_barrier_destroy(&start);
        double sum = 0, max = 0;
        long long written = 0;
        for (int k = 0; k < nth; k++) {
            sum += total[k];
            if (longest[k] > max) max = longest[k];
            written += bytes[k];
        }
        long n = (long)nth * ops;
        printf("pass %d: %s %d threads: %.0f ops/s, mean %.1f us, max %.1f us, cpu %.2f us/op, "
               "vcsw %.2f/op, ivcsw %.2f/op\n",
               pass, mode, nth, n / elapsed, sum / n * 1e6, max * 1e6,
               (cpu(&u1) - cpu(&u0)) / n * 1e6, (double)(u1.ru_nvcsw - u0.ru_nvcsw) / n,
               (double)(u1.ru_nivcsw - u0.ru_nivcsw) / n);
        if (is("append") || is("web")) {
            struct stat st;
            snprintf(p, sizeof p, "%s/log", dir);
            if (stat(p, &st) || st.st_size != written) {
                printf("BAD: %s has %lld bytes, %lld appended\n", p, (long long)st.st_size, written);
                return 1;
            }
            unlink(p);
        }
        if (is("create"))
            for (int k = 0; k < nth; k++)
                for (int i = 0; i < ops; i++) {
                    snprintf(p, sizeof p, "%s/t%d-%d", dir, k, i);
                    if (unlink(p)) {
                        printf("BAD: %s missing\n", p);
                        return 1;
                    }
                }
    }
    if (is("read") || is("web"))
        for (int i = 0; i < 20; i++) {
            snprintf(p, sizeof p, "%s/s%d", dir, i);
            unlink(p);
        }
    if (is("list"))
        for (int i = 0; i < 20; i++) {
            for (int j = 0; j < 100; j++) {
                snprintf(p, sizeof p, "%s/l%d/f%d", dir, i, j);
                unlink(p);
            }
            snprintf(p, sizeof p, "%s/l%d", dir, i);
            rmdir(p);
        }
    return 0;
}
