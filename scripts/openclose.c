/* Opens (O_RDONLY | O_CLOEXEC) and closes PATH N times: the system calls the preload
 * library adds per open and close (docs/DESIGN-NOTES.md, "Process start and system calls
 * per open").
 *
 *   cc -O2 -o openclose scripts/openclose.c
 *   lynxfs run -- ./openclose DIR/FILE 200000 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s PATH N\n", argv[0]);
        return 2;
    }
    int n = atoi(argv[2]);
    for (int i = 0; i < n; i++) {
        int fd = open(argv[1], O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            perror(argv[1]);
            return 1;
        }
        close(fd);
    }
    return 0;
}
