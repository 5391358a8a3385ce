/* The rule table's steps (tests/rules.rs), run as uid 1000 through one front end:
 * plain system calls on a LynxFS mount, the same calls under `lynxfs run` (the
 * preload), or, built with -DCAPI, the C API's calls on the pool file. Each step
 * prints one line "name: result"; rules.rs holds what each must say.
 *
 *   rules ROOT      (kernel or preload: ROOT is the pool's directory)
 *   rules POOL      (C API: POOL is the pool file)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef CAPI
#include "lynxfs.h"

static lynxfs_t *fs;

/* A C API answer (-errno on failure) as a system call's (-1 and errno). */
static long sys(long r) {
    if (r < 0) {
        errno = (int)-r;
        return -1;
    }
    return r;
}
static int x_open(const char *p, int flags, mode_t mode) {
    return (int)sys(lynxfs_open(fs, p, flags, mode));
}
static int x_close(int fd) { return (int)sys(lynxfs_close(fs, fd)); }
static long x_write(int fd, const void *b, size_t n) { return sys(lynxfs_write(fs, fd, b, n)); }
static long x_read(int fd, void *b, size_t n) { return sys(lynxfs_read(fs, fd, b, n)); }
static int x_link(const char *a, const char *b) { return (int)sys(lynxfs_link(fs, a, b)); }
static int x_unlink(const char *p) { return (int)sys(lynxfs_unlink(fs, p)); }
static int x_chmod(const char *p, mode_t m) { return (int)sys(lynxfs_chmod(fs, p, m)); }
static int x_stat(const char *p, struct stat *st) { return (int)sys(lynxfs_stat(fs, p, st)); }
static mode_t x_umask(mode_t m) { return (mode_t)lynxfs_umask(fs, m); }
#else
#define x_open open
#define x_close close
#define x_write write
#define x_read read
#define x_link link
#define x_unlink unlink
#define x_chmod chmod
#define x_stat stat
#define x_umask umask
#endif

/* Paths are under this prefix: the pool's directory, or "" for the C API. */
static const char *root = "";

static const char *at(const char *p) {
    static char buf[4][4096];
    static int next;
    char *b = buf[next++ % 4];
    snprintf(b, sizeof buf[0], "%s%s", root, p);
    return b;
}

/* "0" or the errno's name. */
static const char *outcome(int r) {
    if (r >= 0)
        return "0";
    switch (errno) {
    case EPERM: return "EPERM";
    case EACCES: return "EACCES";
    case ENOENT: return "ENOENT";
    case EEXIST: return "EEXIST";
    case EROFS: return "EROFS";
    default: {
        static char b[32];
        snprintf(b, sizeof b, "errno %d", errno);
        return b;
    }
    }
}

static void say(const char *name, int r) { printf("%s: %s\n", name, outcome(r)); }

/* Opens `p` with `flags` (closing it again): the outcome. */
static int try_open(const char *p, int flags) {
    int fd = x_open(at(p), flags, 0);
    if (fd >= 0)
        x_close(fd);
    return fd < 0 ? -1 : 0;
}

/* Writes one byte through a fresh open with `flags`. */
static int write_byte(const char *p, int flags) {
    int fd = x_open(at(p), flags, 0);
    if (fd < 0)
        return -1;
    long n = x_write(fd, "x", 1);
    int e = errno;
    x_close(fd);
    errno = e;
    return n == 1 ? 0 : -1;
}

/* Reads one byte through a fresh read-only open. */
static int read_byte(const char *p) {
    char c;
    int fd = x_open(at(p), O_RDONLY, 0);
    if (fd < 0)
        return -1;
    long n = x_read(fd, &c, 1);
    int e = errno;
    x_close(fd);
    errno = e;
    return n == 1 ? 0 : -1;
}

static void mode_of(const char *name, const char *p) {
    struct stat st;
    if (x_stat(at(p), &st) != 0)
        printf("%s: stat %s\n", name, outcome(-1));
    else
        printf("%s: %04o\n", name, st.st_mode & 07777);
}

/* Whether a read changed `p`'s atime. */
static void atime_after_read(const char *name, const char *p) {
    struct stat before, after;
    if (x_stat(at(p), &before) != 0 || read_byte(p) != 0 || x_stat(at(p), &after) != 0) {
        printf("%s: %s\n", name, outcome(-1));
        return;
    }
    int same = before.st_atim.tv_sec == after.st_atim.tv_sec &&
               before.st_atim.tv_nsec == after.st_atim.tv_nsec;
    printf("%s: %s\n", name, same ? "kept" : "updated");
}

/* The sysctl's value now (another test may change it for a moment: rules.rs runs
 * the steps again when it changed around them). */
static void sysctl_line(void) {
    char v[16] = "?";
    FILE *f = fopen("/proc/sys/fs/protected_hardlinks", "r");
    if (f) {
        if (!fgets(v, sizeof v, f))
            strcpy(v, "?");
        fclose(f);
    }
    v[strcspn(v, "\n")] = 0;
    printf("fs.protected_hardlinks: %s\n", v);
}

/* Creates `p` with mode 0666 under umask 022: the mode it got. */
static void created_mode(const char *name, const char *p) {
    x_umask(022);
    int fd = x_open(at(p), O_CREAT | O_EXCL | O_WRONLY, 0666);
    if (fd < 0) {
        printf("%s: %s\n", name, outcome(-1));
        return;
    }
    x_close(fd);
    mode_of(name, p);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: rules ROOT|POOL\n");
        return 2;
    }
#ifdef CAPI
    int err = 0;
    fs = lynxfs_attach(argv[1], 0, &err);
    if (!fs) {
        fprintf(stderr, "rules: attach %s: %s\n", argv[1], lynxfs_attach_error());
        return 1;
    }
#else
    root = argv[1];
#endif
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* fs.protected_hardlinks: a file the caller neither owns nor may read and write. */
    sysctl_line();
    say("link a foreign file it cannot write", x_link(at("/d/root-ro"), at("/d/l1")));
    say("link a foreign file it may read and write", x_link(at("/d/root-rw"), at("/d/l2")));
    say("link its own file", x_link(at("/d/mine"), at("/d/l3")));
    sysctl_line();
    /* Inode flags. */
    say("open an immutable file for writing", try_open("/d/immutable", O_WRONLY));
    say("open an append-only file for writing", try_open("/d/append-only", O_WRONLY));
    say("append to an append-only file", write_byte("/d/append-only", O_WRONLY | O_APPEND));
    say("unlink an immutable file", x_unlink(at("/d/immutable")));
    /* killpriv: another user's write clears set-user-ID and set-group-ID. */
    say("write to a foreign setid file", write_byte("/d/setid", O_WRONLY));
    mode_of("its mode after the write", "/d/setid");
    /* Permissions and ACLs. */
    say("open a file an ACL denies", try_open("/d/acl-denied", O_RDONLY));
    say("open a file an ACL grants", try_open("/d/acl-granted", O_RDWR));
    say("chmod a foreign file", x_chmod(at("/d/root-rw"), 0777));
    say("unlink a foreign file in a sticky directory", x_unlink(at("/sticky/root-file")));
    say("unlink its own file in a sticky directory", x_unlink(at("/sticky/mine")));
    /* umask, and a default ACL that replaces it. */
    created_mode("create under umask 022", "/d/new");
    created_mode("create under a default ACL", "/acl/new");
    /* atime policy (relatime, the NOATIME flag). */
    atime_after_read("read a file whose atime is before its mtime", "/d/stale");
    atime_after_read("read a file whose atime is after its mtime and ctime", "/d/fresh");
    atime_after_read("read a NOATIME file", "/d/noatime");
#ifdef CAPI
    int d = lynxfs_detach(fs);
    if (d != 0) {
        fprintf(stderr, "rules: detach: %d\n", d);
        return 1;
    }
#endif
    printf("== end\n");
    return 0;
}
