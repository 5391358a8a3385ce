/* The search-permission table's steps (tests/search_perm.rs), run as uid 1000 through
 * one front end: plain system calls on a LynxFS mount, the same calls under `lynxfs
 * run` (the preload), or, built with -DCAPI, the C API's calls on the pool file. Each
 * step prints one line "name: result"; search_perm.rs holds what each must say (and
 * takes the same steps through the library).
 *
 *   search_perm ROOT   (kernel or preload: ROOT is the pool's directory)
 *   search_perm POOL   (C API: POOL is the pool file)
 *   search_perm ROOT|POOL wait   (one lookup, then another once a line arrives on
 *                                 stdin: another process changed an ancestor between)
 *   search_perm ROOT|POOL chmod  (that other process: the chmod alone)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef CAPI
#include "lynxfs.h"

static lynxfs_t *fs;

/* A C API answer (-errno on failure) as a system call's (-1 and errno). */
static int sys(int r) {
    if (r < 0) {
        errno = -r;
        return -1;
    }
    return r;
}
static int x_open(const char *p, int flags) { return sys(lynxfs_open(fs, p, flags, 0)); }
static int x_close(int fd) { return sys(lynxfs_close(fs, fd)); }
static int x_chmod(const char *p, mode_t m) { return sys(lynxfs_chmod(fs, p, m)); }
static int x_stat(const char *p, struct stat *st) { return sys(lynxfs_stat(fs, p, st)); }
#else
static int x_open(const char *p, int flags) { return open(p, flags); }
#define x_close close
#define x_chmod chmod
#define x_stat stat
#endif

/* Paths are under this prefix: the pool's directory, or "" for the C API. */
static const char *root = "";

static const char *at(const char *p) {
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s%s", root, p);
    return buf;
}

static void say(const char *name, int r) {
    if (r >= 0) {
        printf("%s: 0\n", name);
        return;
    }
    switch (errno) {
    case EACCES: printf("%s: EACCES\n", name); break;
    case ENOENT: printf("%s: ENOENT\n", name); break;
    case EPERM: printf("%s: EPERM\n", name); break;
    default: printf("%s: errno %d\n", name, errno);
    }
}

static int do_stat(const char *p) {
    struct stat st;
    return x_stat(at(p), &st);
}

/* Opens `p` read-only and closes it again. */
static int do_open(const char *p) {
    int fd = x_open(at(p), O_RDONLY);
    if (fd >= 0)
        x_close(fd);
    return fd < 0 ? -1 : 0;
}

/* The fixtures' paths (search_perm.rs makes them): `c` is the middle ancestor. */
#define DENY "/s/deny/a/b/c"
#define ACL "/s/acl/a/b/c"
#define MINE "/s/mine/a/b/c"
#define BELOW "/d/e/f/g/file"

int main(int argc, char **argv) {
    int wait = argc == 3 && strcmp(argv[2], "wait") == 0;
    int change = argc == 3 && strcmp(argv[2], "chmod") == 0;
    if (argc != 2 && !wait && !change) {
        fprintf(stderr, "usage: search_perm ROOT|POOL [wait|chmod]\n");
        return 2;
    }
#ifdef CAPI
    int err = 0;
    fs = lynxfs_attach(argv[1], 0, &err);
    if (!fs) {
        fprintf(stderr, "search_perm: attach %s: %s\n", argv[1], lynxfs_attach_error());
        return 1;
    }
#else
    root = argv[1];
#endif
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (wait) {
        char line[16];
        say("stat below its own directory", do_stat(MINE BELOW));
        if (!fgets(line, sizeof line, stdin))
            return 1;
        say("stat below it after another process's chmod", do_stat(MINE BELOW));
        goto end;
    }
    if (change) {
        say("chmod its directory 0600", x_chmod(at(MINE), 0600));
        goto end;
    }
    say("stat below a directory it may not search", do_stat(DENY BELOW));
    say("open below a directory it may not search", do_open(DENY BELOW));
    say("stat the directory it may not search", do_stat(DENY));
    say("stat through it and out by ..", do_stat(DENY "/../sibling"));
    say("stat below a directory an ACL lets it search", do_stat(ACL BELOW));
    say("open below a directory an ACL lets it search", do_open(ACL BELOW));
    say("stat below its own directory", do_stat(MINE BELOW));
    say("open below its own directory", do_open(MINE BELOW));
    say("stat below it again", do_stat(MINE BELOW));
    say("chmod its directory 0600", x_chmod(at(MINE), 0600));
    say("stat below it after the chmod", do_stat(MINE BELOW));
    say("open below it after the chmod", do_open(MINE BELOW));
    say("chmod its directory 0700", x_chmod(at(MINE), 0700));
    say("stat below it after the chmod back", do_stat(MINE BELOW));
end:
#ifdef CAPI
    int d = lynxfs_detach(fs);
    if (d != 0) {
        fprintf(stderr, "search_perm: detach: %d\n", d);
        return 1;
    }
#endif
    printf("== end\n");
    return 0;
}
