/*
 * checks.c: checks of the LynxFS C API run by tests/capi.rs, one per subcommand
 * (`checks NAME [POOL]`). Each prints "ok NAME" and exits 0, or says what was wrong
 * and exits 1.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fiemap.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
    expect("statfs holds root's reserve back", sv.f_bavail < sv.f_bfree, 1);
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

/* ---- the same steps through the C API and through the kernel on tmpfs ---- */

/* A kernel call's result as the C API gives its own: the value, or -errno. */
static long kern(long r) { return r < 0 ? -errno : r; }
/* A descriptor as 0 (the two sides number theirs apart), or the error. */
static long fdok(long r) { return r >= 0 ? 0 : r; }
/* Notes a failure unless the C API answered `lynx` where the kernel answered `kernel`. */
static void same(const char *what, long lynx, long kernel) {
    if (lynx != kernel) {
        fprintf(stderr, "checks: %s: lynxfs %ld, tmpfs %ld\n", what, lynx, kernel);
        failed = 1;
    }
}

/* The entries a stream lists ("." and ".." included). */
static long lynx_count(lynxfs_t *fs, lynxfs_dir_t *d) {
    struct lynxfs_dirent e;
    long n = 0;
    int r;
    while ((r = lynxfs_readdir(fs, d, &e)) == 1)
        n++;
    return r < 0 ? r : n;
}
static long kernel_count(DIR *d) {
    long n = 0;
    errno = 0;
    while (readdir(d))
        n++;
    return errno ? -errno : n;
}

/* Whether `ino` is the inode of `path` on each side. */
static long lynx_is(lynxfs_t *fs, const struct stat *st, const char *path) {
    struct stat o;
    return lynxfs_stat(fs, path, &o) == 0 && o.st_ino == st->st_ino;
}
static long kernel_is(int kt, const struct stat *st, const char *path) {
    struct stat o;
    return fstatat(kt, path, &o, 0) == 0 && o.st_ino == st->st_ino;
}

/* An open directory removed (rmdir, a rename over it): fstat (nlink 0), an empty
 * listing, nothing made in it, ".." its old parent, and a removed working directory
 * without a path. The pool's root and tmpfs directory `kt` start alike. */
static void removed_dirs(lynxfs_t *fs, int kt) {
    struct stat ls, ks;
    const char *dirs[] = {"p", "p/d", "s", "s/v", "s/n"};
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++)
        same(dirs[i], lynxfs_mkdir(fs, dirs[i], 0755), kern(mkdirat(kt, dirs[i], 0755)));
    int ld = lynxfs_open(fs, "p/d", O_RDONLY | O_DIRECTORY, 0);
    int kd = openat(kt, "p/d", O_RDONLY | O_DIRECTORY);
    same("open p/d", fdok(ld), fdok(kern(kd)));
    same("rmdir p/d", lynxfs_rmdir(fs, "p/d"), kern(unlinkat(kt, "p/d", AT_REMOVEDIR)));
    same("fstat", lynxfs_fstat(fs, ld, &ls), kern(fstat(kd, &ks)));
    same("nlink", (long)ls.st_nlink, (long)ks.st_nlink);
    same("fstatat ..", lynxfs_fstatat(fs, ld, "..", &ls, 0), kern(fstatat(kd, "..", &ks, 0)));
    same(".. is p", lynx_is(fs, &ls, "p"), kernel_is(kt, &ks, "p"));
    same("fstatat ../..", lynxfs_fstatat(fs, ld, "../..", &ls, 0),
         kern(fstatat(kd, "../..", &ks, 0)));
    same("../.. is the top", lynx_is(fs, &ls, "."), kernel_is(kt, &ks, "."));
    same("fstatat empty path", lynxfs_fstatat(fs, ld, "", &ls, AT_EMPTY_PATH),
         kern(fstatat(kd, "", &ks, AT_EMPTY_PATH)));
    same("openat x", fdok(lynxfs_openat(fs, ld, "x", O_CREAT | O_RDWR, 0644)),
         fdok(kern(openat(kd, "x", O_CREAT | O_RDWR, 0644))));
    same("mkdirat x", lynxfs_mkdirat(fs, ld, "x", 0755), kern(mkdirat(kd, "x", 0755)));
    same("tmpfile in it", fdok(lynxfs_openat(fs, ld, ".", O_TMPFILE | O_RDWR, 0600)),
         fdok(kern(openat(kd, ".", O_TMPFILE | O_RDWR, 0600))));
    same("fstatat x", lynxfs_fstatat(fs, ld, "x", &ls, 0), kern(fstatat(kd, "x", &ks, 0)));
    same("mkdirat ../m", lynxfs_mkdirat(fs, ld, "../m", 0755), kern(mkdirat(kd, "../m", 0755)));
    same("stat p/m", lynxfs_stat(fs, "p/m", &ls), kern(fstatat(kt, "p/m", &ks, 0)));
    /* A removed working directory. */
    char buf[256];
    same("fchdir", lynxfs_fchdir(fs, ld), kern(fchdir(kd)));
    same("getcwd", lynxfs_getcwd(fs, buf, sizeof buf), getcwd(buf, sizeof buf) ? 0 : -errno);
    same("stat ..", lynxfs_stat(fs, "..", &ls), kern(stat("..", &ks)));
    same("cwd .. is p", lynx_is(fs, &ls, "/p"), kernel_is(kt, &ks, "p"));
    same("open y", fdok(lynxfs_open(fs, "y", O_CREAT | O_RDWR, 0644)),
         fdok(kern(open("y", O_CREAT | O_RDWR, 0644))));
    same("chdir back", lynxfs_chdir(fs, "/"), kern(fchdir(kt)));
    /* Its listing: nothing at all. */
    lynxfs_dir_t *ls_dir = NULL;
    same("fdopendir", lynxfs_fdopendir(fs, ld, &ls_dir), 0);
    DIR *ks_dir = fdopendir(kd);
    same("kernel fdopendir", ks_dir != NULL, 1);
    if (ls_dir && ks_dir)
        same("entries", lynx_count(fs, ls_dir), kernel_count(ks_dir));
    if (ls_dir)
        same("closedir", lynxfs_closedir(fs, ls_dir), 0);
    if (ks_dir)
        closedir(ks_dir);
    /* Replaced by a rename. */
    ld = lynxfs_open(fs, "s/v", O_RDONLY | O_DIRECTORY, 0);
    kd = openat(kt, "s/v", O_RDONLY | O_DIRECTORY);
    same("rename over", lynxfs_rename(fs, "s/n", "s/v"), kern(renameat(kt, "s/n", kt, "s/v")));
    same("fstat replaced", lynxfs_fstat(fs, ld, &ls), kern(fstat(kd, &ks)));
    same("nlink replaced", (long)ls.st_nlink, (long)ks.st_nlink);
    same("fstatat .. replaced", lynxfs_fstatat(fs, ld, "..", &ls, 0),
         kern(fstatat(kd, "..", &ks, 0)));
    same(".. is s", lynx_is(fs, &ls, "s"), kernel_is(kt, &ks, "s"));
    same("close", lynxfs_close(fs, ld), kern(close(kd)));
}

/* O_TMPFILE and lynxfs_linkat, against tmpfs directory `kt`. */
static void tmpfiles(lynxfs_t *fs, int kt) {
    struct stat ls, ks;
    umask(0); /* the C API applies none */
    same("mkdir tf", lynxfs_mkdir(fs, "tf", 0755), kern(mkdirat(kt, "tf", 0755)));
    int lf = lynxfs_open(fs, "tf", O_TMPFILE | O_RDWR, 0640);
    int kf = openat(kt, "tf", O_TMPFILE | O_RDWR, 0640);
    same("open tmpfile", fdok(lf), fdok(kern(kf)));
    same("write", lynxfs_write(fs, lf, "unnamed", 7), kern(write(kf, "unnamed", 7)));
    same("fstat", lynxfs_fstat(fs, lf, &ls), kern(fstat(kf, &ks)));
    same("nlink", (long)ls.st_nlink, (long)ks.st_nlink);
    same("mode", (long)ls.st_mode, (long)ks.st_mode);
    lynxfs_dir_t *ld = NULL;
    same("opendir", lynxfs_opendir(fs, "tf", &ld), 0);
    DIR *kd = fdopendir(openat(kt, "tf", O_RDONLY | O_DIRECTORY));
    if (ld && kd)
        same("entries", lynx_count(fs, ld), kernel_count(kd));
    lynxfs_closedir(fs, ld);
    closedir(kd);
    same("linkat", lynxfs_linkat(fs, lf, "", LYNXFS_AT_FDCWD, "tf/named", AT_EMPTY_PATH),
         kern(linkat(kf, "", kt, "tf/named", AT_EMPTY_PATH)));
    same("nlink named", lynxfs_fstat(fs, lf, &ls) ? -1 : (long)ls.st_nlink,
         fstat(kf, &ks) ? -1 : (long)ks.st_nlink);
    same("size named", lynxfs_stat(fs, "tf/named", &ls) ? -1 : ls.st_size,
         fstatat(kt, "tf/named", &ks, 0) ? -1 : ks.st_size);
    same("linkat again", lynxfs_linkat(fs, lf, "", LYNXFS_AT_FDCWD, "tf/named", AT_EMPTY_PATH),
         kern(linkat(kf, "", kt, "tf/named", AT_EMPTY_PATH)));
    same("linkat empty, no flag", lynxfs_linkat(fs, lf, "", LYNXFS_AT_FDCWD, "tf/x", 0),
         kern(linkat(kf, "", kt, "tf/x", 0)));
    same("linkat bad flag", lynxfs_linkat(fs, lf, "", LYNXFS_AT_FDCWD, "tf/x", 0x1),
         kern(linkat(kf, "", kt, "tf/x", 0x1)));
    same("close", lynxfs_close(fs, lf), kern(close(kf)));
    lf = lynxfs_open(fs, "tf", O_TMPFILE | O_EXCL | O_WRONLY, 0600);
    kf = openat(kt, "tf", O_TMPFILE | O_EXCL | O_WRONLY, 0600);
    same("open excl", fdok(lf), fdok(kern(kf)));
    same("linkat excl", lynxfs_linkat(fs, lf, "", LYNXFS_AT_FDCWD, "tf/excl", AT_EMPTY_PATH),
         kern(linkat(kf, "", kt, "tf/excl", AT_EMPTY_PATH)));
    same("close excl", lynxfs_close(fs, lf), kern(close(kf)));
    int dl = lynxfs_open(fs, "tf", O_RDONLY | O_DIRECTORY, 0);
    int dk = openat(kt, "tf", O_RDONLY | O_DIRECTORY);
    same("linkat dir", lynxfs_linkat(fs, dl, "", LYNXFS_AT_FDCWD, "tf/d", AT_EMPTY_PATH),
         kern(linkat(dk, "", kt, "tf/d", AT_EMPTY_PATH)));
    lf = lynxfs_openat(fs, dl, ".", O_TMPFILE | O_RDWR, 0600);
    kf = openat(dk, ".", O_TMPFILE | O_RDWR, 0600);
    same("openat tmpfile", fdok(lf), fdok(kern(kf)));
    same("linkat at dir", lynxfs_linkat(fs, lf, "", dl, "at-dir", AT_EMPTY_PATH),
         kern(linkat(kf, "", dk, "at-dir", AT_EMPTY_PATH)));
    same("close at dir", lynxfs_close(fs, lf), kern(close(kf)));
    same("linkat by path", lynxfs_linkat(fs, dl, "named", dl, "hard", 0),
         kern(linkat(dk, "named", dk, "hard", 0)));
    same("close dir", lynxfs_close(fs, dl), kern(close(dk)));
    same("read-only", lynxfs_open(fs, "tf", O_TMPFILE | O_RDONLY, 0600),
         kern(openat(kt, "tf", O_TMPFILE | O_RDONLY, 0600)));
    same("with O_CREAT", lynxfs_open(fs, "tf", O_TMPFILE | O_CREAT | O_RDWR, 0600),
         kern(openat(kt, "tf", O_TMPFILE | O_CREAT | O_RDWR, 0600)));
    same("in a file", lynxfs_open(fs, "tf/named", O_TMPFILE | O_RDWR, 0600),
         kern(openat(kt, "tf/named", O_TMPFILE | O_RDWR, 0600)));
    same("missing", lynxfs_open(fs, "nope", O_TMPFILE | O_RDWR, 0600),
         kern(openat(kt, "nope", O_TMPFILE | O_RDWR, 0600)));
    same("opendir after", lynxfs_opendir(fs, "tf", &ld), 0);
    kd = fdopendir(openat(kt, "tf", O_RDONLY | O_DIRECTORY));
    if (ld && kd)
        same("entries after", lynx_count(fs, ld), kernel_count(kd));
    lynxfs_closedir(fs, ld);
    closedir(kd);
}

/* lynxfs_fiemap on a sparse file: the extents, holes left out, the last flagged, the
 * data lseek's SEEK_DATA/SEEK_HOLE find; counting, a short array, and refusals. */
static void fiemap_check(lynxfs_t *fs) {
    static char block[8192];
    memset(block, 7, sizeof block);
    int fd = lynxfs_open(fs, "/sparse", O_CREAT | O_RDWR, 0644);
    expect("open", fd >= 0, 1);
    expect("write 0", lynxfs_pwrite(fs, fd, block, 4096, 0), 4096);
    expect("write 1M", lynxfs_pwrite(fs, fd, block, 8192, 1 << 20), 8192);
    expect("truncate 3M", lynxfs_ftruncate(fs, fd, 3 << 20), 0);
    struct {
        struct fiemap fm;
        struct fiemap_extent ext[16];
    } m;
    memset(&m, 0, sizeof m);
    m.fm.fm_length = FIEMAP_MAX_OFFSET;
    expect("count", lynxfs_fiemap(fs, fd, &m.fm), 0);
    unsigned n = m.fm.fm_mapped_extents;
    expect("some extents", n >= 2 && n <= 16, 1);
    m.fm.fm_extent_count = 16;
    m.fm.fm_flags = FIEMAP_FLAG_SYNC;
    expect("fiemap", lynxfs_fiemap(fs, fd, &m.fm), 0);
    expect("mapped as counted", m.fm.fm_mapped_extents, n);
    /* Extents joined where they follow each other in the file: the data segments. */
    long seg[16][2];
    int k = 0;
    for (unsigned i = 0; i < n; i++) {
        struct fiemap_extent *e = &m.ext[i];
        expect("last flag", (e->fe_flags & FIEMAP_EXTENT_LAST) != 0, i == n - 1);
        expect("physical in blocks", (long)(e->fe_physical % 4096), 0);
        if (k > 0 && seg[k - 1][1] == (long)e->fe_logical)
            seg[k - 1][1] += (long)e->fe_length;
        else {
            seg[k][0] = (long)e->fe_logical;
            seg[k][1] = (long)(e->fe_logical + e->fe_length);
            k++;
        }
    }
    expect("segments", k, 2);
    expect("first", seg[0][0] == 0 && seg[0][1] == 4096, 1);
    expect("second", seg[1][0] == 1 << 20 && seg[1][1] == (1 << 20) + 8192, 1);
    for (int i = 0; i < k; i++) {
        expect("SEEK_DATA", lynxfs_lseek(fs, fd, i ? seg[i - 1][1] : 0, SEEK_DATA), seg[i][0]);
        expect("SEEK_HOLE", lynxfs_lseek(fs, fd, seg[i][0], SEEK_HOLE), seg[i][1]);
    }
    expect("no data after", lynxfs_lseek(fs, fd, seg[k - 1][1], SEEK_DATA), -ENXIO);
    m.fm.fm_extent_count = 1;
    expect("short array", lynxfs_fiemap(fs, fd, &m.fm), 0);
    expect("one mapped", m.fm.fm_mapped_extents, 1);
    m.fm.fm_start = 2 << 20;
    m.fm.fm_extent_count = 16;
    expect("in a hole", lynxfs_fiemap(fs, fd, &m.fm), 0);
    expect("none there", m.fm.fm_mapped_extents, 0);
    m.fm.fm_flags = FIEMAP_FLAG_XATTR;
    expect("xattr flag", lynxfs_fiemap(fs, fd, &m.fm), -EBADR);
    expect("flag named", m.fm.fm_flags, FIEMAP_FLAG_XATTR);
    m.fm.fm_flags = 0;
    m.fm.fm_length = 0;
    expect("empty range", lynxfs_fiemap(fs, fd, &m.fm), -EINVAL);
    expect("NULL", lynxfs_fiemap(fs, fd, NULL), -EFAULT);
    expect("bad fd", lynxfs_fiemap(fs, 999, &m.fm), -EBADF);
    expect("close", lynxfs_close(fs, fd), 0);
    int d = lynxfs_open(fs, "/", O_RDONLY | O_DIRECTORY, 0);
    m.fm.fm_length = 4096;
    expect("directory", lynxfs_fiemap(fs, d, &m.fm), -EOPNOTSUPP);
    expect("close dir", lynxfs_close(fs, d), 0);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: checks NAME [POOL [TMPFS_DIR]]\n");
        return 2;
    }
    const char *what = argv[1], *pool = argc > 2 ? argv[2] : "";
    /* The tmpfs directory the checks compared with the kernel run in. */
    int kt = argc > 3 ? open(argv[3], O_RDONLY | O_DIRECTORY) : -1;
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
        } else if (!strcmp(what, "fiemap")) {
            fiemap_check(fs);
        } else if (!strcmp(what, "removed") && kt >= 0) {
            removed_dirs(fs, kt);
        } else if (!strcmp(what, "tmpfiles") && kt >= 0) {
            tmpfiles(fs, kt);
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
