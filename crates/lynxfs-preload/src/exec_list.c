/* execl, execlp and execle take their arguments as a C variadic list, which stable
 * Rust cannot receive: these three gather the list into an array and call execv,
 * execvp and execve, which resolve to the preload library's own definitions. The
 * exported execl, execlp and execle are Rust's (a library exports only those): each
 * jumps here with the caller's registers and stack untouched. */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <unistd.h>

/* How many arguments follow `first` up to the NULL, counting `first`. */
static size_t count(const char *first, va_list ap)
{
    size_t n = 1;
    if (first == NULL)
        return 0;
    while (va_arg(ap, const char *) != NULL)
        n++;
    return n;
}

/* argv[0..n] from `first` and the list, NULL-terminated; NULL when out of memory. */
static char **gather(const char *first, size_t n, va_list ap)
{
    char **argv = malloc((n + 1) * sizeof(char *));
    if (argv == NULL)
        return NULL;
    argv[0] = (char *)first;
    for (size_t i = 1; i <= n; i++)
        argv[i] = va_arg(ap, char *);
    argv[n] = NULL;
    return argv;
}

int lynxfs_execl(const char *path, const char *arg, ...)
{
    va_list ap;
    va_start(ap, arg);
    size_t n = count(arg, ap);
    va_end(ap);
    va_start(ap, arg);
    char **argv = gather(arg, n, ap);
    va_end(ap);
    if (argv == NULL) {
        errno = ENOMEM;
        return -1;
    }
    int r = execv(path, argv);
    free(argv);
    return r;
}

int lynxfs_execlp(const char *file, const char *arg, ...)
{
    va_list ap;
    va_start(ap, arg);
    size_t n = count(arg, ap);
    va_end(ap);
    va_start(ap, arg);
    char **argv = gather(arg, n, ap);
    va_end(ap);
    if (argv == NULL) {
        errno = ENOMEM;
        return -1;
    }
    int r = execvp(file, argv);
    free(argv);
    return r;
}

int lynxfs_execle(const char *path, const char *arg, ...)
{
    va_list ap;
    va_start(ap, arg);
    size_t n = count(arg, ap);
    va_end(ap);
    va_start(ap, arg);
    char **argv = gather(arg, n, ap);
    /* The environment follows the NULL that ends the arguments. */
    char *const *envp = va_arg(ap, char *const *);
    va_end(ap);
    if (argv == NULL) {
        errno = ENOMEM;
        return -1;
    }
    int r = execve(path, argv, envp);
    free(argv);
    return r;
}
