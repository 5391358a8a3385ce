/*
 * checks.c: checks of the LynxFS C API run by tests/capi.rs, one per subcommand
 * (`checks NAME [POOL]`). Each prints "ok NAME" and exits 0, or says what was wrong
 * and exits 1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lynxfs.h"

static int failed;

/* Notes a failure unless `got` is `want`. */
static void expect(const char *what, long got, long want) {
    if (got != want) {
        fprintf(stderr, "checks: %s: got %ld (%s), want %ld\n", what, got,
                got < 0 ? strerror((int)-got) : "", want);
        failed = 1;
    }
}

static lynxfs_t *attach(const char *pool) {
    int err = 1;
    lynxfs_t *fs = lynxfs_attach(pool, 0, &err);
    if (!fs) {
        fprintf(stderr, "checks: attach %s: %s\n", pool, lynxfs_attach_error());
        exit(1);
    }
    expect("attach err", err, 0);
    return fs;
}

/* Attaching fails with `want` and a message containing `words`. */
static void attach_fails(const char *pool, int want, const char *words) {
    int err = 0;
    lynxfs_t *fs = lynxfs_attach(pool, 0, &err);
    expect("attach returns NULL", fs == NULL, 1);
    expect("attach err", err, want);
    if (!strstr(lynxfs_attach_error(), words)) {
        fprintf(stderr, "checks: attach message '%s' lacks '%s'\n", lynxfs_attach_error(),
                words);
        failed = 1;
    }
}

static void null_args(void) {
    int err = 0;
    expect("attach(NULL)", lynxfs_attach(NULL, 0, &err) == NULL, 1);
    expect("attach(NULL) err", err, -EFAULT);
    struct stat st;
    expect("stat on a NULL handle", lynxfs_stat(NULL, "/", &st), -EINVAL);
    expect("detach(NULL)", lynxfs_detach(NULL), -EINVAL);
    expect("close on a NULL handle", lynxfs_close(NULL, 0), -EINVAL);
}

static void names(lynxfs_t *fs) {
    char name[300];
    memset(name, 'n', 256);
    name[0] = '/';
    name[257] = 0;
    memset(name + 1, 'n', 256);
    expect("mkdir of a 256-byte name", lynxfs_mkdir(fs, name, 0755), -ENAMETOOLONG);
    name[256] = 0; /* a 255-byte name is fine */
    expect("mkdir of a 255-byte name", lynxfs_mkdir(fs, name, 0755), 0);
    char *long_path = malloc(5000);
    memset(long_path, 'a', 4999);
    long_path[4999] = 0;
    struct stat st;
    expect("stat of a 4999-byte path", lynxfs_stat(fs, long_path, &st), -ENAMETOOLONG);
    free(long_path);
    expect("stat(NULL path)", lynxfs_stat(fs, NULL, &st), -EFAULT);
    expect("stat(NULL buffer)", lynxfs_stat(fs, "/", NULL), -EFAULT);
    expect("mkdir(NULL)", lynxfs_mkdir(fs, NULL, 0755), -EFAULT);
    expect("open of a missing file", lynxfs_open(fs, "/nope", O_RDONLY, 0), -ENOENT);
    expect("a name that is not UTF-8", lynxfs_mkdir(fs, "/\xff\xfe", 0755), 0);
    expect("its removal", lynxfs_rmdir(fs, "/\xff\xfe"), 0);
    expect("attach flags", lynxfs_attach("/x", 1, NULL) == NULL, 1);
}

static void bad_fds(lynxfs_t *fs) {
    char b[8];
    expect("read of fd 7", lynxfs_read(fs, 7, b, sizeof b), -EBADF);
    expect("close(-1)", lynxfs_close(fs, -1), -EBADF);
    int fd = lynxfs_open(fs, "/f", O_CREAT | O_RDWR, 0644);
    expect("first fd", fd, 0);
    expect("lseek whence 99", lynxfs_lseek(fs, fd, 0, 99), -EINVAL);
    expect("pread at -1", lynxfs_pread(fs, fd, b, sizeof b, -1), -EINVAL);
    expect("write(NULL, 8)", lynxfs_write(fs, fd, NULL, 8), -EFAULT);
    expect("close", lynxfs_close(fs, fd), 0);
    expect("close again", lynxfs_close(fs, fd), -EBADF);
    expect("fstat of a closed fd", lynxfs_fstat(fs, fd, &(struct stat){0}), -EBADF);
    expect("readdir(NULL stream)", lynxfs_readdir(fs, NULL, &(struct lynxfs_dirent){0}),
           -EINVAL);
}

static void full(lynxfs_t *fs) {
    static char chunk[1 << 16];
    memset(chunk, 'x', sizeof chunk);
    int fd = lynxfs_open(fs, "/big", O_CREAT | O_WRONLY, 0644);
    expect("open /big", fd >= 0, 1);
    long r, total = 0;
    while ((r = lynxfs_write(fs, fd, chunk, sizeof chunk)) > 0 && total < (1L << 32)) {
        total += r;
    }
    expect("write to a full pool", r, -ENOSPC);
    printf("wrote %ld bytes before ENOSPC\n", total);
    expect("close /big", lynxfs_close(fs, fd), 0);
    expect("unlink /big", lynxfs_unlink(fs, "/big"), 0);
    fd = lynxfs_open(fs, "/small", O_CREAT | O_WRONLY, 0644);
    expect("write after freeing", lynxfs_write(fs, fd, chunk, 4096), 4096);
    expect("close /small", lynxfs_close(fs, fd), 0);
}

static void paths(lynxfs_t *fs) {
    expect("mkdir /d", lynxfs_mkdir(fs, "/d", 0755), 0);
    expect("chdir /d", lynxfs_chdir(fs, "/d"), 0);
    char cwd[64];
    expect("getcwd", lynxfs_getcwd(fs, cwd, sizeof cwd), 3);
    expect("getcwd is /d", strcmp(cwd, "/d"), 0);
    expect("getcwd, small buffer", lynxfs_getcwd(fs, cwd, 2), -ERANGE);
    int dfd = lynxfs_open(fs, ".", O_RDONLY | O_DIRECTORY, 0);
    expect("chdir /", lynxfs_chdir(fs, "/"), 0);
    int fd = lynxfs_openat(fs, dfd, "a", O_CREAT | O_WRONLY, 0600);
    expect("openat", fd >= 0, 1);
    expect("ftruncate", lynxfs_ftruncate(fs, fd, 1000), 0);
    expect("close a", lynxfs_close(fs, fd), 0);
    struct stat st;
    expect("stat /d/a", lynxfs_stat(fs, "/d/a", &st), 0);
    expect("size of /d/a", st.st_size, 1000);
    expect("mode of /d/a", st.st_mode & 07777, 0600);
    expect("link", lynxfs_link(fs, "/d/a", "/d/b"), 0);
    expect("renameat2 NOREPLACE", lynxfs_renameat2(fs, dfd, "a", LYNXFS_AT_FDCWD, "d/b", RENAME_NOREPLACE), -EEXIST);
    expect("renameat2", lynxfs_renameat2(fs, dfd, "a", LYNXFS_AT_FDCWD, "c", 0), 0);
    expect("close d", lynxfs_close(fs, dfd), 0);
    expect("symlink", lynxfs_symlink(fs, "d/b", "/s"), 0);
    char target[16] = {0};
    expect("readlink", lynxfs_readlink(fs, "/s", target, sizeof target), 3);
    expect("readlink text", strcmp(target, "d/b"), 0);
    expect("lstat of a link", lynxfs_lstat(fs, "/s", &st), 0);
    expect("lstat sees a link", S_ISLNK(st.st_mode), 1);
    expect("truncate through the link", lynxfs_truncate(fs, "/s", 10), 0);
    expect("stat /c", lynxfs_stat(fs, "/c", &st), 0);
    expect("size of /c", st.st_size, 10);
    expect("nlink of /c", st.st_nlink, 2);
    expect("chmod", lynxfs_chmod(fs, "/c", 0640), 0);
    expect("chown to root", lynxfs_chown(fs, "/c", (uid_t)-1, 0), 0);
    struct timespec t[2] = {{5, 6}, {7, 8}};
    expect("utimens", lynxfs_utimens(fs, "/c", t), 0);
    expect("stat /c again", lynxfs_stat(fs, "/c", &st), 0);
    expect("mode after chmod", st.st_mode & 07777, 0640);
    expect("mtime", st.st_mtim.tv_sec * 1000000000L + st.st_mtim.tv_nsec, 7000000008L);
    expect("atime", st.st_atim.tv_sec * 1000000000L + st.st_atim.tv_nsec, 5000000006L);
    t[0].tv_nsec = 2000000000L;
    expect("utimens, bad nsec", lynxfs_utimens(fs, "/c", t), -EINVAL);
    expect("setxattr", lynxfs_setxattr(fs, "/c", "user.k", "value", 5, 0), 0);
    char v[16];
    expect("getxattr size", lynxfs_getxattr(fs, "/c", "user.k", NULL, 0), 5);
    expect("getxattr, small", lynxfs_getxattr(fs, "/c", "user.k", v, 2), -ERANGE);
    expect("getxattr", lynxfs_getxattr(fs, "/c", "user.k", v, sizeof v), 5);
    expect("getxattr value", memcmp(v, "value", 5), 0);
    expect("listxattr", lynxfs_listxattr(fs, "/c", v, sizeof v), 7);
    expect("listxattr names", memcmp(v, "user.k", 7), 0);
    expect("removexattr", lynxfs_removexattr(fs, "/c", "user.k"), 0);
    expect("getxattr, gone", lynxfs_getxattr(fs, "/c", "user.k", v, sizeof v), -ENODATA);
    struct statvfs sv;
    expect("statfs", lynxfs_statfs(fs, &sv), 0);
    expect("statfs has blocks", sv.f_blocks > 0 && sv.f_bfree <= sv.f_blocks, 1);
    expect("rmdir of a full directory", lynxfs_rmdir(fs, "/d"), -ENOTEMPTY);
    expect("unlink /d/b", lynxfs_unlink(fs, "/d/b"), 0);
    expect("rmdir", lynxfs_rmdir(fs, "/d"), 0);
}

/* Threads sharing one handle: each makes, writes, reads back and closes its files. */
enum { THREADS = 4, FILES = 200 };

static void *worker(void *arg) {
    lynxfs_t *fs = arg;
    static __thread char name[64], back[64];
    for (int i = 0; i < FILES; i++) {
        snprintf(name, sizeof name, "/t/%lu-%d", (unsigned long)pthread_self(), i);
        int fd = lynxfs_open(fs, name, O_CREAT | O_RDWR | O_EXCL, 0644);
        if (fd < 0 || lynxfs_write(fs, fd, name, strlen(name)) != (ssize_t)strlen(name) ||
            lynxfs_pread(fs, fd, back, sizeof back, 0) != (ssize_t)strlen(name) ||
            memcmp(back, name, strlen(name)) != 0 || lynxfs_close(fs, fd) != 0) {
            fprintf(stderr, "checks: thread file %s (fd %d) failed\n", name, fd);
            return (void *)1;
        }
    }
    return NULL;
}

static void threads(lynxfs_t *fs) {
    expect("mkdir /t", lynxfs_mkdir(fs, "/t", 0755), 0);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) {
        pthread_create(&t[i], NULL, worker, fs);
    }
    for (int i = 0; i < THREADS; i++) {
        void *r;
        pthread_join(t[i], &r);
        expect("thread", r != NULL, 0);
    }
    lynxfs_dir_t *dir;
    struct lynxfs_dirent ent;
    expect("opendir /t", lynxfs_opendir(fs, "/t", &dir), 0);
    int n = 0, r;
    while ((r = lynxfs_readdir(fs, dir, &ent)) == 1) {
        n++;
    }
    expect("readdir end", r, 0);
    expect("entries in /t", n, THREADS * FILES + 2);
    expect("closedir", lynxfs_closedir(fs, dir), 0);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: checks NAME [POOL]\n");
        return 2;
    }
    const char *what = argv[1], *pool = argc > 2 ? argv[2] : "";
    if (!strcmp(what, "null")) {
        null_args();
    } else if (!strcmp(what, "missing")) {
        attach_fails(pool, -ENOENT, "no such pool");
    } else if (!strcmp(what, "foreign")) {
        attach_fails(pool, -EUCLEAN, "not a LynxFS pool");
    } else {
        lynxfs_t *fs = attach(pool);
        if (!strcmp(what, "names")) {
            names(fs);
        } else if (!strcmp(what, "badfd")) {
            bad_fds(fs);
        } else if (!strcmp(what, "full")) {
            full(fs);
        } else if (!strcmp(what, "paths")) {
            paths(fs);
        } else if (!strcmp(what, "threads")) {
            threads(fs);
        } else {
            fprintf(stderr, "checks: no check %s\n", what);
            return 2;
        }
        expect("detach", lynxfs_detach(fs), 0);
    }
    if (failed) {
        return 1;
    }
    printf("ok %s\n", what);
    return 0;
}
