/*
 * lynxfs.h: the C API of LynxFS (liblynxfs.so), a file system for persistent memory
 * in user space. Link with -llynxfs.
 *
 * A lynxfs_t is a pool attached by this process and one caller: the process's
 * effective uid, gid and supplementary groups (read at attach) and a working
 * directory (the pool's root at attach). Paths are inside the pool: "/" is its root.
 *
 * Errors: every call returning int, ssize_t or off_t returns a negative errno
 * (-ENOENT, ...) on failure, as the kernel's system calls do, and never sets errno.
 * Pointers the caller passes must be valid for the call (NUL-terminated strings,
 * buffers of the size given); a NULL handle or stream is -EINVAL, any other NULL
 * pointer -EFAULT. Paths and names longer than Linux allows are -ENAMETOOLONG; names
 * are bytes, as the kernel's (any byte but '/' and NUL). Every call is durable when it
 * returns (fsync has nothing to wait for).
 *
 * Threads: a lynxfs_t may be used by several threads at once, except that
 * lynxfs_detach must be the last call on it. A lynxfs_dir_t is safe to share too,
 * but readdir on one stream from two threads splits its entries between them.
 *
 * Descriptors: the ints returned by lynxfs_open/openat are small (the lowest free,
 * from 0, as POSIX does; at most 1<<20 open per handle, then -EMFILE). They belong
 * to their handle and are not kernel file descriptors.
 */
#ifndef LYNXFS_H
#define LYNXFS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

/* An attached pool and a caller (opaque). */
typedef struct lynxfs lynxfs_t;
/* An open directory stream (opaque). */
typedef struct lynxfs_dir lynxfs_dir_t;

/* dirfd of lynxfs_openat/lynxfs_renameat2: the working directory (as AT_FDCWD). */
#define LYNXFS_AT_FDCWD (-100)

/* One directory entry (as struct dirent). */
struct lynxfs_dirent {
    uint64_t d_ino;      /* inode number */
    unsigned char d_type; /* DT_REG, DT_DIR, DT_LNK, ... */
    char d_name[256];    /* NUL-terminated name */
};

/* ---- attaching ---- */

/* Attach the pool file at `pool` (flags must be 0). Returns the handle, or NULL
 * with *err = -errno (when err is not NULL): -ENOENT no such file, -EUCLEAN not a
 * LynxFS pool (or a corrupt one), -EACCES not allowed, -EFAULT a NULL path,
 * -EINVAL bad flags. lynxfs_attach_error() then says why in words. */
lynxfs_t *lynxfs_attach(const char *pool, int flags, int *err);

/* The text of the last failed lynxfs_attach of the calling thread ("" if none),
 * valid until that thread's next failing attach. */
const char *lynxfs_attach_error(void);

/* Close every descriptor still open and leave the pool; frees fs. Close directory
 * streams first. 0 or -errno (the handle is freed either way). */
int lynxfs_detach(lynxfs_t *fs);

/* ---- descriptors ---- */

/* open(2): O_RDONLY/O_WRONLY/O_RDWR with O_CREAT, O_EXCL, O_TRUNC, O_APPEND,
 * O_DIRECTORY, O_NOFOLLOW. Returns a descriptor or -errno. O_TMPFILE (with O_WRONLY
 * or O_RDWR, not O_CREAT: else -EINVAL) makes an unnamed file in the directory `path`
 * names, freed at its last close unless lynxfs_linkat names it (not if made with
 * O_EXCL). Removed directories still open are empty and dead, as in Linux: nothing
 * can be made in them (-ENOENT), but ".." from them leads to the directory they were
 * removed from while it lives. */
int lynxfs_open(lynxfs_t *fs, const char *path, int flags, mode_t mode);
/* openat(2): a relative path starts at directory descriptor dirfd (or the
 * working directory for LYNXFS_AT_FDCWD). */
int lynxfs_openat(lynxfs_t *fs, int dirfd, const char *path, int flags, mode_t mode);
int lynxfs_close(lynxfs_t *fs, int fd);

/* read(2)/write(2) at the descriptor's position, which they advance (write with
 * O_APPEND: at the end). At most 0x7ffff000 bytes move per call. Bytes or -errno. */
ssize_t lynxfs_read(lynxfs_t *fs, int fd, void *buf, size_t count);
ssize_t lynxfs_write(lynxfs_t *fs, int fd, const void *buf, size_t count);
/* pread(2)/pwrite(2): at `offset`, the position unchanged. */
ssize_t lynxfs_pread(lynxfs_t *fs, int fd, void *buf, size_t count, off_t offset);
ssize_t lynxfs_pwrite(lynxfs_t *fs, int fd, const void *buf, size_t count, off_t offset);
/* lseek(2) with SEEK_SET, SEEK_CUR, SEEK_END, SEEK_DATA or SEEK_HOLE: the new position
 * or -errno. */
off_t lynxfs_lseek(lynxfs_t *fs, int fd, off_t offset, int whence);

int lynxfs_fstat(lynxfs_t *fs, int fd, struct stat *st);
int lynxfs_ftruncate(lynxfs_t *fs, int fd, off_t length);
int lynxfs_fsync(lynxfs_t *fs, int fd);

struct fiemap; /* <linux/fiemap.h> */
/* ioctl(fd, FS_IOC_FIEMAP, fm) on a regular file: its extents overlapping fm_start and
 * fm_length, holes left out, fe_physical the byte offset in the pool file, the file's
 * last extent FIEMAP_EXTENT_LAST; fm_extent_count 0 only counts them into
 * fm_mapped_extents. Flags but FIEMAP_FLAG_SYNC are -EBADR (fm_flags then names
 * them), fm_length 0 -EINVAL, anything but a regular file -EOPNOTSUPP. */
int lynxfs_fiemap(lynxfs_t *fs, int fd, struct fiemap *fm);

/* ---- paths ---- */

/* stat(2)/lstat(2). st_dev is 0 (a pool is no kernel device). */
int lynxfs_stat(lynxfs_t *fs, const char *path, struct stat *st);
int lynxfs_lstat(lynxfs_t *fs, const char *path, struct stat *st);
int lynxfs_mkdir(lynxfs_t *fs, const char *path, mode_t mode);
int lynxfs_unlink(lynxfs_t *fs, const char *path);
int lynxfs_rmdir(lynxfs_t *fs, const char *path);
int lynxfs_rename(lynxfs_t *fs, const char *oldpath, const char *newpath);
/* renameat2(2): flags 0, RENAME_NOREPLACE or RENAME_EXCHANGE. */
int lynxfs_renameat2(lynxfs_t *fs, int olddirfd, const char *oldpath, int newdirfd,
                     const char *newpath, unsigned int flags);
int lynxfs_link(lynxfs_t *fs, const char *oldpath, const char *newpath);
/* linkat(2): flags AT_SYMLINK_FOLLOW and AT_EMPTY_PATH; with AT_EMPTY_PATH and an
 * empty oldpath, olddirfd is the descriptor of the file to name (an O_TMPFILE file
 * made without O_EXCL; -ENOENT for one with O_EXCL or whose last name went). */
int lynxfs_linkat(lynxfs_t *fs, int olddirfd, const char *oldpath, int newdirfd,
                  const char *newpath, int flags);
/* mkdirat(2) and fstatat(2) (flags AT_SYMLINK_NOFOLLOW, AT_EMPTY_PATH). */
int lynxfs_mkdirat(lynxfs_t *fs, int dirfd, const char *path, mode_t mode);
int lynxfs_fstatat(lynxfs_t *fs, int dirfd, const char *path, struct stat *st, int flags);
int lynxfs_symlink(lynxfs_t *fs, const char *target, const char *linkpath);
/* readlink(2): copies at most `size` bytes of the target (no NUL added) and returns
 * how many; a longer target is cut. size 0 is -EINVAL. */
ssize_t lynxfs_readlink(lynxfs_t *fs, const char *path, char *buf, size_t size);
int lynxfs_truncate(lynxfs_t *fs, const char *path, off_t length);

int lynxfs_chmod(lynxfs_t *fs, const char *path, mode_t mode);
/* chown(2): (uid_t)-1 or (gid_t)-1 leaves that id alone. */
int lynxfs_chown(lynxfs_t *fs, const char *path, uid_t uid, gid_t gid);
/* utimensat(2) without dirfd and flags: times[0] is atime, times[1] mtime, each an
 * instant or UTIME_NOW / UTIME_OMIT in tv_nsec; NULL sets both to now. */
int lynxfs_utimens(lynxfs_t *fs, const char *path, const struct timespec times[2]);

/* chdir(2) for this handle's caller; relative paths start there. */
int lynxfs_chdir(lynxfs_t *fs, const char *path);
/* fchdir(2): work in the directory open as fd (a removed one too, as Linux allows). */
int lynxfs_fchdir(lynxfs_t *fs, int fd);
/* umask(2) for this handle's caller: what its creates (open with O_CREAT or
 * O_TMPFILE, mkdir, mknod) take from the mode they ask for, unless the parent
 * directory's default ACL decides the new file's permissions. 0 until set. Returns the
 * old mask, or -errno. */
int lynxfs_umask(lynxfs_t *fs, mode_t mask);
/* getcwd(2) as the system call: the working directory's path inside the pool,
 * NUL-terminated, in buf; returns its length with the NUL, -ERANGE if size is too
 * small, -ENOENT if the directory was removed. */
int lynxfs_getcwd(lynxfs_t *fs, char *buf, size_t size);
/* statvfs(3) of the pool. */
int lynxfs_statfs(lynxfs_t *fs, struct statvfs *out);

/* ---- directory streams ---- */

/* Open the directory at `path` (it uses one descriptor); *dir gets the stream. */
int lynxfs_opendir(lynxfs_t *fs, const char *path, lynxfs_dir_t **dir);
/* fdopendir(3): a stream over the directory open as fd, which the stream now owns
 * (lynxfs_closedir closes it). A removed directory lists nothing, not even "." and
 * "..", as in Linux. */
int lynxfs_fdopendir(lynxfs_t *fs, int fd, lynxfs_dir_t **dir);
/* The next entry ("." and ".." included) into *ent: returns 1, or 0 at the end, or
 * -errno. */
int lynxfs_readdir(lynxfs_t *fs, lynxfs_dir_t *dir, struct lynxfs_dirent *ent);
/* Close the stream and free it. */
int lynxfs_closedir(lynxfs_t *fs, lynxfs_dir_t *dir);

/* ---- extended attributes (as the Linux calls; flags XATTR_CREATE/XATTR_REPLACE) ---- */

/* The value's length; with size 0 nothing is copied (the length to allocate),
 * -ERANGE when size is too small, -ENODATA when there is no such attribute. */
ssize_t lynxfs_getxattr(lynxfs_t *fs, const char *path, const char *name, void *value,
                        size_t size);
int lynxfs_setxattr(lynxfs_t *fs, const char *path, const char *name, const void *value,
                    size_t size, int flags);
/* The names, each followed by a NUL; the sizes as lynxfs_getxattr. */
ssize_t lynxfs_listxattr(lynxfs_t *fs, const char *path, char *list, size_t size);
int lynxfs_removexattr(lynxfs_t *fs, const char *path, const char *name);

#ifdef __cplusplus
}
#endif

#endif /* LYNXFS_H */
