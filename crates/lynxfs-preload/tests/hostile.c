/* Programs that, run preloaded, try to take the pool's memory from the engine
 * (tests/hostile.rs). Each prints what it saw and exits 0 only when every attempt
 * was refused (or, for the exec case, when its own fixed mapping works and the pool
 * still answers right).
 *
 *   hostile files DIR N          make N files DIR/before-I with known contents
 *   hostile attack POOL DIR      every mapping call over each engine mapping
 *   hostile parent DIR SHM LEN   map SHM (LEN bytes), attach, exec "child"
 *   hostile child DIR SHM LEN ADDR  map SHM at ADDR with MAP_FIXED, then use DIR
 *   hostile check DIR N PREFIX   read back N files DIR/PREFIX-I
 *   hostile scribble POOL DIR    stray stores into each engine mapping from three
 *                                threads: each must fault (protection keys)
 *   hostile signals DIR          a signal handler calls into the pool while the
 *                                interrupted thread is inside the library
 *   hostile forks DIR N          N forks while two threads create and remove files
 *                                and a third waits for a lock; each child makes and
 *                                removes a file of its own
 *   hostile execs DIR N          N children exec "check" while two of their threads
 *                                create and remove files
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static int failures;

static void content(char *buf, size_t n, const char *prefix, int i) {
    for (size_t k = 0; k < n; k++)
        buf[k] = (char)('a' + (k * 7 + (size_t)i * 13 + (unsigned char)prefix[0]) % 26);
}

#define FILE_LEN 3000

static int make_files(const char *dir, int n, const char *prefix) {
    char path[4096], buf[FILE_LEN];
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s-%d", dir, prefix, i);
        int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
        if (fd < 0) {
            printf("FAIL create %s: %s\n", path, strerror(errno));
            return 1;
        }
        content(buf, sizeof buf, prefix, i);
        if (write(fd, buf, sizeof buf) != (ssize_t)sizeof buf) {
            printf("FAIL write %s: %s\n", path, strerror(errno));
            return 1;
        }
        close(fd);
    }
    return 0;
}

static int check_files(const char *dir, int n, const char *prefix) {
    char path[4096], want[FILE_LEN], got[FILE_LEN + 1];
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s-%d", dir, prefix, i);
        int fd = open(path, O_RDONLY);
        if (fd < 0) {
            printf("FAIL open %s: %s\n", path, strerror(errno));
            return 1;
        }
        ssize_t r = read(fd, got, sizeof got);
        close(fd);
        content(want, sizeof want, prefix, i);
        if (r != FILE_LEN || memcmp(want, got, FILE_LEN)) {
            printf("FAIL contents of %s (%zd bytes)\n", path, r);
            return 1;
        }
    }
    printf("ok %d files %s-* read back\n", n, prefix);
    return 0;
}

/* One attempt that must fail with EPERM. */
static void refused(const char *what, uintptr_t at, long r, int failed) {
    if (failed && errno == EPERM) {
        printf("ok %s refused\n", what);
        return;
    }
    printf("FAIL %s at %#lx: returned %ld, errno %s\n", what, (unsigned long)at, r,
           strerror(errno));
    failures++;
}

#define NO(what, at, expr, is_failure)                                            \
    do {                                                                          \
        errno = 0;                                                                \
        long r_ = (long)(expr);                                                   \
        refused(what, at, r_, is_failure);                                        \
    } while (0)

static void attack(uintptr_t page) {
    void *p = (void *)page;
    void *scratch = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    void *m;
    long r;
    errno = 0;
    m = mmap(p, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    refused("mmap(MAP_FIXED)", page, (long)m, m == MAP_FAILED);
    errno = 0;
    m = mmap64(p, 4096, PROT_READ, MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    refused("mmap64(MAP_FIXED)", page, (long)m, m == MAP_FAILED);
    NO("munmap", page, r = munmap(p, 4096), r == -1);
    NO("mprotect", page, r = mprotect(p, 4096, PROT_READ), r == -1);
    NO("pkey_mprotect", page, r = pkey_mprotect(p, 4096, PROT_READ, -1), r == -1);
    int bad[] = {MADV_REMOVE, MADV_DONTFORK, MADV_WIPEONFORK, MADV_DONTNEED, MADV_FREE};
    const char *names[] = {"madvise(MADV_REMOVE)", "madvise(MADV_DONTFORK)",
                           "madvise(MADV_WIPEONFORK)", "madvise(MADV_DONTNEED)",
                           "madvise(MADV_FREE)"};
    for (unsigned i = 0; i < sizeof bad / sizeof bad[0]; i++)
        NO(names[i], page, r = madvise(p, 4096, bad[i]), r == -1);
    errno = 0;
    if (madvise(p, 4096, MADV_WILLNEED) == 0)
        printf("ok madvise(MADV_WILLNEED) allowed\n");
    else {
        printf("FAIL madvise(MADV_WILLNEED): %s\n", strerror(errno));
        failures++;
    }
    errno = 0;
    m = mremap(p, 4096, 4096, MREMAP_MAYMOVE | MREMAP_FIXED, scratch);
    refused("mremap (move away)", page, (long)m, m == MAP_FAILED);
    errno = 0;
    m = mremap(p, 4096, 8192, 0);
    refused("mremap (resize)", page, (long)m, m == MAP_FAILED);
    errno = 0;
    m = mremap(scratch, 4096, 4096, MREMAP_MAYMOVE | MREMAP_FIXED, p);
    refused("mremap (move over)", page, (long)m, m == MAP_FAILED);
    int id = shmget(IPC_PRIVATE, 4096, IPC_CREAT | 0600);
    if (id >= 0) {
        errno = 0;
        m = shmat(id, p, SHM_REMAP);
        refused("shmat(SHM_REMAP)", page, (long)m, m == (void *)-1);
        shmctl(id, IPC_RMID, NULL);
    } else {
        printf("FAIL shmget: %s\n", strerror(errno));
        failures++;
    }
    NO("remap_file_pages", page, r = remap_file_pages(p, 4096, 0, 0, 0), r == -1);
    /* Raw system calls: the seal (mseal) makes the kernel refuse them. */
    NO("raw munmap", page, r = syscall(SYS_munmap, p, 4096), r == -1);
    NO("raw mprotect", page, r = syscall(SYS_mprotect, p, 4096, PROT_READ), r == -1);
    errno = 0;
    r = syscall(SYS_mmap, p, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    refused("raw mmap(MAP_FIXED)", page, r, r == -1);
    errno = 0;
    r = syscall(SYS_mremap, p, 4096, 4096, MREMAP_MAYMOVE | MREMAP_FIXED, scratch);
    refused("raw mremap", page, r, r == -1);
    munmap(scratch, 4096);
}

/* Attach by making DIR/probe. */
static int attach(const char *dir) {
    char probe[4096];
    snprintf(probe, sizeof probe, "%s/probe", dir);
    int fd = open(probe, O_CREAT | O_WRONLY, 0644);
    if (fd < 0) {
        printf("FAIL attach through %s: %s\n", probe, strerror(errno));
        return 1;
    }
    close(fd);
    return 0;
}

#define MAX_MAPS 64

/* The engine's mappings as /proc/self/smaps shows them: the pool file and the
 * runtime state file, with their protection keys (-1 where smaps shows none).
 * Returns how many, or -1 when fewer than two. */
static int engine_maps(const char *pool, uintptr_t *starts, uintptr_t *ends, int *keys) {
    FILE *maps = fopen("/proc/self/smaps", "r");
    char line[8192];
    int n = 0, in_engine = 0;
    while (fgets(line, sizeof line, maps)) {
        unsigned long s, e;
        char path[4096] = "";
        int key;
        if (sscanf(line, "ProtectionKey: %d", &key) == 1) {
            if (in_engine)
                keys[n - 1] = key;
            continue;
        }
        if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %4095s", &s, &e, path) < 2)
            continue;
        size_t pl = strlen(path);
        int runtime = strstr(path, "/lynxfs-") && pl > 4 && !strcmp(path + pl - 4, ".run");
        in_engine = (!strcmp(path, pool) || runtime) && n < MAX_MAPS;
        if (in_engine) {
            starts[n] = s;
            ends[n] = e;
            keys[n] = -1;
            n++;
        }
    }
    fclose(maps);
    if (n < 2) {
        printf("FAIL found %d engine mappings (the pool and its runtime state expected)\n", n);
        return -1;
    }
    return n;
}

static int attack_all(const char *pool, const char *dir) {
    if (attach(dir))
        return 1;
    uintptr_t starts[MAX_MAPS], ends[MAX_MAPS];
    int keys[MAX_MAPS];
    int n = engine_maps(pool, starts, ends, keys);
    if (n < 0)
        return 1;
    for (int i = 0; i < n; i++) {
        printf("mapping %d: %s\n", i, i == 0 ? "first" : "next");
        attack(starts[i]);
        attack(starts[i] + ((ends[i] - starts[i]) / 2 & ~(uintptr_t)4095));
    }
    return failures != 0;
}

static void *map_shm(const char *shm, size_t len, void *at) {
    int fd = open(shm, O_RDWR | O_CREAT, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)len) != 0) {
        printf("FAIL %s: %s\n", shm, strerror(errno));
        exit(1);
    }
    int flags = MAP_SHARED | (at ? MAP_FIXED : 0);
    void *p = mmap(at, len, PROT_READ | PROT_WRITE, flags, fd, 0);
    close(fd);
    return p;
}

static const char *sig_path;
static volatile sig_atomic_t sig_calls, sig_found;

static void on_alarm(int sig) {
    (void)sig;
    struct stat st;
    int saved = errno;
    sig_calls++;
    if (stat(sig_path, &st) == 0)
        sig_found++;
    errno = saved;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Creates and removes files DIR/PREFIX-I for `seconds`; returns how many. */
static long churn(const char *dir, const char *prefix, double seconds) {
    char path[4096];
    long n = 0;
    double end = now() + seconds;
    while (now() < end) {
        snprintf(path, sizeof path, "%s/%s-%ld", dir, prefix, n % 16);
        int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
        if (fd < 0) {
            if (errno == EINTR)
                continue;
            printf("FAIL churn create %s: %s\n", path, strerror(errno));
            exit(1);
        }
        if (write(fd, "x", 1) != 1 && errno != EINTR) {
            printf("FAIL churn write %s: %s\n", path, strerror(errno));
            exit(1);
        }
        close(fd);
        if (n % 3 == 0)
            unlink(path);
        n++;
    }
    return n;
}

static int signals(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/before-0", dir);
    sig_path = path;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 300}, {0, 300}};
    setitimer(ITIMER_REAL, &it, NULL);
    long n = churn(dir, "sig", 2.0);
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    printf("ok %ld files made, %d handler calls (%d found the file)\n", n, (int)sig_calls,
           (int)sig_found);
    return sig_calls == 0;
}

struct churner {
    const char *dir;
    char prefix[16];
};

static volatile int stop_churn;

static void *churn_thread(void *arg) {
    struct churner *c = arg;
    char path[4096];
    long n = 0;
    while (!stop_churn) {
        snprintf(path, sizeof path, "%s/%s-%ld", c->dir, c->prefix, n++ % 8);
        int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
        if (fd >= 0)
            close(fd);
        struct stat st;
        stat(path, &st);
        if (n % 2)
            unlink(path);
    }
    return NULL;
}

/* A thread blocked in a lock wait on the pool (an OFD lock the main thread holds on
 * another description of the file) for the whole fork storm: no fork waits for it. */
struct waiter {
    const char *dir;
    int got; /* 1 once the lock was granted, -1 on an error */
};

static void *lock_wait_thread(void *arg) {
    struct waiter *w = arg;
    char path[4096];
    snprintf(path, sizeof path, "%s/locked", w->dir);
    int fd = open(path, O_RDWR);
    struct flock l = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    w->got = fd >= 0 && fcntl(fd, F_OFD_SETLKW, &l) == 0 ? 1 : -1;
    if (fd >= 0)
        close(fd);
    return NULL;
}

static int forks(const char *dir, int n) {
    char locked[4096];
    snprintf(locked, sizeof locked, "%s/locked", dir);
    int lfd = open(locked, O_CREAT | O_RDWR, 0644);
    struct flock l = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if (lfd < 0 || fcntl(lfd, F_OFD_SETLK, &l) != 0) {
        printf("FAIL lock %s: %s\n", locked, strerror(errno));
        return 1;
    }
    struct waiter w = {.dir = dir};
    pthread_t waiter;
    pthread_create(&waiter, NULL, lock_wait_thread, &w);
    pthread_t t[2];
    struct churner c[2];
    for (int i = 0; i < 2; i++) {
        c[i].dir = dir;
        snprintf(c[i].prefix, sizeof c[i].prefix, "thread%d", i);
        pthread_create(&t[i], NULL, churn_thread, &c[i]);
    }
    int bad = 0;
    for (int i = 0; i < n && !bad; i++) {
        pid_t pid = fork();
        if (pid < 0) {
            printf("FAIL fork: %s\n", strerror(errno));
            bad = 1;
            break;
        }
        if (pid == 0) {
            alarm(20); /* a hung child dies, and the parent sees it */
            char path[4096];
            snprintf(path, sizeof path, "%s/child-%d", dir, i);
            int fd = open(path, O_CREAT | O_WRONLY, 0644);
            if (fd < 0 || write(fd, "c", 1) != 1 || close(fd) != 0 || unlink(path) != 0)
                _exit(3);
            /* Half leave through exit (the library detaches), half by _exit. */
            if (i % 2)
                exit(0);
            _exit(0);
        }
        int status;
        if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status)) {
            printf("FAIL fork child %d: status %#x\n", i, status);
            bad = 1;
        }
    }
    stop_churn = 1;
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    if (w.got != 0) {
        printf("FAIL the lock waiter did not wait (%d)\n", w.got);
        bad = 1;
    }
    l.l_type = F_UNLCK;
    fcntl(lfd, F_OFD_SETLK, &l);
    pthread_join(waiter, NULL);
    close(lfd);
    if (w.got != 1) {
        printf("FAIL the lock waiter never got the lock\n");
        bad = 1;
    }
    unlink(locked);
    if (!bad)
        printf("ok %d forks beside two threads in the pool and one in a lock wait\n", n);
    return bad;
}

/* N times: a child starts two threads working in the pool, lets them run for a
 * moment, then execs "check" (which reads the files made before) while they are
 * inside pool calls: the exec must neither hang nor leave the pool damaged. */
static int execs(const char *dir, int n) {
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) {
        printf("FAIL readlink /proc/self/exe: %s\n", strerror(errno));
        return 1;
    }
    self[len] = 0;
    for (int i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid < 0) {
            printf("FAIL fork: %s\n", strerror(errno));
            return 1;
        }
        if (pid == 0) {
            alarm(20);
            static struct churner c[2];
            pthread_t t[2];
            for (int k = 0; k < 2; k++) {
                c[k].dir = dir;
                snprintf(c[k].prefix, sizeof c[k].prefix, "exec%d-%d", i % 4, k);
                pthread_create(&t[k], NULL, churn_thread, &c[k]);
            }
            usleep(200 + (i * 397) % 3000);
            char *args[] = {self, "check", (char *)dir, "40", "before", NULL};
            execv(self, args);
            _exit(4);
        }
        int status;
        if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status)) {
            printf("FAIL exec child %d: status %#x\n", i, status);
            return 1;
        }
    }
    printf("ok %d execs beside two threads in the pool\n", n);
    return 0;
}

/* Stray stores: each must fault with SEGV_PKUERR and change nothing. */
static sigjmp_buf stray_back;
static volatile sig_atomic_t stray_code;

static void on_stray(int sig, siginfo_t *si, void *uc) {
    (void)sig;
    (void)uc;
    stray_code = si->si_code;
    siglongjmp(stray_back, 1);
}

static void stray_store(uintptr_t at, const char *who) {
    stray_code = 0;
    if (sigsetjmp(stray_back, 1) == 0) {
        *(volatile char *)at = 'X';
        printf("FAIL %s: a stray store at %#lx landed\n", who, (unsigned long)at);
        failures++;
        return;
    }
    if (stray_code != SEGV_PKUERR) {
        printf("FAIL %s: the stray store at %#lx faulted with si_code %d, not SEGV_PKUERR\n", who,
               (unsigned long)at, (int)stray_code);
        failures++;
        return;
    }
    printf("ok %s: stray store at %#lx faulted (SEGV_PKUERR)\n", who, (unsigned long)at);
}

struct scribble {
    uintptr_t *starts, *ends;
    int n;
    const char *who;
};

static void scribble_all(const struct scribble *s) {
    for (int i = 0; i < s->n; i++) {
        stray_store(s->starts[i], s->who);
        stray_store(s->starts[i] + ((s->ends[i] - s->starts[i]) / 2 & ~(uintptr_t)4095), s->who);
        stray_store(s->ends[i] - 1, s->who);
    }
}

static void *scribble_thread(void *arg) {
    scribble_all(arg);
    return NULL;
}

static void *attach_thread(void *dir) {
    return (void *)(intptr_t)attach(dir);
}

/* One call on the engine's protection key that must fail with EINVAL. */
#define KEY_NO(what, expr)                                                        \
    do {                                                                          \
        errno = 0;                                                                \
        long r_ = (long)(expr);                                                   \
        if (r_ == -1 && errno == EINVAL) {                                        \
            printf("ok %s refused\n", what);                                      \
        } else {                                                                  \
            printf("FAIL %s: returned %ld, errno %s\n", what, r_, strerror(errno)); \
            failures++;                                                           \
        }                                                                         \
    } while (0)

/* A thread made before the pool was attached, a thread made after, and the main
 * thread each store into every engine mapping; the engine's key cannot be freed,
 * set or lent; the pool still answers. */
static int scribble(const char *pool, const char *dir) {
    pthread_t early;
    struct scribble s = {0};
    uintptr_t starts[MAX_MAPS], ends[MAX_MAPS];
    int keys[MAX_MAPS];
    struct sigaction sa = {0};
    sa.sa_sigaction = on_stray;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, NULL);
    /* Made before the first pool call; it attaches, so the main thread's first pool
     * call comes after. */
    pthread_create(&early, NULL, attach_thread, (void *)dir);
    void *r;
    pthread_join(early, &r);
    if (r)
        return 1;
    int n = engine_maps(pool, starts, ends, keys);
    if (n < 0)
        return 1;
    for (int i = 0; i < n; i++)
        if (keys[i] <= 0 || keys[i] != keys[0]) {
            printf("FAIL engine mapping %d carries protection key %d\n", i, keys[i]);
            return 1;
        }
    int key = keys[0];
    printf("ok %d engine mappings under protection key %d\n", n, key);
    s.starts = starts;
    s.ends = ends;
    s.n = n;
    s.who = "main thread";
    scribble_all(&s);
    pthread_t later;
    struct scribble t = s;
    t.who = "a later thread";
    pthread_create(&later, NULL, scribble_thread, &t);
    pthread_join(later, NULL);
    /* The key is the engine's: not the program's to free, open or use. */
    char *own = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    KEY_NO("pkey_free", pkey_free(key));
    KEY_NO("syscall(pkey_free)", syscall(SYS_pkey_free, key));
    KEY_NO("pkey_set", pkey_set(key, 0));
    KEY_NO("pkey_mprotect of the program's own memory",
           pkey_mprotect(own, 4096, PROT_READ | PROT_WRITE, key));
    s.who = "main thread, after";
    scribble_all(&s);
    return failures != 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 4 && !strcmp(argv[1], "files"))
        return make_files(argv[2], atoi(argv[3]), "before");
    if (argc == 3 && !strcmp(argv[1], "signals"))
        return signals(argv[2]);
    if (argc == 4 && !strcmp(argv[1], "forks"))
        return forks(argv[2], atoi(argv[3]));
    if (argc == 4 && !strcmp(argv[1], "execs"))
        return execs(argv[2], atoi(argv[3]));
    if (argc == 5 && !strcmp(argv[1], "check"))
        return check_files(argv[2], atoi(argv[3]), argv[4]);
    if (argc == 4 && !strcmp(argv[1], "scribble")) {
        if (scribble(argv[2], argv[3]))
            return 1;
        return make_files(argv[3], 50, "after") || check_files(argv[3], 50, "after");
    }
    if (argc == 4 && !strcmp(argv[1], "attack")) {
        if (attack_all(argv[2], argv[3]))
            return 1;
        return make_files(argv[3], 50, "after") || check_files(argv[3], 50, "after");
    }
    if (argc == 5 && !strcmp(argv[1], "parent")) {
        size_t len = strtoull(argv[4], NULL, 0);
        /* The program's shared memory first, where the kernel puts it; then the
         * first pool call attaches; then the worker is exec'd. */
        char *p = map_shm(argv[3], len, NULL);
        if (p == MAP_FAILED) {
            printf("FAIL parent mmap: %s\n", strerror(errno));
            return 1;
        }
        memset(p, 'P', len);
        if (make_files(argv[2], 5, "parent"))
            return 1;
        char addr[32];
        snprintf(addr, sizeof addr, "%#lx", (unsigned long)(uintptr_t)p);
        execl("/proc/self/exe", argv[0], "child", argv[2], argv[3], argv[4], addr, (char *)NULL);
        printf("FAIL exec: %s\n", strerror(errno));
        return 1;
    }
    if (argc == 6 && !strcmp(argv[1], "child")) {
        size_t len = strtoull(argv[4], NULL, 0);
        void *at = (void *)(uintptr_t)strtoull(argv[5], NULL, 0);
        /* The pool is attached already (the exec'd image takes its parent's place at
         * load); make sure, then map the parent's memory where the parent had it. */
        if (check_files(argv[2], 5, "parent"))
            return 1;
        char *p = map_shm(argv[3], len, at);
        if (p == MAP_FAILED) {
            printf("FAIL child mmap(MAP_FIXED) at %p: %s\n", at, strerror(errno));
            return 1;
        }
        for (size_t i = 0; i < len; i += 4096)
            if (p[i] != 'P') {
                printf("FAIL child sees other bytes than its parent's at +%zu\n", i);
                return 1;
            }
        memset(p, 'C', len);
        printf("ok child mapped the parent's memory at %p\n", at);
        return make_files(argv[2], 100, "child") || check_files(argv[2], 100, "child") ||
               check_files(argv[2], 5, "parent");
    }
    fprintf(stderr, "usage: see the comment at the top of hostile.c\n");
    return 2;
}
