/*
 * The calls liblynxfs_preload.so replaces, one by one, with their results printed:
 * tests/calls.rs runs this program preloaded in a pool directory D and plainly in a
 * tmpfs directory T, and the two outputs must be identical (the kernel's semantics are
 * the specification). Nothing printed may legitimately differ between the runs: no
 * addresses, inode numbers, device numbers, times (only set ones), nor D's or T's path.
 *
 * Usage: calls SIBLING_NAME SIBLING_ABS   (the working directory is D or T; SIBLING_NAME
 * is a file name in its parent directory, SIBLING_ABS that file's absolute path).
 * Modes the program runs itself in: calls fds A B, calls echo TEXT.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <linux/capability.h>
#include <pthread.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <poll.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/fsuid.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static const char *self;    /* this program's path, for the exec'd children */
static const char *sib;     /* a file name in the parent of the working directory */
static const char *sib_abs; /* its absolute path */

/* Set around the checks of known differences (listed in tests/calls.rs): their lines
 * start with "~ " and are left out of the comparison. */
static int known;
#define KNOWN_BEGIN() (known = 1)
#define KNOWN_END() (known = 0)

/* A line of output, written at once (no stdio buffer a fork could duplicate). */
static void out(const char *fmt, ...) {
    char line[4096];
    int k = known ? snprintf(line, sizeof line, "~ ") : 0;
    va_list ap;
    va_start(ap, fmt);
    int n = k + vsnprintf(line + k, sizeof line - (size_t)k, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof line - 1)
        n = sizeof line - 1;
    if (write(1, line, (size_t)n) != n)
        _exit(99);
}

static const char *ename(int e) {
    const char *n = strerrorname_np(e);
    return n ? n : "E?";
}

/* An integer result: its value, or -1 and the errno's name. */
static long check(int line, const char *what, long r) {
    int e = errno;
    if (r == -1)
        out("%d %s = -1 %s\n", line, what, ename(e));
    else
        out("%d %s = %ld\n", line, what, r);
    errno = e;
    return r;
}
#define C(expr) (errno = 0, check(__LINE__, #expr, (long)(expr)))
/* An fd result (the preload's own fds take numbers too): fd, or -1 and the errno. */
static long fdcheck(int line, const char *what, long r) {
    int e = errno;
    if (r < 0)
        out("%d %s = -1 %s\n", line, what, ename(e));
    else
        out("%d %s = fd\n", line, what);
    errno = e;
    return r;
}
#define FD(expr) (errno = 0, fdcheck(__LINE__, #expr, (long)(expr)))
/* A pointer result: non-NULL, or NULL and the errno. */
static void *ptr(int line, const char *what, void *p) {
    int e = errno;
    if (p)
        out("%d %s ok\n", line, what);
    else
        out("%d %s = NULL %s\n", line, what, ename(e));
    errno = e;
    return p;
}
#define P(expr) (errno = 0, ptr(__LINE__, #expr, (void *)(expr)))
#define SAY(...) out(__VA_ARGS__)

/* The whole contents of a path (at most 4 KiB), or "<errno>". */
static const char *contents(const char *path) {
    static char buf[4096];
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        snprintf(buf, sizeof buf, "<%s>", ename(errno));
        return buf;
    }
    ssize_t n = read(fd, buf, sizeof buf - 1);
    buf[n < 0 ? 0 : n] = 0;
    close(fd);
    return buf;
}

/* `contents` on one line: newlines shown as '|'. */
static const char *oneline(const char *path) {
    char *c = (char *)contents(path);
    for (char *p = c; *p; p++)
        if (*p == '\n')
            *p = '|';
    return c;
}

static void put(const char *path, const char *text) {
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text))
        out("put %s failed: %s\n", path, ename(errno));
    close(fd);
}

static void show_stat(const char *what, const struct stat *st) {
    SAY("  %s: mode %o nlink %lu uid %u gid %u size %lld\n", what, st->st_mode,
        (unsigned long)st->st_nlink, st->st_uid, st->st_gid, (long long)st->st_size);
}

static void wait_child(pid_t pid) {
    int status;
    if (waitpid(pid, &status, 0) != pid)
        SAY("waitpid: %s\n", ename(errno));
    else if (WIFEXITED(status))
        SAY("  child exit %d\n", WEXITSTATUS(status));
    else
        SAY("  child signal %d\n", WTERMSIG(status));
}

/* ---- open family ---- */
static void opens(void) {
    SAY("== open\n");
    int fd = FD(open("f1", O_CREAT | O_EXCL | O_WRONLY, 0666));
    C(write(fd, "hello world", 11));
    C(close(fd));
    FD(open("f1", O_CREAT | O_EXCL | O_WRONLY, 0666));
    struct stat st;
    C(stat("f1", &st));
    show_stat("f1 (umask 022)", &st);
    fd = FD(open("f1", O_WRONLY | O_TRUNC));
    C(fstat(fd, &st));
    SAY("  size after O_TRUNC %lld\n", (long long)st.st_size);
    C(read(fd, &st, 1)); /* EBADF: write-only */
    C(close(fd));
    fd = FD(open("f1", O_WRONLY | O_APPEND));
    C(write(fd, "abc", 3));
    C(lseek(fd, 0, SEEK_SET));
    C(write(fd, "def", 3));
    C(lseek(fd, 0, SEEK_CUR));
    C(pwrite(fd, "gh", 2, 0)); /* Linux: appends despite the offset */
    C(close(fd));
    SAY("  f1: %s\n", contents("f1"));
    fd = FD(open("f1", O_RDONLY));
    C(write(fd, "x", 1)); /* EBADF: read-only */
    C(close(fd));
    C(mkdir("d1", 0777));
    FD(open("f1", O_RDONLY | O_DIRECTORY));
    FD(open("d1", O_WRONLY));
    FD(open("d1", O_RDWR | O_CREAT, 0644));
    C(symlink("f1", "l1"));
    FD(open("l1", O_RDONLY | O_NOFOLLOW));
    KNOWN_BEGIN();
    C(close(FD(open("l1", O_RDONLY | O_NOFOLLOW | O_PATH))));
    KNOWN_END();
    C(symlink("missing", "l2"));
    FD(open("l2", O_CREAT | O_EXCL | O_WRONLY, 0644));
    FD(open("missing", O_RDONLY));
    FD(open("nodir/x", O_CREAT | O_WRONLY, 0644));
    FD(open("f1/x", O_RDONLY));
    FD(open("f1/", O_RDONLY));
    FD(open("", O_RDONLY));
    C(close(FD(open("d1", O_RDONLY | O_DIRECTORY))));
    C(close(FD(creat("c1", 0640))));
    SAY("  c1 mode %o\n", (stat("c1", &st), st.st_mode));
    int dfd = open("d1", O_RDONLY | O_DIRECTORY);
    fd = openat(dfd, "in", O_CREAT | O_RDWR, 0600);
    C(fd >= 0);
    C(write(fd, "inside", 6));
    C(close(fd));
    SAY("  d1/in: %s\n", contents("d1/in"));
    FD(openat(dfd, "nope", O_RDONLY));
    fd = open("f1", O_RDONLY);
    FD(openat(fd, "x", O_RDONLY)); /* ENOTDIR: not a directory fd */
    C(close(fd));
    C(close(FD(openat(dfd, "../f1", O_RDONLY))));
    C(mkdirat(dfd, "sub", 0755));
    C(mkdirat(dfd, "sub", 0755));
    C(close(dfd));
    FD(openat(12345, "x", O_RDONLY)); /* EBADF */
}

/* ---- reads and writes ---- */
static void io(void) {
    SAY("== io\n");
    char b[64];
    int fd = FD(open("io", O_CREAT | O_RDWR | O_TRUNC, 0644));
    C(write(fd, "0123456789", 10));
    C(pwrite(fd, "AB", 2, 4));
    C(pread(fd, b, 6, 2));
    SAY("  pread: %.6s\n", b);
    C(lseek(fd, 0, SEEK_CUR));
    C(pread(fd, b, 10, 100));
    C(pwrite(fd, "x", 1, -1));
    C(pread(fd, b, 1, -1));
    struct iovec v[3] = {{"ab", 2}, {"", 0}, {"cde", 3}};
    C(lseek(fd, 0, SEEK_SET));
    C(writev(fd, v, 3));
    C(pwritev(fd, v, 3, 20));
    char x[3], y[4];
    struct iovec r[2] = {{x, 3}, {y, 4}};
    C(lseek(fd, 0, SEEK_SET));
    C(readv(fd, r, 2));
    SAY("  readv: %.3s|%.4s\n", x, y);
    C(preadv(fd, r, 2, 18));
    SAY("  preadv: %.3s|%.4s\n", x, y);
    C(lseek(fd, 0, SEEK_END));
    C(lseek(fd, -3, SEEK_END));
    C(lseek(fd, -100, SEEK_CUR));
    C(lseek(fd, 0, 42));
    C(read(fd, b, sizeof b));
    C(read(fd, b, sizeof b)); /* EOF */
    C(lseek(fd, 100, SEEK_SET));
    C(write(fd, "z", 1));
    C(lseek(fd, 0, SEEK_END));
    C(pread(fd, b, 4, 50));
    SAY("  hole reads %d %d %d %d\n", b[0], b[1], b[2], b[3]);
    C(close(fd));
    /* holes: data in [0, 4096) and [1 MiB, 1 MiB + 4096) */
    fd = open("holes", O_CREAT | O_RDWR | O_TRUNC, 0644);
    static char page[4096];
    memset(page, 'h', sizeof page);
    C(pwrite(fd, page, sizeof page, 0));
    C(pwrite(fd, page, sizeof page, 1 << 20));
    C(lseek(fd, 0, SEEK_DATA));
    C(lseek(fd, 0, SEEK_HOLE));
    C(lseek(fd, 8192, SEEK_DATA));
    C(lseek(fd, (1 << 20) + 10, SEEK_HOLE));
    C(lseek(fd, (1 << 20) + 4096, SEEK_DATA));
    C(lseek(fd, 0, SEEK_CUR)); /* a failed seek leaves the position */
    /* a punched page becomes a hole */
    C(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096));
    C(lseek(fd, 0, SEEK_HOLE));
    C(lseek(fd, 0, SEEK_DATA));
    C(lseek(fd, 5 << 20, SEEK_HOLE));
    C(close(fd));
    C(read(12345, b, 1));
}

static void stats(void) {
    SAY("== stat\n");
    struct stat st;
    C(stat("f1", &st));
    show_stat("stat f1", &st);
    C(lstat("l1", &st));
    show_stat("lstat l1", &st);
    C(stat("l1", &st));
    show_stat("stat l1", &st);
    C(stat("d1", &st));
    SAY("  d1 mode %o nlink %lu\n", st.st_mode, (unsigned long)st.st_nlink);
    C(stat("l2", &st));
    C(stat("missing", &st));
    C(stat("f1/", &st));
    C(stat("f1/x", &st));
    C(lstat("d1/", &st));
    int dfd = open("d1", O_RDONLY | O_DIRECTORY);
    C(fstatat(dfd, "in", &st, 0));
    show_stat("fstatat d1/in", &st);
    C(fstatat(dfd, "../l1", &st, AT_SYMLINK_NOFOLLOW));
    show_stat("fstatat ../l1 nofollow", &st);
    C(fstatat(dfd, "", &st, AT_EMPTY_PATH));
    SAY("  empty path: dir %d\n", S_ISDIR(st.st_mode));
    C(fstatat(dfd, "", &st, 0));
    C(fstatat(dfd, "in", &st, 0x40000)); /* EINVAL: unknown flag */
    int fd = open("f1", O_RDONLY);
    C(fstatat(fd, "", &st, AT_EMPTY_PATH));
    show_stat("empty path on a file", &st);
    C(fstat(fd, &st));
    C(fstat(12345, &st));
    struct statx sx;
    C(statx(AT_FDCWD, "f1", 0, STATX_BASIC_STATS | STATX_BTIME, &sx));
    SAY("  statx basic %d btime %d mode %o size %llu\n",
        (sx.stx_mask & STATX_BASIC_STATS) == STATX_BASIC_STATS, !!(sx.stx_mask & STATX_BTIME),
        sx.stx_mode, (unsigned long long)sx.stx_size);
    C(statx(fd, "", AT_EMPTY_PATH, STATX_SIZE, &sx));
    SAY("  statx fd size %llu\n", (unsigned long long)sx.stx_size);
    C(statx(AT_FDCWD, "l1", AT_SYMLINK_NOFOLLOW, STATX_TYPE, &sx));
    SAY("  statx l1 link %d\n", S_ISLNK(sx.stx_mode));
    C(statx(dfd, "nope", 0, STATX_TYPE, &sx));
    C(close(fd));
    C(close(dfd));
    SAY("== access\n");
    C(access("f1", F_OK));
    C(access("f1", R_OK | W_OK));
    C(access("f1", X_OK)); /* root too: no x bit */
    C(access("d1", X_OK));
    C(access("missing", F_OK));
    C(access("f1/x", F_OK));
    C(access("f1", 0100));
    dfd = open("d1", O_RDONLY | O_DIRECTORY);
    C(faccessat(dfd, "in", R_OK, 0));
    C(faccessat(dfd, "in", R_OK, AT_EACCESS));
    C(faccessat(dfd, "in", X_OK, AT_EACCESS));
    C(faccessat(AT_FDCWD, "l2", F_OK, AT_SYMLINK_NOFOLLOW));
    C(faccessat(AT_FDCWD, "l2", F_OK, 0));
    C(close(dfd));
}

static void names(void) {
    SAY("== names\n");
    struct stat st;
    C(mkdir("d1", 0777));
    C(mkdir("nodir/x", 0777));
    C(mkdir("f1/x", 0777));
    C(mkdir("n", 0777));
    C(mkdir("n/m", 0700));
    C(stat("n/m", &st));
    SAY("  n/m mode %o\n", st.st_mode);
    C(rmdir("n"));
    C(rmdir("f1"));
    C(rmdir("n/m/."));
    C(rmdir("missing"));
    C(unlink("n"));
    C(unlink("missing"));
    C(unlink("f1/"));
    put("r1", "one");
    put("r2", "two");
    C(rename("r1", "r2"));
    SAY("  r2: %s r1: %s\n", contents("r2"), contents("r1"));
    C(rename("r2", "n"));
    C(rename("n", "r2"));
    C(rename("n", "n/m/inner"));
    C(rename("missing", "x"));
    C(mkdir("e", 0755));
    C(rename("n", "e"));
    C(stat("e/m", &st));
    C(mkdir("n", 0755));
    put("n/file", "f");
    C(rename("e", "n"));
    C(rename("r2", "r2"));
    put("a1", "A");
    put("b1", "B");
    C(renameat2(AT_FDCWD, "a1", AT_FDCWD, "b1", RENAME_NOREPLACE));
    C(renameat2(AT_FDCWD, "a1", AT_FDCWD, "c2", RENAME_NOREPLACE));
    C(renameat2(AT_FDCWD, "c2", AT_FDCWD, "b1", RENAME_EXCHANGE));
    SAY("  after exchange c2: %s b1: %s\n", contents("c2"), contents("b1"));
    C(renameat2(AT_FDCWD, "c2", AT_FDCWD, "zz", RENAME_EXCHANGE));
    C(renameat2(AT_FDCWD, "c2", AT_FDCWD, "n", RENAME_EXCHANGE));
    SAY("  n is now: %s\n", contents("n"));
    C(stat("c2/file", &st));
    C(renameat2(AT_FDCWD, "c2", AT_FDCWD, "n", RENAME_EXCHANGE | RENAME_NOREPLACE));
    int dfd = open("d1", O_RDONLY | O_DIRECTORY);
    C(renameat(dfd, "in", AT_FDCWD, "moved"));
    SAY("  moved: %s\n", contents("moved"));
    C(link("moved", "hard"));
    C(stat("moved", &st));
    SAY("  nlink %lu\n", (unsigned long)st.st_nlink);
    C(link("moved", "hard"));
    C(link("d1", "dlink"));
    C(link("missing", "x"));
    C(linkat(AT_FDCWD, "l1", dfd, "l1hard", 0));
    C(lstat("d1/l1hard", &st));
    SAY("  linkat no follow: link %d\n", S_ISLNK(st.st_mode));
    C(linkat(AT_FDCWD, "l1", dfd, "l1follow", AT_SYMLINK_FOLLOW));
    C(lstat("d1/l1follow", &st));
    SAY("  linkat follow: reg %d\n", S_ISREG(st.st_mode));
    C(unlink("hard"));
    C(stat("moved", &st));
    SAY("  nlink %lu\n", (unsigned long)st.st_nlink);
    char buf[64];
    C(symlink("some/where", "sl"));
    C(symlink("x", "sl"));
    C(symlink("", "empty-target"));
    ssize_t n = C(readlink("sl", buf, sizeof buf));
    SAY("  sl -> %.*s\n", (int)(n < 0 ? 0 : n), buf);
    n = C(readlink("sl", buf, 4));
    SAY("  truncated %.*s\n", (int)(n < 0 ? 0 : n), buf);
    C(readlink("f1", buf, sizeof buf));
    C(readlink("missing", buf, sizeof buf));
    C(readlink("sl", buf, 0));
    C(symlinkat("../f1", dfd, "up"));
    n = C(readlinkat(dfd, "up", buf, sizeof buf));
    SAY("  up -> %.*s: %s\n", (int)(n < 0 ? 0 : n), buf, contents("d1/up"));
    C(unlinkat(dfd, "up", 0));
    C(mkdirat(dfd, "gone", 0755));
    C(unlinkat(dfd, "gone", 0));
    C(unlinkat(dfd, "gone", AT_REMOVEDIR));
    C(unlinkat(dfd, "l1hard", AT_REMOVEDIR));
    C(unlinkat(dfd, "l1hard", 0x8000));
    C(close(dfd));
}

static void sizes(void) {
    SAY("== sizes\n");
    struct stat st;
    put("t1", "0123456789");
    C(truncate("t1", 4));
    SAY("  t1: %s\n", contents("t1"));
    C(truncate("t1", 8));
    C(stat("t1", &st));
    SAY("  size %lld\n", (long long)st.st_size);
    C(truncate("t1", -1));
    C(truncate("d1", 0));
    C(truncate("missing", 0));
    int fd = open("t1", O_RDONLY);
    C(ftruncate(fd, 0));
    C(close(fd));
    fd = open("t1", O_RDWR);
    C(ftruncate(fd, 2));
    C(ftruncate(fd, -5));
    C(fallocate(fd, 0, 0, 100));
    C(fstat(fd, &st));
    SAY("  size %lld\n", (long long)st.st_size);
    C(fallocate(fd, FALLOC_FL_KEEP_SIZE, 100, 4096));
    C(fstat(fd, &st));
    SAY("  size %lld\n", (long long)st.st_size);
    C(fallocate(fd, 0, -1, 10));
    C(fallocate(fd, 0, 0, 0));
    C(pwrite(fd, "abcdefgh", 8, 0));
    C(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 2, 3));
    char b[8];
    C(pread(fd, b, 8, 0));
    SAY("  punched %d %d %d %d %d %c\n", b[0], b[2], b[3], b[4], b[5] == 'f', b[1]);
    C(fallocate(fd, FALLOC_FL_PUNCH_HOLE, 2, 3));
    C(posix_fallocate(fd, 0, 200));
    C(fstat(fd, &st));
    SAY("  size %lld\n", (long long)st.st_size);
    C(fsync(fd));
    C(fdatasync(fd));
    C(syncfs(fd));
    sync();
    C(close(fd));
    C(fsync(12345));
    C(syncfs(12345));
}

static void times_show(const char *path, int flags) {
    struct stat st;
    if (fstatat(AT_FDCWD, path, &st, flags) == 0)
        SAY("  %s atime %lld.%09ld mtime %lld.%09ld\n", path, (long long)st.st_atim.tv_sec,
            st.st_atim.tv_nsec, (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
}

static void attrs(void) {
    SAY("== attrs\n");
    struct stat st;
    put("m1", "m");
    C(chmod("m1", 0600));
    C(stat("m1", &st));
    SAY("  mode %o\n", st.st_mode);
    C(chmod("m1", 07777));
    C(stat("m1", &st));
    SAY("  mode %o\n", st.st_mode);
    C(chmod("missing", 0600));
    int fd = open("m1", O_RDONLY);
    C(fchmod(fd, 0640));
    C(fstat(fd, &st));
    SAY("  mode %o\n", st.st_mode);
    C(fchmodat(AT_FDCWD, "m1", 0604, 0));
    C(fchmodat(AT_FDCWD, "m1", 0606, AT_SYMLINK_NOFOLLOW));
    C(fchmodat(AT_FDCWD, "l1", 0606, AT_SYMLINK_NOFOLLOW));
    C(stat("m1", &st));
    SAY("  mode %o\n", st.st_mode);
    C(chown("m1", 1000, 1001));
    C(stat("m1", &st));
    SAY("  owner %u %u\n", st.st_uid, st.st_gid);
    C(chmod("m1", 06755));
    KNOWN_BEGIN();
    C(fchown(fd, -1, -1));
    C(fstat(fd, &st));
    SAY("  mode after fchown -1 -1 %o\n", st.st_mode);
    KNOWN_END();
    C(fchown(fd, 0, -1));
    C(fstat(fd, &st));
    SAY("  mode after fchown %o owner %u %u\n", st.st_mode, st.st_uid, st.st_gid);
    C(lchown("l1", 7, 8));
    C(lstat("l1", &st));
    SAY("  l1 owner %u %u\n", st.st_uid, st.st_gid);
    C(stat("l1", &st));
    SAY("  f1 owner %u %u\n", st.st_uid, st.st_gid);
    C(fchownat(AT_FDCWD, "l1", 9, 9, AT_SYMLINK_NOFOLLOW));
    C(chown("missing", 1, 1));
    struct timespec ts[2] = {{1000000000, 123456789}, {1100000000, 5}};
    C(utimensat(AT_FDCWD, "m1", ts, 0));
    times_show("m1", 0);
    struct timespec omit[2] = {{0, UTIME_OMIT}, {1200000000, 0}};
    C(utimensat(AT_FDCWD, "m1", omit, 0));
    times_show("m1", 0);
    struct timespec now[2] = {{0, UTIME_NOW}, {0, UTIME_OMIT}};
    C(futimens(fd, now));
    C(fstat(fd, &st));
    SAY("  atime recent %d mtime %lld\n", llabs(st.st_atim.tv_sec - time(NULL)) < 60,
        (long long)st.st_mtim.tv_sec);
    C(utimensat(AT_FDCWD, "l1", ts, AT_SYMLINK_NOFOLLOW));
    times_show("l1", AT_SYMLINK_NOFOLLOW);
    /* Before 1970 and the ends of the range (issue 17). */
    struct timespec old[2] = {{-315619200, 0}, {-1, 500000000}};
    C(utimensat(AT_FDCWD, "m1", old, 0));
    times_show("m1", 0);
    struct timespec ends[2] = {{LLONG_MIN, 0}, {LLONG_MAX, 0}};
    C(utimensat(AT_FDCWD, "m1", ends, 0));
    times_show("m1", 0);
    struct timespec bad[2] = {{0, 1000000000}, {0, 0}};
    C(utimensat(AT_FDCWD, "m1", bad, 0));
    C(utimensat(AT_FDCWD, "missing", NULL, 0));
    C(futimens(fd, NULL));
    C(fstat(fd, &st));
    SAY("  now: %d\n", llabs(st.st_mtim.tv_sec - time(NULL)) < 60);
    C(close(fd));
}

static void xattrs(void) {
    SAY("== xattrs\n");
    char b[256];
    C(setxattr("f1", "user.a", "1", 1, 0));
    C(setxattr("f1", "user.b", "22", 2, XATTR_CREATE));
    C(setxattr("f1", "user.b", "x", 1, XATTR_CREATE));
    C(setxattr("f1", "user.c", "x", 1, XATTR_REPLACE));
    C(setxattr("f1", "user.b", "333", 3, XATTR_REPLACE));
    C(setxattr("f1", "nonsense.b", "x", 1, 0));
    C(setxattr("f1", "user.", "x", 1, 0));
    C(setxattr("missing", "user.a", "x", 1, 0));
    C(getxattr("f1", "user.b", NULL, 0));
    C(getxattr("f1", "user.b", b, 2));
    ssize_t n = C(getxattr("f1", "user.b", b, sizeof b));
    SAY("  user.b = %.*s\n", (int)(n < 0 ? 0 : n), b);
    C(getxattr("f1", "user.none", b, sizeof b));
    ssize_t len = C(listxattr("f1", NULL, 0));
    C(listxattr("f1", b, 3));
    n = C(listxattr("f1", b, sizeof b));
    /* the order of the names is the file system's: print them sorted */
    char *names[8];
    int k = 0;
    for (char *p = b; p < b + n && k < 8; p += strlen(p) + 1)
        names[k++] = p;
    for (int i = 0; i < k; i++)
        for (int j = i + 1; j < k; j++)
            if (strcmp(names[i], names[j]) > 0) {
                char *t = names[i];
                names[i] = names[j];
                names[j] = t;
            }
    for (int i = 0; i < k; i++)
        SAY("  name %s\n", names[i]);
    SAY("  list length matches %d\n", len == n);
    C(removexattr("f1", "user.a"));
    C(removexattr("f1", "user.a"));
    int fd = open("f1", O_RDONLY);
    C(fsetxattr(fd, "user.f", "fd", 2, 0));
    n = C(fgetxattr(fd, "user.f", b, sizeof b));
    C(flistxattr(fd, b, sizeof b));
    C(fremovexattr(fd, "user.f"));
    C(fgetxattr(fd, "user.f", b, sizeof b));
    C(close(fd));
    C(lsetxattr("l1", "user.l", "x", 1, 0)); /* EPERM: user.* on a symlink */
    C(lgetxattr("l1", "user.b", b, sizeof b));
    C(getxattr("l1", "user.b", b, sizeof b)); /* follows to f1 */
    C(llistxattr("l1", b, sizeof b));
    C(lremovexattr("l1", "user.b"));
    C(setxattr("d1", "user.dir", "d", 1, 0));
    C(getxattr("d1", "user.dir", b, sizeof b));
    C(fgetxattr(12345, "user.dir", b, sizeof b));
}

/* The names of a directory, sorted, with their d_type. */
static void list_dir(DIR *d) {
    char names[64][64];
    int k = 0;
    struct dirent *e;
    errno = 0;
    while ((e = readdir(d)) && k < 64)
        snprintf(names[k++], 64, "%.50s:%d", e->d_name, e->d_type);
    if (errno)
        SAY("  readdir: %s\n", ename(errno));
    qsort(names, (size_t)k, 64, (int (*)(const void *, const void *))strcmp);
    SAY(" ");
    for (int i = 0; i < k; i++)
        SAY(" %s", names[i]);
    SAY("\n");
}

static void dirs(void) {
    SAY("== dirs\n");
    C(mkdir("ls", 0755));
    put("ls/a", "a");
    put("ls/b", "b");
    C(mkdir("ls/c", 0755));
    C(symlink("a", "ls/s"));
    DIR *d = P(opendir("ls"));
    list_dir(d);
    rewinddir(d);
    SAY("  after rewind:");
    list_dir(d);
    rewinddir(d);
    struct dirent *e = readdir(d);
    e = readdir(d);
    long pos = telldir(d);
    e = readdir(d);
    char name[256];
    snprintf(name, sizeof name, "%s", e ? e->d_name : "(none)");
    readdir(d);
    seekdir(d, pos);
    e = readdir(d);
    SAY("  seekdir back: same %d\n", e && !strcmp(e->d_name, name));
    C(dirfd(d) >= 0);
    struct stat st;
    C(fstat(dirfd(d), &st));
    SAY("  dirfd is a dir %d\n", S_ISDIR(st.st_mode));
    C(closedir(d));
    P(opendir("f1"));
    P(opendir("missing"));
    int fd = open("ls", O_RDONLY | O_DIRECTORY);
    d = P(fdopendir(fd));
    C(dirfd(d) == fd);
    list_dir(d);
    C(closedir(d));
    C(fcntl(fd, F_GETFD)); /* closedir closed it */
    fd = open("f1", O_RDONLY);
    P(fdopendir(fd));
    C(close(fd));
    P(fdopendir(12345));
    C(unlink("ls/a"));
    d = opendir("ls");
    list_dir(d);
    closedir(d);
}

/* The working directory relative to where the program started. */
static void show_cwd(const char *start) {
    char b[PATH_MAX];
    if (!getcwd(b, sizeof b)) {
        SAY("  getcwd: %s\n", ename(errno));
        return;
    }
    size_t n = strlen(start);
    SAY("  cwd: %s\n", strncmp(b, start, n) ? "(elsewhere)" : b[n] ? b + n : "(start)");
}

static void cwds(void) {
    SAY("== cwd\n");
    char start[PATH_MAX];
    if (!getcwd(start, sizeof start))
        SAY("getcwd: %s\n", ename(errno));
    C(mkdir("w", 0755));
    C(mkdir("w/x", 0755));
    put("w/x/file", "in x");
    C(chdir("w"));
    show_cwd(start);
    SAY("  x/file: %s\n", contents("x/file"));
    C(chdir("x"));
    show_cwd(start);
    SAY("  file: %s ../../f1 size %d\n", contents("file"), (int)strlen(contents("../../f1")));
    C(chdir(".."));
    show_cwd(start);
    C(chdir("missing"));
    C(chdir("x/file"));
    int fd = open("x", O_RDONLY | O_DIRECTORY);
    C(chdir(start));
    show_cwd(start);
    C(fchdir(fd));
    show_cwd(start);
    put("made-here", "m");
    C(close(fd));
    int f = open("made-here", O_RDONLY);
    C(fchdir(f));
    C(close(f));
    C(chdir("../.."));
    show_cwd(start);
    SAY("  w/x/made-here: %s\n", contents("w/x/made-here"));
    char small[2];
    P(getcwd(small, sizeof small));
    char *dyn = P(getcwd(NULL, 0));
    SAY("  dynamic cwd is start %d\n", dyn && !strcmp(dyn, start));
    free(dyn);
}

/* Whether `st` is the file `path` names. */
static int same_file(const struct stat *st, const char *path) {
    struct stat o;
    return stat(path, &o) == 0 && o.st_ino == st->st_ino && o.st_dev == st->st_dev;
}

/* Where ".." leads from a removed directory open as `fd`, removed from the working
 * directory: there, and names are made through it (and "../.." beyond). */
static void removed_dir_dotdot(int fd) {
    struct stat st;
    if (C(fstatat(fd, "..", &st, 0)) == 0)
        SAY("  .. is the cwd %d\n", same_file(&st, "."));
    if (C(fstatat(fd, "./..", &st, 0)) == 0)
        SAY("  ./.. is the cwd %d\n", same_file(&st, "."));
    if (C(fstatat(fd, "../..", &st, 0)) == 0)
        SAY("  ../.. is the cwd's parent %d\n", same_file(&st, ".."));
    int f = FD(openat(fd, "../via-removed", O_CREAT | O_RDWR, 0644));
    if (f >= 0)
        C(close(f));
    C(access("via-removed", F_OK));
    C(unlink("via-removed"));
    C(mkdirat(fd, "../via-removed-dir", 0755));
    C(rmdir("via-removed-dir"));
}

/* What a removed directory still open as `fd` answers. */
static void removed_dir_steps(int fd) {
    struct stat st;
    C(fstat(fd, &st));
    SAY("  nlink %ld dir %d\n", (long)st.st_nlink, S_ISDIR(st.st_mode));
    removed_dir_dotdot(fd);
    char buf[4096];
    C(getdents64(fd, buf, sizeof buf));
    FD(openat(fd, "x", O_CREAT | O_RDWR, 0644));
    C(mkdirat(fd, "x", 0755));
    C(symlinkat("t", fd, "x"));
    C(fstatat(fd, "x", &st, 0));
    int t = FD(openat(fd, ".", O_TMPFILE | O_RDWR, 0600));
    if (t >= 0)
        C(close(t));
    C(unlinkat(fd, ".", AT_REMOVEDIR));
    DIR *d = P(fdopendir(FD(openat(fd, ".", O_RDONLY | O_DIRECTORY))));
    if (d) {
        errno = 0;
        struct dirent *e = readdir(d);
        SAY("  readdir: %s, errno %d\n", e ? e->d_name : "(end)", errno);
        C(closedir(d));
    }
}

/* Directories removed while open (rmdir, a rename over them) stay usable. */
static void removed_dirs(void) {
    SAY("== removed dirs\n");
    char start[PATH_MAX];
    if (!getcwd(start, sizeof start))
        SAY("getcwd: %s\n", ename(errno));
    C(mkdir("rd", 0755));
    int rd = FD(open("rd", O_RDONLY | O_DIRECTORY));
    C(rmdir("rd"));
    removed_dir_steps(rd);
    C(mkdir("rv", 0755));
    C(mkdir("rn", 0755));
    int rv = FD(open("rv", O_RDONLY | O_DIRECTORY));
    C(rename("rn", "rv"));
    removed_dir_steps(rv);
    C(close(rv));
    /* A removed working directory. */
    C(fchdir(rd));
    struct stat st;
    C(stat(".", &st));
    SAY("  cwd nlink %ld\n", (long)st.st_nlink);
    C(chdir("."));
    char here[PATH_MAX];
    P(getcwd(here, sizeof here));
    P(getcwd(NULL, 0));
    if (C(stat("..", &st)) == 0)
        SAY("  cwd .. is start %d\n", same_file(&st, start));
    FD(open("y", O_CREAT | O_RDWR, 0644));
    DIR *d = P(opendir("."));
    if (d) {
        errno = 0;
        struct dirent *e = readdir(d);
        SAY("  readdir cwd: %s, errno %d\n", e ? e->d_name : "(end)", errno);
        C(closedir(d));
    }
    C(chdir(start));
    C(close(rd));
}

/* linkat of `fd` through /proc/self/fd/N, as programs name an O_TMPFILE file. */
static long link_proc(int fd, const char *to) {
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    return linkat(AT_FDCWD, proc, AT_FDCWD, to, AT_SYMLINK_FOLLOW);
}

/* O_TMPFILE: an unnamed file, named by linkat (AT_EMPTY_PATH, or /proc/self/fd/N with
 * AT_SYMLINK_FOLLOW), unless made with O_EXCL; what open refuses with it. */
static void tmpfiles(void) {
    SAY("== tmpfiles\n");
    C(mkdir("tf", 0755));
    int fd = FD(open("tf", O_TMPFILE | O_RDWR, 0640));
    C(write(fd, "unnamed", 7));
    struct stat st;
    C(fstat(fd, &st));
    show_stat("tmpfile", &st);
    DIR *d = opendir("tf");
    if (d) {
        list_dir(d);
        closedir(d);
    }
    C(linkat(fd, "", AT_FDCWD, "tf/by-empty", AT_EMPTY_PATH));
    C(fstat(fd, &st));
    show_stat("linked", &st);
    SAY("  by-empty: %s\n", contents("tf/by-empty"));
    C(linkat(fd, "", AT_FDCWD, "tf/by-empty", AT_EMPTY_PATH));
    C(linkat(fd, "", AT_FDCWD, "tf/second", AT_EMPTY_PATH));
    C(close(fd));
    fd = FD(open("tf", O_TMPFILE | O_WRONLY, 0600));
    C(link_proc(fd, "tf/by-proc"));
    C(stat("tf/by-proc", &st));
    show_stat("by-proc", &st);
    C(close(fd));
    fd = FD(open("tf/", O_TMPFILE | O_EXCL | O_RDWR, 0600));
    C(write(fd, "excl", 4));
    C(linkat(fd, "", AT_FDCWD, "tf/excl", AT_EMPTY_PATH));
    C(link_proc(fd, "tf/excl"));
    C(close(fd));
    FD(open("tf", O_TMPFILE | O_RDONLY, 0600));
    FD(open("tf", O_TMPFILE | O_CREAT | O_RDWR, 0600));
    FD(open("tf/by-proc", O_TMPFILE | O_RDWR, 0600));
    FD(open("missing", O_TMPFILE | O_RDWR, 0600));
    /* A file whose last name went, and a directory, get no new name. */
    fd = FD(open("tf/gone", O_CREAT | O_RDWR, 0644));
    C(unlink("tf/gone"));
    C(linkat(fd, "", AT_FDCWD, "tf/back", AT_EMPTY_PATH));
    C(link_proc(fd, "tf/back"));
    C(close(fd));
    int dfd = FD(open("tf", O_RDONLY | O_DIRECTORY));
    C(linkat(dfd, "", AT_FDCWD, "tf/dir-link", AT_EMPTY_PATH));
    C(linkat(dfd, "", AT_FDCWD, "tf/dir-link", 0));
    /* Relative to a directory descriptor. */
    fd = FD(openat(dfd, ".", O_TMPFILE | O_RDWR, 0644));
    C(linkat(fd, "", dfd, "at-dir", AT_EMPTY_PATH));
    C(close(fd));
    C(close(dfd));
    d = opendir("tf");
    if (d) {
        list_dir(d);
        closedir(d);
    }
    const char *made[] = {"tf/by-empty", "tf/second", "tf/by-proc", "tf/at-dir"};
    for (size_t i = 0; i < sizeof made / sizeof *made; i++)
        C(unlink(made[i]));
    C(rmdir("tf"));
}

/* ioctl: FIGETBSZ and FS_IOC_FIEMAP on a pool file are the library's; every other
 * request, and any on a kernel fd, the kernel's. */
static void ioctls(void) {
    SAY("== ioctls\n");
    int p[2];
    C(pipe(p));
    C(write(p[1], "abc", 3));
    int n = -1;
    C(ioctl(p[0], FIONREAD, &n));
    SAY("  pipe holds %d\n", n);
    C(close(p[0]));
    C(close(p[1]));
    put("io-file", "0123456789");
    int fd = FD(open("io-file", O_RDONLY));
    int bs = 0;
    C(ioctl(fd, FIGETBSZ, &bs));
    SAY("  block size %d\n", bs);
    /* Not one of the library's: the stand-in fd answers ENOTTY (a known difference). */
    KNOWN_BEGIN();
    C(ioctl(fd, FIONREAD, &n));
    KNOWN_END();
    struct {
        struct fiemap fm;
        struct fiemap_extent ext[4];
    } m;
    memset(&m, 0, sizeof m);
    m.fm.fm_length = FIEMAP_MAX_OFFSET;
    m.fm.fm_extent_count = 4;
    /* tmpfs has no FIEMAP (EOPNOTSUPP): a known difference. */
    KNOWN_BEGIN();
    if (C(ioctl(fd, FS_IOC_FIEMAP, &m.fm)) == 0)
        SAY("  %u extent, logical %llu length %llu last %d\n", m.fm.fm_mapped_extents,
            (unsigned long long)m.ext[0].fe_logical, (unsigned long long)m.ext[0].fe_length,
            (m.ext[0].fe_flags & FIEMAP_EXTENT_LAST) != 0);
    KNOWN_END();
    C(close(fd));
    /* A kernel file (beside the directory): the kernel answers, in both runs. */
    fd = FD(open(sib_abs, O_RDONLY));
    C(ioctl(fd, FS_IOC_FIEMAP, &m.fm));
    C(ioctl(fd, FIGETBSZ, &bs));
    C(close(fd));
    C(unlink("io-file"));
}

static void fds_and_locks(void) {
    SAY("== fds\n");
    int fd = open("dups", O_CREAT | O_RDWR | O_TRUNC, 0644);
    C(write(fd, "0123456789", 10));
    int d = C(dup(fd) > fd);
    d = dup(fd);
    C(lseek(d, 2, SEEK_SET));
    C(lseek(fd, 0, SEEK_CUR)); /* the offset is shared */
    C(dup2(fd, 100));
    FD(dup2(fd, fd));
    C(dup2(12345, 101));
    C(lseek(100, 0, SEEK_CUR));
    C(fcntl(100, F_GETFD));
    C(dup3(fd, 101, O_CLOEXEC));
    C(fcntl(101, F_GETFD));
    C(dup3(fd, fd, 0));
    C(dup3(fd, 102, 0x1234));
    C(fcntl(fd, F_DUPFD, 200));
    C(fcntl(fd, F_DUPFD_CLOEXEC, 200));
    C(fcntl(201, F_GETFD));
    C(fcntl(201, F_SETFD, 0));
    C(fcntl(201, F_GETFD));
    C(fcntl(fd, F_GETFL) & (O_ACCMODE | O_APPEND));
    C(fcntl(fd, F_SETFL, O_APPEND));
    C(fcntl(d, F_GETFL) & (O_ACCMODE | O_APPEND)); /* shared by the description */
    C(lseek(fd, 0, SEEK_SET));
    C(write(fd, "A", 1));
    C(lseek(fd, 0, SEEK_CUR));
    C(fcntl(fd, F_SETFL, 0));
    C(fcntl(fd, F_GETFL) & O_APPEND);
    C(close(100));
    C(close(100));
    C(fcntl(100, F_GETFD));
    close(101);
    close(200);
    close(201);
    close(d);
    SAY("== locks\n");
    struct flock l = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 10};
    C(fcntl(fd, F_SETLK, &l));
    int rd = open("dups", O_RDONLY);
    struct flock w = l;
    C(fcntl(rd, F_SETLK, &w)); /* EBADF: a write lock needs a writable fd */
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        struct flock q = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 5, .l_len = 1};
        C(fcntl(fd, F_GETLK, &q));
        SAY("  child sees type %s pid is parent %d start %lld len %lld\n",
            q.l_type == F_WRLCK ? "WR" : q.l_type == F_UNLCK ? "UN" : "RD", q.l_pid == getppid(),
            (long long)q.l_start, (long long)q.l_len);
        struct flock t = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
        C(fcntl(fd, F_SETLK, &t));
        struct flock u = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 20, .l_len = 10};
        C(fcntl(fd, F_SETLK, &u));
        _exit(0);
    }
    wait_child(pid);
    struct flock q = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 20, .l_len = 1};
    C(fcntl(fd, F_GETLK, &q));
    SAY("  after the child: %s\n", q.l_type == F_UNLCK ? "UN" : "locked");
    l.l_type = F_UNLCK;
    C(fcntl(fd, F_SETLK, &l));
    C(flock(fd, LOCK_EX));
    C(flock(fd, LOCK_UN));
    close(rd);
    close(fd);
}

static void stdio_calls(void) {
    SAY("== stdio\n");
    FILE *f = P(fopen("s.txt", "w+"));
    C(fileno(f) >= 3);
    C(fprintf(f, "line %d\nsecond\n", 1));
    C(fseek(f, 0, SEEK_SET));
    char b[64];
    P(fgets(b, sizeof b, f));
    SAY("  fgets: %s", b);
    C(ftell(f));
    C(fseek(f, 0, SEEK_END));
    C(ftell(f));
    C(fclose(f));
    f = P(fopen("s.txt", "a"));
    C(fputs("third\n", f));
    C(fclose(f));
    SAY("  s.txt: %s\n", oneline("s.txt"));
    P(fopen("missing", "r"));
    P(fopen("d1", "w"));
    int fd = open("s.txt", O_RDONLY);
    f = P(fdopen(fd, "r"));
    C(fileno(f) == fd);
    P(fgets(b, sizeof b, f));
    SAY("  fdopen fgets: %s", b);
    C(fclose(f));
    C(close(fd));
    f = P(fopen("s.txt", "r"));
    f = P(freopen("f1", "r", f));
    if (f) {
        P(fgets(b, sizeof b, f));
        SAY("  freopen: %s\n", b);
        C(fclose(f));
    }
    /* freopen keeps its FILE: a pointer saved before it (`FILE *log = stdout`, C++'s
     * cout) writes to the new file, as the returned one does. The saved pointer is
     * used only if it is the one returned (else it was freed). */
    f = P(fopen("fr1", "w"));
    FILE *saved = f;
    C(fputs("one\n", f));
    FILE *g = P(freopen("fr2", "w", f));
    C(g == saved);
    if (g) {
        C(fputs("two\n", g == saved ? saved : g));
        C(fclose(g));
    }
    SAY("  fr1: %s fr2: %s\n", oneline("fr1"), oneline("fr2"));
    f = P(fopen("fr1", "r"));
    saved = f;
    g = P(freopen("fr2", "a", f));
    C(g == saved);
    if (g) {
        C(fputs("three\n", g));
        C(fclose(g));
    }
    SAY("  fr2: %s\n", oneline("fr2"));
}

static void processes(void) {
    SAY("== fork\n");
    int fd = open("forked", O_CREAT | O_RDWR | O_TRUNC, 0644);
    C(write(fd, "ab", 2));
    pid_t pid = fork();
    if (pid == 0) {
        C(write(fd, "cd", 2));
        _exit(0);
    }
    wait_child(pid);
    C(lseek(fd, 0, SEEK_CUR));
    C(write(fd, "ef", 2));
    SAY("  forked: %s\n", contents("forked"));
    C(close(fd));

    SAY("== exec\n");
    int keep = open("forked", O_RDONLY);
    int drop = open("forked", O_RDONLY | O_CLOEXEC);
    C(lseek(keep, 1, SEEK_SET));
    char a1[16], a2[16];
    snprintf(a1, sizeof a1, "%d", keep);
    snprintf(a2, sizeof a2, "%d", drop);
    pid = fork();
    if (pid == 0) {
        execl(self, self, "fds", a1, a2, (char *)NULL);
        _exit(127);
    }
    wait_child(pid);
    C(lseek(keep, 0, SEEK_CUR)); /* the exec'd child read 2 bytes */

    SAY("== stdout to a pool file, then exec\n");
    pid = fork();
    if (pid == 0) {
        int o = open("stdout.txt", O_CREAT | O_WRONLY | O_TRUNC, 0644);
        dup2(o, 1);
        close(o);
        printf("before exec\n");
        fflush(stdout);
        execl(self, self, "echo", "after exec", (char *)NULL);
        _exit(127);
    }
    wait_child(pid);
    SAY("  stdout.txt: %s\n", oneline("stdout.txt"));

    SAY("== posix_spawn\n");
    int o = open("spawned.txt", O_CREAT | O_WRONLY | O_TRUNC, 0644);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, o, 1);
    char *argv[] = {(char *)self, "echo", "spawned", NULL};
    int r = posix_spawn(&pid, self, &fa, NULL, argv, environ);
    SAY("  posix_spawn = %s\n", r ? ename(r) : "0");
    if (!r)
        wait_child(pid);
    posix_spawn_file_actions_destroy(&fa);
    C(lseek(o, 0, SEEK_CUR));
    C(close(o));
    SAY("  spawned.txt: %s\n", oneline("spawned.txt"));

    SAY("== vfork\n");
    pid = vfork();
    if (pid == 0) {
        execl(self, self, "fds", a1, a2, (char *)NULL);
        _exit(127);
    }
    wait_child(pid);
    C(close(keep));
    C(close(drop));
}

/* Fd numbers around closed pool fds (the preload keeps a closed one's kernel fd for
 * the next open, see fds::park): every number printed is the kernel's own choice in
 * the plain run. Numbers relative to a kernel fd opened first. */
static int proc_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

static void fd_numbers(void) {
    SAY("== fd numbers\n");
    int base = open("/dev/null", O_RDONLY);
    const int ro = O_RDONLY | O_CLOEXEC;
    for (int i = 0; i < 3; i++) {
        int f = open("num", O_CREAT | O_RDWR | O_CLOEXEC, 0644);
        SAY("  open %d: base+%d\n", i, f - base);
        C(close(f));
    }
    /* The lowest free number, whichever fd freed it. */
    int a = open("num", ro), b = open("num", ro);
    C(close(a));
    int c = open("num", ro);
    SAY("  the lower one again: %d\n", c == a);
    C(close(b));
    int k = open("/dev/null", O_RDONLY);
    SAY("  a kernel open after a pool close: base+%d\n", k - base);
    C(close(k));
    C(close(c));
    int d = open("num", ro);
    SAY("  a pool open after a kernel close: base+%d\n", d - base);
    C(close(d));
    C(fcntl(d, F_GETFD)); /* EBADF: closed */
    d = open("num", ro);
    C(close(d));
    C(close(d)); /* EBADF: closed already */
    FILE *fp = fopen("/dev/null", "r");
    int g = open("num", ro);
    C(close(g));
    int fpn = fileno(fp);
    fclose(fp);
    int h = open("num", ro);
    SAY("  a pool open after fclose: the stream's number %d\n", h == fpn);
    C(close(h));
    DIR *dir = opendir("/");
    int dn = dirfd(dir);
    g = open("num", ro);
    C(close(g));
    closedir(dir);
    h = open("num", ro);
    SAY("  a pool open after closedir: the stream's number %d\n", h == dn);
    /* dup2 and close_range onto a just-closed pool fd's number. */
    C(close(h));
    C(dup2(base, h) == h);
    C(fcntl(h, F_GETFD));
    C(close(h));
    int e = open("num", ro);
    C(close(e));
    C(close_range((unsigned)e, (unsigned)e + 10, 0));
    k = open("/dev/null", O_RDONLY);
    SAY("  a kernel open after close_range: base+%d\n", k - base);
    C(close(k));
    /* Fds made without a path (a pipe, a socket) take a closed pool fd's number. */
    e = open("num", ro);
    C(close(e));
    int pp[2];
    C(pipe(pp));
    SAY("  a pipe after a pool close: base+%d base+%d\n", pp[0] - base, pp[1] - base);
    C(close(pp[0]));
    C(close(pp[1]));
    e = open("num", ro);
    C(close(e));
    int so = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    SAY("  a socket after a pool close: base+%d\n", so - base);
    C(close(so));
    /* Not close-on-exec: inherited by an exec'd program (as in == exec). */
    int keep = open("num", O_RDONLY);
    C(fcntl(keep, F_GETFD));
    C(close(keep));
    /* A forked child numbers as its parent would. */
    e = open("num", ro);
    C(close(e));
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int f = open("num", ro);
        SAY("  in a forked child: base+%d\n", f - base);
        _exit(0);
    }
    wait_child(pid);
    /* A listing of /proc/self/fd (its open numbers an fd: the kept one is closed
     * first) shows the close. */
    e = open("num", ro);
    int before = proc_fds();
    C(close(e));
    SAY("  /proc/self/fd after a close: %d fewer\n", before - proc_fds());
    C(close(base));
}

static void memory_and_copies(void) {
    SAY("== mmap\n");
    int fd = open("f1", O_RDONLY);
    char *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    SAY("  mmap %s\n", m == MAP_FAILED ? ename(errno) : "ok");
    if (m != MAP_FAILED) {
        SAY("  mapped: %.8s\n", m);
        m[0] = 'Z';
        SAY("  file unchanged: %s\n", contents("f1"));
        C(munmap(m, 4096));
    }
    C(close(fd));
    SAY("== copies\n");
    put("src", "0123456789abcdef");
    int in = open("src", O_RDONLY);
    int to = open("dst", O_CREAT | O_WRONLY | O_TRUNC, 0644);
    C(sendfile(to, in, NULL, 100));
    off_t off = 10;
    C(sendfile(to, in, &off, 3));
    C(off);
    C(lseek(in, 0, SEEK_CUR));
    SAY("  dst: %s\n", contents("dst"));
    char outside[PATH_MAX];
    snprintf(outside, sizeof outside, "../%s", sib);
    int k = open(outside, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    C(k >= 0);
    C(lseek(in, 4, SEEK_SET));
    C(sendfile(k, in, NULL, 4));
    loff_t io = 0;
    C(copy_file_range(in, &io, k, NULL, 2, 0));
    C(io);
    C(close(k));
    SAY("  outside: %s\n", contents(outside));
    int t2 = open("dst2", O_CREAT | O_RDWR | O_TRUNC, 0644);
    loff_t ii = 2, oo = 1;
    C(copy_file_range(in, &ii, t2, &oo, 5, 0));
    C(ii);
    C(oo);
    C(copy_file_range(in, NULL, t2, NULL, 100, 0));
    C(copy_file_range(in, NULL, t2, NULL, 1, 1));
    SAY("  dst2 len %d\n", (int)strlen(contents("dst2")));
    C(close(t2));
    C(close(in));
    C(close(to));
}

static void misc(void) {
    SAY("== statfs\n");
    struct statfs s;
    C(statfs(".", &s));
    SAY("  namelen %ld bsize>0 %d\n", (long)s.f_namelen, s.f_bsize > 0);
    int fd = open("f1", O_RDONLY);
    C(fstatfs(fd, &s));
    SAY("  namelen %ld bsize>0 %d\n", (long)s.f_namelen, s.f_bsize > 0);
    C(statfs("missing", &s));
    C(close(fd));

    SAY("== temp\n");
    char t[] = "tmpXXXXXX";
    fd = FD(mkstemp(t));
    struct stat st;
    C(stat(t, &st));
    SAY("  mkstemp mode %o name made %d\n", st.st_mode, strcmp(t, "tmpXXXXXX") != 0);
    C(unlink(t));
    char bad[] = "tmpXX";
    C(mkstemp(bad));
    char dt[] = "dirXXXXXX";
    char *p = P(mkdtemp(dt));
    if (p) {
        C(stat(dt, &st));
        SAY("  mkdtemp mode %o\n", st.st_mode);
        C(rmdir(dt));
    }
    close(fd);

    SAY("== close_range\n");
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int a = open("f1", O_RDONLY);

        int b = open("f1", O_RDONLY);
        int c = open("f1", O_RDONLY);
        C(close_range(b, ~0U, CLOSE_RANGE_CLOEXEC));
        C(fcntl(b, F_GETFD));
        C(fcntl(c, F_GETFD));
        C(close_range(b, ~0U, 0));
        C(fcntl(a, F_GETFD));
        C(fcntl(b, F_GETFD));
        C(fcntl(c, F_GETFD));
        C(read(c, t, 1));
        C(close_range(5, 4, 0));
        _exit(0);
    }
    wait_child(pid);

    SAY("== poll\n");
    int pool_fds[3];
    for (int i = 0; i < 3; i++)
        pool_fds[i] = open("f1", O_RDONLY);
    int pp[2];
    C(pipe(pp));
    struct pollfd q = {.fd = pp[0], .events = POLLIN};
    C(poll(&q, 1, 0));
    C(write(pp[1], "x", 1));
    C(poll(&q, 1, 1000));
    SAY("  revents %x\n", q.revents);
    close(pp[0]);
    close(pp[1]);
    for (int i = 0; i < 3; i++)
        close(pool_fds[i]);

    SAY("== outside\n");
    char path[PATH_MAX];
    snprintf(path, sizeof path, "../%s", sib);
    put(path, "outside the pool");
    SAY("  ../sib: %s\n", contents(path));
    snprintf(path, sizeof path, "w/x/../../../%s", sib);
    SAY("  deep: %s\n", contents(path));
    C(stat(path, &st));
    SAY("  size %lld\n", (long long)st.st_size);
    C(symlink(sib_abs, "outlink"));
    SAY("  outlink: %s\n", contents("outlink"));
    C(stat("outlink", &st));
    SAY("  via link size %lld\n", (long long)st.st_size);
    char target[PATH_MAX];
    ssize_t n = readlink("outlink", target, sizeof target - 1);
    target[n < 0 ? 0 : n] = 0;
    SAY("  readlink is the absolute path %d\n", !strcmp(target, sib_abs));
    fd = open("outlink", O_WRONLY | O_APPEND);
    C(write(fd, "!", 1));
    C(close(fd));
    SAY("  appended: %s\n", contents(sib_abs));
    C(unlink(path));
    C(stat("outlink", &st));
}

/* Exec'd: the fds A (inherited) and B (close-on-exec) as the new program sees them. */
static int child_fds(const char *a, const char *b) {
    int fa = atoi(a), fb = atoi(b);
    C(fcntl(fa, F_GETFD));
    C(fcntl(fb, F_GETFD));
    char buf[3] = {0};
    C(read(fa, buf, 2));
    SAY("  inherited fd reads %s\n", buf);
    return 0;
}

/* A process that drops root is checked with its new ids (run as root only). */
static void ids(void) {
    SAY("== ids\n");
    if (geteuid() != 0) {
        SAY("  not root: skipped on both sides\n");
        return;
    }
    int fd = open("secret", O_CREAT | O_WRONLY | O_TRUNC, 0600);
    C(write(fd, "s", 1));
    C(close(fd));
    C(mkdir("shut", 0700));
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        C(setgid(65534));
        C(setuid(65534));
        C(open("secret", O_RDONLY));
        C(open("shut/f", O_CREAT | O_WRONLY, 0644));
        C(unlink("secret"));
        C(access("secret", R_OK));
        fflush(NULL);
        _exit(0);
    }
    wait_child(pid);
    C(unlink("secret"));
    C(rmdir("shut"));
}

/* An open's result, the fd closed again. */
#define OPEN_CLOSE(path, flags)                                                                    \
    do {                                                                                           \
        int f_ = (int)FD(open(path, flags));                                                       \
        if (f_ >= 0)                                                                               \
            close(f_);                                                                             \
    } while (0)

/* glibc's capset (linux/capability.h declares only the structures). */
int capset(cap_user_header_t header, const cap_user_data_t data);

/* Drops capability `cap` from the calling thread's effective set: by the C library's
 * capset, or by a raw system call. */
static void drop_cap(int cap, int raw) {
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    if (syscall(SYS_capget, &h, d) != 0) {
        SAY("  capget: %s\n", ename(errno));
        return;
    }
    d[cap / 32].effective &= ~(1u << (cap % 32));
    if (raw)
        C(syscall(SYS_capset, &h, d));
    else
        C(capset(&h, d));
}

static void *fs_user_thread(void *arg) {
    (void)arg;
    C(setfsuid(1001));
    OPEN_CLOSE("cr/shut/f", O_RDONLY);
    OPEN_CLOSE("cr/theirs", O_RDONLY);
    return NULL;
}

static void *raw_setresuid_thread(void *arg) {
    (void)arg;
    C(syscall(SYS_setresuid, -1, 1001, -1));
    OPEN_CLOSE("cr/shut/f", O_RDONLY);
    OPEN_CLOSE("cr/theirs", O_RDONLY);
    C(access("cr/shut/f", R_OK));
    C(faccessat(AT_FDCWD, "cr/shut/f", R_OK, AT_EACCESS));
    return NULL;
}

/* Credentials as the kernel checks them: the calling thread's fs uid and capabilities,
 * not the process's effective uid (run as root only). */
static void creds(void) {
    SAY("== credentials, per thread\n");
    if (geteuid() != 0) {
        SAY("  not root: skipped on both sides\n");
        return;
    }
    struct stat st;
    C(mkdir("cr", 0755));
    C(mkdir("cr/shut", 0700));
    C(mkdir("cr/their_dir", 0700));
    C(chown("cr/their_dir", 1001, 1001));
    C(close(open("cr/shut/f", O_CREAT | O_WRONLY, 0644)));
    C(close(open("cr/pub", O_CREAT | O_WRONLY, 0644)));
    C(close(open("cr/theirs", O_CREAT | O_WRONLY, 0600)));
    C(chown("cr/theirs", 1001, 1001));
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        /* setfsuid: the kernel checks with the fs uid (and takes the file-system
         * capabilities away from a non-zero one). */
        C(setfsuid(1001));
        OPEN_CLOSE("cr/shut/f", O_RDONLY);
        C(stat("cr/shut/f", &st));
        OPEN_CLOSE("cr/theirs", O_RDWR);
        /* access checks with the real ids; AT_EACCESS with the fs ones. */
        C(access("cr/shut/f", R_OK));
        C(faccessat(AT_FDCWD, "cr/shut/f", R_OK, AT_EACCESS));
        C(access("cr/theirs", W_OK));
        C(setfsuid(0));
        OPEN_CLOSE("cr/shut/f", O_RDONLY);
        /* Another thread's setfsuid and raw setresuid are that thread's alone. */
        pthread_t t;
        pthread_create(&t, NULL, fs_user_thread, NULL);
        pthread_join(t, NULL);
        C(stat("cr/shut/f", &st));
        pthread_create(&t, NULL, raw_setresuid_thread, NULL);
        pthread_join(t, NULL);
        C(stat("cr/shut/f", &st));
        OPEN_CLOSE("cr/theirs", O_RDWR);
        fflush(NULL);
        _exit(0);
    }
    wait_child(pid);
    pid = fork();
    if (pid == 0) {
        /* Root is checked by its capabilities, not by uid 0. */
        drop_cap(CAP_DAC_OVERRIDE, 1);
        OPEN_CLOSE("cr/theirs", O_WRONLY);
        C(access("cr/theirs", W_OK));
        OPEN_CLOSE("cr/theirs", O_RDONLY);
        C(stat("cr/their_dir/x", &st));
        C(mkdir("cr/their_dir/x", 0755));
        drop_cap(CAP_DAC_READ_SEARCH, 0);
        OPEN_CLOSE("cr/theirs", O_RDONLY);
        C(stat("cr/their_dir/x", &st));
        OPEN_CLOSE("cr/shut/f", O_RDWR);
        C(chmod("cr/theirs", 0640));
        drop_cap(CAP_FOWNER, 0);
        C(chmod("cr/theirs", 0600));
        C(chmod("cr/pub", 0600));
        C(chmod("cr/pub", 0644));
        drop_cap(CAP_CHOWN, 1);
        C(chown("cr/pub", 1001, -1));
        C(chown("cr/pub", 0, 0));
        fflush(NULL);
        _exit(0);
    }
    wait_child(pid);
    pid = fork();
    if (pid == 0) {
        /* Dropping root after the attach: still attached, checked as the new user. */
        C(setresgid(65534, 65534, 65534));
        C(setresuid(65534, 65534, 65534));
        OPEN_CLOSE("cr/pub", O_RDONLY);
        OPEN_CLOSE("cr/theirs", O_RDONLY);
        OPEN_CLOSE("cr/shut/f", O_RDONLY);
        C(open("cr/new", O_CREAT | O_WRONLY, 0644));
        fflush(NULL);
        _exit(0);
    }
    wait_child(pid);
    C(unlink("cr/shut/f"));
    C(unlink("cr/pub"));
    C(unlink("cr/theirs"));
    C(rmdir("cr/shut"));
    C(rmdir("cr/their_dir"));
    C(rmdir("cr"));
}

/* system and popen: glibc spawns the shell internally; a pool fd it inherits keeps
 * sharing the caller's position, and the caller's description outlives the shell. */
static void shells(void) {
    SAY("== system, popen\n");
    int fd = open("sys.txt", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    C(write(fd, "a", 1));
    char cmd[64];
    snprintf(cmd, sizeof cmd, "printf b >&%d", fd);
    fflush(NULL);
    C(system(cmd));
    C(write(fd, "c", 1));
    C(lseek(fd, 0, SEEK_CUR));
    SAY("  sys.txt: %s\n", contents("sys.txt"));
    FILE *p = popen("cat sys.txt", "r");
    char line[32] = {0};
    if (p && fgets(line, sizeof line, p))
        SAY("  popen read: %s\n", line);
    C(p ? pclose(p) : -1);
    C(write(fd, "d", 1));
    C(close(fd));
    SAY("  sys.txt: %s\n", contents("sys.txt"));
    C(unlink("sys.txt"));
}

static int only_r(const struct dirent *e) { return e->d_name[0] == 'r'; }

/* realpath and scandir: glibc's own work with internal calls. */
static void resolving(void) {
    SAY("== realpath, scandir\n");
    char here[PATH_MAX], buf[PATH_MAX];
    if (!getcwd(here, sizeof here))
        return;
    C(mkdir("rp", 0755));
    C(mkdir("rp/sub", 0755));
    int fd = open("rp/sub/file", O_CREAT | O_WRONLY, 0644);
    C(close(fd));
    C(symlink("sub/file", "rp/rel"));
    C(symlink("..", "rp/sub/up"));
    C(link("rp/sub/file", "rp/hard"));
    const char *paths[] = {"rp/rel", "rp/sub/up/rel", "./rp//sub/../hard", "rp/sub/", "rp/missing",
                           "rp/sub/file/", "rp/sub/up/../rp/rel"};
    for (unsigned i = 0; i < sizeof paths / sizeof *paths; i++) {
        errno = 0;
        char *r = realpath(paths[i], buf);
        if (r && !strncmp(r, here, strlen(here)))
            SAY("  realpath(%s) = .%s\n", paths[i], r + strlen(here));
        else
            SAY("  realpath(%s) = %s %s\n", paths[i], r ? r : "NULL", r ? "" : strerrorname_np(errno));
    }
    char *m = realpath("rp/rel", NULL);
    SAY("  realpath(rp/rel, NULL) allocated: %s\n", m && !strcmp(m + strlen(here), "/rp/sub/file") ? "yes" : "no");
    free(m);
    struct dirent **list;
    int n = scandir("rp", &list, only_r, alphasort);
    SAY("  scandir(rp, only r*) = %d:", n);
    for (int i = 0; i < n; i++) {
        SAY(" %s", list[i]->d_name);
        free(list[i]);
    }
    SAY("\n");
    if (n >= 0)
        free(list);
    n = scandir("rp/sub", &list, NULL, alphasort);
    SAY("  scandir(rp/sub) = %d:", n);
    for (int i = 0; i < n; i++) {
        SAY(" %s", list[i]->d_name);
        free(list[i]);
    }
    SAY("\n");
    if (n >= 0)
        free(list);
    errno = 0;
    C(scandir("rp/none", &list, NULL, alphasort));
    C(unlink("rp/hard"));
    C(unlink("rp/rel"));
    C(unlink("rp/sub/up"));
    C(unlink("rp/sub/file"));
    C(rmdir("rp/sub"));
    C(rmdir("rp"));
}

int main(int argc, char **argv) {
    self = argv[0];
    if (argc == 4 && !strcmp(argv[1], "fds"))
        return child_fds(argv[2], argv[3]);
    if (argc == 3 && !strcmp(argv[1], "echo")) {
        printf("%s\n", argv[2]);
        return 0;
    }
    if (argc != 3) {
        fprintf(stderr, "usage: calls SIBLING_NAME SIBLING_ABS\n");
        return 2;
    }
    sib = argv[1];
    sib_abs = argv[2];
    umask(022);
    fd_numbers(); /* first: the other sections leave fds open */
    opens();
    io();
    stats();
    names();
    sizes();
    attrs();
    xattrs();
    dirs();
    cwds();
    removed_dirs();
    tmpfiles();
    ioctls();
    fds_and_locks();
    stdio_calls();
    processes();
    memory_and_copies();
    misc();
    ids();
    creds();
    resolving();
    shells();
    SAY("== end\n");
    return 0;
}
