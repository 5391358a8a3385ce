/*
 * example.c: the LynxFS C API at work on a pool given as argv[1]. It makes a
 * directory, creates and writes a file and reads it back, stats it, lists the
 * directory, renames and unlinks, and detaches; it prints each step and exits
 * nonzero at the first failure.
 *
 *   cc -I crates/lynxfs-capi/include example.c -L target/release -llynxfs \
 *      -Wl,-rpath,$PWD/target/release -o example && ./example /dev/shm/my.pool
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lynxfs.h"

static const char BODY[] = "hello from C\n";

/* The attached pool, detached on the way out after a failure too. */
static lynxfs_t *attached;

/* Exits when a call failed (r < 0), naming it and the error. */
static long check(const char *what, long r) {
    if (r < 0) {
        fprintf(stderr, "example: %s: %s\n", what, strerror((int)-r));
        if (attached) {
            lynxfs_detach(attached);
        }
        exit(1);
    }
    return r;
}

static void write_and_read(lynxfs_t *fs) {
    int fd = (int)check("open", lynxfs_open(fs, "/capi/hello.txt", O_CREAT | O_RDWR, 0644));
    check("write", lynxfs_write(fs, fd, BODY, strlen(BODY)));
    char back[64] = {0};
    long n = check("pread", lynxfs_pread(fs, fd, back, sizeof back - 1, 0));
    if ((size_t)n != strlen(BODY) || memcmp(back, BODY, (size_t)n) != 0) {
        fprintf(stderr, "example: read back %ld bytes: %s\n", n, back);
        exit(1);
    }
    printf("wrote and read back %ld bytes\n", n);
    check("lseek", lynxfs_lseek(fs, fd, 0, SEEK_SET));
    check("close", lynxfs_close(fs, fd));
}

static void stat_file(lynxfs_t *fs) {
    struct stat st;
    check("stat", lynxfs_stat(fs, "/capi/hello.txt", &st));
    if (st.st_size != (off_t)strlen(BODY) || !S_ISREG(st.st_mode)) {
        fprintf(stderr, "example: stat: size %lld mode %o\n", (long long)st.st_size,
                st.st_mode);
        exit(1);
    }
    printf("stat: size %lld mode %o\n", (long long)st.st_size, st.st_mode & 07777);
}

static void list_dir(lynxfs_t *fs) {
    lynxfs_dir_t *dir;
    struct lynxfs_dirent ent;
    check("opendir", lynxfs_opendir(fs, "/capi", &dir));
    int r;
    while ((r = lynxfs_readdir(fs, dir, &ent)) == 1) {
        printf("entry: %s\n", ent.d_name);
    }
    check("readdir", r);
    check("closedir", lynxfs_closedir(fs, dir));
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: example POOL\n");
        return 2;
    }
    int err;
    lynxfs_t *fs = lynxfs_attach(argv[1], 0, &err);
    if (!fs) {
        fprintf(stderr, "example: attach %s: %s (%s)\n", argv[1], lynxfs_attach_error(),
                strerror(-err));
        return 1;
    }
    attached = fs;
    printf("attached %s\n", argv[1]);
    check("mkdir", lynxfs_mkdir(fs, "/capi", 0755));
    printf("made /capi\n");
    write_and_read(fs);
    stat_file(fs);
    int fd = (int)check("create scratch", lynxfs_open(fs, "/capi/scratch", O_CREAT | O_WRONLY, 0600));
    check("close scratch", lynxfs_close(fs, fd));
    list_dir(fs);
    check("rename", lynxfs_rename(fs, "/capi/hello.txt", "/capi/greeting.txt"));
    printf("renamed hello.txt to greeting.txt\n");
    check("unlink", lynxfs_unlink(fs, "/capi/scratch"));
    printf("unlinked scratch\n");
    attached = NULL;
    check("detach", lynxfs_detach(fs));
    printf("detached\n");
    return 0;
}
