/* Lock sequences for tests/locks.rs, run on a mount and on tmpfs (the control).
 *
 *   locks 478 FILE         xfstests generic/478's sequences: a lock set, then one of
 *                          (a child cloned with CLONE_FILES closes the fd | a child
 *                          cloned without it closes its copy | dup and close), then
 *                          another process's GETLK; one line per case.
 *   locks cycle FILE N     N processes, each holding byte i, each then waiting for
 *                          byte i+1 (the last for byte 0: the request closing the
 *                          cycle); one line per process: what its wait got.
 *   locks waiters FILE N [GAP_MS]
 *                          holds a write lock while N threads of its own wait for it
 *                          (OFD locks, each on an open of its own; all at once, or
 *                          one every GAP_MS); says "waiting", lets go when stdin has
 *                          a line, says "all got it" when every waiter had the lock.
 *   locks wake FILE        a lock held (POSIX, OFD, flock) while another process
 *                          waits for it in the kernel, then let go (an unlock, or a
 *                          close); one line per case: whether the waiter got it.
 *
 * Every step is bounded: alarm() kills a process stuck past its time.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static void die(const char *what)
{
    fprintf(stderr, "%s: %s\n", what, strerror(errno));
    exit(2);
}

static struct flock range(short type, off_t start, off_t len)
{
    struct flock l;
    memset(&l, 0, sizeof l); /* l_pid 0: OFD locks need it */
    l.l_type = type;
    l.l_whence = SEEK_SET;
    l.l_start = start;
    l.l_len = len;
    return l;
}

static void put(int fd, const void *b, size_t n)
{
    if (write(fd, b, n) != (ssize_t)n)
        die("write to a pipe");
}

static void get(int fd, void *b, size_t n)
{
    if (read(fd, b, n) != (ssize_t)n)
        die("read from a pipe");
}

/* ---- generic/478 ---- */

enum op { CLONE_FILES_CLOSE, CLONE_CLOSE, DUP_CLOSE };
static const char *op_name[] = {"clone with CLONE_FILES, close", "clone, close",
                                "dup, close"};

static char stack[256 * 1024] __attribute__((aligned(16)));

/* Runs the calling process on CPU `cpu` (when the machine has it). */
static void pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    sched_setaffinity(0, sizeof set, &set);
}

static int child_close(void *p)
{
    pin(0);
    close(*(int *)p);
    return 0;
}

/* One case: P2 (forked before anything is opened, so it shares nothing) opens the
 * file, waits for the go, asks GETLK and sends back the type it got.
 *
 * The schedule is made hostile, as generic/478's busy-polling processes make it: a
 * process at nice -20 spins on CPU 0, where the closing child runs (so whatever the
 * close leaves to be done on that CPU, a mount's RELEASE, is served late), and P2
 * asks from CPU 1. On a local file system the close has done everything when it
 * returns, so this changes nothing there. */
static void one_478(const char *path, int ofd, int rdwr, short set, short ask, enum op op)
{
    int go[2], back[2];
    if (pipe(go) || pipe(back))
        die("pipe");
    pid_t hog = fork();
    if (hog < 0)
        die("fork");
    if (hog == 0) {
        alarm(30);
        pin(0);
        setpriority(PRIO_PROCESS, 0, -20);
        for (;;)
            ;
    }
    pid_t p2 = fork();
    if (p2 < 0)
        die("fork");
    int flags = rdwr ? O_RDWR : O_RDONLY;
    if (p2 == 0) {
        alarm(30);
        pin(1);
        int fd = open(path, flags);
        if (fd < 0)
            die("open in the asker");
        /* Spin for the go, as generic/478's getlk routine spins on its semaphore:
         * a CPU busy here is one the daemon's queue for it waits for. */
        if (fcntl(go[0], F_SETFL, O_NONBLOCK))
            die("O_NONBLOCK");
        char c;
        while (read(go[0], &c, 1) != 1)
            ;
        struct flock l = range(ask, 0, 10);
        if (fcntl(fd, ofd ? F_OFD_GETLK : F_GETLK, &l))
            die("getlk");
        put(back[1], &l.l_type, sizeof l.l_type);
        _exit(0);
    }
    int fd = open(path, flags);
    if (fd < 0)
        die("open in the setter");
    struct flock l = range(set, 0, 10);
    if (fcntl(fd, ofd ? F_OFD_SETLKW : F_SETLKW, &l))
        die("setlk");
    if (op == DUP_CLOSE) {
        int d = dup(fd);
        if (d < 0)
            die("dup");
        close(d);
    } else {
        int cf = op == CLONE_FILES_CLOSE ? CLONE_FILES : 0;
        pid_t c = clone(child_close, stack + sizeof stack, cf | SIGCHLD, &fd);
        if (c < 0)
            die("clone");
        waitpid(c, NULL, 0);
    }
    put(go[1], "g", 1);
    short got;
    get(back[0], &got, sizeof got);
    waitpid(p2, NULL, 0);
    kill(hog, SIGKILL);
    waitpid(hog, NULL, 0);
    close(fd); /* EBADF after a CLONE_FILES child's close: nothing to do */
    printf("%s %s set %s, %s, get %s: %s\n", ofd ? "OFD" : "POSIX",
           rdwr ? "O_RDWR" : "O_RDONLY", set == F_WRLCK ? "wrlck" : "rdlck", op_name[op],
           ask == F_WRLCK ? "wrlck" : "rdlck",
           got == F_UNLCK   ? "lock could be placed"
           : got == F_RDLCK ? "get rdlck"
                            : "get wrlck");
    fflush(stdout);
    close(go[0]);
    close(go[1]);
    close(back[0]);
    close(back[1]);
}

static void run_478(const char *path)
{
    for (int ofd = 1; ofd >= 0; ofd--)
        for (int rdwr = 1; rdwr >= 0; rdwr--)
            for (int op = CLONE_FILES_CLOSE; op <= DUP_CLOSE; op++)
                for (int set = 0; set < 2; set++)
                    for (int ask = 0; ask < 2; ask++) {
                        short s = set ? F_RDLCK : F_WRLCK, a = ask ? F_RDLCK : F_WRLCK;
                        if (!rdwr && s == F_WRLCK)
                            continue; /* a write lock needs a writable open */
                        one_478(path, ofd, rdwr, s, a, op);
                    }
}

/* ---- deadlock cycles ---- */

/* Until process `pid` is in system call `nr` (blocked in its wait), then 50 ms more. */
static void wait_in(pid_t pid, int nr)
{
    char path[64], buf[64];
    snprintf(path, sizeof path, "/proc/%d/syscall", (int)pid);
    for (int tries = 0; tries < 1000; tries++) {
        FILE *f = fopen(path, "r");
        if (!f)
            die("open /proc/PID/syscall");
        char *line = fgets(buf, sizeof buf, f);
        fclose(f);
        if (line && atoi(line) == nr)
            break;
        usleep(5000);
    }
    usleep(50000);
}

static void wait_in_fcntl(pid_t pid)
{
    wait_in(pid, 72 /* fcntl on x86-64 */);
}

static void run_cycle(const char *path, int n)
{
    alarm(60); /* the children's own alarms end a wait that never ends: this, the rest */
    int ready[2], go[2], report[2];
    if (pipe(ready) || pipe(go) || pipe(report))
        die("pipe");
    pid_t kids[64];
    for (int i = 0; i < n; i++) {
        kids[i] = fork();
        if (kids[i] < 0)
            die("fork");
        if (kids[i] == 0) {
            alarm(30);
            int fd = open(path, O_RDWR);
            if (fd < 0)
                die("open");
            struct flock l = range(F_WRLCK, i, 1);
            if (fcntl(fd, F_SETLK, &l))
                die("lock own byte");
            put(ready[1], "r", 1);
            int k;
            get(go[0], &k, sizeof k); /* this process's turn to wait */
            l = range(F_WRLCK, (i + 1) % n, 1);
            int r = fcntl(fd, F_SETLKW, &l);
            int e = r ? errno : 0;
            int msg[2] = {i, e};
            put(report[1], msg, sizeof msg);
            /* The one told EDEADLK lets its own byte go so the others finish. */
            close(fd);
            _exit(0);
        }
    }
    for (int i = 0; i < n; i++) {
        char c;
        get(ready[0], &c, 1);
    }
    /* One at a time: each is in its wait (in fcntl, and a moment more for the
     * request to be seen) before the next is let go, so the last closes the cycle.
     * Which one does is not what is checked: one of the n, and only one, must be
     * told EDEADLK, and the others then get their locks. */
    for (int i = 0; i < n; i++) {
        put(go[1], &i, sizeof i);
        if (i + 1 < n)
            wait_in_fcntl(kids[i]);
    }
    int got = 0, deadlk = 0, other = 0;
    for (int i = 0; i < n; i++) {
        int msg[2];
        get(report[0], msg, sizeof msg);
        if (msg[1] == 0)
            got++;
        else if (msg[1] == EDEADLK)
            deadlk++;
        else
            other++;
    }
    for (int i = 0; i < n; i++)
        waitpid(kids[i], NULL, 0);
    printf("%d processes: %d got the lock, %d EDEADLK, %d another error\n", n, got,
           deadlk, other);
}

/* ---- many waiters ---- */

static const char *wpath;

static void *waiter(void *unused)
{
    (void)unused;
    int fd = open(wpath, O_RDWR);
    if (fd < 0)
        die("open in a waiter");
    struct flock l = range(F_WRLCK, 0, 0);
    if (fcntl(fd, F_OFD_SETLKW, &l))
        die("a waiter's F_OFD_SETLKW");
    close(fd);
    return NULL;
}

static void run_waiters(const char *path, int n, int gap_ms)
{
    wpath = path;
    alarm(120);
    int fd = open(path, O_RDWR);
    if (fd < 0)
        die("open");
    struct flock l = range(F_WRLCK, 0, 0);
    if (fcntl(fd, F_OFD_SETLK, &l))
        die("hold");
    pthread_t *t = calloc(n, sizeof *t);
    for (int i = 0; i < n; i++) {
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setstacksize(&a, 64 * 1024);
        if (pthread_create(&t[i], &a, waiter, NULL))
            die("pthread_create");
        if (gap_ms)
            usleep(gap_ms * 1000);
    }
    printf("waiting\n");
    fflush(stdout);
    char line[64];
    if (!fgets(line, sizeof line, stdin))
        die("stdin");
    l = range(F_UNLCK, 0, 0);
    if (fcntl(fd, F_OFD_SETLK, &l))
        die("let go");
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    printf("all got it\n");
}

/* ---- a waiter woken by an unlock or a close ---- */

enum kind { POSIX, OFD, FLOCK };
static const char *kind_name[] = {"POSIX", "OFD", "flock"};

/* Takes (block: waits for) or lets go of a write lock of kind `k` on `fd`. */
static int lock_kind(int fd, enum kind k, int take, int block)
{
    if (k == FLOCK)
        return flock(fd, take ? LOCK_EX | (block ? 0 : LOCK_NB) : LOCK_UN);
    struct flock l = range(take ? F_WRLCK : F_UNLCK, 0, 0);
    int cmd = k == OFD ? (block ? F_OFD_SETLKW : F_OFD_SETLK) : (block ? F_SETLKW : F_SETLK);
    return fcntl(fd, cmd, &l);
}

static void run_wake(const char *path)
{
    alarm(100);
    for (int k = POSIX; k <= FLOCK; k++)
        for (int by_close = 0; by_close <= 1; by_close++) {
            int go[2];
            if (pipe(go))
                die("pipe");
            /* Forked before the holder opens: it shares no open file with it. */
            pid_t kid = fork();
            if (kid < 0)
                die("fork");
            if (kid == 0) {
                alarm(10); /* never woken: killed, and the case says so */
                char c;
                get(go[0], &c, 1);
                int fd = open(path, O_RDWR);
                if (fd < 0)
                    die("open in the waiter");
                _exit(lock_kind(fd, k, 1, 1) ? 1 : 0);
            }
            int fd = open(path, O_RDWR);
            if (fd < 0)
                die("open");
            if (lock_kind(fd, k, 1, 0))
                die("hold");
            put(go[1], "g", 1);
            wait_in(kid, k == FLOCK ? 73 /* flock on x86-64 */ : 72);
            if (by_close)
                close(fd);
            else if (lock_kind(fd, k, 0, 0))
                die("let go");
            int st;
            if (waitpid(kid, &st, 0) != kid)
                die("waitpid");
            printf("%s lock let go by %s: the waiter %s\n", kind_name[k],
                   by_close ? "a close" : "an unlock",
                   WIFEXITED(st) && WEXITSTATUS(st) == 0 ? "got it" : "did not get it");
            if (!by_close)
                close(fd);
            close(go[0]);
            close(go[1]);
        }
}

int main(int argc, char **argv)
{
    if (argc >= 3 && !strcmp(argv[1], "478"))
        run_478(argv[2]);
    else if (argc >= 4 && !strcmp(argv[1], "cycle"))
        run_cycle(argv[2], atoi(argv[3]));
    else if (argc >= 4 && !strcmp(argv[1], "waiters"))
        run_waiters(argv[2], atoi(argv[3]), argc > 4 ? atoi(argv[4]) : 0);
    else if (argc >= 3 && !strcmp(argv[1], "wake"))
        run_wake(argv[2]);
    else {
        fprintf(stderr, "usage: locks 478 FILE | cycle FILE N | waiters FILE N [GAP_MS] | wake FILE\n");
        return 2;
    }
    return 0;
}
