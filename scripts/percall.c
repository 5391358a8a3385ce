/* Per-iteration cost of the preload on three loops, for callgrind (docs/DESIGN-NOTES.md,
 * "The preload's per-open and per-opendir cost"): ls = opendir of DIR/dK (absolute),
 * readdir to the end, closedir; oc = openat(dirfd, "dK/fJ") and close; web = the same
 * open, pread of the whole file, close. `webls setup 1 DIR 0` makes the tree.
 *
 *   cc -O2 -o percall scripts/percall.c
 *   lynxfs run -- valgrind --tool=callgrind ./percall ls|oc|web DIR N */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    const char *root = argv[2]; int n = atoi(argv[3]); char p[512], buf[16384];
    int dfd = open(root, O_RDONLY | O_DIRECTORY);
    for (int i = 0; i < n; i++) {
        int d = (i * 37) % 200, f = i % 5;
        if (argv[1][0] == 'w') {
            snprintf(p, sizeof p, "d%d/f%d", d, f);
            int fd = openat(dfd, p, O_RDONLY | O_CLOEXEC);
            off_t off = 0; ssize_t k;
            while ((k = pread(fd, buf, sizeof buf, off)) > 0) off += k;
            close(fd);
        } else if (argv[1][0] == 'l') {
            snprintf(p, sizeof p, "%s/d%d", root, d);
            DIR *dp = opendir(p); while (readdir(dp)); closedir(dp);
        } else {
            snprintf(p, sizeof p, "d%d/f%d", d, f);
            int fd = openat(dfd, p, O_RDONLY | O_CLOEXEC); close(fd);
        }
    }
    return 0;
}
