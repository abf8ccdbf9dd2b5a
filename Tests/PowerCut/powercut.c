/*
 * A power cut for one process's files, for the durability tests.
 *
 * Built twice from this file by the test that uses it:
 *
 *   cc -shared -fPIC -o powercut.so powercut.c -ldl      the shim, LD_PRELOADed into the gateway
 *   cc -DPOWERCUT_UNDO -o powercut-undo powercut.c       the cut itself, run once the gateway is killed
 *
 * The shim watches the files whose path contains $POWERCUT_MATCH (and not
 * "-shm": SQLite rebuilds its shared-memory index from the WAL after a
 * crash). Before each write or truncation of such a file it appends what
 * the write is about to overwrite (the old bytes and the old size) to the
 * journal $POWERCUT_JOURNAL; an fsync or fdatasync of the file appends a
 * mark that everything before it for that file is on the disk.
 *
 * A process killed with SIGKILL leaves its writes in the page cache, where
 * the next process reads them: it proves only that a write was made, not
 * that it was synced. `powercut-undo JOURNAL` then does what a power cut
 * does to a file system that loses what was not synced: for each file, it
 * undoes, newest first, every write made since the file's last sync. What
 * is left is what the disk held when the power went.
 *
 * Only what the test needs: pwrite/pwrite64/write, ftruncate/ftruncate64,
 * fsync/fdatasync, open/open64/openat/openat64/close. SQLite reaches its
 * files through these alone (it maps only the -shm file, and never opens
 * with O_TRUNC, which is not journaled).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define MAX_FDS 4096

enum { RECORD_WRITE = 'W', RECORD_TRUNCATE = 'T', RECORD_SYNC = 'S' };

#ifndef POWERCUT_UNDO

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char *watched[MAX_FDS];
static int journal = -1;

static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void *, size_t, off64_t);
static ssize_t (*real_write)(int, const void *, size_t);
static int (*real_ftruncate)(int, off_t);
static int (*real_ftruncate64)(int, off64_t);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_open)(const char *, int, ...);
static int (*real_open64)(const char *, int, ...);
static int (*real_openat)(int, const char *, int, ...);
static int (*real_openat64)(int, const char *, int, ...);
static int (*real_close)(int);

__attribute__((constructor)) static void setup(void) {
    real_pwrite = dlsym(RTLD_NEXT, "pwrite");
    real_pwrite64 = dlsym(RTLD_NEXT, "pwrite64");
    real_write = dlsym(RTLD_NEXT, "write");
    real_ftruncate = dlsym(RTLD_NEXT, "ftruncate");
    real_ftruncate64 = dlsym(RTLD_NEXT, "ftruncate64");
    real_fsync = dlsym(RTLD_NEXT, "fsync");
    real_fdatasync = dlsym(RTLD_NEXT, "fdatasync");
    real_open = dlsym(RTLD_NEXT, "open");
    real_open64 = dlsym(RTLD_NEXT, "open64");
    real_openat = dlsym(RTLD_NEXT, "openat");
    real_openat64 = dlsym(RTLD_NEXT, "openat64");
    real_close = dlsym(RTLD_NEXT, "close");
    const char *path = getenv("POWERCUT_JOURNAL");
    if (path) journal = real_open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

static int matches(const char *path) {
    const char *match = getenv("POWERCUT_MATCH");
    return match && path && strstr(path, match) && !strstr(path, "-shm");
}

/* Appends all of `bytes` to the journal; the lock is held. */
static void append(const void *bytes, size_t count) {
    const char *p = bytes;
    while (count > 0) {
        ssize_t n = real_write(journal, p, count);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) abort(); /* a cut that cannot be recorded would prove nothing */
        p += n;
        count -= (size_t)n;
    }
}

static void header(char kind, const char *path) {
    uint32_t length = (uint32_t)strlen(path);
    append(&kind, 1);
    append(&length, sizeof length);
    append(path, length);
}

static void u64(uint64_t value) { append(&value, sizeof value); }

/* The bytes of [offset, offset + count) as the file holds them now, and its size. */
static void before(int fd, const char *path, char kind, uint64_t offset, uint64_t count, uint64_t extra) {
    struct stat st;
    if (fstat(fd, &st) != 0) abort();
    uint64_t size = (uint64_t)st.st_size;
    uint64_t existing = offset >= size ? 0 : (size - offset < count ? size - offset : count);
    char *old = existing ? malloc(existing) : NULL;
    uint64_t got = 0;
    while (got < existing) {
        ssize_t n = pread(fd, old + got, existing - got, (off_t)(offset + got));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += (uint64_t)n;
    }
    header(kind, path);
    u64(offset);
    u64(size);
    u64(extra);
    u64(got);
    if (got) append(old, got);
    free(old);
}

static const char *path_of(int fd) { return fd >= 0 && fd < MAX_FDS ? watched[fd] : NULL; }

static void note_write(int fd, uint64_t offset, size_t count) {
    pthread_mutex_lock(&lock);
    const char *path = path_of(fd);
    if (path && journal >= 0) before(fd, path, RECORD_WRITE, offset, count, 0);
    pthread_mutex_unlock(&lock);
}

static void note_truncate(int fd, uint64_t length) {
    pthread_mutex_lock(&lock);
    const char *path = path_of(fd);
    if (path && journal >= 0) {
        struct stat st;
        if (fstat(fd, &st) != 0) abort();
        uint64_t size = (uint64_t)st.st_size;
        /* What a shrink cuts off, to put back. */
        before(fd, path, RECORD_TRUNCATE, length, size > length ? size - length : 0, length);
    }
    pthread_mutex_unlock(&lock);
}

static void note_sync(int fd) {
    pthread_mutex_lock(&lock);
    const char *path = path_of(fd);
    if (path && journal >= 0) header(RECORD_SYNC, path);
    pthread_mutex_unlock(&lock);
}

static void watch(int fd, const char *path) {
    if (fd < 0 || fd >= MAX_FDS || !matches(path)) return;
    char full[PATH_MAX];
    if (!realpath(path, full)) return;
    pthread_mutex_lock(&lock);
    free(watched[fd]);
    watched[fd] = strdup(full);
    pthread_mutex_unlock(&lock);
}

ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset) {
    note_write(fd, (uint64_t)offset, count);
    return real_pwrite(fd, buf, count, offset);
}

ssize_t pwrite64(int fd, const void *buf, size_t count, off64_t offset) {
    note_write(fd, (uint64_t)offset, count);
    return real_pwrite64(fd, buf, count, offset);
}

ssize_t write(int fd, const void *buf, size_t count) {
    if (path_of(fd)) {
        off_t offset = lseek(fd, 0, SEEK_CUR);
        if (offset >= 0) note_write(fd, (uint64_t)offset, count);
    }
    return real_write(fd, buf, count);
}

int ftruncate(int fd, off_t length) {
    note_truncate(fd, (uint64_t)length);
    return real_ftruncate(fd, length);
}

int ftruncate64(int fd, off64_t length) {
    note_truncate(fd, (uint64_t)length);
    return real_ftruncate64(fd, length);
}

int fsync(int fd) {
    int rc = real_fsync(fd);
    if (rc == 0) note_sync(fd);
    return rc;
}

int fdatasync(int fd) {
    int rc = real_fdatasync(fd);
    if (rc == 0) note_sync(fd);
    return rc;
}

#define OPEN_BODY(call)                                      \
    mode_t mode = 0;                                         \
    if (flags & (O_CREAT | O_TMPFILE)) {                     \
        va_list args;                                        \
        va_start(args, flags);                               \
        mode = (mode_t)va_arg(args, int);                    \
        va_end(args);                                        \
    }                                                        \
    int fd = call;                                           \
    if (fd >= 0) watch(fd, path);                            \
    return fd;

int open(const char *path, int flags, ...) { OPEN_BODY(real_open(path, flags, mode)) }
int open64(const char *path, int flags, ...) { OPEN_BODY(real_open64(path, flags, mode)) }
int openat(int dir, const char *path, int flags, ...) { OPEN_BODY(real_openat(dir, path, flags, mode)) }
int openat64(int dir, const char *path, int flags, ...) { OPEN_BODY(real_openat64(dir, path, flags, mode)) }

int close(int fd) {
    if (fd >= 0 && fd < MAX_FDS && watched[fd]) {
        pthread_mutex_lock(&lock);
        free(watched[fd]);
        watched[fd] = NULL;
        pthread_mutex_unlock(&lock);
    }
    return real_close(fd);
}

#else /* POWERCUT_UNDO */

struct record {
    char kind;
    char *path;
    uint64_t offset, size, extra, count;
    char *bytes;
};

static int read_all(FILE *in, void *into, size_t count) { return fread(into, 1, count, in) == count; }

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s JOURNAL\n", argv[0]);
        return 2;
    }
    FILE *in = fopen(argv[1], "rb");
    if (!in) {
        perror(argv[1]);
        return 1;
    }
    struct record *records = NULL;
    size_t count = 0, capacity = 0;
    for (;;) {
        struct record r = {0};
        uint32_t length;
        if (!read_all(in, &r.kind, 1)) break;
        if (!read_all(in, &length, sizeof length)) break;
        r.path = calloc(length + 1, 1);
        if (!read_all(in, r.path, length)) break;
        if (r.kind != RECORD_SYNC) {
            if (!read_all(in, &r.offset, 8) || !read_all(in, &r.size, 8) || !read_all(in, &r.extra, 8) || !read_all(in, &r.count, 8)) break;
            r.bytes = malloc(r.count ? r.count : 1);
            /* A record cut short by the kill: its write never happened. */
            if (!read_all(in, r.bytes, r.count)) break;
        }
        if (count == capacity) {
            capacity = capacity ? capacity * 2 : 1024;
            records = realloc(records, capacity * sizeof *records);
        }
        records[count++] = r;
    }
    fclose(in);
    size_t undone = 0;
    /* Newest first; a file's records before its last sync are on the disk. */
    for (size_t i = count; i-- > 0;) {
        struct record *r = &records[i];
        if (r->kind == RECORD_SYNC) continue;
        int synced = 0;
        for (size_t j = i + 1; j < count && !synced; j++) {
            synced = records[j].kind == RECORD_SYNC && strcmp(records[j].path, r->path) == 0;
        }
        if (synced) continue;
        int fd = open(r->path, O_WRONLY);
        if (fd < 0) {
            perror(r->path);
            return 1;
        }
        if (r->count && pwrite(fd, r->bytes, r->count, (off_t)r->offset) != (ssize_t)r->count) {
            perror("pwrite");
            return 1;
        }
        if (ftruncate(fd, (off_t)r->size) != 0) {
            perror("ftruncate");
            return 1;
        }
        close(fd);
        undone++;
    }
    printf("%zu of %zu writes undone\n", undone, count);
    return 0;
}

#endif
