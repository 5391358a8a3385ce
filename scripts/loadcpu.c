/* CPU time and page faults of a process's whole tree, plain and preloaded, side by
 * side (docs/DESIGN-NOTES.md, "Loading the library (stop 53)").
 *
 *   cc -O2 -o loadcpu scripts/loadcpu.c
 *   ./loadcpu N DIV SETUP... -- PROGRAM [ARGS...]
 *
 * Runs PROGRAM N times in each SETUP, the setups alternated (so each sees the same
 * load): "plain" (no LD_PRELOAD), LIB (LD_PRELOAD=LIB), or "-LIB" (LD_PRELOAD=LIB
 * with every LYNXFS_ variable removed: the library loaded with no pool configured).
 * Each run is fork + execve + wait4; its user + system time and minor faults are the
 * child's and its waited-for descendants' (so a shell loop counts every process it
 * started), divided by DIV (the loop's length). Prints the median, the quartiles and
 * the mean of each setup, and each median's difference from the first setup's. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The environment of SETUP `spec`: this one without LD_PRELOAD (and without the
 * LYNXFS_ variables for "-LIB"), plus LD_PRELOAD=LIB unless plain. */
static char **env_of(const char *spec) {
    int strip = spec[0] == '-', have = 0, k = 0;
    if (strip) spec++;
    while (environ[have]) have++;
    char **env = calloc(have + 2, sizeof *env);
    for (int j = 0; j < have; j++) {
        if (!strncmp(environ[j], "LD_PRELOAD=", 11)) continue;
        if (strip && !strncmp(environ[j], "LYNXFS_", 7)) continue;
        env[k++] = environ[j];
    }
    if (strcmp(spec, "plain")) {
        size_t len = strlen(spec) + 12;
        env[k] = malloc(len);
        snprintf(env[k], len, "LD_PRELOAD=%s", spec);
    }
    return env;
}

/* One run: CPU in us and minor faults of the child's tree, or exit on failure. */
static void run(char **args, char **env, const char *name, double *cpu, double *faults) {
    pid_t p = fork();
    if (p == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        execve(args[0], args, env);
        _exit(127);
    }
    int st;
    struct rusage ru;
    wait4(p, &st, 0, &ru);
    if (!WIFEXITED(st) || WEXITSTATUS(st)) {
        fprintf(stderr, "loadcpu: %s failed (status %d)\n", name, st);
        exit(1);
    }
    *cpu = ru.ru_utime.tv_sec * 1e6 + ru.ru_utime.tv_usec + ru.ru_stime.tv_sec * 1e6 +
           ru.ru_stime.tv_usec;
    *faults = ru.ru_minflt;
}

int main(int argc, char **argv) {
    int nl = 0;
    while (3 + nl < argc && strcmp(argv[3 + nl], "--")) nl++;
    if (argc < 6 || nl == 0 || 3 + nl + 1 >= argc) {
        fprintf(stderr, "usage: %s N DIV SETUP... -- PROGRAM [ARGS...]\n", argv[0]);
        return 2;
    }
    int n = atoi(argv[1]);
    double div = atof(argv[2]);
    char **args = argv + 3 + nl + 1, ***envs = calloc(nl, sizeof *envs);
    double *t = calloc((size_t)n * nl, sizeof *t), *f = calloc((size_t)n * nl, sizeof *f);
    for (int s = 0; s < nl; s++) envs[s] = env_of(argv[3 + s]);
    int warm = n / 10 < 20 ? n / 10 : 20;
    for (int i = -warm; i < n; i++)
        for (int s = 0; s < nl; s++) {
            double cpu, faults;
            run(args, envs[s], argv[3 + s], &cpu, &faults);
            if (i < 0) continue;
            t[s * n + i] = cpu / div;
            f[s * n + i] = faults / div;
        }
    double base = 0;
    for (int s = 0; s < nl; s++) {
        double *ts = t + s * n, *fs = f + s * n, sum = 0;
        qsort(ts, n, sizeof *ts, cmp);
        qsort(fs, n, sizeof *fs, cmp);
        for (int i = 0; i < n; i++) sum += ts[i];
        if (s == 0) base = ts[n / 2];
        printf("%-30s cpu median %7.1f us (%+6.1f) q1 %7.1f q3 %7.1f mean %7.1f faults %6.1f\n",
               argv[3 + s], ts[n / 2], ts[n / 2] - base, ts[n / 4], ts[3 * n / 4], sum / n,
               fs[n / 2]);
    }
    return 0;
}
