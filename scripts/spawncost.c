/* Process start cost with and without the preload library, side by side.
 *
 *   cc -O2 -o spawncost scripts/spawncost.c
 *   ./spawncost N LIB POOL AT TMPDIR -- PROGRAM [ARGS...]
 *
 * Runs PROGRAM N times in each of two setups, alternating: plain (no LD_PRELOAD, every
 * "@" in ARGS replaced by TMPDIR) and preloaded (LD_PRELOAD=LIB, LYNXFS_POOL=POOL,
 * LYNXFS_AT=AT, "@" replaced by AT). Each run is fork + execve + waitpid; prints the
 * median and quartiles of each, in microseconds, and the difference of the medians. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>

extern char **environ;

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double run(char *const argv[], char *const envp[]) {
    double t0 = now_us();
    pid_t p = fork();
    if (p == 0) {
        freopen("/dev/null", "w", stdout);
        execve(argv[0], argv, envp);
        _exit(127);
    }
    int st;
    waitpid(p, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) == 127) {
        fprintf(stderr, "spawncost: %s failed (status %d)\n", argv[0], st);
        exit(1);
    }
    return now_us() - t0;
}

static char **args_with(char **args, int n, const char *dir) {
    char **v = calloc(n + 1, sizeof *v);
    for (int i = 0; i < n; i++) {
        const char *at = strchr(args[i], '@');
        if (!at) { v[i] = args[i]; continue; }
        size_t len = strlen(args[i]) + strlen(dir);
        v[i] = malloc(len + 1);
        snprintf(v[i], len + 1, "%.*s%s%s", (int)(at - args[i]), args[i], dir, at + 1);
    }
    return v;
}

static char **env_with(const char **extra, int n) {
    int have = 0;
    while (environ[have]) have++;
    char **v = calloc(have + n + 1, sizeof *v);
    int k = 0;
    for (int i = 0; i < have; i++)
        if (strncmp(environ[i], "LD_PRELOAD=", 11) && strncmp(environ[i], "LYNXFS_POOL=", 12) && strncmp(environ[i], "LYNXFS_AT=", 10))
            v[k++] = environ[i];
    for (int i = 0; i < n; i++) v[k++] = (char *)extra[i];
    return v;
}

static void report(const char *name, double *t, int n) {
    qsort(t, n, sizeof *t, cmp);
    printf("%-10s median %7.0f us  q1 %7.0f  q3 %7.0f\n", name, t[n / 2], t[n / 4], t[3 * n / 4]);
}

int main(int argc, char **argv) {
    if (argc < 8 || strcmp(argv[6], "--")) {
        fprintf(stderr, "usage: %s N LIB POOL AT TMPDIR -- PROGRAM [ARGS...]\n", argv[0]);
        return 2;
    }
    int n = atoi(argv[1]);
    char buf[3][4096];
    snprintf(buf[0], sizeof buf[0], "LD_PRELOAD=%s", argv[2]);
    snprintf(buf[1], sizeof buf[1], "LYNXFS_POOL=%s", argv[3]);
    snprintf(buf[2], sizeof buf[2], "LYNXFS_AT=%s", argv[4]);
    const char *extra[3] = {buf[0], buf[1], buf[2]};
    char **plain_env = env_with(NULL, 0), **pre_env = env_with(extra, 3);
    int nargs = argc - 7;
    char **plain_args = args_with(argv + 7, nargs, argv[5]);
    char **pre_args = args_with(argv + 7, nargs, argv[4]);
    double *a = calloc(n, sizeof *a), *b = calloc(n, sizeof *b);
    for (int i = 0; i < 20; i++) { run(plain_args, plain_env); run(pre_args, pre_env); }
    for (int i = 0; i < n; i++) {
        a[i] = run(plain_args, plain_env);
        b[i] = run(pre_args, pre_env);
    }
    report("plain", a, n);
    double ma = a[n / 2];
    report("preload", b, n);
    printf("difference of medians: %.0f us (%.2fx)\n", b[n / 2] - ma, b[n / 2] / ma);
    return 0;
}
