/* Per-call time of pool operations under the preload, for comparing protection keys
 * on and off (scripts/keyscost.sh, docs/DESIGN-NOTES.md "Protection keys"): N creates,
 * stats, 4 KiB pwrites and preads, renames and unlinks in DIR, then N anonymous
 * mmap/munmap pairs (which the preload checks against the engine's mappings). Prints
 * one line per operation: name and nanoseconds per call.
 *
 *   cc -O2 -o keyscost scripts/keyscost.c
 *   lynxfs run --pool P --at DIR -- ./keyscost DIR N */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static void report(const char *op, double start, int n) {
    printf("%s %.1f\n", op, (now() - start) / n);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: keyscost DIR N\n");
        return 2;
    }
    const char *dir = argv[1];
    int n = atoi(argv[2]);
    char p[4096], q[4096], buf[4096] = {1};
    struct stat st;
    double t = now();
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof p, "%s/f%d", dir, i);
        int fd = open(p, O_CREAT | O_WRONLY | O_EXCL, 0644);
        if (fd < 0 || close(fd))
            return perror(p), 1;
    }
    report("create", t, n);
    t = now();
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof p, "%s/f%d", dir, i);
        if (stat(p, &st))
            return perror(p), 1;
    }
    report("stat", t, n);
    snprintf(p, sizeof p, "%s/data", dir);
    int fd = open(p, O_CREAT | O_RDWR, 0644);
    t = now();
    for (int i = 0; i < n; i++)
        if (pwrite(fd, buf, sizeof buf, (off_t)(i % 256) * 4096) != 4096)
            return perror("pwrite"), 1;
    report("write-4k", t, n);
    t = now();
    for (int i = 0; i < n; i++)
        if (pread(fd, buf, sizeof buf, (off_t)(i % 256) * 4096) != 4096)
            return perror("pread"), 1;
    report("read-4k", t, n);
    close(fd);
    t = now();
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof p, "%s/f%d", dir, i);
        snprintf(q, sizeof q, "%s/g%d", dir, i);
        if (rename(p, q))
            return perror(p), 1;
    }
    report("rename", t, n);
    t = now();
    for (int i = 0; i < n; i++) {
        snprintf(q, sizeof q, "%s/g%d", dir, i);
        if (unlink(q))
            return perror(q), 1;
    }
    report("unlink", t, n);
    t = now();
    for (int i = 0; i < 100000; i++) {
        void *m = mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED || munmap(m, 65536))
            return perror("mmap"), 1;
    }
    report("mmap+munmap", t, 100000);
    return 0;
}
