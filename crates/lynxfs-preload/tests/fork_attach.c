/*
 * Forks while other threads make the process's first pool call (tests/fork_attach.rs).
 * Each round is a fresh process (never attached): two threads stat the pool's directory
 * (the call that attaches) while its main thread forks at once, again and again; each
 * child makes a pool call of its own and exits. A child still running after LIMIT
 * seconds is killed by its alarm and counted as hung: it inherited an attach another
 * thread of its parent was in the middle of.
 *
 * Usage: fork_attach POOL_DIR ROUNDS
 * Prints one line per round with a problem and a last line "rounds R hung H failed F".
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define THREADS 2
#define FORKS 8
#define LIMIT 5

static const char *dir;

static void *first_call(void *arg) {
    (void)arg;
    struct stat st;
    if (stat(dir, &st) != 0)
        perror("stat in a thread");
    return NULL;
}

/* A child of the fork: one pool call, within LIMIT seconds. */
static void child(void) {
    alarm(LIMIT);
    struct stat st;
    _exit(stat(dir, &st) == 0 ? 0 : 3);
}

/* One round, in a process of its own: 1 if a child hung, 2 if one failed, else 0. */
static int one_round(void) {
    alarm(4 * LIMIT);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, first_call, NULL);
    pid_t kids[FORKS];
    for (int k = 0; k < FORKS; k++) {
        kids[k] = fork();
        if (kids[k] == 0)
            child();
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    int worst = 0;
    for (int k = 0; k < FORKS; k++) {
        int status;
        if (kids[k] < 0 || waitpid(kids[k], &status, 0) != kids[k]) {
            worst = worst ? worst : 2;
            continue;
        }
        if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
            worst = 1;
        else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            worst = worst ? worst : 2;
    }
    return worst;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: fork_attach POOL_DIR ROUNDS\n");
        return 2;
    }
    dir = argv[1];
    int rounds = atoi(argv[2]), hung = 0, failed = 0, r;
    for (r = 0; r < rounds && !hung; r++) {
        pid_t p = fork();
        if (p == 0)
            _exit(one_round());
        int status;
        waitpid(p, &status, 0);
        int code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
        if (code == 1)
            hung++;
        else if (code != 0)
            failed++;
        if (code != 0)
            printf("round %d: %s\n", r, code == 1 ? "a child hung" : "a child failed");
    }
    printf("rounds %d hung %d failed %d\n", r, hung, failed);
    return hung || failed;
}
